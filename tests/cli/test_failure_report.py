"""`gradflow script` and `gradflow inspect` when backward fails: gradflow's explanation (the tensor, the lines,
the fix) then torch's own message, exit 5; with --json the same as fields of `error.backward_failure`.

Oracles, from plain runs that do not use gradflow: torch's anomaly mode (the forward line of the op whose
backward failed), the tensor's version counter watched line by line (the lines that wrote it), and the lines
plain torch's Tensor.backward was called from (the backward() that freed the graph).
"""
from __future__ import annotations

import json
import runpy
import sys
import textwrap

import pytest
import torch

from ..processes import ROOT
from ..tracer.test_failures import _anomaly_line, _version_bumps

EXAMPLES = ROOT / "examples"


def _error(res) -> dict:
    return json.loads(res.stdout.strip().splitlines()[-1])["error"]


def _backward_lines(path) -> list[int]:
    """The lines of `path` that called Tensor.backward, in order, in a plain run (plain torch)."""
    called, real = [], torch.Tensor.backward

    def spy(self, *args, **kwargs):
        frame = sys._getframe(1)
        while frame.f_code.co_filename != str(path):
            frame = frame.f_back
        called.append(frame.f_lineno)
        return real(self, *args, **kwargs)

    torch.Tensor.backward = spy
    try:
        runpy.run_path(str(path))
    except RuntimeError:
        pass
    finally:
        torch.Tensor.backward = real
    return called


def test_script_inplace_names_saver_and_writer_then_torch(cli, monkeypatch):
    monkeypatch.chdir(ROOT)
    path = EXAMPLES / "fail_inplace.py"
    res = cli("script", "examples/fail_inplace.py")
    assert res.exit_code == 5
    err = res.stderr
    assert err.index("saved by:") < err.index("modified at:") < err.index("fix:") < err.index("torch says: Runtime")
    res = cli("script", "examples/fail_inplace.py", "--json")
    assert res.exit_code == 5
    f = _error(res)["backward_failure"]
    assert (f["kind"], f["tensor"]) == ("inplace_saved", "h")
    assert f["saved_by"] == {"op": "sigmoid", "line": f"examples/fail_inplace.py:{_anomaly_line(path)}"}
    assert f["modified_at"] == [f"examples/fail_inplace.py:{n}" for n in _version_bumps(path, "h")]
    assert f["fix"].startswith("write `h = h + 1`")


def test_script_second_backward_names_the_first_backward(cli, monkeypatch):
    monkeypatch.chdir(ROOT)
    first = _backward_lines(EXAMPLES / "fail_second_backward.py")[0]
    res = cli("script", "examples/fail_second_backward.py", "--json")
    assert res.exit_code == 5
    f = _error(res)["backward_failure"]
    assert (f["kind"], f["tensor"], f["freed_by"], f["freed_call"]) == \
        ("graph_freed", "hidden", f"examples/fail_second_backward.py:{first}", 1)
    assert "hidden = hidden.detach()" in f["fix"]


def test_script_failure_gradflow_does_not_explain_stays_as_it_was(cli, tmp_path):
    path = tmp_path / "other.py"
    path.write_text("import torch\nx = torch.randn(2, requires_grad=True)\nraise ValueError('bad batch')\n")
    res = cli("script", str(path), "--json")
    assert res.exit_code == 5
    assert "backward_failure" not in _error(res) and "ValueError: bad batch" in _error(res)["message"]


FUNCTIONS = textwrap.dedent("""
    import torch


    def bptt():
        torch.manual_seed(0)
        cell = torch.nn.RNNCell(3, 4)
        hidden = torch.zeros(1, 4)
        for step in range(2):
            hidden = cell(torch.randn(1, 3), hidden)
            loss = hidden.pow(2).sum()
            if step == 0:
                loss.backward()
        return loss, cell


    def again():
        lin = torch.nn.Linear(3, 1)
        loss = lin(torch.randn(2, 3)).pow(2).sum()
        loss.backward()
        return loss, lin


    def inplace():
        lin = torch.nn.Linear(3, 4)
        h = torch.sigmoid(lin(torch.randn(2, 3)))
        h += 1
        return h.sum(), lin
""")


@pytest.fixture
def functions(tmp_path):
    path = tmp_path / "steps.py"
    path.write_text(FUNCTIONS)
    return path


def _plain_call(path, name):
    """Run FUNCTION and its loss's backward in plain torch: the error torch gives, and the backward lines."""
    module = runpy.run_path(str(path))
    loss, _ = module[name]()
    with pytest.raises(RuntimeError) as info:
        loss.backward()
    return str(info.value)


def test_inspect_truncated_bptt_loss_is_the_users_failure_not_bad_input(cli, functions):
    assert "backward through the graph a second time" in _plain_call(functions, "bptt")  # what torch says
    first = _backward_lines_in(functions, "bptt")[0]
    res = cli("inspect", f"{functions}:bptt", "--json")
    assert res.exit_code == 5
    f = _error(res)["backward_failure"]
    assert (f["kind"], f["tensor"], f["freed_by"]) == ("graph_freed", "hidden", f"{functions}:{first}")
    assert "already used" not in res.stderr and "hidden = hidden.detach()" in res.stderr


def test_inspect_loss_backwarded_by_the_user_is_still_bad_input(cli, functions):
    res = cli("inspect", f"{functions}:again")
    assert res.exit_code == 2 and "already used by a backward pass" in res.stderr


def test_inspect_inplace_names_the_lines(cli, functions):
    res = cli("inspect", f"{functions}:inplace", "--json")
    assert res.exit_code == 5
    f = _error(res)["backward_failure"]
    lines = FUNCTIONS.splitlines()
    saver = next(i for i, x in enumerate(lines, 1) if "sigmoid" in x)
    assert f["saved_by"] == {"op": "sigmoid", "line": f"{functions}:{saver}"}
    assert f["modified_at"] == [f"{functions}:{lines.index('    h += 1') + 1}"]


def _backward_lines_in(path, name) -> list[int]:
    called, real = [], torch.Tensor.backward

    def spy(self, *args, **kwargs):
        called.append(sys._getframe(1).f_lineno)
        return real(self, *args, **kwargs)

    torch.Tensor.backward = spy
    try:
        runpy.run_path(str(path))[name]()
    finally:
        torch.Tensor.backward = real
    return called


@pytest.mark.parametrize("example,code,kind", [
    ("fail_inplace", 5, "inplace_saved"), ("fail_second_backward", 5, "graph_freed"),
    ("fail_leaf_inplace", 5, "leaf_inplace"), ("fail_no_grad_path", 3, None),
    ("fail_nonleaf_grad", 5, "nonleaf_grad"), ("fail_checkpoint", 3, "checkpoint_no_grad"),
    ("fail_no_derivative", 5, "no_derivative"), ("fail_custom_function", 5, "function_grads"),
])
def test_every_failure_example_fails_in_python_and_is_reported(cli, monkeypatch, example, code, kind):
    monkeypatch.chdir(ROOT)
    with pytest.raises((RuntimeError, AttributeError)):
        runpy.run_path(str(EXAMPLES / f"{example}.py"))  # plain python fails too
    res = cli("script", f"examples/{example}.py", "--json")
    assert res.exit_code == code
    assert _error(res).get("backward_failure", {}).get("kind") == kind
