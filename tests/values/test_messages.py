"""Messages that name what is really wrong (each was once a message about something else)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from gradflow import EvalError, ValueInputError, explain


def test_a_fifo_is_named_as_one_not_as_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("x.npy")
    with pytest.raises(ValueInputError) as err:
        explain("x*2", x="@x.npy")
    assert "'x.npy' is a named pipe (FIFO), not a regular file" in err.value.message
    assert "no such file" not in err.value.message


def test_random_bytes_are_not_a_file_torch_wrote(tmp_path):
    path = tmp_path / "x.pt"
    path.write_bytes(bytes(range(7, 207)))  # not zip, not a pickle
    with pytest.raises(ValueInputError) as err:
        explain("sum(x)", x=f"@{path}")
    assert "not a file torch.save wrote" in err.value.message and "Python objects" not in err.value.message


def test_pickled_objects_are_still_refused_as_objects(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"f": print}, path)
    with pytest.raises(ValueInputError, match="holds Python objects other than tensors"):
        explain("sum(x)", x=f"@{path}")


@pytest.mark.parametrize("array, words", [
    (np.array(["2020-01-01"], dtype="datetime64[D]"), "dates and times (numpy datetime64)"),
    (np.array([1], dtype="timedelta64[s]"), "time spans (numpy timedelta64)"),
    (np.array(["a"]), "text (numpy str_)"),
    (np.array([1 + 2j]), "complex numbers"),
])
def test_a_npy_of_other_kinds_says_which_kind(tmp_path, array, words):
    path = tmp_path / "x.npy"
    np.save(path, array)
    with pytest.raises(ValueInputError) as err:
        explain("sum(x)", x=f"@{path}")
    assert f"holds {words}, not real numbers" in err.value.message


def test_output_to_a_directory_says_it_is_one(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("graph", "x*2", "--x", "1", "-o", "")
    assert result.exit_code == 2
    assert "cannot write to '.': it is a directory, not a file" in result.stderr
    assert 'an empty -o "" names the current directory' in result.stderr


def test_cross_entropy_of_a_single_number_says_there_are_no_classes():
    with pytest.raises(EvalError) as err:
        explain("F.cross_entropy(x, t)", x=1.0, t=0.0)
    assert "needs a score per class, and its input is a single number" in err.value.message
    assert "index out of range" not in err.value.message


@pytest.mark.parametrize("target, shown", [(1e30, "1e+30"), (2.0, "2"), (-1.0, "-1")])
def test_a_class_target_out_of_range_is_named_as_given(target, shown):
    with pytest.raises(EvalError) as err:
        explain("F.cross_entropy(x, t)", x=[1.0, 2.0], t=target)
    assert f"cross_entropy's target {shown} is not a class index: the input has 2 classes" in err.value.message
    assert "-9223372036854775808" not in err.value.message


def test_ignore_index_is_still_a_target_torch_takes():
    grads = explain("F.cross_entropy(x, t)", x=[[1.0, 2.0], [3.0, 4.0]], t=[1.0, -100.0]).grads["x"]
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)  # plain torch, written separately
    torch.nn.functional.cross_entropy(x, torch.tensor([1, -100])).backward()
    assert torch.allclose(grads, x.grad)


@pytest.mark.parametrize("value", [10**400, -(10**400)])
def test_an_int_beyond_float64_is_inf_with_a_warning_as_on_the_command_line(value):
    result = explain("x*2", x=value)
    assert result.output.value.item() == (float("inf") if value > 0 else float("-inf"))
    assert float(result.grads["x"]) == 2.0  # d(2x)/dx, whatever x is
    assert any("beyond float64's range" in w.message for w in result.warnings)
    listed = explain("sum(x*2)", x=[1, value])
    assert listed.grads["x"].tolist() == [2.0, 2.0]


@pytest.mark.parametrize("text, shown", [("x*٣", "٣"), ("x*３", "３"), ("x*²", "²")])
def test_non_ascii_digits_are_not_numbers(text, shown):
    from gradflow import ParseError

    with pytest.raises(ParseError) as err:
        explain(text, x=2.0)
    assert f"unexpected character '{shown}' (not an ASCII digit: numbers are written with 0-9)" in err.value.message


@pytest.mark.parametrize("constant, string", [("Infinity", "inf"), ("-Infinity", "-inf"), ("NaN", "nan")])
def test_a_batch_line_with_a_json_constant_names_its_string(cli, constant, string):
    line = '{"expr": "x*2", "vars": {"x": %s}}\n' % constant
    result = cli("batch", "-", input=line)
    assert f'{constant} is not valid JSON (RFC 8259); write it as the string \\"{string}\\"' in result.stdout
