"""Side by side: several programs, and one program's cut mechanisms (hand-derived numbers).

Blog at x=1, y1=2, y2=7: L = 25 in every case; dL/dx = 50 (no cut), 70 (detach(x*y1)), -20 (detach(x*y2)).
"""
import json

import pytest
import sympy as sp

from gradflow import compare

from ..conftest import BLOG
from ..exprgen import STYLES, generate

BLOG_ARGS = ["--x", "1", "--y1", "2", "--y2", "7"]
THREE = ["(x*y1 - x*y2)^2", "(detach(x*y1) - x*y2)^2", "(x*y1 - detach(x*y2))^2"]


def _grads(row, leaf="x"):
    g = row.grads.get(leaf)
    return None if g is None else g.item()


def test_blog_three_cases():
    c = compare(THREE, **BLOG)
    assert [(r.label, r.output.item(), _grads(r)) for r in c.rows] == [
        (THREE[0], 25.0, 50.0), (THREE[1], 25.0, 70.0), (THREE[2], 25.0, -20.0)]
    assert c.exit_code == 0 and c.leaves == ["x"]


def test_each_program_gets_the_values_it_uses():
    c = compare(["x*y1", "x*y2"], x=1, y1=2, y2=7)  # d(x*y1)/dx = y1 = 2, d(x*y2)/dx = y2 = 7
    assert [_grads(r) for r in c.rows] == [2.0, 7.0]


def test_value_no_program_uses_is_a_warning_or_with_strict_an_error():
    from gradflow import ValueInputError

    c = compare(["x*y1", "x*y2"], x=1, y1=2, y2=7, z=3, yy1=4)  # scripts pass one set of values to many programs
    assert [_grads(r) for r in c.rows] == [2.0, 7.0] and c.exit_code == 0
    assert [(w.kind, w.message) for w in c.warnings] == [
        ("unused_value", "a value was given for 'z', which none of the programs uses"),
        ("unused_value", "a value was given for 'yy1', which none of the programs uses; did you mean 'y1'?")]
    assert json.loads(c.to_json())["warnings"][0]["kind"] == "unused_value"
    with pytest.raises(ValueInputError, match="none of the programs uses"):
        compare(["x*y1"], x=1, y1=2, z=3, strict=True)
    modes = compare("(x*y1 - detach(x*y2))^2", modes=True, x=1, y1=2, y2=7, z=3)
    assert [w.message for w in modes.warnings] == ["a value was given for 'z', which the program does not use"]
    with pytest.raises(ValueInputError, match="the program does not use"):
        compare("(x*y1 - detach(x*y2))^2", modes=True, x=1, y1=2, y2=7, z=3, strict=True)


def test_bad_program_is_its_own_row_and_exit_codes():
    c = compare([THREE[0], "(x*", "(detach(x*y1) - detach(x*y2))^2"], **BLOG)
    assert [r.ok for r in c.rows] == [True, False, False]
    assert c.rows[1].error.kind == "syntax" and c.rows[2].error.kind == "no_gradient"
    assert c.exit_code == 4  # mixed: PARTIAL (the syntax error; no gradient is an answer, not a failure)
    assert compare(["(x*", "x*"], x=1).exit_code == 2  # all failed: the failure's code


def test_no_gradient_is_an_answer_not_a_failure():
    assert compare(["detach(x)"], x=1).exit_code == 0  # was 3
    c = compare(["x*y", "detach(x)*y"], x=1, y=2)  # was 4
    assert c.exit_code == 0 and [r.no_gradient for r in c.rows] == [False, True]
    assert [r.grads["x"] for r in c.rows][1] is None and float(c.rows[0].grads["x"]) == 2.0  # d(x*y)/dx = y


def test_cli_table_and_json(cli):
    res = cli("compare", *THREE, *BLOG_ARGS)
    assert res.exit_code == 0, res.stderr
    lines = [" ".join(line.split()) for line in res.stdout.splitlines()]
    assert "(detach(x*y1) - x*y2)^2 25 70" in lines and "(x*y1 - detach(x*y2))^2 25 -20" in lines
    res = cli("compare", *THREE, *BLOG_ARGS, "--json")
    doc = json.loads(res.stdout)
    assert [(r["program"], r["output"], r["grads"]) for r in doc["rows"]] == [
        (THREE[0], 25.0, {"x": 50.0}), (THREE[1], 25.0, {"x": 70.0}), (THREE[2], 25.0, {"x": -20.0})]


