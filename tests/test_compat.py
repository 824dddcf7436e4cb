"""gradflow/compat.py: each private use of another library gives the library's own answer, and when the private
name is gone (or the version is not one it was checked with) the public way still works."""
import functools

import lark
import pytest
import typer
from typer import _coercion, core

from gradflow import ParseError, compat
from gradflow.language import parser, tables
from gradflow.language.lexing import Continuation

from .processes import PYTHON, run

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


# ---- Typer ----------------------------------------------------------------------------------------------
@pytest.fixture
def typer_restored(monkeypatch):
    """Whatever a test patches in Typer is undone after it."""
    monkeypatch.setattr(core, "build_runtime_param", core.build_runtime_param)
    return monkeypatch


@pytest.mark.parametrize("low,high", [(None, None), (1, None), (0, 10), (2, 3)])
def test_a_whole_number_is_what_typers_coercion_makes_of_it(low, high):
    """`--jobs 2`, `--first-line 3`: the shortcut gives Typer's int, or leaves the value to Typer's coercion,
    which then words the error (never a different answer)."""
    info = typer.Option("--n", min=low, max=high)
    typers = _coercion.build_runtime_param(_coercion.resolve_type_descriptor(int, info))
    taken = 0
    for value in ["0", "1", "2", "3", "02", "007", "10", "11", "-1", "+3", " 3", "3 ", "1.5", "x", "", "٣", "1e3",
                  "99999999999999999999"]:
        got = compat.plain_value(int, value, info)
        try:
            want = typers._coerce_value(value, param=None, ctx=None)
        except typer.BadParameter:
            assert got is compat._NOT_PLAIN, value
            continue
        assert got is compat._NOT_PLAIN or (got == want and type(got) is int), value
        taken += got is not compat._NOT_PLAIN
    assert taken >= 3  # digits within the range are taken: no pydantic for them
    assert compat.plain_value(str, "x", info) == "x" and compat.plain_value(float, "1.5", info) is compat._NOT_PLAIN


def test_the_typer_patch_applies_once(typer_restored):
    assert compat.typer_coercion_applies()  # the Typer of the test extra is one it was checked with
    assert compat.typer_coercion_without_pydantic() is True
    assert compat.typer_coercion_without_pydantic() is False  # already applied


def test_options_are_coerced_with_the_patch(typer_restored, cli):
    compat.typer_coercion_without_pydantic()
    res = cli("eval", "x*y", "--x", "2", "--y", "5", "--dtype", "float64", "--order", "2", "--wrt", "all", "--json")
    assert res.exit_code == 0, res.stderr
    assert '"grads": {"x": 5.0, "y": 2.0}' in res.stdout
    assert cli("eval", "x", "--x", "1", "--order", "9").exit_code == 2  # out of range: Typer's own message


@pytest.mark.parametrize("gone", ["RuntimeParam", "build_runtime_param", "resolve_type_descriptor"])
def test_without_typers_private_names_nothing_is_patched(typer_restored, gone):
    typer_restored.delattr(_coercion, gone)
    assert not compat.typer_coercion_applies()
    assert compat.typer_coercion_without_pydantic() is False


def test_another_typer_version_is_left_alone(typer_restored):
    typer_restored.setattr(typer, "__version__", "0.99.0")
    assert compat.typer_coercion_without_pydantic() is False


_GONE = """
import sys
from typer import _coercion
del _coercion.RuntimeParam
sys.argv = ["gradflow", "eval", "x*y", "--x", "2", "--y", "5", "--dtype", "float64", "--limit", "depth=50"]
from gradflow.cli.app import run
run()
"""


@pytest.mark.slow
def test_the_command_works_when_typers_private_name_is_gone():
    res = run([*PYTHON, "-c", _GONE], text=True)
    assert res.returncode == 0, res.stderr
    assert "x.grad = 5" in res.stdout
