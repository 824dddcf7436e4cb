"""Checks that run before anything expensive: program text, tree depth, graph size, value text.

All iterative (no recursion), torch-free, and each failure is a package error
with the limit's name and the flag that changes it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradflow.errors import ParseError, Span, ValueInputError
from gradflow.limits import MAX_VALUE_DIMS, Limits, check

if TYPE_CHECKING:  # the node classes load only once a program has parsed (early errors stay light)
    from gradflow.language.graph import Graph, Program


def check_arguments(source, wrt, dtype, device, values) -> None:
    """explain()'s arguments have usable types (the CLI always passes text)."""
    for name, given, ok, example in [("the program", source, str, 'explain("x^2", x=3)'),
                                     ("wrt", wrt, (str, list, tuple, type(None)), 'wrt="x,y"'),
                                     ("dtype", dtype, str, 'dtype="float64"'), ("device", device, str, 'device="cpu"'),
                                     ("values", values, (dict, type(None)), 'values={"x": 1}')]:
        if not isinstance(given, ok):
            raise ValueInputError("bad_argument", f"{name} must be {_kind(ok)}, got {type(given).__name__}",
                                  hint=f"e.g. {example}")
    if isinstance(wrt, (list, tuple)) and not all(isinstance(w, str) for w in wrt):
        raise ValueInputError("bad_argument", "wrt must list variable names as text", hint='e.g. wrt=["x", "y"]')


def _kind(ok) -> str:
    names = {str: "text", list: "a list", tuple: "a tuple", dict: "a dict", type(None): "None"}
    return " or ".join(names[t] for t in (ok if isinstance(ok, tuple) else (ok,)))


def check_source(source: str, limits: Limits) -> None:
    """The program is valid Unicode, not too long and not too deeply parenthesised."""
    check("length", len(source), "the program text has", limit=limits.length)
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ParseError("bad_text", f"the program contains a byte that is not valid text at position {err.start}",
                         hint="save the program as UTF-8", span=Span(err.start, err.start + 1)) from None
    depth, deepest = paren_depth(source)
    if depth > limits.depth:
        check("depth", depth, "the parentheses nest", limit=limits.depth,
              span=Span(deepest, deepest + 1), source=source)


def paren_depth(source: str) -> tuple[int, int]:
    """The deepest parenthesis nesting outside comments, and where it is reached."""
    depth = best = at = 0
    in_comment = False
    for i, ch in enumerate(source):
        if in_comment:
            in_comment = ch != "\n"
        elif ch == "#":
            in_comment = True
        elif ch == "(":
            depth += 1
            if depth > best:
                best, at = depth, i
        elif ch == ")":
            depth = max(0, depth - 1)
    return best, at


def check_tree(program: Program, limits: Limits) -> None:
    """The typed expression trees are at most `limits.depth` levels deep (walked with a stack)."""
    from gradflow.language.graph import Call, SetFlag

    for st in program.stmts:
        if isinstance(st, SetFlag):
            continue
        stack = [(st.expr, 1)]
        while stack:
            e, d = stack.pop()
            if d > limits.depth:
                check("depth", tree_depth(st.expr), "the expression nests", limit=limits.depth,
                      span=e.span, source=program.source)
            if isinstance(e, Call):
                stack.extend((a, d + 1) for a in e.args)


def tree_depth(root) -> int:
    from gradflow.language.graph import Call

    best, stack = 0, [(root, 1)]
    while stack:
        e, d = stack.pop()
        best = max(best, d)
        if isinstance(e, Call):
            stack.extend((a, d + 1) for a in e.args)
    return best


def check_graph(graph: Graph, limits: Limits) -> None:
    check("nodes", len(graph.nodes), "the program has", limit=limits.nodes)


def check_value_text(name: str, text: str) -> None:
    """A JSON list value nests at most MAX_VALUE_DIMS brackets (json.loads would recurse)."""
    depth = best = 0
    for ch in text:
        if ch == "[":
            depth += 1
            best = max(best, depth)
        elif ch == "]":
            depth -= 1
    if best > MAX_VALUE_DIMS:
        raise ValueInputError("bad_value", f"the value of '{name}' nests lists {best} deep; "
                              f"at most {MAX_VALUE_DIMS} dimensions are supported",
                              hint="give a number or a list like [[1,2],[3,4]]")
