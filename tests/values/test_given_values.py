"""Values as given: nothing is changed quietly (rounding, overflow, a second value for a name, a fractional limit),
and what cannot be used (a seed torch refuses, long doubles, sparse tensors, a sweep that overflows) is refused.

Oracles: float32 rounding by `struct` (IEEE single precision, no torch), hand-computed values, plain torch code.
"""
import json
import struct

import numpy as np
import pytest
import torch

from gradflow import explain
from gradflow.batch import run_batch
from gradflow.errors import LimitError, ValueInputError
from gradflow.limits import as_limits
from gradflow.studies.sweeps import sweep


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _warnings(res) -> list[str]:
    return [w["message"] for w in json.loads(res.stdout)["warnings"]]


# ---- 5. numbers that the dtype rounds are said, as .npy files already are ------------------------------

def test_a_cli_number_float32_rounds_is_a_warning_with_both_values(cli):
    assert _f32(16777217.0) == 16777216.0  # 2**24 + 1 needs 25 bits; float32 has 24
    res = cli("eval", "x*1", "--x", "16777217", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["output"]["value"] == 16777216.0
    assert _warnings(res) == ["x was given as 16777217; float32 holds 16777216; use --dtype float64 to keep it "
                              "(in Python: dtype='float64')"]
    assert "warning: x was given as 16777217; float32 holds 16777216" in res.stderr
    assert _warnings(cli("eval", "x*1", "--x", "16777217", "--json", "--dtype", "float64")) == []


@pytest.mark.parametrize("given,held", [("0.123456789", "0.12345679"), ("1e-50", "0"), ("-16777219", "-16777220")])
def test_the_value_used_is_the_shortest_text_float32_reads_back(cli, given, held):
    assert _f32(float(held)) == _f32(float(given)) and float(held) != float(given)
    assert _warnings(cli("eval", "x*1", "--x", given, "--json"))[0].startswith(f"x was given as {given}; "
                                                                               f"float32 holds {held};")


@pytest.mark.parametrize("value", ["0.1", "3", "-2.5", "1e-3", "[0.1, 0.2, 0.3]", "inf"])
def test_numbers_float32_reads_back_as_written_are_not_warned_about(cli, value):
    res = cli("eval", "sum(x*1)", "--x", value, "--json")
    assert [w for w in _warnings(res) if "given as" in w] == []


def test_list_elements_and_json_lines_and_the_api_are_warned_about_too():
    r = explain("sum(x)", x=[1, 16777217])
    assert [w.message.split(";")[0] for w in r.warnings] == ["x[1] was given as 16777217"]
    (rec,) = run_batch(['{"expr": "x*y", "vars": {"x": 16777217, "y": 1}}'])
    assert rec["warnings"][0]["kind"] == "value_converted" and "holds 16777216" in rec["warnings"][0]["message"]
    big = explain("x*1", x=2**53 + 1, dtype="float64")  # float64 has 53 bits
    assert [w.message for w in big.warnings] == ["x was given as 9007199254740993; float64 holds 9007199254740992"]


def test_a_sweep_does_not_warn_about_its_own_points(cli):
    res = cli("eval", "x^2", "--x=0:1:11", "--json")
    assert res.exit_code == 0 and "given as" not in res.stdout + res.stderr


def test_a_finite_value_float32_overflows_is_said_to_be_too_large_not_inf(cli):
    res = cli("eval", "x*y", "--x", "1", "--y", "1e39")
    assert "warning: inf first appears in the forward pass at 'y': the value given for y, 1e+39, is too large " \
           "for float32 (its largest number is about 3.4e38), so it became inf; use --dtype float64" in res.stderr
    assert "is inf" not in res.stderr.split("\n")[0]
    res = cli("eval", "x*y", "--x", "1", "--y", "1e400")  # really inf: said as before
    assert "at 'y': the value given for y is inf\n" in res.stderr
    r = explain("sum(x*y)", x=1, y=[1.0, -1e39])
    assert "a number given for y is too large for float32" in r.warnings[0].message


# ---- 5. one name, one value -----------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--x", "1", "--var", "x=5"], "x is given twice (--x and --var x=...)"),
    (["--var", "x=5", "--x", "1"], "x is given twice (--x and --var x=...)"),
    (["--var", "x=1", "--var", "x=5"], "--var x=... is given twice"),
    (["--x", "1", "--x=5"], "--x is given twice"),
])
def test_a_variable_given_twice_by_any_route_is_an_error(cli, args, message):
    res = cli("eval", "x*1", *args)
    assert res.exit_code == 2 and res.stderr.startswith(f"error: {message}\n")


def test_the_api_refuses_a_value_given_both_ways():
    with pytest.raises(ValueInputError, match="'x' is given twice"):
        explain("x*1", values={"x": 1}, x=5)
    with pytest.raises(ValueInputError, match="'x' is given twice"):
        sweep("x*y", "y", 0, 1, 3, values={"x": 1}, x=2)


@pytest.mark.parametrize("item", ["depth=1.9", "depth=0.5", "depth=1e7.5", "depth=nan", "depth=inf"])
def test_a_limit_must_be_a_whole_number(cli, item):
    res = cli("eval", "x*2", "--x", "1", "--limit", item)
    assert res.exit_code == 2 and "limit 'depth' must be a positive whole number" in res.stderr


