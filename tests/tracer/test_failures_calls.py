"""Class 7: an op with no derivative for an argument, and a custom autograd.Function whose backward returns the
wrong number of gradients or a gradient of the wrong shape. Each against torch's real error in a plain run; the
lines are read from the script's own text."""
from __future__ import annotations

import json
import runpy

import pytest

import gradflow

from ..processes import ROOT
from .scripts import line_of, write_script


def _both(path, explained):
    """torch's error in a plain run, and the same run's error under explain_errors()."""
    with pytest.raises(RuntimeError) as plain:
        runpy.run_path(str(path))
    with pytest.raises(RuntimeError) as info:
        explained(runpy.run_path, str(path))
    assert type(info.value) is type(plain.value) and str(info.value).startswith(str(plain.value))
    return str(plain.value), info.value.gradflow


@pytest.mark.parametrize("call,op", [("torch.special.gammainc(a, x)", "special.gammainc"),
                                     ("torch.igamma(a, x)", "igamma")])
def test_no_derivative_names_the_op_line_and_argument(explained, tmp_path, monkeypatch, call, op):
    monkeypatch.chdir(tmp_path)
    path = write_script(tmp_path, "gamma", f"""
        import torch
        a = torch.full((3,), 2.0, requires_grad=True)
        x = torch.rand(3) * 4
        cdf = {call}
        cdf.sum().backward()
    """)
    said, f = _both(path, explained)
    assert "the derivative for 'igamma: input' is not implemented" in said
    assert (f.kind, f.tensor) == ("no_derivative", "a")
    assert f.call == {"op": op, "line": line_of(path, call), "argument": "a"}
    assert "a.detach()" in f.fix


FUNCTION = """
    import torch


    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, s):
            ctx.save_for_backward(s)
            return x * s

        @staticmethod
        def backward(ctx, grad):
            (s,) = ctx.saved_tensors
            return RETURNS


    x = torch.randn(2, 3, requires_grad=True)
    s = torch.randn(3)
    y = Scale.apply(x, s)
    y.sum().backward()
"""


def test_function_returning_too_few_gradients(explained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_script(tmp_path, "few", FUNCTION.replace("RETURNS", "grad * s"))
    said, f = _both(path, explained)
    assert "returned an incorrect number of gradients (expected 2, got 1)" in said
    assert f.kind == "function_grads" and f.call["line"] == line_of(path, "Scale.apply(")
    assert "must return 2 gradients" in f.fix and "(x, s)" in f.fix


def test_function_returning_a_gradient_of_the_wrong_shape(explained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_script(tmp_path, "shape", FUNCTION.replace("RETURNS", "(grad * s).sum(0), None"))
    said, f = _both(path, explained)
    assert "invalid gradient at index 0 - got [3] but expected shape compatible with [2, 3]" in said
    assert (f.kind, f.tensor) == ("function_grads", "x")
    assert f.call == {"op": "Scale.apply", "line": line_of(path, "Scale.apply("), "argument": "x"}
    assert "[2, 3]" in f.fix


@pytest.mark.parametrize("example,kind,needle", [("fail_no_derivative.py", "no_derivative", "gammainc(a, x)"),
                                                 ("fail_custom_function.py", "function_grads", "Scale.apply(")])
def test_script_reports_class_7(cli, monkeypatch, example, kind, needle):
    monkeypatch.chdir(ROOT)
    with pytest.raises(RuntimeError):
        runpy.run_path(str(ROOT / "examples" / example))  # it fails in plain python too
    res = cli("script", f"examples/{example}", "--json")
    assert res.exit_code == 5
    f = json.loads(res.stdout.strip().splitlines()[-1])["error"]["backward_failure"]
    number = next(i for i, t in enumerate((ROOT / "examples" / example).read_text().splitlines(), 1) if needle in t)
    assert f["kind"] == kind and f["call"]["line"] == f"examples/{example}:{number}"
