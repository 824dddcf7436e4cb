"""The engine reads every small tensor's numbers once (values/jsonable.py `plain`); the JSON, the json limit, the
nan/inf scan and the table must say exactly what reading the tensors themselves said (hand-derived values)."""
import json
import math

import pytest

from gradflow import explain
from gradflow.errors import LimitError
from gradflow.limits import as_limits, using
from gradflow.values.jsonable import UNCONVERTED, document


def test_small_and_big_tensors_side_by_side():
    """A 100-element value (left as a tensor) among scalars and a 2-d value (nested lists): every number as
    torch gives it, in the same document."""
    r = explain("sum(a * 2) + sum(m * m) + s", a=[1.0] * 100, m=[[1.0, 2.0], [3.0, -4.0]], s=0.5, wrt="all",
                dtype="float64")
    d = r.to_dict()
    nodes = {n["name"]: n for n in d["nodes"]}
    assert nodes["a"]["value"] == [1.0] * 100 and nodes["a"]["grad"] == [2.0] * 100
    assert nodes["m"]["value"] == [[1.0, 2.0], [3.0, -4.0]] and nodes["m"]["grad"] == [[2.0, 4.0], [6.0, -8.0]]
    assert nodes["s"]["value"] == 0.5 and nodes["s"]["grad"] == 1.0 and nodes["s"]["shape"] == []
    assert nodes["m"]["shape"] == [2, 2] and nodes["a"]["shape"] == [100]
    assert d["output"]["value"] == 200.0 + 30.0 + 0.5
    flows = {(e["from"], e["to"]): e["flow"] for e in d["edges"]}
    assert flows[("m", "m * m")] == [[1.0, 2.0], [3.0, -4.0]]  # each use of m carries d(m*m)/dm's half
    assert [c["flow"] for c in d["contributions"]["m"]] == [[[1.0, 2.0], [3.0, -4.0]]] * 2
    assert r.nodes[0].value_py is UNCONVERTED  # a, over PLAIN_MAX elements
    assert json.loads(r.to_json()) == d


def test_documents_do_not_share_lists():
    """A reader may change the dict it got: the next document, and the result, stay as computed."""
    r = explain("sum(x * x)", x=[1.0, 2.0], dtype="float64")
    d = r.to_dict()
    d["nodes"][0]["value"].append(99)
    d["nodes"][0]["grad"][0] = 99
    d["edges"][0]["flow"][0] = 99
    d["contributions"]["x"][0]["flow"][0] = 99
    again = r.to_dict()
    assert again["nodes"][0]["value"] == [1.0, 2.0] and again["nodes"][0]["grad"] == [2.0, 4.0]
    assert again["edges"][0]["flow"] == [1.0, 2.0] and again["contributions"]["x"][0]["flow"] == [1.0, 2.0]


@pytest.mark.parametrize("limit, hint", [(2, "json=20"), (3, "json=30"), (40, "json=400")])
def test_json_limit_counts_tensor_by_tensor(limit, hint):
    """The limit's error comes at the tensor that passes it, as when every tensor was counted on its own:
    its hint offers ten times the limit (not the whole program's count, 2 + 2*59 + 58 edges...)."""
    r = explain(" + ".join(f"x*{k}" for k in range(1, 31)), x=1.0, dtype="float64")
    with using(as_limits({"json": limit})), document(), pytest.raises(LimitError) as err:
        r.to_dict()
    assert f"--limit {hint}" in err.value.hint and f"more than {limit:,} tensor elements" in err.value.message


def test_json_limit_just_fits():
    """Every tensor element printed, counted exactly: output 1 + x.grad 1 + 4 nodes (value and grad: 2*4 - 1 for
    the constant 2, which has no grad) + 3 edges whose flow is a number (the constant's edge has none)."""
    r = explain("x * 2 + x", x=1.0, dtype="float64")
    need = 1 + 1 + (2 * 4 - 1) + 3 + 2  # + the two contributions of x
    with using(as_limits({"json": need})), document():
        r.to_dict()
    with using(as_limits({"json": need - 1})), document(), pytest.raises(LimitError):
        r.to_dict()


def test_non_finite_numbers_read_once():
    """nan/inf in scalars, flat and nested lists: found by the scan, printed as strings."""
    r = explain("sum(log(m))", m=[[1.0, 0.0], [-1.0, 2.0]], dtype="float64")
    d = r.to_dict()
    log = next(n for n in d["nodes"] if n["op"] == "log")
    assert log["value"] == [[0.0, "-inf"], ["nan", math.log(2.0)]]
    assert [w["kind"] for w in d["warnings"]] == ["nonfinite_value", "nonfinite_grad"]
    assert "log of a negative number is nan" in d["warnings"][0]["message"]
    s = explain("1 / x", x=0.0)
    assert s.to_dict()["output"]["value"] == "inf" and [w.kind for w in s.warnings][0] == "nonfinite_value"
