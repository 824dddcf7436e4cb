"""Reading values from text and formatting numbers (torch-free)."""
import math

import pytest

from gradflow import ValueInputError
from gradflow.values.text import format_number, parse_value


@pytest.mark.parametrize("text,want", [
    ("2", 2.0), ("-1.5", -1.5), ("1e-3", 0.001), (" 7 ", 7.0), (".5", 0.5),
    ("[1,2,3]", [1, 2, 3]), ("[[1,2],[3,4]]", [[1, 2], [3, 4]]), ("[1.5, -2e3]", [1.5, -2000.0]), ("[]", []),
])
def test_parse_value(text, want):
    assert parse_value("x", text) == want


@pytest.mark.parametrize("text,detail", [
    ("abc", ""), ("", ""), ("[1,", ""), ("[[1,2],[3]]", "the rows have different lengths"),
    ("[true]", "True is not a number"), ('["a"]', "'a' is not a number"), ("[[1],2]", "different lengths"),
    ("1,2", ""),
])
def test_bad_values(text, detail):
    with pytest.raises(ValueInputError) as info:
        parse_value("w", text)
    e = info.value
    assert e.kind == "bad_value" and e.message.startswith(f"cannot read the value of 'w': {text.strip()!r}")
    assert detail in e.message
    assert "JSON list" in e.hint


def test_non_finite_text_is_read_as_float():
    assert math.isnan(parse_value("x", "nan")) and parse_value("x", "-inf") == -math.inf


@pytest.mark.parametrize("x,want", [
    (50.0, "50"), (-20.0, "-20"), (0.5, "0.5"), (0.0, "0"), (-0.0, "0"), (1 / 3, "0.333333"),
    (1.23456789e-5, "1.23457e-05"), (1e20, "1e+20"), (math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"),
    (-math.nan, "nan"), (123456789.0, "1.23457e+08"), (5e-324, "4.94066e-324"),  # a negative nan; the smallest float
    (7, "7"), (0, "0"), (-3, "-3"), (1234567, "1.23457e+06"), (True, "True"), (False, "False"),  # int, bool tensors
])
def test_format_number(x, want):
    assert format_number(x) == want
