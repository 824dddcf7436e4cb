"""Tensor values: constructors (seeded), .npy/.pt files (safely), big-tensor summaries, the element limit."""
import json
import math
import os
import pickle

import numpy as np
import pytest

from gradflow import explain
from gradflow.errors import LimitError, ValueInputError
from gradflow.limits import MAX_ELEMENTS
from gradflow.values.jsonable import JSON_FULL_MAX


def _x(r):
    return r.node("x").value


@pytest.mark.parametrize("text,shape,values", [
    ("zeros(2,3)", (2, 3), [[0.0] * 3] * 2),
    ("ones(4)", (4,), [1.0] * 4),
    ("full(2,2, 0.5)", (2, 2), [[0.5, 0.5], [0.5, 0.5]]),
    ("full(2.5)", (), 2.5),
    ("arange(0, 1, 0.25)", (4,), [0.0, 0.25, 0.5, 0.75]),
    ("arange(3)", (3,), [0.0, 1.0, 2.0]),
    ("arange(1, 3)", (2,), [1.0, 2.0]),
    ("linspace(-1, 1, 5)", (5,), [-1.0, -0.5, 0.0, 0.5, 1.0]),
    (" randn( 3 , 4 ) ", (3, 4), None),
    ("rand(2,1,3)", (2, 1, 3), None),
    ("randn()", (), None),
])
def test_constructors(text, shape, values):
    r = explain("sum(x*x)", x=text, dtype="float64")
    t = _x(r)
    assert tuple(t.shape) == shape and str(t.dtype) == "torch.float64"
    if values is not None:
        assert t.tolist() == values
    assert r.grad("x") == (2 * t).tolist()  # d/dx sum(x*x) = 2x
    if text.startswith("rand("):
        assert 0 <= t.min().item() and t.max().item() < 1


def test_seeded_reproducibility():
    a = _x(explain("sum(x)", x="randn(3,4)", seed=5)).tolist()
    assert a == _x(explain("sum(x)", x="randn(3,4)", seed=5)).tolist()
    assert a != _x(explain("sum(x)", x="randn(3,4)", seed=6)).tolist()
    assert a != _x(explain("sum(x)", x="randn(3,4)")).tolist()  # default seed is 0
    # drawn in the order the program first uses the variables, whatever order the values come in
    r = explain("sum(x) + sum(w)", w="randn(3,4)", x="randn(3,4)", seed=5, wrt="all")
    assert _x(r).tolist() == a and r.node("w").value.tolist() != a


def test_randn_looks_standard_normal():
    t = _x(explain("sum(x)", x="randn(100000)", dtype="float64", seed=3))
    assert abs(t.mean().item()) < 0.02 and abs(t.std().item() - 1) < 0.02


