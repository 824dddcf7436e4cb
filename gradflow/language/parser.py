"""Text -> Program: lark parses with grammar.lark, a transformer builds typed nodes.

Errors become `ParseError`s carrying a span, so the CLI can underline the bad
token. Nothing is ever handed to Python's eval.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from lark import Lark, Token
from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)
from lark.visitors import Transformer_NonRecursive

from gradflow.errors import ParseError, Span
from gradflow.language.lexing import Continuation

if TYPE_CHECKING:
    from gradflow.language.ops import FUNCTIONS, suggest
    from gradflow.language.syntax import (
        Assign,
        Call,
        Expr,
        ExprStmt,
        Num,
        Program,
        SetFlag,
        Var,
    )

_READABLE = {
    "NUMBER": "a number", "NAME": "a name", "LPAR": "'('", "RPAR": "')'", "MINUS": "'-'",
    "PLUS": "'+'", "STAR": "'*'", "SLASH": "'/'", "AT": "'@'", "POW": "'^'", "COMMA": "','",
    "EQUAL": "'='", "DOT": "'.'", "BOOL": "true or false", "_SEP": "';' or a new line",
    "$END": "the end", "REQUIRES_GRAD": "requires_grad",
}


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    from gradflow.language.tables import load

    return load(Continuation())


def _span_of(tok: Token) -> Span:
    return Span(tok.start_pos or 0, tok.end_pos or 0)


def _join(a: Span, b: Span) -> Span:
    return Span(a.start, b.end)


class _Build(Transformer_NonRecursive):
    """Bottom-up: every method returns a typed node with its span (no recursion: deep input is safe)."""

    def __init__(self, source: str):
        super().__init__()
        self.source = source

    def number(self, c):
        s = _span_of(c[0])
        return Num(s, s, float(c[0]))

    def var(self, c):
        s = _span_of(c[0])
        return Var(s, s, str(c[0]))

    def paren(self, c):
        lpar, inner, rpar = c
        inner.full = Span(lpar.start_pos, rpar.end_pos)
        return inner

    add = sub = mul = div = matmul = pow = None  # set below from _binary()

    def neg(self, c):
        s = Span(c[0].start_pos, c[1].full.end)
        return Call(s, s, "neg", [c[1]])

    def args(self, c):
        return list(c)

    def call(self, c):
        name, lpar, args, rpar = c
        s = Span(name.start_pos, rpar.end_pos)
        args = args or []
        op = FUNCTIONS.get(str(name))
        if op is None:
            near = suggest(str(name))
            raise ParseError("unknown_function", f"unknown function '{name}'",
                             hint=(f"did you mean '{near}'? " if near else "") + "`gradflow ops` lists every function",
                             span=_span_of(name), source=self.source)
        if not op.min_args <= len(args) <= op.max_args:
            raise ParseError("arity", f"{name}() takes {op.arity.replace('-', ' or ')} argument"
                             f"{'' if op.max_args == 1 else 's'}, got {len(args)}",
                             hint=f"{name}: {op.doc}", span=s, source=self.source)
        return Call(s, s, op.name, args)

    def assign(self, c):
        name, expr = c
        return Assign(str(name), expr, Span(name.start_pos, expr.full.end))

    def setflag(self, c):
        name, flag = c
        return SetFlag(str(name), str(flag).lower() == "true", Span(name.start_pos, flag.end_pos))

    def start(self, c):
        return [st if not isinstance(st, Expr) else ExprStmt(st, st.full) for st in c if st is not None]


def _binary(op: str):
    def build(self, c):
        s = _join(c[0].full, c[-1].full)
        return Call(s, s, op, [c[0], c[-1]])
    return build


for _op in ("add", "sub", "mul", "div", "matmul", "pow"):
    setattr(_Build, _op, _binary(_op))


def _syntax_error(err: UnexpectedInput, source: str) -> ParseError:
    pos = getattr(err, "pos_in_stream", None)
    at_end = getattr(getattr(err, "token", None), "type", None) == "$END"
    if isinstance(err, UnexpectedEOF) or pos is None or at_end:
        pos = len(source.rstrip())  # just after the last character, even with a trailing new line
    if isinstance(err, UnexpectedCharacters):
        found = repr(source[pos]) if pos < len(source) else "end of input"
        msg = f"unexpected character {found}"
        if source[pos] == "_":
            msg += " (names start with a letter)"
        expected = _accepted(err, err.allowed)
    else:
        tok = getattr(err, "token", None)
        found = "end of input" if tok is None or tok.type == "$END" else repr(str(tok))
        found = "end of line" if str(tok) == "\n" else found
        msg = f"unexpected {found}"
        expected = _accepted(err, err.expected if isinstance(err, (UnexpectedToken, UnexpectedEOF)) else set())
    names = sorted({_READABLE.get(t, t) for t in expected or () if not t.startswith("__")})
    hint = ("expected " + ", ".join(names)) if names else None
    end = pos + 1 if pos < len(source) else pos
    return ParseError("syntax", f"syntax error: {msg} at {_where(source, pos)}", hint=hint,
                      span=Span(pos, max(end, pos + 1) if pos < len(source) else pos), source=source)


def _accepted(err: UnexpectedInput, fallback) -> set[str]:
    """The terminals the parser accepts where it stopped. The lexer's own set (lark's default) also holds the
    new line, which `Continuation` has lexed everywhere, whether or not a statement may end there."""
    state: Any = getattr(err, "state", None)
    try:
        return {t for t in state.parse_conf.parse_table.states[state.position] if t.isupper()}  # no rules
    except (AttributeError, KeyError, TypeError):
        return set(fallback or ())


def _where(source: str, pos: int) -> str:
    """'position 3' in one-line programs; 'line 2, column 5' (1-based, as editors count) in longer ones."""
    if "\n" not in source.rstrip("\n"):
        return f"position {pos}"
    line = source.count("\n", 0, pos) + 1
    return f"line {line}, column {pos - (source.rfind(chr(10), 0, pos) + 1) + 1}"


def _load_nodes():
    """Bind the op table and typed-node classes _Build uses, on the first parse that gets that far: a syntax
    error (the CLI's early exit) never pays for syntax.py's dataclasses."""
    global Assign, Call, Expr, ExprStmt, Num, Program, SetFlag, Var, FUNCTIONS, suggest
    from gradflow.language.ops import FUNCTIONS, suggest
    from gradflow.language.syntax import (
        Assign,
        Call,
        Expr,
        ExprStmt,
        Num,
        Program,
        SetFlag,
        Var,
    )


def parse(source: str) -> Program:
    """Parse program text into typed statements. Raises ParseError."""
    try:
        tree = _lark().parse(source)
    except UnexpectedInput as err:
        raise _syntax_error(err, source) from None
    _load_nodes()
    try:
        stmts = _Build(source).transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, ParseError):
            raise err.orig_exc from None
        raise
    return Program(source, stmts)
