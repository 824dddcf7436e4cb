"""What the lexer does beyond the grammar: a new line inside parentheses continues the statement."""
from __future__ import annotations

from lark.lark import PostLex


class Continuation(PostLex):
    """Inside parentheses a new line continues the statement, as in Python: the lexer's new-line separators
    are dropped while a '(' is open (a ';' still ends the statement there, and is a syntax error)."""

    always_accept = ("_SEP",)  # lex a new line in every parser state, so this filter sees it

    def process(self, stream):
        depth = 0
        for tok in stream:
            if tok.type == "LPAR":
                depth += 1
            elif tok.type == "RPAR":
                depth = max(depth - 1, 0)
            elif depth and tok.type == "_SEP" and tok.value == "\n":
                continue
            yield tok
