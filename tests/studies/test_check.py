"""Numeric check against hand-derived numbers and SymPy.

A cut is a SymPy symbol c held at its forward value: the check's autograd/numeric
columns are dL(x, c)/dx at c = c0; the true column is d L(x, c(x))/dx.
"""
import json

import pytest
import sympy as sp

from gradflow import check

from ..conftest import BLOG

x, y, c = sp.symbols("x y c")
AT = {x: sp.Rational(3, 2), y: sp.Rational(-1, 2)}

# (program, L with the cut as c, the cut expression)
SYMPY_CASES = [
    ("(x*y - detach(x*x))^2", (x * y - c) ** 2, x * x),
    ("sin(x)*no_grad(exp(x*y)) + log(x + 2)^2", sp.sin(x) * c + sp.log(x + 2) ** 2, sp.exp(x * y)),
    ("tanh(x*y) - inference_mode(x^2 + 1)/2", sp.tanh(x * y) - c / 2, x ** 2 + 1),
    ("a = sigmoid(x)*y; a*detach(a) + sqrt(x)", (sp.exp(x) / (1 + sp.exp(x)) * y) * c + sp.sqrt(x),
     sp.exp(x) / (1 + sp.exp(x)) * y),
]


def test_blog():
    r = check("(x*y1 - detach(x*y2))^2", **BLOG)
    leaf = r.leaf("x")
    assert leaf.autograd.item() == -20.0
    assert leaf.numeric.item() == pytest.approx(-20.0, abs=1e-6)
    assert leaf.ok and r.ok
    assert leaf.true.item() == 50.0
    assert leaf.removed.item() == 70.0
    assert r.notes == []


@pytest.mark.parametrize("program,held,cut", SYMPY_CASES)
@pytest.mark.parametrize("leaf", ["x", "y"])
def test_against_sympy(program, held, cut, leaf):
    sym = {"x": x, "y": y}[leaf]
    c0 = cut.subs(AT)
    want_held = float(sp.diff(held, sym).subs(c, c0).subs(AT))
    want_true = float(sp.diff(held.subs(c, cut), sym).subs(AT))
    r = check(program, wrt=leaf, x=1.5, y=-0.5).leaf(leaf)
    assert r.ok
    assert r.numeric.item() == pytest.approx(want_held, rel=1e-6, abs=1e-8)
    assert (0.0 if r.autograd is None else r.autograd.item()) == pytest.approx(want_held, rel=1e-12, abs=1e-12)
    assert r.true.item() == pytest.approx(want_true, rel=1e-12)
    assert r.removed.item() == pytest.approx(want_true - want_held, rel=1e-9, abs=1e-12)


def test_vector_leaf_elementwise():
    # L = sum(w * detach(w) * v): held dL/dw_k = w_k v_k, true = 2 w_k v_k
    r = check("sum(w*detach(w)*v)", w=[1.0, -2.0, 3.0], v=[0.5, 4.0, -1.0], wrt="w").leaf("w")
    assert r.ok
    assert r.numeric.tolist() == pytest.approx([0.5, -8.0, -3.0], abs=1e-6)
    assert r.true.tolist() == [1.0, -16.0, -6.0]
    assert r.removed.tolist() == [0.5, -8.0, -3.0]


def test_all_cut_still_checks():
    r = check("(detach(x*y1) - detach(x*y2))^2", **BLOG)
    leaf = r.leaf("x")
    assert leaf.autograd is None and leaf.numeric.item() == 0.0 and leaf.ok
    assert leaf.true.item() == 50.0  # 2*(x*y1 - x*y2)*(y1 - y2) = 2*(-5)*(-5)


def test_requires_grad_false_counts_as_cut():
    r = check("x.requires_grad = false; (x*y1 - x*y2)^2", **BLOG).leaf("x")
    assert r.autograd is None and r.numeric.item() == 0.0 and r.ok and r.true.item() == 50.0


def test_relu_corner_is_noted_and_disagrees():
    # relu(x)*y at x=0: torch says 0, central differences (h*y - 0)/(2h) = y/2
    r = check("relu(x)*y", x=0, y=3)
    assert r.leaf("x").numeric.item() == pytest.approx(1.5)
    assert not r.ok
    assert len(r.notes) == 1 and "relu(x) is not differentiable here" in r.notes[0].message


@pytest.mark.parametrize("program,values,needle", [
    ("abs(x - 1)", {"x": 1}, "corner at 0"),
    ("sqrt(x)", {"x": 0}, "infinite derivative"),
    ("max(x, y)", {"x": 2, "y": 2}, "tied arguments"),
    ("max(w)", {"w": [1, 3, 3]}, "2 elements tied for the maximum"),
])
def test_not_smooth_notes(program, values, needle):
    r = check(program, wrt="all", **values)
    assert any(needle in n.message for n in r.notes)


