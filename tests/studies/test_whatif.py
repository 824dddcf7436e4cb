"""What if I cut here? Hand-derived numbers for each rewritten program.

Blog: L = (x*y1 - x*y2)^2 at x=1, y1=2, y2=7, dL/dd = 2d = -10 with d = -5.
  detach(x*y1): only x*y2 carries gradient: -10 * (-y2) = 70
  detach(x*y2): only x*y1 carries gradient: -10 * y1 = -20
"""
import json

import pytest

from gradflow import whatif
from gradflow.language.compile import compile_program
from gradflow.language.edits import Edit

from ..conftest import BLOG

BLOG_ARGS = ["--x", "1", "--y1", "2", "--y2", "7"]


def _table(result):
    return {(s.node, s.action): (None if s.no_gradient else s.grads["x"].item()) for s in result.scenarios}


def test_blog_detach_each_use():
    r = whatif("(x*y1 - x*y2)^2", **BLOG)
    assert r.current.grad("x") == 50.0
    assert _table(r) == {("x*y1", "detach"): 70.0, ("x*y2", "detach"): -20.0,
                         ("x*y1 - x*y2", "detach"): None, ("(x*y1 - x*y2)^2", "detach"): None}
    changes = {s.node: s.change["x"] for s in r.scenarios}
    assert changes["x*y1"].item() == 20.0 and changes["x*y2"].item() == -70.0
    assert changes["x*y1 - x*y2"] is None


def test_blog_remove_existing_detach():
    r = whatif("(x*y1 - detach(x*y2))^2", **BLOG)
    assert _table(r)[("detach(x*y2)", "remove cut")] == 50.0
    assert _table(r)[("x*y1", "detach")] is None  # the only live use of x is gone: nothing to differentiate


def test_both_detached_each_removal():
    r = whatif("(detach(x*y1) - detach(x*y2))^2", **BLOG)
    assert r.current.error is not None and r.current.error.kind == "no_gradient"
    assert _table(r) == {("detach(x*y1)", "remove cut"): -20.0, ("detach(x*y2)", "remove cut"): 70.0}


def test_remove_no_grad_region():
    # no_grad(x*y2) is the constant 7: dL/dx = 7. Without it L = x^2*y2: dL/dx = 2*x*y2 = 14
    r = whatif("z = no_grad(x*y2)*x; z", x=1, y2=7)
    assert r.current.grad("x") == 7.0
    assert _table(r)[("no_grad(x*y2)", "remove cut")] == 14.0


def test_nested_regions():
    # L = no_grad(inference_mode(x*y2) + x*y1) * x: everything inside is a constant 7 + 2 = 9 -> dL/dx = 9.
    # Without no_grad: L = (7 + x*y1)*x, dL/dx = 7 + 2*x*y1 = 11. Without inference_mode: still inside no_grad: 9
    r = whatif("no_grad(inference_mode(x*y2) + x*y1)*x", x=1, y1=2, y2=7)
    assert r.current.grad("x") == 9.0
    t = _table(r)
    assert t[("no_grad(inference_mode(x*y2) + x*y1)", "remove cut")] == 11.0
    assert t[("inference_mode(x*y2)", "remove cut")] == 9.0


def test_named_node_detached_everywhere():
    # a = x*y1 = 2; L = a*a + a*x: dL/dx = 2a*y1 + a + x*y1 = 8 + 2 + 2 = 12. detach(a): dL/dx = a = 2
    r = whatif("a = x*y1; L = a*a + a*x", x=1, y1=2)
    assert r.current.grad("x") == 12.0
    assert _table(r)[("a", "detach")] == 2.0


def test_remove_requires_grad_false():
    # L = x*y1 + y1*y1: dL/dy1 = x + 2*y1 = 5; with x tracked again dL/dx = y1 = 2
    r = whatif("x.requires_grad = false; L = x*y1 + y1*y1", wrt="all", x=1, y1=2)
    assert r.current.grad("x") is None and r.current.grad("y1") == 5.0
    row = next(s for s in r.scenarios if s.node == "x.requires_grad = false")
    assert row.action == "remove cut" and row.grads["x"].item() == 2.0 and row.grads["y1"].item() == 5.0


def test_scenario_that_fails_in_torch_is_a_row():
    # inside no_grad nothing is saved; without it, * must save the inference tensor: torch refuses
    r = whatif("no_grad(inference_mode(x*y2)*x)*x", x=1, y2=7)
    row = next(s for s in r.scenarios if s.action == "remove cut" and s.node.startswith("no_grad"))
    assert row.error is not None and row.error.kind == "inference_tensor" and not row.no_gradient


def test_rewrite_keeps_ids_in_order():
    g = compile_program("a = x*y1; L = detach(a)*a")
    e = Edit(g)
    e.detach_at(g.inputs["x"])
    e.remove_cut(next(n.id for n in g.nodes if n.op == "detach"))
    g2 = e.graph()
    assert [n.id for n in g2.nodes] == list(range(len(g2.nodes)))
    assert all(a < n.id for n in g2.nodes for a in n.args)
    assert [n.op for n in g2.nodes] == ["var", "detach", "var", "mul", "mul"]
    assert g.nodes[3].op == "detach"  # the cached original is untouched


def test_cli_table(cli):
    res = cli("whatif", "(x*y1 - x*y2)^2", *BLOG_ARGS)
    assert res.exit_code == 0, res.stderr
    lines = [" ".join(line.split()) for line in res.stdout.splitlines()]
    assert "x*y1 detach 70 +20" in lines and "x*y2 detach -20 -70" in lines
    assert "x*y1 - x*y2 detach no gradient —" in lines
    assert "(as written) — 50" in lines


def test_cli_json(cli):
    res = cli("whatif", "(x*y1 - detach(x*y2))^2", *BLOG_ARGS, "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["current"] == {"output": 25.0, "grads": {"x": -20.0}}
    row = next(s for s in doc["scenarios"] if s["action"] == "remove cut")
    assert row["node"] == "detach(x*y2)" and row["grads"] == {"x": 50.0} and row["change"] == {"x": 70.0}
    nograd = next(s for s in doc["scenarios"] if s["node"] == "x*y1")
    assert nograd["no_gradient"] is True and nograd["grads"] == {"x": None}


@pytest.mark.parametrize("args,code", [(["(x*"], 2), (["x*y", "--x", "1"], 2)])
def test_cli_errors(cli, args, code):
    res = cli("whatif", *args)
    assert res.exit_code == code and "Traceback" not in res.stderr and res.stderr.startswith("error:")


def test_too_many_scenarios_is_a_limit_error(monkeypatch):
    from gradflow import LimitError
    from gradflow.studies import whatif as scenarios

    monkeypatch.setattr(scenarios, "MAX_SCENARIOS", 3)
    with pytest.raises(LimitError, match="4 times"):  # x*y1, x*y2, their difference, L
        whatif("(x*y1 - x*y2)^2", **BLOG)


def test_cli_file_and_shadowed_name(cli, tmp_path):
    prog = tmp_path / "p.txt"
    prog.write_text("(x*y1 - x*y2)^2")
    res = cli("whatif", "--file", str(prog), *BLOG_ARGS, "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["current"]["grads"] == {"x": 50.0}
    res = cli("whatif", "json*x", "--x", "1")
    assert res.exit_code == 2 and "--var json=VALUE" in res.stderr
