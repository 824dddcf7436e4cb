"""Checks that run before anything expensive: program text, tree depth, graph size, value text.

All iterative (no recursion), torch-free, and each failure is a package error
with the limit's name and the flag that changes it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradflow.errors import ParseError, Span
from gradflow.limits import Limits, check

if TYPE_CHECKING:  # the node classes load only once a program has parsed (early errors stay light)
    from gradflow.language.graph import Graph
    from gradflow.language.syntax import Program


def check_source(source: str, limits: Limits) -> None:
    """The program is valid Unicode, not too long and not too deeply parenthesised."""
    check("length", len(source), "the program text has", limit=limits.length)
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ParseError("bad_text", f"the program contains a byte that is not valid text at position {err.start}",
                         hint="save the program as UTF-8", span=Span(err.start, err.start + 1)) from None
    if source.count("(") <= limits.depth:
        return  # no deeper than its parentheses are many: no walk over the text
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
    """The typed expression trees, counted from the `with` blocks around them, are at most `limits.depth`
    levels deep (walked with a stack)."""
    if len(program.source) <= limits.depth:
        return  # every level has characters of its own (an operator, a name, a bracket, a block's `with`)
    from gradflow.language.syntax import Call, SetFlag, With

    statements = [(st, 0) for st in reversed(program.stmts)]
    while statements:
        st, blocks = statements.pop()
        if isinstance(st, With):
            if blocks + 1 > limits.depth:
                check("depth", blocks + 1, "the `with` blocks nest", limit=limits.depth, span=st.span,
                      source=program.source)
            statements.extend((inner, blocks + 1) for inner in reversed(st.body))
            continue
        if isinstance(st, SetFlag):
            continue
        stack = [(st.expr, blocks + 1)]
        while stack:
            e, d = stack.pop()
            if d > limits.depth:
                check("depth", blocks + tree_depth(st.expr), "the expression nests", limit=limits.depth,
                      span=e.span, source=program.source)
            if isinstance(e, Call):
                stack.extend((a, d + 1) for a in e.args)


def tree_depth(root) -> int:
    from gradflow.language.syntax import Call

    best, stack = 0, [(root, 1)]
    while stack:
        e, d = stack.pop()
        best = max(best, d)
        if isinstance(e, Call):
            stack.extend((a, d + 1) for a in e.args)
    return best


def check_graph(graph: Graph, limits: Limits) -> None:
    check("nodes", len(graph.nodes), "the program has", limit=limits.nodes)