def test_whole_numbers_in_exponent_form_stay_accepted_and_a_limit_is_given_once():
    assert as_limits(["depth=1e7", "nodes=2000.0"]).depth == 10_000_000
    with pytest.raises(LimitError, match="positive whole number"):
        as_limits({"depth": 1.9})
    with pytest.raises(LimitError, match="'depth' is given twice"):
        as_limits(["depth=5", "max_depth=6"])


# ---- 5. a UTF-8 byte-order mark starts many Windows files ---------------------------------------------

def test_a_program_file_or_stdin_may_start_with_a_byte_order_mark(cli, tmp_path):
    f = tmp_path / "prog.txt"
    f.write_bytes(b"\xef\xbb\xbf(x*y1 - detach(x*y2))^2\n")
    for res in (cli("eval", "--file", str(f), "--x", "1", "--y1", "2", "--y2", "7", "--json"),
                cli("eval", "-", "--x", "1", "--y1", "2", "--y2", "7", "--json", input=f.read_bytes())):
        assert res.exit_code == 0, res.stderr
        assert json.loads(res.stdout)["grads"] == {"x": -20.0}  # the blog's -10 * y1


def test_a_program_file_longer_than_the_limit_is_refused_before_it_is_read_whole(cli, tmp_path):
    f = tmp_path / "long.txt"
    f.write_text("x+" * 6000 + "x")
    res = cli("eval", "--file", str(f), "--x", "1")
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: the program text in --file {f} has more than 10,000 characters; "
                                 "the limit is 10,000\nhint: raise it with --limit length=100000")


# ---- 4. values torch cannot take are refused clearly ----------------------------------------------------

def test_a_seed_outside_torchs_range_is_a_clear_error(cli):
    res = cli("eval", "x^2", "--x", "1", "--seed", "99999999999999999999")
    assert res.exit_code == 2 and "the seed 99999999999999999999 is not one torch can use" in res.stderr
    assert "Traceback" not in res.stderr and "internal" not in res.stderr
    res = cli("eval", "sum(x)", "--x", "randn(2)", "--seed", "99999999999999999999")
    assert res.exit_code == 2 and "Overflow" not in res.stderr
    with pytest.raises(ValueInputError, match="18446744073709551615"):
        sweep("sum(x)*y", "y", 0, 1, 2, x="randn(2)", seed=2**64)


def test_the_largest_seed_torch_takes_is_used():
    top = 2**64 - 1
    r = explain("sum(x)", x="randn(3)", seed=top, dtype="float64")
    want = torch.randn(3, generator=torch.Generator().manual_seed(top), dtype=torch.float64)
    assert r.node("x").value.tolist() == want.tolist()


def test_long_double_npy_is_refused_not_rounded(cli, tmp_path):
    path = tmp_path / "ld.npy"
    np.save(path, np.array([1.5, 2.5], dtype=np.longdouble))
    if np.dtype(np.longdouble).itemsize <= 8:
        pytest.skip("long double is float64 on this platform")
    res = cli("eval", "sum(x)", "--x", f"@{path}")
    assert res.exit_code == 2 and "long double numbers (numpy.longdouble), which torch cannot hold" in res.stderr


@pytest.mark.parametrize("make,kind", [(lambda: torch.eye(2).to_sparse(), "a sparse_coo tensor"),
                                       (lambda: torch.eye(2).to_sparse_csr(), "a sparse_csr tensor")])
def test_a_sparse_tensor_file_is_refused(cli, tmp_path, make, kind):
    path = tmp_path / "sp.pt"
    with pytest.warns() if "csr" in kind else _nothing():
        torch.save(make(), path)
    res = cli("eval", "sum(x)", "--x", f"@{path}")
    assert res.exit_code == 2 and f"is {kind}, not an ordinary (dense) tensor" in res.stderr
    with pytest.raises(ValueInputError, match="sparse"):
        explain("sum(x)", x=torch.load(path, weights_only=True))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---- 4. a sweep whose points would overflow -------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--x=-1.7e308:1.7e308:3", "--dtype", "float64"], "the distance from START to STOP is too large"),
    (["--x=-1e39:1:3"], "START -1e+39 is too large for float32"),
    (["--x=0:3.5e38:3"], "STOP 3.5e+38 is too large for float32"),
])
def test_a_sweep_that_would_overflow_is_refused(cli, tmp_path, args, message):
    picture = tmp_path / "e.png"
    res = cli("eval", "x^2", *args, "--plot", str(picture))
    assert res.exit_code == 2 and message in res.stderr and "Traceback" not in res.stderr
    assert not picture.exists()


def test_a_wide_sweep_within_the_dtype_runs():
    r = sweep("x^2", "x", -(2.0**130), 2.0**130, 3, dtype="float64")  # 2^130 ≈ 1.4e39: beyond float32
    assert r.values == [-(2.0**130), 0.0, 2.0**130] and r.outputs() == [2.0**260, 0.0, 2.0**260]  # exact powers of 2


def test_a_picture_of_a_sweep_with_nothing_finite_is_not_a_crash(cli, tmp_path):
    pytest.importorskip("matplotlib")
    picture = tmp_path / "e.png"
    res = cli("eval", "x/0", "--x=1:2:3", "--plot", str(picture))
    assert res.exit_code == 0 and "nothing to draw" in res.stderr and not picture.exists()
