"""Text -> Program: lark's LALR parser reads grammar.lark into a parse tree, the transformer in transformer.py
turns the tree into typed nodes.

Errors become `ParseError`s carrying a span, so the CLI can underline the bad token. Nothing is ever handed to
Python's eval.

Why a tree and not lark's `transformer=` option (nodes built during the parse, as lark's calc example does):
that is a little faster, but it would report an unknown name before a syntax error later in the text, load the
node classes before a syntax error is found, and share one transformer (which quotes the text in its errors)
between threads. Parsing first, then building, gives all three for free. Neither is fast enough for a batch of
all-distinct programs: fastparse.py is, once a first text has parsed (`parse`).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from lark import Lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from gradflow.errors import ParseError, Span
from gradflow.language.lexing import Continuation, IndentationProblem

if TYPE_CHECKING:
    from gradflow.language.syntax import Program

_READABLE = {
    "NUMBER": "a number", "NAME": "a name", "LPAR": "'('", "RPAR": "')'", "MINUS": "'-'",
    "PLUS": "'+'", "STAR": "'*'", "SLASH": "'/'", "AT": "'@'", "POW": "'^'", "COMMA": "','",
    "EQUAL": "'='", "DOT": "'.'", "BOOL": "true or false", "_SEMI": "';'", "_NL": "a new line",
    "$END": "the end", "REQUIRES_GRAD": "requires_grad", "LSQB": "'['", "RSQB": "']'", "COLON": "':'",
    "ELLIPSIS": "'...'", "STRING": "a string", "LT": "'<'", "GT": "'>'", "LE": "'<='", "GE": "'>='", "EQ": "'=='",
    "NE": "'!='", "WITH": "with", "_INDENT": "an indented block", "_DEDENT": "the end of the block",
}
_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH", "AT", "POW", "LT", "GT", "LE", "GE", "EQ", "NE"}


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    from gradflow.language.tables import load

    return load(Continuation())


def _syntax_error(err: UnexpectedInput, source: str) -> ParseError:
    pos = getattr(err, "pos_in_stream", None)
    tok = getattr(err, "token", None)
    synthetic = getattr(tok, "type", "") in ("_NL", "_DEDENT") and str(tok) == ""  # lexing.py's, at the end
    at_end = getattr(tok, "type", None) == "$END" or (synthetic and pos is not None and pos >= len(source.rstrip()))
    if isinstance(err, UnexpectedEOF) or pos is None or at_end:
        pos = len(source.rstrip())  # just after the last character, even with a trailing new line
    if isinstance(err, UnexpectedCharacters):
        found = repr(source[pos]) if pos < len(source) else "end of input"
        msg = f"unexpected character {found}"
        if source[pos] == "_":
            msg += " (names start with a letter)"
        elif source[pos].isdigit():  # ٣, ３, ²: digits to Python's str.isdigit, not to the grammar
            msg += " (not an ASCII digit: numbers are written with 0-9)"
        expected = _accepted(err, err.allowed)
    else:
        found = "end of input" if tok is None or at_end else repr(str(tok))
        found = "end of line" if not at_end and getattr(tok, "type", None) == "_NL" else found
        found = {"_INDENT": "indent", "_DEDENT": "end of the block"}.get(getattr(tok, "type", ""), found)
        msg = f"unexpected {found}"
        expected = _accepted(err, err.expected if isinstance(err, (UnexpectedToken, UnexpectedEOF)) else set())
    expected = {t for t in expected or () if not t.startswith("__")}
    operators = expected & _OPERATORS if len(expected & _OPERATORS) >= 4 else set()  # after an operand
    names = sorted({_READABLE.get(t, t) for t in expected - operators}) + (["an operator"] if operators else [])
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


def parse(source: str) -> Program:
    """Parse program text into typed statements. Raises ParseError.

    lark's LALR parser builds the parse tree, then Build turns it into typed nodes. Parsing the whole text
    first means a syntax error anywhere wins over an unknown name before it, and a text with a syntax error
    never loads the node classes. Once a text has parsed, later texts go through fastparse.py first (the
    same nodes, faster, for a process that parses many); on any error there, lark's parser reports it."""
    if _FAST and _FAST[0] is not None:
        from gradflow.language.fastparse import NotFast
        from gradflow.language.syntax import Program

        try:
            return Program(source, _FAST[0].parse(source))
        except (NotFast, KeyError, ParseError, IndentationProblem):
            pass  # lark's parser below reports the error, exactly as always
    program = _tree_parse(source)
    if not _FAST:
        _FAST.append(_fast())
    return program


_FAST: list = []  # [fastparse.Fast], or [None] when this lark's insides differ from what it reads


def _fast():
    """fastparse's parser over this lark, or None where lark's insides differ from what it reads."""
    from gradflow.language.fastparse import Fast

    try:
        return Fast(_lark())
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _tree_parse(source: str) -> Program:
    """lark's parse tree, then Build over it: every error is reported from here."""
    try:
        tree = _lark().parse(source)
    except UnexpectedInput as err:
        raise _syntax_error(err, source) from None
    except IndentationProblem as err:
        raise ParseError("syntax", f"syntax error: {err.message} at {_where(source, err.pos)}",
                         hint="indent every line of a `with` block alike, deeper than its `with` line",
                         span=Span(err.pos, err.pos + 1), source=source) from None
    from gradflow.language.syntax import Program
    from gradflow.language.transformer import Build  # the typed nodes load only once the text has parsed

    try:
        stmts = Build(source).transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, ParseError):
            raise err.orig_exc from None
        raise
    return Program(source, stmts)
