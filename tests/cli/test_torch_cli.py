"""The command line speaks PyTorch: the issue's own examples, programs with `with` blocks from a file and
from stdin, and every new mistake as a clear error with exit 2 (never a traceback)."""
import json
import re

import pytest

BLOG = ["--x", "1", "--y1", "2", "--y2", "7"]


def test_method_detach_keeps_the_text_as_written(cli):
    """(x*y1 - c)^2 with c = x*y2 = 7 held: dL/dx = 2 * (2 - 7) * y1 = -20."""
    res = cli("eval", "(x*y1 - (x*y2).detach())**2", *BLOG)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.rstrip().endswith("x.grad = -20")
    assert re.search(r"✂ \(x\*y2\)\.detach\(\) +detach ", res.stdout)


def test_torch_pow(cli):
    """(x*y1 - x*y2)^2: dL/dx = 2 * (x*y1 - x*y2) * (y1 - y2) = 2 * (-5) * (-5) = 50."""
    res = cli("eval", "torch.pow(x*y1 - x*y2, 2)", *BLOG)
    assert res.exit_code == 0 and res.stdout.rstrip().endswith("x.grad = 50")


BLOCK = "with torch.no_grad():\n    c = x*y2\nL = (x*y1 - c)**2\n"


def test_a_with_block_from_a_file_and_from_stdin(cli, tmp_path):
    prog = tmp_path / "prog.gf"
    prog.write_text(BLOCK)
    for args, stdin in ((["--file", str(prog)], None), (["-"], BLOCK)):
        res = cli("eval", *args, *BLOG, "--json", input=stdin)
        assert res.exit_code == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["grads"] == {"x": -20.0}  # c is computed untracked: the same cut as detach
        c = next(n for n in doc["nodes"] if n["name"] == "c")
        assert (c["requires_grad"], c["status"], c["cut_by"]) == (False, "cut", "`with torch.no_grad():` on line 1")


def test_indexing_flows_per_use(cli):
    """x = [2, 3, 5], L = x[0] * x[1:].sum() = 16: via x[0] [8, 0, 0], via x[1:] [0, 2, 2]."""
    res = cli("eval", "x[0] * x[1:].sum()", "--x", "[2,3,5]", "--flows")
    assert res.exit_code == 0
    assert "x.grad = [8, 2, 2]\n  = [8, 0, 0]  (via x[0])\n  + [0, 2, 2]  (via x[1:])" in res.stdout


@pytest.mark.parametrize("args,kind,words", [
    (["x[3]", "--x", "[1,2,3]"], "index", "index 3 is out of bounds for dimension 0 with size 3"),
    (["x.sum(dim=2)", "--x", "[1,2,3]"], "shape", "dim out of range"),
    (["x.sigmod().sum()", "--x", "[1,2,3]"], "unknown_method", "did you mean '.sigmoid()'?"),
    (["F.softmax(x, dims=0)", "--x", "[1,2,3]"], "unknown_keyword", "did you mean 'dim'?"),
    (["x.sum(dim=0.5)", "--x", "[1,2,3]"], "argument", "whole number"),
    (["with torch.no_grad():\n  c = x\n d = c\nd", "--x", "1"], "syntax", "unindent does not match"),
    (["y.retain_grad(); x*y", "--x", "1", "--y", "2"], "retain_grad", "does not require grad"),
    (["z = x*y; z.requires_grad_(False); z", "--x", "1", "--y", "2"], "requires_grad_non_leaf",
     "you can only change requires_grad flags of leaf variables"),
    (["v = x[0]; v.detach_(); v*x[1]", "--x", "[1,2]"], "torch", "Can't detach views in-place"),
])
def test_mistakes_exit_2_with_a_clear_error(cli, args, kind, words):
    res = cli("eval", *args, "--json")
    assert res.exit_code == 2, res.stderr
    assert json.loads(res.stdout)["error"]["kind"] == kind
    assert words in res.stderr and "Traceback" not in res.stderr


def test_ops_json_lists_every_spelling(cli):
    doc = json.loads(cli("ops", "--json").stdout)
    relu = next(o for o in doc if o["name"] == "relu")
    assert relu["spellings"] == ["relu(a)", "a.relu()", "torch.relu(a)", "F.relu(a)",
                                 "torch.nn.functional.relu(a)"]
    assert next(o for o in doc if o["name"] == "sum")["params"] == "input, dim=None, keepdim=False"
