"""The Python API's `explain()`: prepare (compile, check values, choose leaves, build values) -> evaluate."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradflow.engine.prepare import UNUSED_KIND, merge_values, prepare, unused_values
from gradflow.errors import ValueInputError
from gradflow.limits import Limits, as_limits

if TYPE_CHECKING:  # program/values/difflib load on first use: a syntax error needs none of them
    from gradflow.language.graph import Graph


def explain(source: str, /, *, wrt: str | list[str] | None = None, dtype: str = "float32",
            device: str = "cpu", seed: int = 0, values: dict[str, Any] | None = None, measure_edges: bool = True,
            limits=None, strict: bool = False, brief: bool = False, **kw_values: Any):
    """Evaluate `source`, run backward and explain every node's gradient.

    Values come as keyword arguments (`x=1`) or, for names that clash with this
    function's own parameters, in `values={...}`. Returns an `Explanation`;
    raises a `GradflowError` subclass for an invalid program or value. When the
    output does not require grad, the result comes back with `.error` set.
    `measure_edges=False` skips the per-use gradient views (memory for big tensors):
    an edge from a node used more than once then has `flow` None.
    `limits` ({"depth": 500, ...} or a `Limits`) changes the resource limits (docs/limits.md).
    A value the program does not use is a warning (`.warnings`, kind "unused_value"); `strict=True` makes it
    a ValueInputError.
    `brief=True` gives the answer only: `output`, `grads`, `why`, `warnings` and `error` exactly as without it,
    but `nodes` and `edges` empty (and so no `flows`): faster, for scripts that need only the gradients.
    Text values may be constructors ("randn(3,4)", drawn from a generator seeded
    with `seed`) or files ("@x.npy", "@x.pt"); see values/specs.py.
    """
    check_arguments(source, wrt, dtype, device, values)
    return explain_checked(source, merge_values(values, kw_values), wrt=wrt, dtype=dtype, device=device, seed=seed,
                           measure_edges=measure_edges, limits=as_limits(limits), strict=strict, brief=brief)


def explain_checked(program: str | Graph, given: dict[str, Any], *, wrt: str | list[str] | None, dtype: str,
                    device: str, seed: int, measure_edges: bool, limits: Limits, strict: bool, brief: bool):
    """explain() once its arguments are checked (`check_arguments`), its values merged and its limits read;
    `program` may be compiled already (a batch line's: compile_program's cache was asked for it once)."""
    graph, vals, leaves = prepare(program, given, wrt, dtype=dtype, seed=seed, limits=limits, strict=strict)
    from gradflow.engine.evaluate import evaluate  # torch is imported only from here on

    result = evaluate(graph, vals, leaves, dtype=dtype, device=device, measure_edges=measure_edges, limits=limits,
                      brief=brief)
    result.warnings[:0] = unused_warnings(given, graph.inputs)
    return result


def unused_warnings(given, used, who: str = "the program does not use") -> list:
    """The "unused_value" warnings for the values given that the program does not use."""
    from gradflow.analysis.explanation import Warning

    return [Warning(UNUSED_KIND, None, message) for _, message in unused_values(given, used, who)]


def check_arguments(source, wrt, dtype, device, values) -> None:
    """explain()'s arguments have usable types (the CLI always passes text)."""
    checks: list[tuple[str, object, Any, str]] = [("the program", source, str, 'explain("x^2", x=3)'),
                                     ("wrt", wrt, (str, list, tuple, type(None)), 'wrt="x,y"'),
                                     ("dtype", dtype, str, 'dtype="float64"'), ("device", device, str, 'device="cpu"'),
                                     ("values", values, (dict, type(None)), 'values={"x": 1}')]
    for name, given, ok, example in checks:
        if not isinstance(given, ok):
            raise ValueInputError("bad_argument", f"{name} must be {_kind(ok)}, got {type(given).__name__}",
                                  hint=f"e.g. {example}")
    if isinstance(wrt, (list, tuple)) and not all(isinstance(w, str) for w in wrt):
        raise ValueInputError("bad_argument", "wrt must list variable names as text", hint='e.g. wrt=["x", "y"]')


def _kind(ok) -> str:
    names = {str: "text", list: "a list", tuple: "a tuple", dict: "a dict", type(None): "None"}
    return " or ".join(names[t] for t in (ok if isinstance(ok, tuple) else (ok,)))
