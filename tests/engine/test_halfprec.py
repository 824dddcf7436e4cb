"""--dtype float16|bfloat16: the program runs in half precision, and underflow to 0 is named against float64.

Oracles: hand-derived values (d/dx of x*1e-3*1e-3*1e-3 is 1e-9, below float16's smallest positive number
6e-8) and the same computation written in plain torch in float16 and in float64.
"""
import json

import pytest
import torch
from typer.testing import CliRunner

import gradflow
from gradflow.cli.app import app


def kinds(result):
    return [w.kind for w in result.warnings]


def test_float16_gradient_underflow_is_named_at_the_edge_where_it_happens():
    r = gradflow.explain("x*1e-3*1e-3*1e-3", x=1, dtype="float16")
    assert r.grads["x"].dtype == torch.float16 and float(r.grads["x"]) == 0.0
    x16 = torch.tensor(1.0, dtype=torch.float16, requires_grad=True)  # plain torch agrees: 0 in float16
    (x16 * 1e-3 * 1e-3 * 1e-3).backward()
    assert float(x16.grad) == 0.0
    # the incoming gradient at x*1e-3 is 1e-6 (fits in float16), times 1e-3 gives 1e-9 (does not)
    grad_warning = next(w for w in r.warnings if w.kind == "underflow_grad")
    assert "on the edge x → x*1e-3: float64 gives 1e-09" in grad_warning.message
    assert any(w.message == "x.grad underflowed to 0 in float16: float64 gives 1e-09" for w in r.warnings)
    value = next(w for w in r.warnings if w.kind == "underflow_value")
    assert value.node == "x*1e-3*1e-3*1e-3" and "float64 gives 1e-09" in value.message


def test_the_underflowed_elements_are_those_plain_torch_finds():
    r = gradflow.explain("sum(exp(-x))", x=[1, 10, 20], dtype="float16")
    x16 = torch.tensor([1.0, 10, 20], dtype=torch.float16, requires_grad=True)
    x64 = x16.detach().double().requires_grad_()
    torch.exp(-x16).sum().backward()
    torch.exp(-x64).sum().backward()
    lost = (x16.grad == 0) & (x64.grad != 0)
    assert lost.tolist() == [False, False, True] and torch.equal(r.grads["x"], x16.grad)
    leaf = [w.message for w in r.warnings if w.node == "x" and w.kind == "underflow_grad"]
    assert leaf == [f"x.grad underflowed to 0 in float16: float64 gives {float(x64.grad[2]):.6g} in 1 of 3 elements"]


def test_bfloat16_has_float32_s_range_so_only_tinier_values_underflow():
    r = gradflow.explain("x*1e-20*1e-20", x=1, dtype="bfloat16")  # 1e-40: a bfloat16 subnormal, not 0
    assert r.grads["x"].dtype == torch.bfloat16 and float(r.grads["x"]) != 0 and "underflow_grad" not in kinds(r)
    r = gradflow.explain("x*1e-30*1e-30", x=1, dtype="bfloat16")  # 1e-60: 0
    assert float(r.grads["x"]) == 0.0 and kinds(r).count("underflow_grad") == 2


def test_a_constant_float16_cannot_hold_is_named_and_float32_runs_are_unchanged():
    r = gradflow.explain("x*1e-30*1e-30", x=1, dtype="float16")
    assert r.warnings[0].message == "the number 1e-30 is 0 in float16 (the smallest positive float16 is about 6e-08)"
    assert gradflow.explain("x*1e-30*1e-30", x=1).warnings == []  # float32: no float64 twin, no warnings added


def test_float16_overflow_names_65504():
    r = gradflow.explain("x*300*300", x=1, dtype="float16")  # 90000 > 65504
    assert float(r.grads["x"]) == float("inf")
    assert "overflow: the result is too large for float16 (float16's largest number is 65504)" in r.warnings[0].message


def test_check_and_hessian_compute_in_float64_and_say_so():
    res = CliRunner().invoke(app, ["eval", "x^3", "--x", "0.1", "--dtype", "float16", "--order", "2", "--check",
                                   "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["check"]["dtype"] == "float64" and doc["hessian"]["dtype"] == "float64"
    assert doc["hessian"]["matrix"][0][0] == pytest.approx(0.6, rel=1e-12)  # 6x at x = 0.1, in float64
    assert "computes in float64, as the oracle" in doc["check"]["notes"][0]["message"]
    res = CliRunner().invoke(app, ["eval", "x^3", "--x", "0.1", "--dtype", "float16", "--order", "2"],
                             env={"COLUMNS": "120"})
    assert "Second derivatives (cuts respected, computed in float64)" in res.stdout


def test_cli_float16_shows_the_underflow():
    res = CliRunner().invoke(app, ["eval", "x*1e-3*1e-3*1e-3", "--x", "1", "--dtype", "float16"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "x.grad = 0" in res.stdout
    assert "warning: x.grad underflowed to 0 in float16: float64 gives 1e-09" in res.stderr
