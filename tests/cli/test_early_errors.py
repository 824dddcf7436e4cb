"""Errors found before evaluation print as plain text (gradflow.render.plain): same text as the rich
renderer, colour only on a terminal, and the early-exit path loads no rich console or node classes."""
import io
import sys

import pytest
from rich.console import Console

from gradflow.render import plain as diagnostics
from gradflow.errors import ParseError, Span, UserCodeError, ValueInputError
from gradflow.render.node_table import print_error as rich_print_error

from ..processes import GRADFLOW, run

ERRORS = [
    ParseError("syntax", "syntax error: unexpected end of input at position 22", hint="expected ')'",
               span=Span(22, 22), source="(x*y1 - detach(x*y2)^2"),
    ParseError("syntax", "syntax error: unexpected '*' at position 4", span=Span(4, 5), source="x\t+ * 2\r"),
    ValueInputError("usage", "no program given [x] *not markup*", hint="gradflow eval \"x\" --x 1"),
    UserCodeError("user_code", "main() raised ValueError: bad [x] (at m.py:2)", hint="fix it",
                  frames=[("m.py", 2, "main", "raise ValueError('bad [x]')\t# tab")]),
]


def _imported(*args):
    res = run([GRADFLOW[0], "-X", "importtime", *GRADFLOW[1:], *args], text=True)
    return res, {ln.rsplit("|", 1)[-1].strip() for ln in res.stderr.splitlines() if ln.startswith("import time:")}


def test_syntax_error_loads_no_rich_console_nor_node_classes():
    res, mods = _imported("eval", "(x*y1 - detach(x*y2)^2", "--x", "1")
    assert res.returncode == 2
    assert "error: syntax error: unexpected end of input at position 22" in res.stderr
    assert not {"rich.console", "rich.text", "gradflow.render.node_table", "gradflow.language.graph", "torch"} & mods


def test_inspect_of_a_missing_file_loads_no_torch():
    res, mods = _imported("inspect", "no_such_model.py:main")
    assert res.returncode == 2 and "error: no such file: no_such_model.py" in res.stderr
    assert not {"torch", "rich.console"} & mods


def test_help_loads_no_rich_console():
    res, mods = _imported("--help")
    assert res.returncode == 0 and "rich.console" not in mods


@pytest.mark.parametrize("error", ERRORS)
def test_plain_text_matches_the_rich_renderer(error, monkeypatch):
    out = io.StringIO()
    rich_print_error(error, Console(file=out, width=40, color_system=None))  # the oracle: rich's own rendering
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    diagnostics.print_error(error)
    assert plain.getvalue() == out.getvalue()


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("env, coloured", [({}, True), ({"NO_COLOR": "1"}, False), ({"TERM": "dumb"}, False)])
def test_colour_only_on_a_terminal_without_no_color(env, coloured, monkeypatch):
    for key in ("NO_COLOR", "TERM"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    diagnostics.print_error(ERRORS[0])
    text = tty.getvalue()
    assert ("\x1b[1;31merror: syntax error" in text and "\x1b[36mhint: expected ')'\x1b[0m" in text) == coloured
    assert ("\x1b" in text) == coloured
    assert text.replace("\x1b[1;31m", "").replace("\x1b[36m", "").replace("\x1b[0m", "") == \
        "error: syntax error: unexpected end of input at position 22\n  (x*y1 - detach(x*y2)^2\n" \
        "                        ^\nhint: expected ')'\n"
