"""Edge flows after the single-use shortcut and with measure_edges=False, against hand-derived numbers.

L = sum(tanh(x)*x + sigmoid(x)) at x = [0.5, -1]: x is used three times, every other node once.
dL/dx = tanh(x) + x*(1 - tanh(x)^2) + s(1-s); the three edges out of x carry those three terms.
"""
import math

import pytest

from gradflow import explain

X = [0.5, -1.0]
EXPR = "sum(tanh(x)*x + sigmoid(x))"


def _sig(v):
    return 1 / (1 + math.exp(-v))


def _flows(r):
    return {(r.nodes[e.src].name, r.nodes[e.dst].name, e.pos): e.flow for e in r.edges}


@pytest.mark.parametrize("copies", [1, 2500])  # 2 elements (small: read into Python numbers), 5000 (kept as tensors)
def test_every_edge_flow_matches_hand_derivation(copies):
    xs = X * copies
    r = explain(EXPR, x=xs, dtype="float64")
    f = _flows(r)
    tanh_term = [v * (1 - math.tanh(v) ** 2) for v in xs]  # into tanh(x): times x
    assert f[("x", "tanh(x)", 0)].tolist() == pytest.approx(tanh_term)
    assert f[("x", "tanh(x)*x", 1)].tolist() == pytest.approx([math.tanh(v) for v in xs])
    assert f[("x", "sigmoid(x)", 0)].tolist() == pytest.approx([_sig(v) * (1 - _sig(v)) for v in xs])
    assert f[("tanh(x)", "tanh(x)*x", 0)].tolist() == pytest.approx(xs)  # d(t*x)/dt = x
    for key in [("tanh(x)*x", "tanh(x)*x + sigmoid(x)", 0), ("sigmoid(x)", "tanh(x)*x + sigmoid(x)", 1)]:
        assert f[key].tolist() == [1.0] * len(xs)
    total = [a + b + c for a, b, c in zip(tanh_term, [math.tanh(v) for v in xs], [_sig(v) * (1 - _sig(v)) for v in xs])]
    assert r.grad("x") == pytest.approx(total)


def test_measure_edges_off_keeps_grads_and_single_use_flows():
    r = explain(EXPR, x=X, dtype="float64", measure_edges=False)
    f = _flows(r)
    assert f[("x", "tanh(x)", 0)] is None and f[("x", "sigmoid(x)", 0)] is None  # x is used 3 times
    assert f[("tanh(x)", "tanh(x)*x", 0)].tolist() == pytest.approx(X)
    assert len(r.edges) == 7 and len(r.to_dict()["edges"]) == 7
    assert r.grad("x") == explain(EXPR, x=X, dtype="float64").grad("x")


def test_identity_wrapper_flows_still_measured_without_edges():
    # no_grad(x) on a leaf returns x itself: gradient still flows; d(x*x*3)/dx = 6x = 12 at x=2
    r = explain("a = no_grad(x); a*a*3", x=2, measure_edges=False)
    assert r.grad("x") == 12.0 and r.node("a").grad.item() == 12.0


def test_a_flag_on_a_region_reaches_the_value_it_wraps():
    """`z = no_grad(y*3); z.requires_grad_()`: z and y*3 are one tensor, made a leaf by the flag (torch: the
    tensor computed under no_grad, then requires_grad_()). Hand-derived at x = 3: y = 6, z = 18, L = z*y = 108;
    dL/dz = y = 6 is the grad of that one tensor, so y*3 shows it too; dL/dy = z = 18 (its use inside no_grad is
    cut), dL/dx = 2 * 18 = 36."""
    r = explain("y = 2*x; z = no_grad(y*3); z.requires_grad_(); z*y", x=3, dtype="float64")
    assert r.grad("x") == 36.0 and r.node("y").grad.item() == 18.0
    assert r.node("z").grad.item() == 6.0 and r.node("y*3").grad.item() == 6.0
    assert r.node("y*3").status == "live"


def test_a_flag_through_nested_regions():
    """The same through two wrappers, flagged in the expression: no_grad(no_grad(w*2)) is w*2's tensor.
    L = sum(c * x) at w = [3, 4], x = [1, 2]: dL/dc = x, and w*2 (the same tensor) shows it."""
    r = explain("c = no_grad(no_grad(w*2)).requires_grad_(); sum(c * x)", w=[3.0, 4.0], x=[1.0, 2.0], wrt="x",
                dtype="float64")
    assert r.node("w*2").grad.tolist() == [1.0, 2.0] and r.node("c").grad.tolist() == [1.0, 2.0]
    assert r.grad("x") == [6.0, 8.0] and r.node("w*2").status == "live"
