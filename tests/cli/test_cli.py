"""The command line: exit codes, stdout/stderr split, values, options, torch-free paths."""
import json
import subprocess

import pytest
from typer.testing import CliRunner

from gradflow.cli.app import app
from gradflow.language.ops import OPS

from ..processes import PYTHON, run

BLOG_ARGS = ["--x", "1", "--y1", "2", "--y2", "7"]


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    """Rich may read the real terminal's size: pin it so long lines never wrap differently."""
    monkeypatch.setenv("COLUMNS", "100")


def test_blog_table_on_stdout_nothing_on_stderr(cli):
    res = cli("eval", "(x*y1 - detach(x*y2))^2", *BLOG_ARGS)
    assert res.exit_code == 0 and res.stderr == ""
    assert "x.grad = -20" in res.stdout and "MulBackward0" in res.stdout
    assert "● on a live gradient path" in res.stdout and "✂ cut: x*y2 → detach(x*y2)" in res.stdout
    assert "\x1b[" not in res.stdout  # not a terminal: no colour codes


def test_both_detached_exit_3_table_still_printed(cli):
    res = cli("eval", "(detach(x*y1) - detach(x*y2))^2", *BLOG_ARGS)
    assert res.exit_code == 3
    assert "x.grad = None  (every path from x to L is cut by detach(x*y1) and detach(x*y2))" in res.stdout
    assert res.stderr.startswith("error: the output")
    assert "element 0 of tensors does not require grad" in res.stderr


@pytest.mark.parametrize("args,needle", [
    (["x +* 2", "--x", "1"], "error: syntax error: unexpected '*' at position 3\n  x +* 2\n     ^\n"),
    (["sinn(x)", "--x", "1"], "hint: did you mean 'sin'?"),
    (["pow(x)", "--x", "1"], "error: pow() takes 2 arguments, got 1"),
    (["x*y", "--x", "1"], "hint: pass --y VALUE (or --var y=VALUE"),
    (["x", "--x", "abc"], "error: cannot read the value of 'x': 'abc'"),
    (["x", "--x", "1", "--z", "2", "--strict"], "error: a value was given for 'z', which the program does not use"),
    (["x*2", "--x", "[1,2]"], "hint: wrap it in sum(...) or mean(...), e.g. sum(x*2)"),
    (["sum(x*y)", "--x", "[1,2]", "--y", "[1,2,3]"], "shape mismatch at 'x*y': mul of shapes (2,) and (3,)"),
    (["x", "--x", "1", "--dtype", "int32"], "error: unknown dtype 'int32'"),
    (["x", "--x", "1", "--device", "cuda"], "error: device 'cuda' is not available on this machine"),
    (["x", "--x", "1", "--wrt", "z"], "error: --wrt names 'z', which the program does not use"),
    (["x*yy", "--x", "1", "--yy", "2", "--wrt", "y"], "hint: did you mean 'yy'?"),
    (["z = x*2; z.requires_grad = false; z", "--x", "1"], "use detach(z)"),
    (["inference_mode(x*y)*x", "--x", "2", "--y", "3"], "Inference tensors cannot be saved for backward"),
    (["x", "--x"], "error: --x needs a value"),
    (["x", "--x", "1", "oops"], "error: unexpected argument 'oops'"),
    (["x", "--x", "1", "--x=2"], "error: --x is given twice"),
    (["x", "--x", "1", "--var", "novalue"], "error: --var takes NAME=VALUE, got 'novalue'"),
    ([], "error: no program given"),
])
def test_input_errors_exit_2(cli, args, needle):
    res = cli("eval", *args)
    assert res.exit_code == 2, res.stdout + res.stderr
    assert res.stdout == ""
    assert needle in res.stderr
    assert "Traceback" not in res.stderr


def test_debug_shows_traceback_keeps_exit_code(cli):
    res = cli("eval", "x +* 2", "--x", "1", "--debug")
    assert res.exit_code == 2
    assert "Traceback (most recent call last)" in res.stderr and "ParseError" in res.stderr


@pytest.mark.parametrize("args", [["--x=-2"], ["--x", "-2"], ["--var", "x=-2"], ["--x", "-2e0"]])
def test_negative_values(cli, args):
    res = cli("eval", "x^2", *args, "--json")
    doc = json.loads(res.stdout)
    assert doc["output"]["value"] == 4.0 and doc["grads"] == {"x": -4.0}


