"""What the lexer does beyond the grammar: lines, continuation inside brackets, and `with` blocks.

- Inside parentheses or brackets a new line continues the statement, as in Python.
- Every line ends with an _NL, the last one included (a program need not end with a new line).
- A `with ...:` line followed by deeper-indented lines opens a block: _INDENT, and _DEDENT where the
  indentation comes back. Outside blocks indentation means nothing (programs written before blocks existed
  may indent lines freely); inside one it must be consistent, as Python requires.
"""
from __future__ import annotations

from lark import Token
from lark.lark import PostLex

_OPEN, _CLOSE = ("LPAR", "LSQB"), ("RPAR", "RSQB")


class IndentationProblem(Exception):
    """A block's indentation is inconsistent; `pos` is where the offending line starts."""

    def __init__(self, message: str, pos: int):
        super().__init__(message)
        self.message, self.pos = message, pos


def _indent(nl: Token) -> int:
    """The indentation of the line after this new-line token (a tab counts 8, as lark's Indenter does)."""
    last = str(nl).rsplit("\n", 1)[-1]
    ws = last[: len(last) - len(last.lstrip(" \t\f"))]
    return ws.count(" ") + ws.count("\f") + 8 * ws.count("\t")


class Continuation(PostLex):
    """The postlexer: new lines inside brackets are dropped (a ';' still ends the statement there, and is a
    syntax error); a final _NL is added; `with` blocks get _INDENT / _DEDENT."""

    always_accept = ("_NL",)  # lex a new line in every parser state, so this filter sees it

    def process(self, stream):
        depth = 0
        blocks: list[tuple[int, int]] = []  # per open block: (its header line's indentation, its body's)
        line_ind, header, opener = 0, False, False
        last = problem = None  # problem: a bad indentation, raised only if a token follows (not at the end)
        for tok in stream:
            if problem is not None:
                raise problem
            if tok.type == "_NL":
                if depth:
                    continue
                yield tok
                ind = _indent(tok)
                try:
                    yield from self._layout(tok, ind, line_ind, opener, blocks)
                except IndentationProblem as bad:
                    problem = bad
                line_ind, header, opener, last = ind, False, False, tok
                continue
            if last is None and tok.column:
                line_ind = tok.column - 1  # the first line's own indentation
            if tok.type in _OPEN:
                depth += 1
            elif tok.type in _CLOSE:
                depth = max(depth - 1, 0)
            header = header or (tok.type == "WITH" and not depth)
            opener = header and not depth and tok.type == "COLON"
            last = tok
            yield tok
        if last is not None and last.type != "_NL":
            yield Token("_NL", "", *at_end(last))
        for _ in blocks:
            yield Token("_DEDENT", "", *at_end(last))

    @staticmethod
    def _layout(nl: Token, ind: int, line_ind: int, opener: bool, blocks: list[tuple[int, int]]):
        """_INDENT / _DEDENT for the line after `nl`."""
        start = nl.end_pos if nl.end_pos is not None else 0
        if opener:
            if ind > line_ind:
                blocks.append((line_ind, ind))
                yield Token("_INDENT", "", start, nl.end_line, nl.end_column, nl.end_line, nl.end_column, start)
            return  # not deeper: the parser says an indented block was expected
        while blocks and ind < blocks[-1][1]:
            header_ind, _ = blocks.pop()
            if ind > header_ind:
                raise IndentationProblem("unindent does not match any outer indentation level", start)
            yield Token("_DEDENT", "", start, nl.end_line, nl.end_column, nl.end_line, nl.end_column, start)
        if blocks and ind > blocks[-1][1]:
            raise IndentationProblem("unexpected indent", start)


def at_end(last):
    if last is None:
        return (0, 1, 1, 1, 1, 0)
    return (last.end_pos, last.end_line, last.end_column, last.end_line, last.end_column, last.end_pos)
