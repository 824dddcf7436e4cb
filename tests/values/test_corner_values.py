"""Numerical corner cases of values: explained, never a crash."""
import json

import numpy as np
import pytest
import torch

from gradflow import EvalError, ValueInputError, explain


def test_integer_looking_cli_value_is_a_float_leaf(cli):
    res = cli("eval", "x*x", "--x", "1", "--json")
    doc = json.loads(res.stdout)
    x = doc["nodes"][0]
    assert (x["name"], x["requires_grad"], x["is_leaf"], x["grad"]) == ("x", True, True, 2.0)  # d(x²)/dx = 2x
    assert doc["dtype"] == "float32"


def test_python_int_and_int_tensor_become_floats():
    r = explain("x*x", x=3)
    assert r.node("x").value.dtype == torch.float32 and r.grad("x") == 6.0
    r = explain("sum(x*x)", x=torch.tensor([1, 2]))
    assert r.grad("x") == [2.0, 4.0]
    assert [w.message for w in r.warnings] == ["x was int64; converted to float32 so it can require grad"]


def test_mixed_dtypes_are_unified_and_said():
    r = explain("sum(x*y)", x=np.array([1.0, 2.0]), y=torch.tensor([3.0, 4.0], dtype=torch.float16))
    assert r.grad("x") == [3.0, 4.0]
    assert {w.node: w.message for w in r.warnings} == {
        "x": "x was float64; converted to float32 (the chosen dtype); dtype='float64' keeps its precision",
        "y": "y was float16; converted to float32 (the chosen dtype)"}
    r64 = explain("sum(x*y)", x=np.array([0.1]), y=[3], dtype="float64")
    assert r64.grad("x") == [3.0] and r64.warnings == []


def test_device_mismatch_is_explained():
    with pytest.raises(EvalError, match="cannot make a tensor of the value of 'x'"):
        explain("x*2", x=torch.empty(2, device="meta"))  # a tensor with no data on another device
    with pytest.raises(EvalError, match="not available|unknown device"):
        explain("x*2", x=1, device="cuda:7")


def test_complex_is_refused():
    with pytest.raises(EvalError, match="is complex"):
        explain("x*2", x=torch.tensor(1 + 2j))
    with pytest.raises(EvalError, match="is complex"):
        explain("x*2", x=1j)


@pytest.mark.parametrize("value,match", [("abc", "cannot read the value"), ("[1, 2", "cannot read the value"),
                                         ("[[1],[2,3]]", "rows have different lengths"), ("[true]", "not a number")])
def test_bad_value_text(value, match):
    with pytest.raises(ValueInputError, match=match):
        explain("sum(x)", x=value)


@pytest.mark.parametrize("kw,match", [({"wrt": 5}, "wrt must be"), ({"dtype": ["f"]}, "dtype must be text"),
                                      ({"values": [1]}, "values must be a dict"), ({"wrt": [1]}, "variable names")])
def test_bad_argument_types(kw, match):
    with pytest.raises(ValueInputError, match=match):
        explain("x", x=1, **kw)
    with pytest.raises(ValueInputError, match="the program must be text"):
        explain(b"x", x=1)


def test_shape_mismatch_is_explained():
    with pytest.raises(EvalError, match="shape mismatch at 'x@y'"):
        explain("sum(x@y)", x=[1.0, 2.0], y=[1.0, 2.0, 3.0])


def test_empty_value_reduction():
    with pytest.raises(EvalError) as info:
        explain("max(x)", x=[])
    assert info.value.exit_code == 2 and "max(x)" in info.value.message


@pytest.mark.parametrize("args", [["eval", "2*3", "--check"], ["eval", "2*3", "--order", "2"],
                                  ["eval", "2*3", "--graph", "tree"], ["graph", "2*3"]])
def test_constants_only_program_with_every_view(cli, args):
    """No variable at all (found by the fuzzer: the views' replay assumed one leaf)."""
    res = cli(*args)
    assert res.exit_code in (0, 2, 3), res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
