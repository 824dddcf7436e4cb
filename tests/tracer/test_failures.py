"""gradflow.explain_errors on small real scripts: the lines it names against what torch really did.

Oracles: torch's anomaly mode (the forward line of the op whose backward failed: the saver), and the tensor's
own version counter watched line by line with sys.settrace in a plain run (the lines that wrote it in place).
"""
from __future__ import annotations

import re
import runpy
import sys
import warnings

import pytest
import torch

import gradflow
from gradflow.tracer.failures import GradflowWarning

from .scripts import line_of, write_script

SCRIPTS = {
    "augassign": ("y", """
        import torch
        torch.manual_seed(0)
        w = torch.randn(3, 4, requires_grad=True)
        x = torch.randn(2, 3)
        h = x @ w
        y = torch.sigmoid(h)
        y += 1
        y.sum().backward()
    """),
    "view_write": ("h", """
        import torch
        w = torch.randn(3, 4, requires_grad=True)
        x = torch.randn(2, 3)
        h = torch.exp(x @ w)
        h[:, 0] = 0
        h.sum().backward()
    """),
    "relu_": ("h", """
        import torch
        w = torch.randn(3, 4, requires_grad=True)
        h = torch.tanh(w)
        h.relu_()
        h.sum().backward()
    """),
}


def _run_explained(path, explained):
    with pytest.raises(RuntimeError) as info:
        explained(runpy.run_path, str(path))
    return info.value


def _anomaly_line(path) -> int:
    """The forward line anomaly mode blames (plain torch, no gradflow)."""
    with warnings.catch_warnings(record=True) as caught, torch.autograd.detect_anomaly(check_nan=False):
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError):
            runpy.run_path(str(path))
    text = "\n".join(str(w.message) for w in caught)
    return int(re.findall(rf'File "{re.escape(str(path))}", line (\d+)', text)[-1])


def _version_bumps(path, name) -> list[int]:
    """The lines after which `name`'s version counter went up, in a plain run watched by sys.settrace."""
    bumps, last = [], [None, None]

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != str(path):
            return None
        t = frame.f_locals.get(name)
        version = t._version if isinstance(t, torch.Tensor) else None
        if last[1] is not None and version is not None and version > last[1]:
            bumps.append(last[0])
        last[:] = [frame.f_lineno, version]
        return tracer

    sys.settrace(tracer)
    try:
        runpy.run_path(str(path))
    except RuntimeError:
        pass
    finally:
        sys.settrace(None)
    return bumps


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_inplace_saved_names_the_lines_torch_used(explained, tmp_path, case, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, body = SCRIPTS[case]
    path = write_script(tmp_path, case, body)
    err = _run_explained(path, explained)
    f = err.gradflow
    assert f.kind == "inplace_saved" and f.tensor == name
    assert f.saved_by["line"] == f"{case}.py:{_anomaly_line(path)}"
    assert f.modified_at == [f"{case}.py:{n}" for n in _version_bumps(path, name)]
    assert str(err).startswith("one of the variables needed for gradient computation")  # torch's words first
    assert "why backward failed" in str(err)


def test_optimizer_step_between_forward_and_backward(explained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_script(tmp_path, "opt", """
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(5, 3)
        loss1 = model(x).pow(2).mean()
        loss2 = model(x).abs().mean()
        loss1.backward(retain_graph=True)
        opt.step()
        loss2.backward()
    """)
    f = _run_explained(path, explained).gradflow
    assert f.tensor == "model.2.weight" and f.modified_at == ["opt.py:8"]
    assert f.saved_by["line"] == f"opt.py:{_anomaly_line(path)}" == "opt.py:6"
    assert "optimizer.step() after backward()" in f.fix


@pytest.mark.parametrize("case,carrier,freed,fix", [
    ("rnn", "hidden", 7, "hidden = hidden.detach()"),
    ("gan", "fake", 6, "fake.detach()"),
    ("shared", "feats", 6, "(loss_a + loss_b).backward()"),
])
def test_graph_freed_names_the_earlier_backward_and_the_carrier(explained, tmp_path, monkeypatch, case, carrier, freed, fix):
    monkeypatch.chdir(tmp_path)
    bodies = {
        "rnn": """
            import torch
            W = torch.randn(4, 4, requires_grad=True)
            hidden = torch.zeros(1, 4)
            for step in range(3):
                hidden = torch.tanh(torch.randn(1, 4) + hidden @ W)
                loss = hidden.pow(2).sum()
                loss.backward()
        """,
        "gan": """
            import torch
            G, D = torch.nn.Linear(2, 3), torch.nn.Linear(3, 1)
            opt_d = torch.optim.SGD(D.parameters(), lr=0.1)
            fake = torch.tanh(G(torch.randn(4, 2)))
            loss_d = D(fake).mean()
            loss_d.backward()
            opt_d.step()
            loss_g = -D(fake).mean()
            loss_g.backward()
        """,
        "shared": """
            import torch
            enc, a, b = torch.nn.Linear(3, 4), torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
            feats = torch.relu(enc(torch.randn(5, 3)))
            loss_a = a(feats).pow(2).mean()
            loss_b = b(feats).pow(2).mean()
            loss_a.backward()
            loss_b.backward()
        """,
    }
    path = write_script(tmp_path, case, bodies[case])
    f = _run_explained(path, explained).gradflow
    assert (f.kind, f.tensor, f.freed_by) == ("graph_freed", carrier, f"{case}.py:{freed}")
    assert fix in f.fix


def test_leaf_inplace_names_the_line(explained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_script(tmp_path, "leaf", """
        import torch
        w = torch.randn(3, requires_grad=True)
        w[0] = 1.0
    """)
    f = _run_explained(path, explained).gradflow
    assert (f.kind, f.tensor, f.modified_at) == ("leaf_inplace", "w", ["leaf.py:3"])
    assert "torch.no_grad()" in f.fix


def test_nonleaf_grad_names_the_op_and_the_hidden_leaf(explained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_script(tmp_path, "nonleaf", """
        import torch
        w = torch.randn(3, requires_grad=True).double()
        (w * 2).sum().backward()
        print(w.grad.norm())
    """)
    with pytest.raises(AttributeError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explained(runpy.run_path, str(path))
    f = info.value.gradflow
    assert (f.kind, f.tensor, f.made_by) == ("nonleaf_grad", "w", {"op": "double", "line": "nonleaf.py:2"})


def test_nothing_failing_changes_nothing():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    x = torch.randn(6, 3)
    plain = torch.autograd.grad(model(x).sum(), list(model.parameters()))
    with gradflow.explain_errors():
        seen = torch.autograd.grad(model(x).sum(), list(model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(plain, seen))


def test_nonleaf_grad_read_that_fails_nothing_warns_in_the_with_form(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_script(tmp_path, "reads", """
        import torch
        w = torch.randn(3, requires_grad=True).double()
        (w * 2).sum().backward()
        g = w.grad
    """)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gradflow.explain_errors():
            runpy.run_path(str(path))
    assert any("non-leaf Tensor" in str(w.message) for w in caught)  # torch's own warning: the oracle
    ours = [w for w in caught if w.category is GradflowWarning]
    assert len(ours) == 1 and f"{ours[0].filename}:{ours[0].lineno}" == line_of(path, "g = w.grad")  # the read
    assert not str(ours[0].message).startswith("why backward failed")  # nothing failed
    assert "made by:     double at reads.py:2" in str(ours[0].message)
    assert "tensor:      w" in str(ours[0].message)