def test_cli_partial_exit(cli):
    res = cli("compare", THREE[0], "(x*", *BLOG_ARGS)
    assert res.exit_code == 4
    assert "syntax error" in res.stdout and "Traceback" not in res.stderr


def test_cli_programs_must_come_first(cli):
    res = cli("compare", "--x", "1", "x")
    assert res.exit_code == 2 and "must come first" in res.stderr


# ---- --modes ---------------------------------------------------------------------------

def _modes(c):
    return {r.label: r for r in c.rows}


def test_modes_blog():
    m = _modes(compare("(x*y1 - detach(x*y2))^2", modes=True, **BLOG))
    assert [(k, _grads(r)) for k, r in m.items() if not r.skipped] == [
        ("detach", -20.0), ("no_grad", -20.0), ("inference_mode", -20.0), ("no cut", 50.0)]
    # detach records x*y2 (it requires grad) and cuts after it; no_grad / inference_mode record nothing
    assert [m[k].inner for k in ("detach", "no_grad", "inference_mode", "no cut")] == [
        {"x*y2": True}, {"x*y2": False}, {"x*y2": False}, {"x*y2": True}]
    assert m["no cut"].program == "(x*y1 - x*y2)^2" and m["no_grad"].program == "(x*y1 - no_grad(x*y2))^2"
    # x also feeds x*y1, so x.requires_grad = false is not the same cut
    assert m["requires_grad = false"].skipped and "not expressible" in m["requires_grad = false"].note


def test_modes_inference_tensor_saved_by_mul():
    # L = c*x with c = x*y2 = 7 cut: dL/dx = 7; uncut L = x^2*y2: 14. '*' saves c for backward:
    # an inference tensor there fails, while under '-' (blog above) it works
    m = _modes(compare("inference_mode(x*y2)*x", modes=True, x=1, y2=7))
    assert [_grads(m[k]) for k in ("detach", "no_grad", "no cut")] == [7.0, 7.0, 14.0]
    err = m["inference_mode"].error
    assert err.kind == "inference_tensor" and "Inference tensors cannot be saved for backward" in err.message
    assert "save" in m["inference_mode"].note


def test_modes_requires_grad_false_where_expressible():
    # L = x*y1*y2 with y1*y2 cut: dL/dx = y1*y2 = 14, y1 and y2 get nothing.
    # Uncut: dL/dy1 = x*y2 = 7, dL/dy2 = x*y1 = 2.
    c = compare("L = x*detach(y1*y2)", modes=True, wrt="all", x=1, y1=2, y2=7)
    m = _modes(c)
    rg = m["requires_grad = false"]
    assert not rg.skipped and rg.program == "y1.requires_grad = false; y2.requires_grad = false; L = x*(y1*y2)"
    assert (_grads(rg, "x"), _grads(rg, "y1"), _grads(rg, "y2")) == (14.0, None, None)
    assert rg.inner == {"y1*y2": False}
    assert (_grads(m["no cut"], "y1"), _grads(m["no cut"], "y2")) == (7.0, 2.0)
    assert c.exit_code == 0


def test_modes_needs_one_program_with_a_cut():
    from gradflow import ValueInputError

    with pytest.raises(ValueInputError, match="has none"):
        compare("x*y1", modes=True, x=1, y1=2)
    with pytest.raises(ValueInputError, match="one program"):
        compare(THREE, modes=True, **BLOG)


