"""Reading variable values from text (torch-free): numbers and JSON-style nested lists."""
from __future__ import annotations

import json

from gradflow.errors import ValueInputError
from gradflow.limits import MAX_VALUE_DIMS
from gradflow.values.jsonable import summary
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
        return _number(text) if not text.startswith("[") else _check_list(json.loads(text))
    except (ValueError, TypeError) as err:
        detail = f" ({err})" if isinstance(err, TypeError) else ""
        raise ValueInputError(
            "bad_value", f"cannot read the value of '{name}': {text!r}{detail}",
            hint="give a number (2, -1.5, 1e-3), a JSON list ([1,2,3], [[1,2],[3,4]]), a constructor "
                 "(randn(3,4), zeros(2), linspace(-1,1,5), ...) or a file (@x.npy, @x.pt)") from None


def _number(text: str) -> int | float:
    """'2.5' -> 2.5; '16777217' -> 16777217 exactly (an int: the warning about rounding can quote it as given)."""
    digits = text.lstrip("+-")
    if digits.isdigit() and digits.isascii() and len(digits) <= 300:  # beyond 1e300 (or '1e5'): a float, as before
        return int(text)
    return float(text)


def check_value_text(name: str, text: str) -> None:
    """A JSON list value nests at most MAX_VALUE_DIMS brackets (json.loads would recurse)."""
    depth = best = 0
    for ch in text:
        if ch == "[":
            depth += 1
            best = max(best, depth)
        elif ch == "]":
            depth -= 1
    if best > MAX_VALUE_DIMS:
        raise ValueInputError("bad_value", f"the value of '{name}' nests lists {best} deep; "
                              f"at most {MAX_VALUE_DIMS} dimensions are supported",
                              hint="give a number or a list like [[1,2],[3,4]]")


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
    """Compact, human form: 50, -20, 0.5, 1.23457e-05, nan, inf; True / False for a boolean tensor's elements."""
    if isinstance(x, bool):
        return str(x)
    if x != x:
        return "nan"  # (a negative nan formats as -nan)
    return f"{x:.6g}" if x else "0"  # -0.0 too; inf and -inf format as themselves


DASH = "—"
SMALL = 6  # tensors with at most this many elements are shown in full


def format_tensor(t, sep: str = " ") -> str:
    """Small tensors in full ([1, 2, 3]); large ones summarised by shape, dtype and statistics
    (`sep` between the groups: shape+dtype, mean+norm, min+max)."""
    if t is None:
        return DASH
    if t.dim() == 0:
        return format_number(t.item())
    if t.numel() <= SMALL:
        return _nested(t.tolist())
    s = summary(t)
    return (f"shape {tuple(t.shape)} {s['dtype']}{sep}mean {_short(s['mean'])} norm {_short(s['norm'])}"
            f"{sep}min {_short(s['min'])} max {_short(s['max'])}")


def format_numbers(t, numbers, size: int, sep: str = " ") -> str:
    """format_tensor(t) from the numbers the engine read already (`numbers`: t.tolist(), `size`: t.numel(); see
    values/jsonable.py `plain`), without asking torch again."""
    if numbers is None:
        return DASH
    if numbers.__class__ is not list:
        return format_number(numbers)
    if size <= SMALL:
        return _nested(numbers)
    return format_tensor(t, sep)


def _short(v: float) -> str:
    return format_number(float(f"{v:.4g}"))


def _nested(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_nested(x) for x in v) + "]"
    return format_number(v)
