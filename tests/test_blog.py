"""The classic blog example, hand-derived: L = (x*y1 - x*y2)^2 at x=1, y1=2, y2=7.

d = x*y1 - x*y2 = -5, dL/dd = 2d = -10.
  nothing detached:      dL/dx = -10*(y1 - y2) = 50
  x*y1 detached:         dL/dx = -10*(-y2)     = 70
  x*y2 detached:         dL/dx = -10*y1        = -20
  both detached:         backward fails (exit 3)
"""
import json

import pytest

from gradflow import explain

from .conftest import BLOG

CASES = [("(x*y1 - x*y2)^2", 50.0), ("(detach(x*y1) - x*y2)^2", 70.0), ("(x*y1 - detach(x*y2))^2", -20.0)]


@pytest.mark.parametrize("expr,grad", CASES)
def test_api(expr, grad):
    r = explain(expr, **BLOG)
    assert r.grad("x") == grad
    assert r.output.value.item() == 25.0
    assert r.error is None


@pytest.mark.parametrize("expr,grad", CASES)
def test_cli_json(cli, expr, grad):
    res = cli("eval", expr, "--x", "1", "--y1", "2", "--y2", "7", "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["grads"] == {"x": grad}
    assert doc["output"] == {"name": expr, "value": 25.0, "requires_grad": True}
    assert doc["error"] is None


def test_both_detached_api():
    r = explain("(detach(x*y1) - detach(x*y2))^2", **BLOG)
    assert r.error is not None and r.error.kind == "no_gradient"
    assert r.grads == {"x": None}
    assert "detach(x*y1)" in r.why["x"] and "detach(x*y2)" in r.why["x"]


def test_both_detached_cli(cli):
    res = cli("eval", "(detach(x*y1) - detach(x*y2))^2", "--x", "1", "--y1", "2", "--y2", "7")
    assert res.exit_code == 3
    assert "x.grad = None" in res.stdout  # the table is still printed
    assert "does not require grad" in res.stderr
    assert "Traceback" not in res.stderr


def test_named_statements():
    r = explain("out1 = x*y1; out2 = x*y2; L = (detach(out1) - out2)^2", **BLOG)
    assert r.grad("x") == 70.0
    assert r.output.name == "L"
    assert r.node("out1").status == "cut"
