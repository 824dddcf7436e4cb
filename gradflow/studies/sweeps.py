"""Sweeps: evaluate one program at many values of one variable (the others fixed).

The program is compiled once (api.compile_program) and the fixed values are
built once; each point is one engine evaluation and backward pass. Every point
keeps a light `SweepRow` (L, the grads, error, warnings); the full Explanations
are kept only when asked (`keep=True`, the API default; the CLI streams instead).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gradflow.analysis.explanation import Explanation
from gradflow.engine.prepare import check_seed, checked, merge_values
from gradflow.errors import GradflowError, ValueInputError
from gradflow.values.jsonable import one_document, to_jsonable
from gradflow.values.specs import SweepRange, check_range, parse_sweep


@dataclass
class SweepRow:
    """What a sweep remembers of one point."""

    value: float  # the swept variable
    output: Any  # L (0-d tensor)
    grads: dict[str, Any]  # chosen leaf -> grad tensor or None
    error: GradflowError | None = None
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, value: float, p: Explanation) -> SweepRow:
        return cls(value, p.output.value, dict(p.grads), p.error, [w.message for w in p.warnings])


@dataclass
class SweepResult:
    """`rows[i]` is the point where the swept variable is `values[i]`; `points[i]` its Explanation (if kept)."""

    source: str
    var: str
    values: list[float]
    wrt: list[str]
    rows: list[SweepRow] = field(default_factory=list)
    points: list[Explanation] = field(default_factory=list)

    def outputs(self) -> list[float]:
        """L at every point (nan where it is nan)."""
        return [r.output.item() for r in self.rows]

    def grads(self, leaf: str) -> list[Any]:
        """dL/d(leaf) at every point: numbers (or nested lists), None where no gradient arrived."""
        return [to_jsonable(r.grads[leaf], strict=False) for r in self.rows]

    def records(self, full: bool = True) -> list[dict]:
        """One eval --json document per point, plus "sweep": {"var", "index", "value"} (needs keep=True)."""
        return [record(self.var, i, self.values[i], p, full) for i, p in enumerate(self.points)]

    @one_document
    def to_dict(self) -> dict:
        """Compact columns: {"source", "var", "values", "output", "grads": {leaf: [...]}} (strict JSON)."""
        return {"source": self.source, "var": self.var, "values": list(self.values),
                "output": [to_jsonable(r.output) for r in self.rows],
                "grads": {leaf: [to_jsonable(r.grads[leaf]) for r in self.rows] for leaf in self.wrt}}


def record(var: str, index: int, value: float, point: Explanation, full: bool = True) -> dict:
    """A point's `eval --json` document plus "sweep": {"var", "index", "value"}."""
    return {**point.to_dict(full), "sweep": {"var": var, "index": index, "value": value}}


def sweep(source: str, /, var: str = "x", start: float = -1.0, stop: float = 1.0, count: int = 21, *,
          wrt: str | list[str] | None = None, dtype: str = "float32", device: str = "cpu", seed: int = 0,
          values: dict[str, Any] | None = None, progress: Callable[[int, int], None] | None = None,
          keep: bool = True, strict: bool = False, **kw_values: Any) -> SweepResult:
    """Evaluate `source` at `count` evenly spaced values of `var` from `start` to `stop`.

    Other variables' values come as keywords (or `values={...}`), as for explain().
    `progress(done, total)` is called after each point; `keep=False` drops the
    per-point Explanations (records() then needs them) to save memory. A value the program does not use is
    a warning at every point, or with `strict` an error.
    """
    rng = parse_sweep(var, f"{start}:{stop}:{count}") if isinstance(count, int) else None
    if rng is None:
        raise ValueInputError("bad_value", f"cannot sweep '{var}' from {start!r} to {stop!r} in {count!r} points",
                              hint="sweep(src, 'x', -2, 2, 41): numbers, and a whole count >= 1")

    def on_point(i: int, point: Explanation):
        if progress is not None:
            progress(i + 1, rng.count)

    return run_sweep(source, var, rng, merge_values(values, kw_values), wrt=wrt, dtype=dtype, device=device,
                     seed=seed, on_point=on_point, keep=keep, strict=strict)


def check_sweep(source: str, var: str, values: dict[str, Any], wrt=None, rng: SweepRange | None = None,
                dtype: str = "float32", seed: int = 0, strict: bool = False):
    """The torch-free part (program, values, leaves, the seed, every point a finite number of `dtype`):
    its errors come before any work."""
    ready = checked(source, {**values, var: 0.0}, wrt, strict=strict)
    check_seed(seed)
    if rng is not None:
        check_range(var, rng, dtype)
    return ready


def run_sweep(source: str, var: str, rng: SweepRange, values: dict[str, Any], *, wrt=None,
              dtype: str = "float32", device: str = "cpu", seed: int = 0,
              on_point: Callable[[int, Explanation], None] | None = None, keep: bool = False,
              strict: bool = False, rows: bool = True, brief: bool = False) -> SweepResult:
    """The sweep itself; `on_point(i, explanation)` runs as soon as point i is computed. `rows=False` keeps
    no SweepRow (a caller that prints each point as it comes: memory stays flat). `brief`: every point's
    Explanation brief (explain(brief=True))."""
    graph, fixed, leaves = check_sweep(source, var, values, wrt, rng, dtype, seed, strict)
    from gradflow.engine.evaluate import evaluate  # torch from here on
    from gradflow.engine.explain import unused_warnings
    from gradflow.values.tensors import materialize, resolve_device, resolve_dtype, scalar

    fixed = materialize(fixed, dtype, seed)
    result = SweepResult(graph.source, var, rng.points(), leaves)
    torch_dtype, torch_device = resolve_dtype(dtype), resolve_device(device)
    unused = unused_warnings({**values, var: 0.0}, graph.inputs)  # every point's warnings start with them
    for i, x in enumerate(result.values):
        # each point already in the dtype: the points are gradflow's, not values given, so no rounding warnings
        point = evaluate(graph, {**fixed, var: scalar(x, torch_dtype, torch_device)}, leaves, dtype=dtype,
                         device=device, brief=brief)
        point.warnings[:0] = unused
        if rows:
            result.rows.append(SweepRow.of(x, point))
        if keep:
            result.points.append(point)
        if on_point is not None:
            on_point(i, point)
    return result
