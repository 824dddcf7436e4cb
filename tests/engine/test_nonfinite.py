"""nan/inf traced to the first node (forward) and the first edge (backward), hand-derived."""
import json
import math

import pytest

from gradflow import explain


def kinds(r):
    return {w.kind: w for w in r.warnings}


def test_division_by_zero():
    r = explain("y = x/z; y*3", x=1, z=0)
    w = kinds(r)
    assert r.node("y").value.item() == math.inf
    assert w["nonfinite_value"].node == "y"
    assert w["nonfinite_value"].message == ("inf first appears in the forward pass at 'y': "
                                            "division by zero: the divisor z is 0")
    # dL/dx = 3/z = inf: made on the edge x -> y by the derivative of a/b
    assert w["nonfinite_grad"].node == "y" and "x → y" in w["nonfinite_grad"].message
    assert r.grad("x") == math.inf


def test_zero_over_zero_is_nan():
    w = kinds(explain("x/z", x=0, z=0))["nonfinite_value"]
    assert w.message.startswith("nan first appears") and "(0/0 is nan)" in w.message


def test_sqrt_at_zero_has_an_infinite_gradient_only():
    r = explain("sqrt(x)", x=0)
    assert r.output.value.item() == 0.0 and r.grad("x") == math.inf  # d sqrt/dx = 1/(2 sqrt(x))
    assert "nonfinite_value" not in kinds(r)
    w = kinds(r)["nonfinite_grad"]
    assert w.node == "sqrt(x)" and "1/(2·sqrt(a)) is inf at a = x = 0" in w.message


def test_log_of_negative_and_of_zero():
    r = explain("2*log(x)", x=-1)
    assert math.isnan(r.output.value.item()) and r.grad("x") == -2.0  # 2/x stays finite
    assert kinds(r)["nonfinite_value"].message.endswith("log of a negative number is nan")
    assert list(kinds(r)) == ["nonfinite_value"]
    assert kinds(explain("log(x)", x=0))["nonfinite_value"].message.endswith("log(0) is -inf")


def test_sqrt_of_negative():
    w = kinds(explain("sqrt(x) + x", x=-4))["nonfinite_value"]
    assert w.node == "sqrt(x)" and w.message.endswith("sqrt of a negative number is nan")


def test_first_origin_only_later_nodes_inherit():
    r = explain("a = x/0; b = a*2; c = log(x - 5); b + c", x=1)
    values = [w for w in r.warnings if w.kind == "nonfinite_value"]
    assert [w.node for w in values] == ["a"]


def test_zero_times_inf_in_backward():
    # L = 0*log(x) at x=0: the gradient arriving at log(x) is 0, times d log/dx = 1/0 -> nan
    r = explain("0*log(x)", x=0)
    assert math.isnan(r.grad("x"))
    assert "0·inf is nan" in kinds(r)["nonfinite_grad"].message


def test_finite_program_has_no_warning():
    assert explain("(x*y1 - detach(x*y2))^2", x=1, y1=2, y2=7).warnings == []


def test_given_inf_value_is_the_origin():
    w = kinds(explain("x*2", x="1e400"))["nonfinite_value"]  # 1e400 does not fit in a float
    assert w.node == "x" and w.message.endswith("the value given for x is inf")


def test_cli_table_marks_the_node_and_stderr_says_why(cli):
    res = cli("eval", "y = x/z; y*3", "--x", "1", "--z", "0")
    assert res.exit_code == 0
    row = next(line for line in res.stdout.splitlines() if line.strip().startswith("● y "))
    assert "⚠" in row
    assert "⚠ nan/inf starts here" in res.stdout
    assert "warning: inf first appears in the forward pass at 'y': division by zero" in res.stderr


def test_cli_json_is_strict_with_warnings(cli):
    res = cli("eval", "sqrt(x)", "--x", "0", "--json")
    doc = json.loads(res.stdout, parse_constant=pytest.fail)  # NaN/Infinity tokens would fail
    assert doc["grads"] == {"x": "inf"}
    assert doc["warnings"] == [{"kind": "nonfinite_grad", "node": "sqrt(x)", "message": (
        "the gradient first becomes inf in the backward pass on the edge x → sqrt(x): "
        "d sqrt(a)/da = 1/(2·sqrt(a)) is inf at a = x = 0")}]


def test_cli_json_mode_also_warns_on_stderr(cli):
    res = cli("eval", "log(x)", "--x", "-1", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["warnings"][0]["kind"] == "nonfinite_value"
    assert res.stderr.startswith("warning: nan first appears in the forward pass at 'log(x)'")


@pytest.mark.parametrize("values,want", [
    ([], False), ([1.0, -2.0], False), ([1.0, float("nan")], True), ([float("inf"), -float("inf")], True),
    ([3.0e38, 3.0e38], False),  # finite, though their float32 sum overflows: tested element by element
    ([3.0e38, 3.0e38, float("-inf")], True),
])
def test_bad_tells_nonfinite_from_an_overflowing_sum(values, want):
    import torch

    from gradflow.engine.nonfinite import bad

    assert bad(torch.tensor(values, dtype=torch.float32)) is want
    assert bad(torch.tensor([1, 2])) is False and bad(None) is False


@pytest.mark.parametrize("n", [1, 5, 64, 65, 5000])  # every path of bad(): item, Python sum, torch sum
@pytest.mark.parametrize("poison", [None, float("nan"), float("inf"), float("-inf")])
def test_bad_on_every_size(n, poison):
    import torch

    from gradflow.engine.nonfinite import bad

    t = torch.ones(n, dtype=torch.float64)
    if poison is not None:
        t[n // 2] = poison
    assert bad(t) is (poison is not None)
    assert bad(t.reshape(1, n)) is (poison is not None)  # 2-d: no Python sum over nested lists


INF = float("inf")


@pytest.mark.parametrize("x", [[0.0, -0.0], [0.0, 1.0, -0.0, 2.0]])
def test_opposite_infinities_in_one_program(x):
    """1/x at [0, -0] is [inf, -inf], their sum nan: the first non-finite value is at 1/x; d(1/x)/dx = -1/x^2
    is -inf at both zeros, made on the edge x -> 1/x."""
    r = explain("sum(1/x)", x=x, dtype="float64")
    w = kinds(r)
    assert w["nonfinite_value"].node == "1/x" and "division by zero" in w["nonfinite_value"].message
    assert w["nonfinite_value"].message.startswith("inf/-inf first appears")
    assert w["nonfinite_grad"].node == "1/x" and "x → 1/x" in w["nonfinite_grad"].message
    assert r.grad("x")[0] == -INF and r.grad("x")[1] == (-INF if len(x) == 2 else -1.0)
