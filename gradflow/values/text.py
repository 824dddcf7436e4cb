"""Reading variable values from text (torch-free): numbers and JSON-style nested lists."""
from __future__ import annotations

import json
import math

from gradflow.errors import ValueInputError
from gradflow.language.checks import check_value_text
from gradflow.values.specs import parse_special


def parse_value(name: str, text: str):
    """'2.5' -> 2.5, '[[1,2],[3,4]]' -> nested list of floats; 'randn(3,4)' / '@x.npy' -> a
    specs.TensorSpec / specs.FileValue (built later by tensors.py). Raises ValueInputError."""
    text = text.strip()
    special = parse_special(name, text)
    if special is not None:
        return special
    check_value_text(name, text)
    try:
        return float(text) if not text.startswith("[") else _check_list(json.loads(text))
    except (ValueError, TypeError) as err:
        detail = f" ({err})" if isinstance(err, TypeError) else ""
        raise ValueInputError(
            "bad_value", f"cannot read the value of '{name}': {text!r}{detail}",
            hint="give a number (2, -1.5, 1e-3), a JSON list ([1,2,3], [[1,2],[3,4]]), a constructor "
                 "(randn(3,4), zeros(2), linspace(-1,1,5), ...) or a file (@x.npy, @x.pt)") from None


def _check_list(value):
    """Rectangular nested lists of numbers only."""
    def shape(v):
        if isinstance(v, bool) or not isinstance(v, (list, int, float)):
            raise TypeError(f"{v!r} is not a number")
        if not isinstance(v, list):
            return ()
        if not v:
            return (0,)
        inner = [shape(x) for x in v]
        if any(s != inner[0] for s in inner):
            raise TypeError("the rows have different lengths")
        return (len(v), *inner[0])

    if not isinstance(value, list):
        raise TypeError("expected a list")
    shape(value)
    return value


def format_number(x: float) -> str:
    """Compact, human form: 50, -20, 0.5, 1.23457e-05, nan, inf."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    return f"{x:.6g}"
