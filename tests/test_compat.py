"""gradflow/compat.py: each private name of another library has a fallback that works without it."""
import functools

import lark
import pytest

from gradflow import ParseError, compat
from gradflow.language import parser, tables
from gradflow.language.lexing import Continuation

PROGRAMS = ["(x*y1 - detach(x*y2))^2", "a = x*2\nb = (a +\n 1); b^-2", "x.requires_grad = false; x*3",
            "with torch.no_grad():\n    a = x*2\nsum(a * x)"]


def _parses(lk: lark.Lark) -> list:
    return [lk.parse(p) for p in PROGRAMS]


def test_lark_tables_load_on_this_lark():
    """The lark installed here is one the shipped tables are known to load on (else every process builds them)."""
    assert compat._version(lark.__version__) in compat.LARK_TABLE_VERSIONS
    assert tables.load(Continuation()).source_path == "<deserialized>"


def _outcomes() -> list:
    """parser.parse's programs and errors (kind, message, hint, span) for PROGRAMS and some broken texts."""
    out = []
    for text in [*PROGRAMS, "(x*y) +", "x $ y", "foo(x) + )", "with torch.no_grad():\n    a = x\n  b = a\n"]:
        try:
            out.append(parser.parse(text).stmts)
        except ParseError as err:
            out.append((err.kind, str(err), err.hint, err.span))
    return out


def test_without_lark_s_private_loader_the_parser_is_built_and_parses_alike(monkeypatch):
    shipped, before = _parses(tables.load(Continuation())), _outcomes()
    monkeypatch.delattr(lark.Lark, "_load_from_dict")
    built = tables.load(Continuation())
    assert built.source_path != "<deserialized>" and _parses(built) == shipped
    monkeypatch.setattr(parser, "_lark", functools.cache(parser._lark.__wrapped__))  # parse() itself, on it
    assert _outcomes() == before and parser._lark().source_path != "<deserialized>"


@pytest.mark.parametrize("version", ["1.1.9", "2.0.0", "1.4.0", "dev"])
def test_on_a_lark_version_not_known_to_read_the_tables_the_parser_is_built(monkeypatch, version):
    shipped = _parses(tables.load(Continuation()))
    monkeypatch.setattr(lark, "__version__", version)
    built = tables.load(Continuation())
    assert built.source_path != "<deserialized>" and _parses(built) == shipped


def test_tables_this_lark_cannot_read_are_built_instead(monkeypatch):
    def unreadable(*args, **kwargs):
        raise KeyError("__type__")

    monkeypatch.setattr(lark.Lark, "_load_from_dict", unreadable)
    assert _parses(tables.load(Continuation())) == _parses(lark.Lark(tables.grammar_text(), postlex=Continuation(),
                                                                         **tables.OPTIONS))
