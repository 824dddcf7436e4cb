"""Control characters in user text (a comment in the program, a value, a file name, a module or parameter name
from `inspect`'s user code, an exception message) never reach the terminal, DOT or Mermaid raw: every renderer
shows them escaped ('\\x1b'), as Python writes them in a string (gradflow/display.py)."""
import io
import json
import re

import pytest

from gradflow.display import dot_string, mermaid_text, visible
from gradflow.errors import GradflowError, Span

ESC = "\x1b[31m"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what a terminal would act on
COMMENT = f"x*2 # {ESC}red\x07\x08\r\u202e"  # ESC, BEL, backspace, CR, a right-to-left override


def test_visible_escapes_what_a_terminal_acts_on_and_keeps_the_rest():
    assert visible("a\x1b[31mb\x07\x08\r\x7f\x85\u202e") == "a\\x1b[31mb\\x07\\x08\\r\\x7f\\x85\\u202e"
    assert visible("tab\tnew\nline ✂ é") == "tab\tnew\nline ✂ é"
    every = "".join(map(chr, range(0x00, 0xA0))) + "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    assert not RAW.search(visible(every))


def test_dot_and_mermaid_labels():
    assert dot_string(f'a"b\\c\n{ESC}') == '"a\\"b\\\\c\\n\\\\x1b[31m"'
    assert mermaid_text(f'<a>"b"\n{ESC}') == "#lt;a#gt;#quot;b#quot;<br/>\\x1b[31m"


def test_the_caret_stays_under_the_escaped_character():
    error = GradflowError("syntax", "unexpected character '\\x1b'", span=Span(3, 4), source=f"x*2{ESC}")
    assert error.caret() == "  x*2\\x1b[31m\n     ^^^^"


SHOWN, HIDDEN = True, False  # whether the output quotes the user text (then it must be there, escaped)


@pytest.mark.parametrize("args,stdin,shown", [
    (["eval", COMMENT, "--x", "1"], None, HIDDEN),  # the table names nodes, not the comment
    (["eval", COMMENT, "--x", "1", "--json"], None, HIDDEN),
    (["eval", COMMENT, "--x=-1:1:3"], None, SHOWN),  # the sweep's title shows the program, comment and all
    (["eval", COMMENT, "--x=-1:1:3", "--json"], None, HIDDEN),
    (["eval", COMMENT, "--x", "1", "--graph", "dot"], None, SHOWN),
    (["eval", COMMENT, "--x", "1", "--check", "--order", "2", "--flows"], None, HIDDEN),
    (["graph", COMMENT, "--x", "1"], None, HIDDEN),
    (["graph", COMMENT, "--x", "1", "--format", "dot"], None, SHOWN),  # the graph's label is the program
    (["graph", COMMENT, "--x", "1", "--format", "mermaid"], None, HIDDEN),
    (["whatif", COMMENT, "--x", "1"], None, HIDDEN),
    (["compare", COMMENT, "x*3", "--x", "1"], None, SHOWN),
    (["batch", "--text", "--x", "1"], f"{COMMENT}\nx^\n", HIDDEN),
    (["eval", f"x*2{ESC}", "--x", "1"], None, SHOWN),  # a syntax error quotes the text and its line
    (["eval", "x", "--wrt", ESC, "--x", "1"], None, SHOWN),
    (["eval", "x", "--x", "1", "--dtype", ESC], None, SHOWN),
    (["eval", "x", f"--x{ESC}", "1"], None, SHOWN),
    (["eval", "--file", f"no{ESC}such"], None, SHOWN),
    (["graph", "x", "--x", "1", "--format", ESC], None, SHOWN),
    (["eval", "2*detach(x)", "--x", "1", "--wrt", f"x,{ESC}"], None, SHOWN),
])
def test_no_control_character_reaches_the_output(cli, args, stdin, shown):
    res = cli(*args, input=stdin)
    assert res.exit_code in (0, 2, 3, 4), res.stderr
    assert not RAW.search(res.stdout), res.stdout
    assert not RAW.search(res.stderr), res.stderr
    assert ("\\x1b[31m" in res.stdout + res.stderr) is shown  # shown escaped, not dropped


def test_an_error_shows_the_escaped_text_with_the_caret_under_it(cli):
    res = cli("eval", f"x*2{ESC}", "--x", "1")
    assert res.exit_code == 2
    assert res.stderr.splitlines()[:3] == ["error: syntax error: unexpected character '\\x1b' at position 3",
                                           "  x*2\\x1b[31m", "     ^^^^"]


USER_CODE = '''
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    model = nn.Module()
    model.add_module("\\x1b[31mred", nn.Linear(2, 1))
    setattr(model, "bell\\x07", nn.Linear(2, 1))
    x = torch.ones(1, 2)
    loss = getattr(model, "\\x1b[31mred")(x).sum() + getattr(model, "bell\\x07")(x).detach().sum()
    return loss, model


def fails():
    raise ValueError("\\x1b[2Jthe screen is gone")
'''


@pytest.fixture
def user_code(tmp_path):
    path = tmp_path / "names.py"
    path.write_text(USER_CODE)
    return path


@pytest.mark.parametrize("extra", [[], ["--expand"], ["--graph", "tree"], ["--graph", "dot"], ["--graph", "mermaid"],
                                   ["--only-problems"]])
def test_inspect_shows_names_from_user_code_escaped(cli, user_code, extra):
    res = cli("inspect", f"{user_code}:main", *extra)
    assert res.exit_code == 0, res.stderr
    assert not RAW.search(res.stdout) and not RAW.search(res.stderr)
    assert "\\x1b[31mred" in res.stdout or "bell\\x07" in res.stdout, res.stdout


def test_inspect_json_keeps_the_true_names(cli, user_code):
    res = cli("inspect", f"{user_code}:main", "--json")
    names = {p["name"] for p in json.loads(res.stdout)["params"]}
    assert {"\x1b[31mred.weight", "bell\x07.weight"} <= names  # JSON escapes them itself (\u001b)
    assert not RAW.search(res.stdout)


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_an_exception_message_from_user_code_is_escaped(cli, user_code, extra):
    res = cli("inspect", f"{user_code}:fails", *extra)
    assert res.exit_code == 5  # the user's own code failed (ExitCode.USER_CODE)
    assert not RAW.search(res.stdout) and not RAW.search(res.stderr)
    assert "error: fails() raised ValueError: \\x1b[2Jthe screen is gone" in res.stderr


def test_rich_consoles_escape_any_text_even_on_a_terminal():
    from rich.text import Text

    from gradflow.render.console import new_console

    out = io.StringIO()
    console = new_console(file=out, force_terminal=True, color_system="standard", width=60)
    console.print(Text(f"name {ESC}red\u202e", style="bold"))  # (rich's Text drops BEL, BS, CR itself)
    printed = out.getvalue()
    assert "name \\x1b[31mred\\u202e" in printed
    assert "\x1b[31mred" not in printed and "\u202e" not in printed  # rich's own style codes are the only ESCs
    assert printed.count("\x1b[") == 2  # bold on, reset


@pytest.mark.slow  # matplotlib
def test_the_sweep_picture_title_is_escaped(cli, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.svg"
    res = cli("eval", f"x^2 # {ESC}", "--x=-1:1:3", "--plot", str(out))
    assert res.exit_code == 0, res.stderr
    assert not RAW.search(out.read_text())  # an SVG with a raw ESC is not even valid XML
