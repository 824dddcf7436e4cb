"""Sweeps: evaluate one program at many values of one variable (the others fixed).

The program is compiled once (api.compile_program) and the fixed values are
built once; each point is one engine evaluation and backward pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .api import check_values, compile_program, resolve_wrt
from .errors import ValueInputError
from .result import Explanation, to_jsonable
from .specs import SweepRange, parse_sweep


@dataclass
class SweepResult:
    """One Explanation per point; `values[i]` is the swept variable at `points[i]`."""

    source: str
    var: str
    values: list[float]
    points: list[Explanation] = field(default_factory=list)

    @property
    def wrt(self) -> list[str]:
        return self.points[0].wrt if self.points else []

    def outputs(self) -> list[float]:
        """L at every point (nan where it is nan)."""
        return [p.output.value.item() for p in self.points]

    def grads(self, leaf: str) -> list[Any]:
        """dL/d(leaf) at every point: numbers (or nested lists), None where no gradient arrived."""
        return [p.grad(leaf) for p in self.points]

    def records(self, full: bool = False) -> list[dict]:
        """One eval --json document per point, plus "sweep": {"var", "index", "value"}."""
        return [self.record(i, full) for i in range(len(self.points))]

    def record(self, i: int, full: bool = False) -> dict:
        return {**self.points[i].to_dict(full), "sweep": {"var": self.var, "index": i, "value": self.values[i]}}

    def to_dict(self) -> dict:
        """Compact columns: {"source", "var", "values", "output", "grads": {leaf: [...]}} (strict JSON)."""
        return {"source": self.source, "var": self.var, "values": list(self.values),
                "output": [to_jsonable(p.output.value) for p in self.points],
                "grads": {leaf: [to_jsonable(p.grads[leaf]) for p in self.points] for leaf in self.wrt}}


def sweep(source: str, /, var: str = "x", start: float = -1.0, stop: float = 1.0, count: int = 21, *,
          wrt: str | list[str] | None = None, dtype: str = "float32", device: str = "cpu", seed: int = 0,
          values: dict[str, Any] | None = None, progress: Callable[[int, int], None] | None = None,
          **kw_values: Any) -> SweepResult:
    """Evaluate `source` at `count` evenly spaced values of `var` from `start` to `stop`.

    Other variables' values come as keywords (or `values={...}`), as for explain().
    `progress(done, total)` is called after each point. Returns a SweepResult.
    """
    rng = parse_sweep(var, f"{start}:{stop}:{count}") if isinstance(count, int) else None
    if rng is None:
        raise ValueInputError("bad_value", f"cannot sweep '{var}' from {start!r} to {stop!r} in {count!r} points",
                              hint="sweep(src, 'x', -2, 2, 41): numbers, and a whole count >= 1")
    on_point = None if progress is None else (lambda res, i: progress(i + 1, len(res.values)))
    return run_sweep(source, var, rng, {**(values or {}), **kw_values}, wrt=wrt, dtype=dtype, device=device,
                     seed=seed, on_point=on_point)


def run_sweep(source: str, var: str, rng: SweepRange, values: dict[str, Any], *, wrt=None,
              dtype: str = "float32", device: str = "cpu", seed: int = 0,
              on_point: Callable[[SweepResult, int], None] | None = None) -> SweepResult:
    """The sweep itself; `on_point(result, i)` runs as soon as point i is in `result.points`."""
    graph = compile_program(source)
    fixed = check_values(graph, {**values, var: 0.0})
    leaves = resolve_wrt(graph, wrt)
    from .engine import evaluate  # torch from here on
    from .tensors import materialize

    fixed = materialize({n: fixed[n] for n in graph.inputs}, dtype, seed)
    result = SweepResult(graph.source, var, rng.points())
    for i, x in enumerate(result.values):
        result.points.append(evaluate(graph, {**fixed, var: x}, leaves, dtype=dtype, device=device))
        if on_point is not None:
            on_point(result, i)
    return result
