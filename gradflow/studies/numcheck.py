"""Numeric check: autograd against central finite differences, in float64.

The finite differences run the same program with every cut (detach, no_grad,
inference_mode, requires_grad = false) held at its forward value, so they measure
what autograd should return. The true derivative runs it with the cuts removed;
"cuts removed" = true - autograd is what the cuts took away.
An engine helper (imports torch); reach it through `gradflow.check`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from gradflow.analysis.explanation import Explanation
from gradflow.analysis.smooth import Note, notes
from gradflow.analysis.status import depends_on
from gradflow.engine.forward import forward, make_leaves
from gradflow.engine.prepare import merge_values
from gradflow.errors import LimitError
from gradflow.language.graph import Graph
from gradflow.values.jsonable import one_document, to_jsonable

MAX_ELEMENTS = 4096  # finite differences: two runs per element of the chosen leaves


@dataclass
class LeafCheck:
    leaf: str
    autograd: Any  # tensor, or None when no gradient reached the leaf
    numeric: Any  # tensor
    true: Any  # tensor: the derivative with every cut removed
    error: float  # max |autograd - numeric|
    ok: bool

    @property
    def removed(self):
        return self.true - (self.numeric * 0 if self.autograd is None else self.autograd)

    def to_dict(self) -> dict:
        return {"leaf": self.leaf, "autograd": to_jsonable(self.autograd), "numeric": to_jsonable(self.numeric),
                "ok": self.ok, "max_abs_error": to_jsonable(torch.tensor(self.error)),
                "true": to_jsonable(self.true), "cuts_removed": to_jsonable(self.removed)}


@dataclass
class CheckResult:
    source: str
    leaves: list[LeafCheck]
    eps: float
    rtol: float
    atol: float
    notes: list[Note] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.leaves)

    def leaf(self, name: str) -> LeafCheck:
        return next(c for c in self.leaves if c.leaf == name)

    @one_document
    def to_dict(self) -> dict:
        return {"dtype": "float64", "eps": self.eps, "rtol": self.rtol, "atol": self.atol, "ok": self.ok,
                "leaves": [c.to_dict() for c in self.leaves], "notes": [n.to_dict() for n in self.notes]}


def frozen_values(result: Explanation, graph: Graph) -> dict[int, torch.Tensor]:
    """The cut nodes: computed from a chosen leaf, yet not requiring grad -> their forward values."""
    deps = depends_on(graph, result.wrt)
    return {n.id: n.value.detach() for n in result.nodes if deps[n.id] and not n.requires_grad}


@torch.no_grad()
def numeric_grad(graph: Graph, leaves: dict, name: str, frozen: dict, eps: float) -> torch.Tensor:
    """Central differences of the output wrt every element of one leaf."""
    base = leaves[name].detach()
    flat = base.reshape(-1)
    grad = torch.zeros_like(flat)
    for k in range(flat.numel()):
        h = eps * max(1.0, abs(flat[k].item()))
        side = []
        for sign in (1.0, -1.0):
            moved = flat.clone()
            moved[k] += sign * h
            side.append(forward(graph, {**leaves, name: moved.reshape(base.shape)}, torch.float64, cuts=False,
                                frozen=frozen)[graph.output])
        grad[k] = (side[0].double() - side[1].double()).reshape(()) / (2 * h)  # double: a comparison's bools
    return grad.reshape(base.shape)


def true_grads(graph: Graph, values: dict, wrt: list[str]) -> dict[str, torch.Tensor]:
    """Autograd of the program with every cut removed (identity), in float64."""
    leaves = make_leaves(graph, values, wrt)
    out = forward(graph, leaves, torch.float64, cuts=False)[graph.output]
    chosen = [leaves[w] for w in wrt]
    grads = torch.autograd.grad(out, chosen, allow_unused=True) if out.requires_grad else [None] * len(wrt)
    return {w: torch.zeros_like(t) if g is None else g for w, t, g in zip(wrt, chosen, grads)}


def _compare(leaf: str, auto, num, true, rtol: float, atol: float) -> LeafCheck:
    a = torch.zeros_like(num) if auto is None else auto.double()
    err = float((a - num).abs().max()) if num.numel() else 0.0
    ok = err <= atol + rtol * (float(num.abs().max()) if num.numel() else 0.0)
    return LeafCheck(leaf, auto, num, true, err, ok)


def run_check(result: Explanation, *, eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-6) -> CheckResult:
    """`result` must come from a float64 evaluation (its graph and values are used again)."""
    graph, values = result.graph, result.inputs
    leaves = make_leaves(graph, values, [])
    size = sum(leaves[w].numel() for w in result.wrt)
    if size > MAX_ELEMENTS:
        raise LimitError("check_too_large", f"the numeric check needs two runs per element: the chosen leaves "
                         f"have {size} elements, the limit is {MAX_ELEMENTS}",
                         hint="choose fewer or smaller leaves with --wrt")
    frozen = frozen_values(result, graph)
    true = true_grads(graph, values, result.wrt)
    checks = [_compare(w, result.grads[w], numeric_grad(graph, leaves, w, frozen, eps), true[w], rtol, atol)
              for w in result.wrt]
    return CheckResult(result.source, checks, eps, rtol, atol, notes(result, graph, tol=eps))


def check(source: str, /, *, wrt: str | list[str] | None = None, eps: float = 1e-6, rtol: float = 1e-5,
          atol: float = 1e-6, values: dict[str, Any] | None = None, **kw_values: Any) -> CheckResult:
    """Compare autograd with finite differences (cuts held) and with the cut-free derivative.

        >>> check("(x*y1 - detach(x*y2))^2", x=1, y1=2, y2=7).leaf("x").true.item()
        50.0
    """
    from gradflow.engine.explain import explain

    result = explain(source, wrt=wrt, dtype="float64", values=merge_values(values, kw_values))
    return run_check(result, eps=eps, rtol=rtol, atol=atol)
