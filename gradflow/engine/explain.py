"""The Python API: `explain()` and friends. Thin: parse -> lower -> evaluate."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from gradflow.errors import ValueInputError
from gradflow.language.checks import check_arguments, check_graph, check_source, check_tree
from gradflow.limits import Limits, as_limits, current
from gradflow.language.parser import parse

if TYPE_CHECKING:  # program/values/difflib load on first use: a syntax error needs none of them
    from gradflow.language.graph import Graph


def compile_program(source: str, limits: Limits | None = None) -> Graph:
    """Parse and lower once per distinct text (batch and sweeps reuse it), within `limits`
    (default: the limits in force, see `limits.using`)."""
    return _compile(source, current() if limits is None else limits)


@functools.lru_cache(maxsize=1024)
def _compile(source: str, limits: Limits) -> Graph:
    check_source(source, limits)
    program = parse(source)  # first: a syntax error never loads program.py
    check_tree(program, limits)
    from gradflow.language.graph import lower

    graph = lower(program)
    check_graph(graph, limits)
    return graph


compile_program.cache_info = _compile.cache_info  # type: ignore[attr-defined]
compile_program.cache_clear = _compile.cache_clear  # type: ignore[attr-defined]


def resolve_wrt(graph: Graph, wrt: str | list[str] | None) -> list[str]:
    """None -> ['x'] if the program uses x, else every variable; 'all'; 'a,b' or a list."""
    names = list(graph.inputs)
    if wrt is None:
        return ["x"] if "x" in graph.inputs else names
    if isinstance(wrt, str) and wrt.strip() == "all":
        return names
    if isinstance(wrt, str):
        wrt = [w.strip() for w in wrt.split(",") if w.strip()]
    if not wrt:
        raise ValueInputError("usage", "--wrt names no variable", hint="--wrt x, --wrt a,b or --wrt all")
    computed = {name for n in graph.nodes if n.op != "var" for name in n.names}
    for w in wrt:
        if w in computed and w not in graph.inputs:
            raise ValueInputError("not_a_leaf", f"--wrt names '{w}', which is computed, not an input variable",
                                  hint=f"--wrt chooses input leaves ({', '.join(names) or 'none'}); "
                                       f"the gradient of {w} is in its row of the table")
        if w not in graph.inputs:
            raise ValueInputError("unknown_variable", f"--wrt names '{w}', which the program does not use",
                                  hint=_known(w, names))
    return list(dict.fromkeys(wrt))


def _known(name: str, names: list[str]) -> str:
    import difflib

    near = difflib.get_close_matches(name, names, n=1)
    listing = ", ".join(names) or "(none)"
    return (f"did you mean '{near[0]}'? " if near else "") + f"the program's variables are: {listing}"


def check_values(graph: Graph, values: dict[str, Any]) -> dict[str, Any]:
    """Every input has a value and every value names an input; text values are parsed."""
    names = list(graph.inputs)
    for name in values:
        if name not in graph.inputs:
            raise ValueInputError("unknown_variable", f"a value was given for '{name}', "
                                  "which the program does not use", hint=_known(name, names))
    for name in names:
        if name not in values:
            raise ValueInputError("missing_value", f"no value for variable '{name}'",
                                  hint=f"pass --{name} VALUE (or --var {name}=VALUE; "
                                       f"in Python: {name}=VALUE)")
    from gradflow.values.text import parse_value

    return {k: parse_value(k, v) if isinstance(v, str) else v for k, v in values.items()}


def explain(source: str, /, *, wrt: str | list[str] | None = None, dtype: str = "float32",
            device: str = "cpu", seed: int = 0, values: dict[str, Any] | None = None, measure_edges: bool = True,
            limits=None, **kw_values: Any):
    """Evaluate `source`, run backward and explain every node's gradient.

    Values come as keyword arguments (`x=1`) or, for names that clash with this
    function's own parameters, in `values={...}`. Returns an `Explanation`;
    raises a `GradflowError` subclass for an invalid program or value. When the
    output does not require grad, the result comes back with `.error` set.
    `measure_edges=False` skips the per-use gradient views (memory for big tensors):
    an edge from a node used more than once then has `flow` None.
    `limits` ({"depth": 500, ...} or a `Limits`) changes the resource limits (README).
    Text values may be constructors ("randn(3,4)", drawn from a generator seeded
    with `seed`) or files ("@x.npy", "@x.pt"); see specs.py.
    """
    check_arguments(source, wrt, dtype, device, values)
    limits = as_limits(limits)
    graph = compile_program(source, limits)
    vals = check_values(graph, {**(values or {}), **kw_values})
    leaves = resolve_wrt(graph, wrt)
    from gradflow.engine.evaluate import evaluate  # torch is imported only from here on
    from gradflow.values.tensors import materialize

    from gradflow.limits import using

    with using(limits):  # constructor sizes are checked against these limits before allocating
        tensors = materialize({n: vals[n] for n in graph.inputs}, dtype, seed)  # program order: seeded draws
    return evaluate(graph, tensors, leaves, dtype=dtype, device=device, measure_edges=measure_edges, limits=limits)