def test_smooth_point_has_no_notes():
    assert check("abs(x - 1) + max(x, y)", x=2, y=1, wrt="all").notes == []


def test_cli_table(cli):
    res = cli("eval", "(x*y1 - detach(x*y2))^2", "--x", "1", "--y1", "2", "--y2", "7", "--check")
    assert res.exit_code == 0, res.stderr
    row = next(line for line in res.stdout.splitlines() if line.strip().startswith("x ") and "✓" in line)
    assert row.split() == ["x", "-20", "-20", "✓", "50", "70"]


def test_cli_json(cli):
    res = cli("eval", "(x*y1 - detach(x*y2))^2", "--x", "1", "--y1", "2", "--y2", "7", "--check", "--json")
    doc = json.loads(res.stdout)
    assert doc["grads"] == {"x": -20.0}  # existing fields unchanged
    leaf = doc["check"]["leaves"][0]
    assert (leaf["leaf"], leaf["autograd"], leaf["ok"], leaf["true"], leaf["cuts_removed"]) == ("x", -20.0, True,
                                                                                               50.0, 70.0)
    assert leaf["numeric"] == pytest.approx(-20.0, abs=1e-6)


def test_cli_note_and_mark(cli):
    res = cli("eval", "relu(x)*y", "--x", "0", "--y", "3", "--check")
    assert res.exit_code == 0
    assert "✗ off by 1.5" in res.stdout and "relu(x) is not differentiable here" in res.stdout


def test_too_many_elements(cli):
    res = cli("eval", "sum(w)", "--w", json.dumps([1.0] * 5000), "--check")
    assert res.exit_code == 2
    assert "the limit is 4096" in res.stderr and "Traceback" not in res.stderr


# ---- generated programs: the check against SymPy, with detach / no_grad anywhere ----------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_UNARY = {"sin": sp.sin, "cos": sp.cos, "tanh": sp.tanh, "sigmoid": lambda a: 1 / (1 + sp.exp(-a))}
_BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


@st.composite
def programs(draw, depth=3):
    """(text, SymPy with cuts as fresh symbols, SymPy without cuts, {cut symbol: its forward expression})."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        name = draw(st.sampled_from(["x", "y"]))
        return name, sp.Symbol(name), sp.Symbol(name), {}
    kind = draw(st.sampled_from(["unary", "binary", "cut"]))
    a_text, a_held, a_true, a_cuts = draw(programs(depth - 1))
    if kind == "unary":
        f = draw(st.sampled_from(sorted(_UNARY)))
        return f"{f}({a_text})", _UNARY[f](a_held), _UNARY[f](a_true), a_cuts
    if kind == "cut":
        c_sym = sp.Dummy("c")  # unique: two cuts drawn with one name would be one symbol (a false failure)
        # no_grad(x) on a bare variable runs nothing inside, so it cuts nothing: use detach there
        cut = "detach" if a_text in ("x", "y") else draw(st.sampled_from(["detach", "no_grad"]))
        return (f"{cut}({a_text})", c_sym, a_true,
                {**a_cuts, c_sym: a_true})
    op = draw(st.sampled_from(sorted(_BINARY)))
    b_text, b_held, b_true, b_cuts = draw(programs(depth - 1))
    return (f"({a_text}) {op} ({b_text})", _BINARY[op](a_held, b_held), _BINARY[op](a_true, b_true),
            {**a_cuts, **b_cuts})


@settings(max_examples=25, deadline=None)
@given(programs(), st.floats(-1.5, 1.5), st.floats(-1.5, 1.5))
def test_generated_programs_against_sympy(prog, xv, yv):
    text, held, true, cuts = prog
    xs, ys = sp.symbols("x y")
    at = {xs: xv, ys: yv}
    values = {n: v for n, v in (("x", xv), ("y", yv)) if n in text}
    r = check(text, wrt="all", **values)
    forward = {c_sym: inner.subs(at) for c_sym, inner in cuts.items()}  # a cut holds its forward value
    for leaf in r.leaves:
        sym = sp.Symbol(leaf.leaf)
        want_held = float(sp.diff(held, sym).subs(forward).subs(at))
        assert leaf.ok
        assert leaf.numeric.item() == pytest.approx(want_held, rel=1e-5, abs=1e-6)
        assert leaf.true.item() == pytest.approx(float(sp.diff(true, sym).subs(at)), rel=1e-9, abs=1e-12)
