"""Second derivatives against SymPy. A cut is a symbol c: differentiate L(x, c) twice, then put c = c0."""
import json

import pytest
import sympy as sp

from gradflow import hessian

from ..conftest import BLOG

x, y1, y2, c = sp.symbols("x y1 y2 c")
AT = {x: 1, y1: 2, y2: 7}
LEAVES = [x, y1, y2]


def sympy_hessian(held, cut=None):
    c0 = cut.subs(AT) if cut is not None else 0
    return [[float(sp.diff(held, a, b).subs(c, c0).subs(AT)) for b in LEAVES] for a in LEAVES]


def test_blog_nothing_detached():
    # d2L/dx2 = 2*(y1 - y2)^2 = 50
    assert hessian("(x*y1 - x*y2)^2", **BLOG).matrix == [[50.0]]


def test_blog_detached():
    # L = (x*y1 - c)^2 with c held: d2L/dx2 = 2*y1^2 = 8
    assert hessian("(x*y1 - detach(x*y2))^2", **BLOG).entry("x", "x") == 8.0


@pytest.mark.parametrize("program,held,cut", [
    ("(x*y1 - x*y2)^2", (x * y1 - x * y2) ** 2, None),
    ("exp(x*y1) * sin(y2) - x^3*y2", sp.exp(x * y1) * sp.sin(y2) - x ** 3 * y2, None),
])
def test_full_hessian(program, held, cut):
    got = hessian(program, wrt="all", **BLOG).matrix
    want = sympy_hessian(held, cut)
    assert [v for row in got for v in row] == pytest.approx([v for row in want for v in row], rel=1e-12)


def test_mixed_hessian_with_cut():
    # L = (x*y1 - c)^2, c = x*y2: rows/cols x, y1 from SymPy; y2 gets no gradient at all (None)
    got = hessian("(x*y1 - detach(x*y2))^2", wrt="all", **BLOG).matrix
    want = sympy_hessian((x * y1 - c) ** 2, x * y2)
    assert [row[:2] for row in got[:2]] == [row[:2] for row in want[:2]] == [[8.0, -6.0], [-6.0, 2.0]]
    assert got[2] == [None, None, None] and got[0][2] is None


def test_tensor_leaf_diagonal():
    # L = sum(w^3) + sum(w)*x: d2L/dw_k^2 = 6 w_k, d2L/dx2 = 0
    w = sp.symbols("w0:3")
    L = sum(v ** 3 for v in w) + sum(w) * x
    at = {w[0]: 1, w[1]: -2, w[2]: 0.5, x: 2}
    r = hessian("sum(w^3) + sum(w)*x", wrt="all", w=[1, -2, 0.5], x=2)
    assert r.kind == "diagonal"
    assert r.diagonal["w"].tolist() == [float(sp.diff(L, v, v).subs(at)) for v in w]
    assert r.diagonal["x"].item() == 0.0


def test_cli_table(cli):
    res = cli("eval", "(x*y1 - detach(x*y2))^2", "--x", "1", "--y1", "2", "--y2", "7", "--order", "2",
              "--wrt", "x,y1")
    assert res.exit_code == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines()[-4:] if line.strip()]
    assert ["x", "8", "-6"] in rows and ["y1", "-6", "2"] in rows


def test_cli_json(cli):
    res = cli("eval", "(x*y1 - x*y2)^2", "--x", "1", "--y1", "2", "--y2", "7", "--order", "2", "--json")
    doc = json.loads(res.stdout)
    assert doc["hessian"] == {"kind": "matrix", "wrt": ["x"], "matrix": [[50.0]], "diagonal": {}}
    assert doc["grads"] == {"x": 50.0}


def test_cli_diagonal(cli):
    res = cli("eval", "sum(w^3)", "--w", "[1,2]", "--order", "2")
    assert "d²L/dw² = [6, 12]" in res.stdout


def test_cli_too_large(cli):
    res = cli("eval", "sum(w^2)", "--w", json.dumps([1.0] * 2000), "--order", "2")
    assert res.exit_code == 2
    assert "the limit is 1024" in res.stderr and "--wrt" in res.stderr


def test_cli_bad_order(cli):
    res = cli("eval", "x^2", "--x", "1", "--order", "3")
    assert res.exit_code == 2 and "--order must be 1 or 2" in res.stderr
