"""--json and to_dict(): strict RFC 8259, every schema field, non-finite numbers as strings."""
import json

import pytest

from gradflow import explain

NODE_KEYS = {"name", "op", "value", "shape", "requires_grad", "is_leaf", "grad_fn", "grad"}


def strict(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def run_json(cli, *args):
    res = cli("eval", *args, "--json")
    return res, strict(res.stdout)


def test_schema_fields(cli):
    res, doc = run_json(cli, "(x*y1 - detach(x*y2))^2", "--x", "1", "--y1", "2", "--y2", "7", "--wrt", "x,y2")
    assert res.exit_code == 0 and res.stdout.count("\n") == 1
    assert doc["output"] == {"name": "(x*y1 - detach(x*y2))^2", "value": 25.0, "requires_grad": True}
    assert doc["grads"] == {"x": -20.0, "y2": None}  # exactly one key per chosen leaf
    assert doc["error"] is None
    assert [n["name"] for n in doc["nodes"]] == ["x", "y1", "x*y1", "y2", "x*y2", "detach(x*y2)",
                                                 "x*y1 - detach(x*y2)", "2", "(x*y1 - detach(x*y2))^2"]
    for n in doc["nodes"]:
        assert NODE_KEYS <= set(n)
    x, mul = doc["nodes"][0], doc["nodes"][2]
    assert {k: x[k] for k in NODE_KEYS} == {"name": "x", "op": "var", "value": 1.0, "shape": [],
                                             "requires_grad": True, "is_leaf": True, "grad_fn": None,
                                             "grad": -20.0}
    assert (mul["grad_fn"], mul["grad"], mul["is_leaf"]) == ("MulBackward0", -10.0, False)
    assert doc["nodes"][5]["grad"] is None and doc["nodes"][5]["status"] == "cut"
    assert "y2" in doc["why"]


def test_tensors_are_nested_lists(cli):
    _, doc = run_json(cli, "sum(A @ v)", "--A", "[[1,2],[3,4]]", "--v", "[5,6]", "--wrt", "all")
    assert doc["grads"] == {"A": [[5.0, 6.0], [5.0, 6.0]], "v": [4.0, 6.0]}
    a = doc["nodes"][0]
    assert a["value"] == [[1.0, 2.0], [3.0, 4.0]] and a["shape"] == [2, 2]
    assert doc["output"]["value"] == 56.0  # a 0-d tensor is a plain number


@pytest.mark.parametrize("expr,value,grad", [
    ("log(x)", "-inf", "inf"),  # at x = 0
    ("sqrt(x)", "nan", "nan"),  # at x = -1
    ("-log(x)", "inf", "-inf"),  # at x = 0
])
def test_non_finite_as_strings(cli, expr, value, grad):
    x = "-1" if "sqrt" in expr else "0"
    res, doc = run_json(cli, expr, f"--x={x}")
    assert res.exit_code == 0
    assert doc["output"]["value"] == value and doc["grads"]["x"] == grad
    assert "NaN" not in res.stdout and "Infinity" not in res.stdout


def test_non_finite_inside_lists(cli):
    _, doc = run_json(cli, "sum(log(x))", "--x", "[0, 1]")
    assert doc["nodes"][1]["value"] == ["-inf", 0.0]
    assert doc["grads"]["x"] == ["inf", 1.0]


def test_no_gradient_document(cli):
    res, doc = run_json(cli, "(detach(x*y1) - detach(x*y2))^2", "--x", "1", "--y1", "2", "--y2", "7")
    assert res.exit_code == 3
    assert doc["grads"] == {"x": None}
    assert doc["output"]["requires_grad"] is False
    assert doc["error"]["kind"] == "no_gradient" and "does not require grad" in doc["error"]["message"]
    assert len(doc["nodes"]) == 10
    assert "does not require grad" in res.stderr


@pytest.mark.parametrize("args,kind", [
    (["x +* 2", "--x", "1"], "syntax"),
    (["sinn(x)", "--x", "1"], "unknown_function"),
    (["x*y", "--x", "1"], "missing_value"),
    (["x*y", "--x", "1", "--y", "abc"], "bad_value"),
    (["x*2", "--x", "[1,2]"], "non_scalar"),
    (["z = x*2; z.requires_grad = false; z", "--x", "1"], "requires_grad_non_leaf"),
])
def test_errors_before_or_during_evaluation(cli, args, kind):
    res, doc = run_json(cli, *args)
    assert res.exit_code == 2
    assert doc["output"] is None and doc["grads"] == {} and doc["nodes"] == []
    assert doc["error"]["kind"] == kind and doc["error"]["message"]
    assert set(doc) >= {"output", "grads", "nodes", "error"}
    assert res.stderr.startswith("error: ")


def test_syntax_error_position_in_json(cli):
    _, doc = run_json(cli, "x +* 2", "--x", "1")
    assert doc["error"]["position"] == 3 and doc["error"]["hint"].startswith("expected")


def test_api_to_dict_matches_cli(cli):
    _, doc = run_json(cli, "sum(w*x)", "--w", "[1,2]", "--x", "[3,4]", "--wrt", "all")
    api = strict(explain("sum(w*x)", w=[1, 2], x=[3, 4], wrt="all").to_json())
    assert api == doc


def test_json_bypasses_rich(cli):
    """Brackets and long lines come out untouched (no markup, no wrapping)."""
    long = " + ".join(f"x*{i}" for i in range(1, 40))
    res, doc = run_json(cli, f"sum({long})", "--x", "[1,2]")
    assert res.stdout.count("\n") == 1 and doc["source"] == f"sum({long})"
    start, end = doc["nodes"][-1]["span"]
    assert doc["source"][start:end] == f"sum({long})"  # the output's name is abbreviated; its span is not
    assert doc["nodes"][0]["value"] == [1.0, 2.0]
