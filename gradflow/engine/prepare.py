"""The preamble every evaluation shares: values checked against the program, leaves chosen, values pinned.

Torch-free.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradflow.errors import ValueInputError

if TYPE_CHECKING:
    from gradflow.language.graph import Graph


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