def test_cli_seed_matches_api(cli):
    res = cli("eval", "sum(x*x)", "--x", "randn(2,3)", "--seed", "7", "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["nodes"][0]["value"] == _x(explain("sum(x*x)", x="randn(2,3)", seed=7)).tolist()


@pytest.mark.parametrize("text,message", [
    ("randm(3)", "did you mean 'rand'"),
    ("eye(3)", "is not a tensor constructor"),
    ("ones(3.5)", "whole numbers"),
    ("ones(-1)", "whole numbers"),
    ("zeros(2, x)", "plain numbers"),
    ("linspace(0, 1)", "linspace() takes"),
    ("arange(0, 1, 0)", "non-zero step"),
    ("full()", "full() takes"),
    ("randn(3", "cannot read the value"),
    ("__import__('os')", "is not a tensor constructor"),
    ("ones(len('ab'))", "plain numbers"),
])
def test_bad_constructors(text, message):
    with pytest.raises(ValueInputError) as err:
        explain("sum(x)", x=text)
    assert message in err.value.message


def test_element_limit_refuses_before_allocating(monkeypatch):
    import gradflow.values.tensors

    def boom(*a, **k):
        raise AssertionError("a tensor was built")

    monkeypatch.setattr(gradflow.values.tensors, "build", boom)
    for text in ("zeros(100000,100000)", f"randn({MAX_ELEMENTS + 1})", "arange(0, 1e12)", "linspace(0, 1, 1e9)"):
        with pytest.raises(LimitError) as err:
            explain("sum(x)", x=text)
        assert f"the limit is {MAX_ELEMENTS:,}" in err.value.message


def test_element_limit_cli(cli):
    res = cli("eval", "sum(x)", "--x", "zeros(100000,100000)")
    assert res.exit_code == 2
    assert "10,000,000,000 elements" in " ".join(res.stderr.split()) and "Traceback" not in res.stderr


def test_npy_header_checked_before_loading(tmp_path):
    """A header claiming 10^10 float64s with no data: refused by size, not by a failed read."""
    path = tmp_path / "huge.npy"
    with path.open("wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (100000, 100000)})
    with pytest.raises(LimitError):
        explain("sum(x)", x=f"@{path}")


@pytest.mark.parametrize("array", [np.arange(12.0).reshape(3, 4) / 7, np.arange(5), np.float64(2.5),
                                   np.asfortranarray(np.arange(6.0).reshape(2, 3)), np.arange(3.0).astype(">f8")])
def test_npy_round_trip(tmp_path, array):
    path = tmp_path / "x.npy"
    np.save(path, array)
    r = explain("sum(x*x)", x=f"@{path}", dtype="float64")
    assert np.array_equal(_x(r).numpy(), array)
    assert np.allclose(np.asarray(r.grad("x")), 2 * array, rtol=0, atol=1e-15)
    assert r.output.value.item() == pytest.approx(float((array * array).sum()), rel=1e-15)


@pytest.mark.parametrize("zipfile", [True, False])
def test_pt_round_trip(tmp_path, zipfile):
    import torch

    data = [[1.5, -2.0], [0.25, 4.0]]
    path = tmp_path / "x.pt"
    torch.save(torch.tensor(data, dtype=torch.float64), path, _use_new_zipfile_serialization=zipfile)
    r = explain("sum(x*x)", x=f"@{path}", dtype="float64")
    assert _x(r).tolist() == data
    assert r.grad("x") == [[3.0, -4.0], [0.5, 8.0]]
    assert r.output.value.item() == 1.5**2 + 4 + 0.25**2 + 16


class Evil:
    marker = ""

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("writer", ["torch.save", "pickle.dump"])
def test_malicious_pickle_refused(tmp_path, cli, writer):
    import torch

    marker, path = tmp_path / "pwned", tmp_path / "evil.pt"
    Evil.marker = str(marker)
    if writer == "torch.save":
        torch.save(Evil(), path)
    else:
        path.write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ValueInputError) as err:
        explain("sum(x)", x=f"@{path}")
    assert err.value.kind == "unsafe_file" and "never unpickles" in err.value.message
    res = cli("eval", "sum(x)", "--x", f"@{path}")
    assert res.exit_code == 2 and "refused to load" in " ".join(res.stderr.split()) and "Traceback" not in res.stderr
    assert not marker.exists()


def test_files_that_are_not_one_numeric_tensor(tmp_path):
    import torch

    torch.save({"w": torch.ones(2)}, tmp_path / "d.pt")
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(tmp_path / "c.npy", np.array([1 + 2j]))
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    for name, message in [("d.pt", "a dict with keys w"), ("o.npy", "Python objects"), ("c.npy", "complex numbers"),
                          ("junk.npy", "cannot read"), ("missing.npy", "no such file"), ("x.csv", "only .npy and .pt")]:
        with pytest.raises(ValueInputError) as err:
            explain("sum(x)", x=f"@{tmp_path / name}")
        assert message in err.value.message, name


def test_json_summarises_big_tensors_with_summary(cli):
    res = cli("eval", "sum(x*x)", "--x", "full(40,50, 2)", "--json", "--summary")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    summary = {"shape": [40, 50], "dtype": "float32", "mean": 4.0, "min": 4.0, "max": 4.0}
    assert doc["grads"]["x"] == {**summary, "norm": pytest.approx(4 * math.sqrt(2000))}
    assert doc["nodes"][0]["value"]["mean"] == 2.0
    assert doc["output"]["value"] == 8000.0  # 0-d stays a number
    for option in ([], ["--full"]):  # in full by default; --full is still accepted
        full = json.loads(cli("eval", "sum(x*x)", "--x", "full(40,50, 2)", "--json", *option).stdout)
        assert full["grads"]["x"] == [[4.0] * 50] * 40


def test_json_threshold():
    small = explain("sum(x)", x=f"ones({JSON_FULL_MAX})").to_dict(full=False)
    big = explain("sum(x)", x=f"ones({JSON_FULL_MAX + 1})")
    assert small["grads"]["x"] == [1.0] * JSON_FULL_MAX
    assert big.to_dict(full=False)["grads"]["x"]["shape"] == [JSON_FULL_MAX + 1]
    assert big.to_dict()["grads"]["x"] == [1.0] * (JSON_FULL_MAX + 1)  # the default: in full


def test_table_summary_has_dtype_and_norm():
    from gradflow.values.text import format_tensor

    t = _x(explain("sum(x)", x="full(3,4, -2)", dtype="float64"))
    assert format_tensor(t) == "shape (3, 4) float64 mean -2 norm 6.928 min -2 max -2"  # norm = 2*sqrt(12), 4 digits


def test_torch_refusals_are_input_errors():
    with pytest.raises(ValueInputError, match=r"cannot build the value of 'x', arange\(5, 0, 1\)"):
        explain("sum(x)", x="arange(5, 0, 1)")


from hypothesis import given, settings, strategies as st  # noqa: E402

_num = st.floats(-50, 50, allow_nan=False).map(lambda v: round(v, 3))


@settings(max_examples=40, deadline=None)
@given(start=_num, stop=_num, step=_num.filter(lambda s: abs(s) >= 0.01))
def test_arange_size_is_predicted_exactly(start, stop, step):
    """The element count checked against the limit (before allocating) is the count torch then makes."""
    import torch

    from gradflow.values.specs import parse_special

    spec = parse_special("x", f"arange({start!r}, {stop!r}, {step!r})")
    want = torch.arange(start, stop, step, dtype=torch.float64).numel() if (stop - start) * step > 0 else 0
    assert spec.numel == want


def test_check_sees_the_same_random_values(cli):
    """--check re-evaluates in float64: it must use the seeded values shown, not fresh draws."""
    res = cli("eval", "sum(x*x*x)", "--x", "randn(3)", "--seed", "5", "--check", "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    x = doc["nodes"][0]["value"]
    assert doc["check"]["leaves"][0]["autograd"] == pytest.approx([3 * v * v for v in x], rel=1e-12)


def test_sweep_refuses_single_point_views(cli):
    res = cli("eval", "x^2", "--x=-1:1:3", "--check")
    assert res.exit_code == 2 and "look at one point" in res.stderr


def test_other_views_take_constructor_values(cli):
    """check(), hessian() and `graph` re-run the program: they must see the same seeded tensors."""
    import gradflow

    x = explain("sum(x*x*x)", x="randn(2)", dtype="float64").node("x").value.tolist()
    assert gradflow.check("sum(x*x*x)", x="randn(2)").leaf("x").true.tolist() == pytest.approx(
        [3 * v * v for v in x], rel=1e-12)
    assert gradflow.hessian("sum(x*x*x)", x="randn(2)").to_dict()["diagonal"]["x"] == pytest.approx(
        [6 * v for v in x], rel=1e-12)
    res = cli("graph", "sum(x*w)", "--x", "randn(3)", "--w", "@missing.npy", "--format", "dot")
    assert res.exit_code == 2 and "no such file" in res.stderr
    res = cli("graph", "sum(x*w)", "--x", "randn(3)", "--w", "ones(3)", "--format", "dot")
    assert res.exit_code == 0 and res.stdout.startswith("digraph")


@pytest.mark.slow
def test_four_million_elements_within_the_default_limits(tmp_path, cli):
    """The issue's big case: a 4,000,000-element x through sum(tanh(x)*x + sigmoid(x)), with the default limits.
    Oracle: the hand-derived derivative tanh(x) + x*(1 - tanh(x)^2) + s*(1 - s), s = sigmoid(x), numpy float64."""
    x = np.random.default_rng(3).standard_normal(4_000_000).astype(np.float32)
    x64 = x.astype(np.float64)
    t, s = np.tanh(x64), 1 / (1 + np.exp(-x64))
    want = t + x64 * (1 - t * t) + s * (1 - s)
    r = explain("sum(tanh(x)*x + sigmoid(x))", x=x)
    np.testing.assert_allclose(r.grads["x"].numpy(), want, rtol=1e-5, atol=1e-6)
    assert r.output.value.item() == pytest.approx(float(np.sum(t * x64 + s)), rel=1e-5)
    np.save(tmp_path / "x.npy", x)  # the CLI, from a file: JSON summaries (shape, mean, min, max, norm)
    res = cli("eval", "sum(tanh(x)*x + sigmoid(x))", "--x", f"@{tmp_path / 'x.npy'}", "--json")
    assert res.exit_code == 2 and json.loads(res.stdout)["error"]["kind"] == "limit_json"  # in full: ~0.5 GB
    res = cli("eval", "sum(tanh(x)*x + sigmoid(x))", "--x", f"@{tmp_path / 'x.npy'}", "--json", "--summary")
    assert res.exit_code == 0, res.stderr
    g = json.loads(res.stdout)["grads"]["x"]
    assert g["shape"] == [4_000_000]
    assert (g["mean"], g["min"], g["max"], g["norm"]) == pytest.approx(
        (want.mean(), want.min(), want.max(), np.linalg.norm(want)), rel=1e-4)
