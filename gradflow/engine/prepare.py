"""The preamble every evaluation shares, once: compile -> check values -> resolve wrt -> build the values.

`checked()` is the torch-free part (its errors come before any work); `prepare()` also builds constructor
and file values as tensors (seeded, in program order), so every later run sees the same numbers.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from gradflow.errors import ValueInputError
from gradflow.language.compile import compile_program
from gradflow.limits import Limits, current, using

if TYPE_CHECKING:
    from gradflow.language.graph import Graph


class Prepared(NamedTuple):
    graph: Graph
    values: dict[str, Any]  # one per input, in program order
    wrt: list[str]  # the chosen leaves


def checked(program: str | Graph, values: dict[str, Any], wrt: str | list[str] | None,
            limits: Limits | None = None, strict: bool = False) -> Prepared:
    """The program compiled (text) or as given (Graph), its values parsed and checked, the leaves chosen.
    A value the program does not use is dropped (`unused_values` says which), or with `strict` an error."""
    graph = compile_program(program, limits) if isinstance(program, str) else program
    return Prepared(graph, check_values(graph, values, strict), resolve_wrt(graph, wrt))


def prepare(program: str | Graph, values: dict[str, Any], wrt: str | list[str] | None, *, dtype: str = "float32",
            seed: int = 0, limits: Limits | None = None, strict: bool = False) -> Prepared:
    """`checked()`, then constructor and file values built (sizes checked against `limits` first)."""
    limits = limits or current()
    check_seed(seed)
    ready = checked(program, values, wrt, limits, strict)
    from gradflow.values.tensors import materialize  # torch from here on

    with using(limits):
        built = materialize(ready.values, dtype, seed)  # program order: seeded draws
    return ready if built is ready.values else ready._replace(values=built)


def merge_values(values: dict[str, Any] | None, kw_values: dict[str, Any]) -> dict[str, Any]:
    """`values={...}` and keyword values together; a name given both ways is an error, never a silent choice."""
    both = [name for name in kw_values if name in (values or {})]
    if both:
        raise ValueInputError("duplicate_value", f"'{both[0]}' is given twice: in values={{...}} and as {both[0]}=...",
                              hint="give each variable one value")
    return {**(values or {}), **kw_values}


SEEDS = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed takes


def check_seed(seed: int) -> None:
    """A whole number torch can seed with; refused up front, even if nothing random is drawn."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not SEEDS[0] <= seed <= SEEDS[1]:
        raise ValueInputError("bad_seed", f"the seed {seed!r} is not one torch can use: a seed is a whole number "
                              f"from {SEEDS[0]} to {SEEDS[1]} (torch.manual_seed's range)", hint="--seed 1")


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


def asked_leaves(source: str | None, wrt: str | list[str] | None, limits: Limits | None = None) -> list[str] | None:
    """An error document's `wrt`: the leaves the request chooses when the program compiles, else the names asked
    for (None for the default or 'all', which need the program). Never raises."""
    if source is not None:
        try:
            return resolve_wrt(compile_program(source, limits), wrt)
        except Exception:  # noqa: BLE001 - a GradflowError, or a bug: the error document is printed all the same
            pass
    if isinstance(wrt, str):
        names = [w.strip() for w in wrt.split(",") if w.strip()]
        return None if names in ([], ["all"]) else names
    return None if wrt is None else [w for w in wrt if isinstance(w, str)]


def _known(name: str, names: list[str], whose: str = "the program's") -> str:
    near = _near(name, names)
    listing = ", ".join(names) or "(none)"
    return (f"did you mean '{near}'? " if near else "") + f"{whose} variables are: {listing}"


def _near(name: str, names: list[str]) -> str | None:
    import difflib

    near = difflib.get_close_matches(name, names, n=1)
    return near[0] if near else None


UNUSED_KIND = "unused_value"  # the warning's kind (JSON `warnings`); with strict, the error's is unknown_variable


def unused_values(names: list[str] | dict[str, Any], used: list[str] | dict[str, Any],
                  who: str = "the program does not use") -> list[tuple[str, str]]:
    """(name, message) for each value given that is not in `used`, in the order given: a warning by default
    (scripts pass one set of values to many programs), kept with "did you mean 'y1'?" when the name looks
    like a typo of a used one."""
    used = list(used)
    out = []
    for name in names:
        if name not in used:
            near = _near(name, used)
            out.append((name, f"a value was given for '{name}', which {who}"
                              + (f"; did you mean '{near}'?" if near else "")))
    return out


def refuse_unused(names: list[str] | dict[str, Any], used: list[str] | dict[str, Any],
                  who: str = "the program does not use", whose: str = "the program's") -> None:
    """strict: the first unused value is an error (exit 2)."""
    for name, _ in unused_values(names, used, who)[:1]:
        raise ValueInputError("unknown_variable", f"a value was given for '{name}', which {who}",
                              hint=_known(name, list(used), whose) + " (an error only with --strict)")


def check_values(graph: Graph, values: dict[str, Any], strict: bool = False) -> dict[str, Any]:
    """Every input has a value, in program order; text values are parsed. A value for a name the program does
    not use is dropped (`unused_values` words the warning), or with `strict` an error."""
    inputs = graph.inputs
    if strict:
        refuse_unused(values, list(inputs))
    kept = {k: values[k] for k in inputs if k in values}  # in program order
    if len(kept) < len(inputs):  # some input has no value
        unused = [k for k in values if k not in inputs]
        name = next(name for name in inputs if name not in kept)
        near = _near(name, unused) or (unused[0] if len(unused) == 1 else None)
        typo = f"; the value given for '{near}' is not used: a typo?" if near else ""
        raise ValueInputError("missing_value", f"no value for variable '{name}'",
                              hint=f"pass --{name} VALUE (or --var {name}=VALUE; in Python: {name}=VALUE){typo}")
    texts = [k for k, v in values.items() if k in inputs and isinstance(v, str)]  # parsed in the order given
    if texts:  # (numbers and lists, most values, need no parser)
        from gradflow.values.text import parse_value

        kept.update((k, parse_value(k, kept[k])) for k in texts)  # each in its place
    return kept
