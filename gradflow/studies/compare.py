"""Side by side: several programs (or one program's cut mechanisms) on the same values.

`compare([...])` evaluates each expression with the values it uses; a bad
expression becomes an error row and the others still run. `compare(src,
modes=True)` rewrites every cut of one program to each mechanism (modes.py).
"""
from __future__ import annotations

from typing import Any

from gradflow.engine.prepare import merge_values, prepare, refuse_unused, resolve_wrt
from gradflow.errors import GradflowError, ValueInputError
from gradflow.language.compile import compile_program
from gradflow.studies.rows import Comparison, Row


def _graphs(sources: list[str]) -> list:
    out: list = []  # a Graph, or the error compiling it
    for src in sources:
        try:
            out.append(compile_program(src))
        except GradflowError as err:
            out.append(err)
    return out


def _check_unused(graphs: list, values: dict, strict: bool) -> list:
    """A value no program uses: a warning (maybe a typo), or with `strict` an error (unknowable while some
    program does not parse)."""
    if any(isinstance(g, GradflowError) for g in graphs):
        return []
    used = sorted({name for g in graphs if not isinstance(g, GradflowError) for name in g.inputs})
    who = "none of the programs uses"
    if strict:
        refuse_unused(values, used, who, "the programs'")
    from gradflow.engine.explain import unused_warnings

    return unused_warnings(values, used, who)


def _leaves(graph, wrt) -> list[str]:
    """--wrt as it applies to this program: the named leaves it uses (others show 'not used')."""
    if isinstance(wrt, str) and wrt.strip() != "all":
        wrt = [w.strip() for w in wrt.split(",") if w.strip()]
    if isinstance(wrt, list) and any(w in graph.inputs for w in wrt):
        wrt = [w for w in wrt if w in graph.inputs]
    return resolve_wrt(graph, wrt)


def _row(src: str, graph, values: dict, wrt, dtype: str, device: str) -> Row:
    row = Row(src, src)
    if isinstance(graph, GradflowError):
        row.error = graph
        return row
    from gradflow.studies.whatif import run_graph

    try:
        ready = prepare(graph, {k: v for k, v in values.items() if k in graph.inputs}, _leaves(graph, wrt), dtype=dtype)
        result, row.error = run_graph(*ready, dtype, device)
    except GradflowError as err:
        result, row.error = None, err
    if result is not None:
        row.fill(result)
        row.note = "; ".join(f"{k}: {v}" for k, v in result.why.items())
    return row


def compare(sources: str | list[str], /, *, modes: bool = False, wrt: str | list[str] | None = None,
            dtype: str = "float32", device: str = "cpu", values: dict[str, Any] | None = None,
            strict: bool = False, **kw_values: Any) -> Comparison:
    """Evaluate several programs on the same values, or (modes=True) one program's cut mechanisms.

    A program that fails becomes a row with `.error`; a value no program uses is a warning (`.warnings`),
    or with `strict` a ValueInputError.
    """
    vals = merge_values(values, kw_values)
    sources = [sources] if isinstance(sources, str) else list(sources)
    if modes:
        from gradflow.studies.modes import compare_modes

        if len(sources) != 1:
            raise ValueInputError("usage", f"modes compares one program's cuts; got {len(sources)} programs",
                                  hint='gradflow compare --modes "(x*y1 - detach(x*y2))^2" --x 1 --y1 2 --y2 7')
        return compare_modes(sources[0], vals, wrt, dtype, device, strict)
    if not sources:
        raise ValueInputError("usage", "no program to compare", hint='gradflow compare "EXPR1" "EXPR2" --x 1')
    graphs = _graphs(sources)
    warnings = _check_unused(graphs, vals, strict)
    rows = [_row(src, g, vals, wrt, dtype, device) for src, g in zip(sources, graphs)]
    leaves = list(dict.fromkeys(leaf for r in rows for leaf in r.grads))
    return Comparison(rows, leaves, warnings=warnings)