def test_program_starting_with_minus(cli):
    res = cli("eval", "-log(x)", "--x", "2", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["grads"]["x"] == -0.5


def test_expr_after_values_is_explained(cli):
    res = cli("eval", "--x", "1", "x*2")
    assert res.exit_code == 2
    assert "error: the program must come first, before the values (got '--x')" in res.stderr


@pytest.mark.parametrize("name", ["json", "help", "wrt", "file", "var", "dtype", "device", "debug"])
def test_names_clashing_with_options(cli, name):
    res = cli("eval", f"x*{name}", "--x", "2")
    assert res.exit_code == 2
    assert f"the variable '{name}' has the name of the option --{name}" in res.stderr
    assert f"hint: give its value with --var {name}=VALUE" in res.stderr
    ok = cli("eval", f"x*{name}", "--x", "2", "--var", f"{name}=3", "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["grads"] == {"x": 3.0}


def test_clashing_name_given_as_option(cli):
    res = cli("eval", "x*json", "--x", "1", "--json", "2")
    assert res.exit_code == 2 and "--var json=VALUE" in res.stderr


def test_file_and_stdin(cli, tmp_path):
    prog = tmp_path / "prog.gf"
    prog.write_text("# the blog, by name\nout1 = x*y1\nout2 = x*y2\nL = (detach(out1) - out2)^2\n")
    res = cli("eval", "--file", str(prog), *BLOG_ARGS, "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["grads"] == {"x": 70.0}
    res = cli("eval", "-", *BLOG_ARGS, "--json", input=prog.read_text())
    assert res.exit_code == 0 and json.loads(res.stdout)["grads"] == {"x": 70.0}
    res = cli("eval", "--file", str(tmp_path / "missing.gf"), "--x", "1")
    assert res.exit_code == 2 and "cannot read --file" in res.stderr
    res = cli("eval", "x", "--file", str(prog), "--x", "1")
    assert res.exit_code == 2 and "not both" in res.stderr


@pytest.mark.parametrize("wrt,grads", [
    (None, {"x": 3.0}), ("all", {"x": 3.0, "y": 2.0, "z": 0.0}), ("y,z", {"y": 2.0, "z": 0.0}),
])
def test_wrt(cli, wrt, grads):
    extra = ["--wrt", wrt] if wrt else []
    res = cli("eval", "x*y + 0*z", "--x", "2", "--y", "3", "--z", "4", "--json", *extra)
    assert json.loads(res.stdout)["grads"] == grads


def test_leaf_without_gradient_shows_none_and_reason(cli):
    res = cli("eval", "x*y + 0*detach(z)", "--x", "2", "--y", "3", "--z", "4", "--wrt", "all")
    assert res.exit_code == 0
    assert "z.grad = None  (every path from z to L is cut by detach(z))" in res.stdout


def test_dtype_float64(cli):
    for dtype, want in [("float64", 1 / 3), ("float32", 0.3333333432674408)]:
        res = cli("eval", "x/3", "--x", "1", "--dtype", dtype, "--json")
        assert json.loads(res.stdout)["output"]["value"] == want


def test_warnings_go_to_stderr(cli):
    res = cli("eval", "no_grad(x)*y", "--x", "2", "--y", "3")
    assert res.exit_code == 0 and "x.grad = 3" in res.stdout
    assert res.stderr.startswith("warning: no_grad(x) returns x itself") and "warning" not in res.stdout


def test_80_columns_lose_nothing_and_keep_brackets():
    args = ["eval", "sum(inference_mode(x*y)) - sum(log(x))", "--x", "[0,1]", "--y", "3"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "87"})  # the table's width here: every column whole
    lines = res.stdout.splitlines()
    header = next(line for line in lines if "grad_fn" in line).split()
    assert header == ["node", "op", "value", "requires_grad", "is_leaf", "grad_fn", "grad"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "80"})  # too narrow for it: a block per node
    assert res.exit_code == 0, res.stderr
    assert max(len(line) for line in res.stdout.splitlines()) <= 80 and "grad_fn " not in res.stdout.split("\n")[2]
    text = " ".join(res.stdout.split())
    assert "log(x) ⚠ log grad [-1, -1] · value [-inf, 0] ·" in text  # d(-sum(log x))/d log(x) = -1 each; ⚠: -inf
    assert "x var grad [-inf, -1] · value [0, 1] · requires_grad True · is_leaf True" in text
    res = CliRunner().invoke(app, ["eval", "sum(log(x))", "--x", "[0,1]"], env={"COLUMNS": "100"})
    x_row = next(line for line in res.stdout.splitlines() if line.startswith(" ● x "))
    assert x_row.split()[-2:] == ["[inf,", "1]"]  # not eaten as markup
    assert "[-inf, 0]" in res.stdout and "x.grad = [inf, 1]" in res.stdout


def test_help_version_ops(cli):
    res = cli("--help")
    assert res.exit_code == 0 and "eval" in res.stdout and "ops" in res.stdout
    res = cli("eval", "--help")
    assert res.exit_code == 0 and '--w "[1,2]"' in res.stdout and "--wrt" in res.stdout
    res = cli("--version")
    assert res.exit_code == 0 and res.stdout.startswith("gradflow ")
    res = cli("ops")
    assert res.exit_code == 0 and all(name in res.stdout for name in OPS)
    doc = json.loads(cli("ops", "--json").stdout)
    assert [o["name"] for o in doc] == list(OPS)


def _python(code: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return run(PYTHON + list(args) if not code else PYTHON + ["-c", code], text=True, input=stdin)


def test_torch_free_paths():
    code = """
import sys
from gradflow.cli.app import app
assert "torch" not in sys.modules, "import gradflow.cli.app"
for args in (["--help"], ["eval", "--help"], ["ops"], ["eval", "x +* 2"], ["eval", "x*y", "--x", "1"],
             ["eval", "sinn(x)", "--x", "1"], ["--version"]):
    try:
        app(args, prog_name="gradflow")
    except SystemExit:
        pass
    assert "torch" not in sys.modules, args
print("torch-free")
"""
    res = _python(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("torch-free")


@pytest.mark.slow
def test_python_dash_m():
    res = _python("", "-m", "gradflow", "eval", "(x*y1 - detach(x*y2))^2", *BLOG_ARGS, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["grads"] == {"x": -20.0}
    res = _python("", "-m", "gradflow", "eval", "(x", "--x", "1")
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stdout == ""