def test_cli_modes(cli):
    res = cli("compare", "--modes", "inference_mode(x*y2)*x", "--x", "1", "--y2", "7")
    assert res.exit_code == 0, res.stderr  # a mechanism failing is a finding, not a failure
    lines = [" ".join(line.split()) for line in res.stdout.splitlines()]
    assert "no cut x*y2*x 7 14 x*y2 ✓" in lines
    assert "✗ inference_mode:" in res.stdout
    doc = json.loads(cli("compare", "--modes", "inference_mode(x*y2)*x", "--x", "1", "--y2", "7", "--json").stdout)
    assert [r["label"] for r in doc["rows"]] == ["detach", "no_grad", "inference_mode", "no cut",
                                                 "requires_grad = false"]
    assert doc["rows"][2]["error"]["kind"] == "inference_tensor"


# ---- generated programs: the detach and no-cut rewrites against SymPy ------------------

def _sympy_grads(case):
    """Total dL/dleaf (summed over every use's symbols), per leaf, as flat lists."""
    args = list(case.point)
    out = {}
    for leaf, uses in case.uses.items():
        per_use = [syms for _, syms in uses]
        f = sp.lambdify(args, [sum(sp.diff(case.L, s[j]) for s in per_use) for j in range(len(per_use[0]))])
        out[leaf] = [float(v) for v in f(*[case.point[s] for s in args])]
    return out


def _flat(t):
    return [0.0] * 3 if t is None else t.double().reshape(-1).tolist()


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("vector", [False, True])
def test_modes_rewrites_match_sympy(vector, style):
    """Each cut rewritten to each mechanism, whether written detach(e), e.detach() or torch.detach(e)."""
    checked = 0
    for seed in range(30):
        cut, uncut = generate(seed, vector, style=style), generate(seed, vector, cuts=False, style=style)
        if not cut.values or "detach(" not in cut.source and "no_grad(" not in cut.source:
            continue
        m = _modes(compare(cut.source, modes=True, wrt=list(cut.values), dtype="float64", **cut.values))
        for row, case in ((m["detach"], cut), (m["no cut"], uncut)):
            for leaf, want in _sympy_grads(case).items():
                got = _flat(row.grads[leaf])[:len(want)]
                assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (cut.source, row.label, leaf)
                checked += 1
        if checked >= 30:
            break
    assert checked >= 20


def test_modes_display_and_identity_no_grad():
    # L = (x+y)^2 - x at x=2, y=3. Uncut: dL/dx = 2*5 - 1 = 9, dL/dy = 10.
    # no_grad(x) runs no operation inside, so it cuts nothing: dL/dx = -1 (and a warning says so)
    m = _modes(compare("detach(x+y)^2 - detach(x)", modes=True, wrt="all", x=2, y=3))
    assert m["no cut"].program == "(x+y)^2 - x" and m["no_grad"].program == "no_grad(x+y)^2 - no_grad(x)"
    assert (_grads(m["no cut"], "x"), _grads(m["no cut"], "y")) == (9.0, 10.0)
    assert (_grads(m["no_grad"], "x"), _grads(m["no_grad"], "y")) == (-1.0, None)
    assert "nothing is cut" in m["no_grad"].note
    assert m["detach"].error.kind == "no_gradient"
    nested = _modes(compare("detach(no_grad(x*y))*x", modes=True, x=2, y=3))
    assert nested["no cut"].program == "x*y*x" and _grads(nested["no cut"]) == 12.0  # d(x^2*y)/dx = 2xy


def test_modes_rewrite_cuts_written_as_methods():
    """(x*y2).detach() is rewritten around its operand (its parentheses dropped), y.detach_() as y = op(y)."""
    m = _modes(compare("(x*y1 - (x*y2).detach())**2", modes=True, x=1, y1=2, y2=7))
    assert m["no_grad"].program == "(x*y1 - no_grad(x*y2))**2" and m["no cut"].program == "(x*y1 - x*y2)**2"
    assert (m["detach"].grads["x"], m["no cut"].grads["x"]) == (-20.0, 50.0)
    m = _modes(compare("z = x*y; z.detach_(); z*x", modes=True, x=2, y=3))
    assert m["detach"].program == "z = x*y; z = detach(z); z*x" and m["no cut"].program == "z = x*y; z = z; z*x"
    assert (m["detach"].grads["x"], m["no_grad"].grads["x"]) == (6.0, 12.0)  # z*x: x*y held / z is z itself
