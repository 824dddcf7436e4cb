"""Text -> Program: lark parses with grammar.lark, the transformer in build.py builds typed nodes.

Errors become `ParseError`s carrying a span, so the CLI can underline the bad
token. Nothing is ever handed to Python's eval.

Three paths give the same nodes (`parse`): climb.py, precedence climbing over one-line programs of the common
constructs (the batch's programs), gives up on anything else and on any error; fastparse.py, lark's LALR
tables in a loop of our own, parses every text that parses and gives up on any error; the parse tree
(`_tree_parse`, lark's parser then Build over its tree) reports every error, as it always has. Each of the
first two checks when it is built that grammar.lark and lark are what it reads (else parse keeps to the rest).
"""
from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any

from gradflow.errors import ParseError, Span
from gradflow.language.larklib import (
    Lark,
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)
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


# The fast paths (climb.py, then fastparse.py: no parse tree, Build's methods called as the text is read) are taken
# once the node classes are loaded (a previous program parsed: batch, sweeps, tests) or for a text long enough
# that loading them (~20 ms) is small next to parsing it: a short program with a syntax error, the common early
# exit, still loads none of them. Any error there, and the tree path reports it, exactly as it always has.
FAST_FROM = 2000  # characters


_FAST: list = []  # [fastparse.Fast], or [None] when this lark's insides differ from what it expects
_CLIMB: list = []  # [climb.Climb], or [None] when grammar.lark's rules or lark's insides differ from its own


def _build(slot: list, path) -> None:
    """A fast path over this lark (`path(lark)`) into `slot`, or None there when grammar.lark's rules or lark's
    insides differ from what it reads: parse then keeps to the paths after it."""
    try:
        slot.append(path(_lark()))
    except (AttributeError, KeyError, TypeError, ValueError):
        slot.append(None)


def _fast():
    if not _FAST:
        from gradflow.language.fastparse import Fast

        _build(_FAST, Fast)
    return _FAST[0]


def _climb():
    if not _CLIMB:
        from gradflow.language.climb import Climb

        _build(_CLIMB, Climb)
    return _CLIMB[0]


def parse(source: str) -> Program:
    """Parse program text into typed statements. Raises ParseError.

    Three paths, each taking over where the one before gives up: climb.py (one-line programs of the common
    constructs, by precedence climbing), fastparse.py (lark's LALR tables in a loop of our own, any text that
    parses), and the parse tree (`_tree_parse`), which reports every error. The first two never report one:
    on any error they give up, and the text is parsed again by the next path. All three give the same nodes."""
    if len(source) >= FAST_FROM or "gradflow.language.build" in sys.modules:
        for path in (_climb(), _fast()):
            if path is not None:
                try:
                    stmts = path.parse(source)
                except Exception:  # noqa: BLE001  # any error: the next path, and last the tree path, reports it
                    continue
                if not _PROGRAM:  # an import statement costs ~0.7 us, 2% of a short program's parse
                    from gradflow.language.syntax import Program

                    _PROGRAM.append(Program)
                return _PROGRAM[0](source, stmts)
    return _tree_parse(source)


_PROGRAM: list = []  # [syntax.Program], once a fast path has parsed a text


def _tree_parse(source: str) -> Program:
    """The parse tree, then Build over it: every error is reported from here."""
    try:
        tree = _lark().parse(source)
    except UnexpectedInput as err:
        raise _syntax_error(err, source) from None
    except IndentationProblem as err:
        raise ParseError("syntax", f"syntax error: {err.message} at {_where(source, err.pos)}",
                         hint="indent every line of a `with` block alike, deeper than its `with` line",
                         span=Span(err.pos, err.pos + 1), source=source) from None
    from gradflow.language.build import Build  # the typed nodes load only once the text has parsed
    from gradflow.language.syntax import Program

    try:
        stmts = Build(source).transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, ParseError):
            raise err.orig_exc from None
        raise
    return Program(source, stmts)
