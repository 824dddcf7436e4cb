"""Flows: a leaf's grad split by use, checked by hand, by SymPy and by summing the parts."""
import functools
import json

import pytest
import sympy as sp

from gradflow import explain

from ..conftest import BLOG
from ..exprgen import STYLES, generate

BLOG_ARGS = ["--x", "1", "--y1", "2", "--y2", "7"]


def _split(result, leaf="x"):
    return [(c.via, c.flow.item(), c.cut, c.cut_by) for c in result.flows[leaf]]


def test_blog_split_hand_derived():
    # d = x*y1 - x*y2 = -5, dL/dd = 2d = -10: via x*y1: -10*y1 = -20; via x*y2: -10*(-y2) = 70; sum 50
    r = explain("(x*y1 - x*y2)^2", **BLOG)
    assert _split(r) == [("x*y1", -20.0, False, None), ("x*y2", 70.0, False, None)]
    assert r.grad("x") == 50.0


def test_blog_detached_use_is_cut_with_zero_flow():
    r = explain("(detach(x*y1) - x*y2)^2", **BLOG)
    assert _split(r) == [("x*y1", 0.0, True, "detach(x*y1)"), ("x*y2", 70.0, False, None)]


def test_no_grad_cut_named_and_json():
    r = explain("a = x*y1; L = no_grad(a*x) + a*x", x=3, y1=2)
    # a = 6; via a: dL/da * da/dx = x * y1 = 6 (the no_grad use of a is cut); via a*x (2nd): a = 6
    parts = r.to_dict()["contributions"]["x"]
    assert [(p["via"], p["flow"], p["cut"], p["cut_by"]) for p in parts] == [
        ("a", 6.0, False, None), ("a*x", 0.0, True, "no_grad(a*x)"), ("a*x", 6.0, False, None)]
    assert r.grad("x") == 12.0


def test_vector_leaf_flows_are_tensors():
    r = explain("sum(w*w + detach(w)*x)", wrt="w,x", w=[1, 2, 3], x=2)
    flows = [c.flow.tolist() for c in r.flows["w"]]
    assert flows == [[1, 2, 3], [1, 2, 3], [0, 0, 0]]  # d(w*w)/dw per use = the other w; detach cut
    assert [c.flow.item() for c in r.flows["x"]] == [6.0]  # sum(detach(w)) = 6


def test_leaf_that_is_the_output():
    r = explain("x", x=4)
    assert [(c.via, c.flow.item()) for c in r.flows["x"]] == [("L itself", 1.0)]


def test_requires_grad_false_cuts_every_use():
    r = explain("x.requires_grad = false; L = x*y + y", wrt="all", x=1, y=2)
    assert [(c.via, c.flow.item(), c.cut, c.cut_by) for c in r.flows["x"]] == [
        ("x*y", 0.0, True, "x.requires_grad = false")]
    assert [(c.via, c.flow.item()) for c in r.flows["y"]] == [("x*y", 1.0), ("L", 1.0)]  # dL/dy = x + 1


def test_eval_flows_line(cli):
    res = cli("eval", "(x*y1 - x*y2)^2", *BLOG_ARGS, "--flows")
    assert res.exit_code == 0, res.stderr
    assert "x.grad = 50 = -20 (via x*y1) + 70 (via x*y2)" in res.stdout
    res = cli("eval", "(detach(x*y1) - x*y2)^2", *BLOG_ARGS, "--flows")
    assert "x.grad = 70 = 0 (via x*y1, cut by detach(x*y1)) + 70 (via x*y2)" in res.stdout


def test_eval_json_has_edges_and_contributions(cli):
    res = cli("eval", "(x*y1 - x*y2)^2", *BLOG_ARGS, "--json")
    doc = json.loads(res.stdout)
    assert [(e["from"], e["to"], e["flow"], e["cut"]) for e in doc["edges"] if e["from"] == "x"] == [
        ("x", "x*y1", -20.0, False), ("x", "x*y2", 70.0, False)]
    assert [(c["via"], c["flow"]) for c in doc["contributions"]["x"]] == [("x*y1", -20.0), ("x*y2", 70.0)]


# ---- generated programs: parts sum to the grad; each part is SymPy's derivative along that use ----

SEEDS = range(40)


@functools.lru_cache(maxsize=None)
def _cases(vector, style="function"):
    cases = [generate(s, vector, style=style) for s in SEEDS]
    return [c for c in cases if c.values]


@pytest.mark.parametrize("vector", [False, True])
@pytest.mark.parametrize("dtype,tol", [("float32", 1e-4), ("float64", 1e-10)])
def test_parts_sum_to_grad(vector, dtype, tol):
    for case in _cases(vector):
        r = explain(case.source, wrt=list(case.values), dtype=dtype, **case.values)
        for leaf, parts in r.flows.items():
            total = sum(c.flow.double() for c in parts)
            grad = r.grads[leaf]
            expected = grad.double() if grad is not None else total * 0
            assert (total - expected).abs().max().item() <= tol * (1 + expected.abs().max().item()), case.source


def _sympy_flows(case, leaf):
    """{(via, pos): sorted list of per-use derivative vectors}, from SymPy."""
    out = {}
    uses = [(key, syms) for key, syms in case.uses[leaf] if key is not None]
    every = [s for _, syms in uses for s in syms]
    args = list(case.point)
    derivs = sp.lambdify(args, [sp.diff(case.L, s) for s in every])(*[case.point[s] for s in args])
    derivs = iter(derivs)
    for key, syms in uses:
        out.setdefault(key, []).append(tuple(float(next(derivs)) for _ in syms))
    return {k: sorted(v) for k, v in out.items()}


def _gradflow_flows(result, leaf):
    out = {}
    for c in result.flows[leaf]:
        vec = tuple(c.flow.double().reshape(-1).tolist())
        out.setdefault((c.via, c.pos), []).append(vec)
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("vector", [False, True])
def test_flows_match_sympy_per_use(vector, style):
    """The same programs written with functions, with methods and `**`, and with torch.* names: every use's
    flow (named by its consumer's text as written) is SymPy's derivative along it."""
    checked = nonzero = 0
    for case in _cases(vector, style)[:20]:
        r = explain(case.source, wrt=list(case.values), dtype="float64", **case.values)
        for leaf in case.values:
            want, got = _sympy_flows(case, leaf), _gradflow_flows(r, leaf)
            assert want.keys() == got.keys(), case.source
            for key in want:
                assert len(want[key]) == len(got[key]), (case.source, key)
                for w, g in zip(want[key], got[key]):
                    assert g == pytest.approx(w, rel=1e-9, abs=1e-9), (case.source, key)
                    checked += 1
                    nonzero += any(v != 0 for v in w)
    assert checked > 40 and nonzero > 20
