"""Gradient health per layer: each module's gradient norm in forward order, vanishing and exploding layers flagged.

    report = t.explain(loss, params=model)
    for layer in report.health().layers: print(layer.name, layer.grad_norm, layer.status)

A layer is the module that owns a parameter (`blocks.2.fc1` for `blocks.2.fc1.weight` and `.bias`; a tensor
outside any module is a layer of its own). Its grad norm is the 2-norm of all its parameters' gradients
together, computed in float64 (a float32 sum of squares overflows long before the elements do). Layers are
ordered by the first op of the forward that used one of their parameters (then the first op that ran inside
the module; layers never run come last, in the model's order).

The rule (`FACTOR` = 100, `WINDOW` = 2): a layer's neighbourhood is the layer itself and up to two layers on
each side in forward order, counting only layers whose norm is finite and above zero; its running median is the
median of their norms (a median filter: one outlier cannot move it, and a layer at the edge still has one).
A layer is
  vanishing  when its norm is more than 100x below its running median,
  exploding  when it is more than 100x above it,
  nonfinite  when an element of a gradient is nan or inf (its norm is then nan or inf),
  zero       when every gradient is exactly 0 (not None), and
  none       when no parameter of it got a gradient (None: frozen, unused or cut; the report says why).
Otherwise it is "ok", also when it has no neighbours to compare with. A run of three or more consecutive
low layers makes its own median low, and a gradual decay (10x per layer) stays within 100x of its median:
both are drawn (log scale) but not flagged.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from gradflow.display import Shown


class InspectReport(Protocol):
    """What layer health reads of a report (report/inspect_report.py's InspectReport, whose health() calls
    layer_health: the report's module imports this one, not the other way)."""

    params: list[Any]  # ParamReport
    graph: Any  # reasons.FlowGraph | None
    module_names: dict[int, str]


ParamReport = Any

FACTOR = 100.0
WINDOW = 2
STATUSES = ("ok", "vanishing", "exploding", "nonfinite", "zero", "none")


@dataclass
class LayerHealth:
    name: str
    params: list[str]
    numel: int
    grad_norm: float | None  # None: no parameter got a gradient; nan / inf: a non-finite gradient
    status: str = "ok"  # one of STATUSES
    ratio: float | None = None  # grad_norm / its running median (None without neighbours)

    @property
    def flagged(self) -> bool:
        return self.status in ("vanishing", "exploding", "nonfinite")

    def describe(self) -> str:
        """`vanishing: 3.2e+05x below its running median` and the like ('' for an ok layer)."""
        if self.status in ("vanishing", "exploding") and self.ratio:
            times = 1 / self.ratio if self.status == "vanishing" else self.ratio
            side = "below" if self.status == "vanishing" else "above"
            return f"{self.status}: {times:.3g}x {side} its running median"
        return {"nonfinite": "nonfinite: a gradient holds nan or inf", "zero": "gradient exactly zero",
                "none": "no gradient (None)"}.get(self.status, "")

    def to_dict(self) -> dict:
        from gradflow.values.jsonable import to_jsonable

        return {"layer": self.name, "params": self.params, "numel": self.numel,
                "grad_norm": None if self.grad_norm is None else to_jsonable(self.grad_norm),
                "status": self.status, "ratio": None if self.ratio is None else to_jsonable(self.ratio)}


@dataclass(repr=False)  # repr(): the chart as text (display.Shown)
class HealthReport(Shown):
    layers: list[LayerHealth] = field(default_factory=list)
    factor: float = FACTOR
    window: int = WINDOW

    @property
    def flagged(self) -> list[LayerHealth]:
        return [x for x in self.layers if x.flagged]

    def layer(self, name: str) -> LayerHealth:
        for x in self.layers:
            if x.name == name:
                return x
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {"rule": {"factor": self.factor, "window": self.window}, "layers": [x.to_dict() for x in self.layers]}


def layer_of(name: str) -> str:
    """`blocks.2.fc1.weight` -> `blocks.2.fc1`; a top-level tensor is a layer of its own."""
    return name.rsplit(".", 1)[0] if "." in name else name


def layer_health(report: InspectReport, factor: float = FACTOR, window: int = WINDOW) -> HealthReport:
    groups: dict[str, list[ParamReport]] = {}
    for p in report.params:
        groups.setdefault(layer_of(p.name), []).append(p)
    order = _forward_order(report)
    names = sorted(groups, key=lambda k: min(order(p) for p in groups[k]))
    layers = [_layer(k, groups[k]) for k in names]
    flag(layers, factor, window)
    return HealthReport(layers, factor, window)


def _forward_order(report: InspectReport):
    """A sort key per parameter: (first op using it | first op run in its module | never, position)."""
    first_use: dict[int, int] = {}
    first_in_module: dict[str, int] = {}
    if report.graph is not None:
        for serial, uses in report.graph.uses.items():
            if uses:
                first_use[serial] = uses[0].op
        for rec in report.graph.ops:
            name = report.module_names.get(rec.module) if rec.module is not None else None
            if name is not None:
                first_in_module.setdefault(name, rec.index)
    position = {id(p): i for i, p in enumerate(report.params)}

    def key(p: ParamReport) -> tuple[float, int]:
        op = first_use.get(p.serial) if p.serial is not None else None
        if op is None:
            op = first_in_module.get(layer_of(p.name))
        return (math.inf if op is None else op, position[id(p)])

    return key


def _layer(name: str, params: list[ParamReport]) -> LayerHealth:
    grads = [p.grad for p in params if p.grad is not None]
    norm = None
    if grads:
        norm = math.sqrt(sum(float(torch.linalg.vector_norm(g, dtype=torch.float64)) ** 2 for g in grads))
        if not all(bool(torch.isfinite(g).all()) for g in grads):
            norm = math.nan if any(bool(torch.isnan(g).any()) for g in grads) else math.inf
    layer = LayerHealth(name, [p.name for p in params], sum(p.numel for p in params), norm)
    if norm is None:
        layer.status = "none"
    elif not math.isfinite(norm):
        layer.status = "nonfinite"
    elif norm == 0.0:
        layer.status = "zero"
    return layer


def flag(layers: list[LayerHealth], factor: float = FACTOR, window: int = WINDOW) -> None:
    """Mark vanishing / exploding layers in place (see the module's doc for the rule)."""
    comparable = [i for i, x in enumerate(layers) if x.status == "ok"]
    for k, i in enumerate(comparable):
        near = comparable[max(0, k - window):k + 1 + window]  # the layer itself and its neighbours
        if len(near) < 2:
            continue
        norm = layers[i].grad_norm or 0.0
        ratio = layers[i].ratio = norm / statistics.median(layers[j].grad_norm or 0.0 for j in near)
        if ratio < 1 / factor:
            layers[i].status = "vanishing"
        elif ratio > factor:
            layers[i].status = "exploding"
