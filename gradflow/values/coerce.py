"""What happens to a variable's value on its way to a tensor, said in words.

Every value becomes a fresh floating-point leaf of the chosen dtype and device
(so `--x 1` can require grad); this module refuses what cannot be converted
faithfully (complex numbers) and describes conversions worth knowing about.
Torch-free: it only reads `.dtype` / `.device` attributes.
"""
from __future__ import annotations

import math
import struct

from gradflow.errors import EvalError

_CHECKED = 100  # elements of a list value looked at one by one for a rounding worth a warning


def _dtype_name(value) -> str | None:
    dtype = getattr(value, "dtype", None)
    return None if dtype is None else str(dtype).removeprefix("torch.")


def check_value(name: str, value) -> None:
    """Complex values would silently lose their imaginary part: refuse them."""
    if isinstance(value, complex) or "complex" in (_dtype_name(value) or ""):
        raise EvalError("bad_value", f"the value of '{name}' is complex; gradflow works with real numbers",
                        hint=f"pass the real part ({name}.real) or the magnitude (abs)")


def conversion_note(name: str, value, tensor) -> str | None:
    """A sentence when the value's dtype or device was changed, else None."""
    src = _dtype_name(value)
    dst = _dtype_name(tensor)
    notes = []
    if src and src != dst:
        why = "so it can require grad" if not src.startswith(("float", "bfloat")) else "(the chosen dtype)"
        why += "; dtype='float64' keeps its precision" if src == "float64" else ""
        notes.append(f"{name} was {src}; converted to {dst} {why}")
    device = getattr(value, "device", None)
    if device is not None and str(device) != str(tensor.device):
        notes.append(f"{name} was on {device}; copied to {tensor.device}")
    return "; ".join(notes) or None


def rounding_note(name: str, value, tensor) -> str | None:
    """A number given as text or JSON (`--x 16777217`, a list) that the dtype cannot hold as written: a sentence
    naming the value given and the value used. Not for 0.1 in float32: float32 rounds it, but its nearest float32
    still reads back as 0.1. Overflow to inf is left to the nan/inf warning (engine/nonfinite.py)."""
    dtype = _dtype_name(tensor) or ""
    if type(value) in (int, float):
        return _note(name, value, tensor.item(), dtype)
    if not isinstance(value, list) or dtype != "float32" or tensor.numel() == 0:  # float64 holds JSON/CLI floats
        return None
    exact = tensor.double().new_tensor(value)  # the numbers as given (float64), to find the rounded ones
    rounded = ((tensor.double() != exact) & exact.isfinite()).flatten().nonzero().flatten()[:_CHECKED].tolist()
    given, used = exact.flatten(), tensor.flatten()
    for i in rounded:
        index = ", ".join(str(k) for k in _unravel(i, tuple(tensor.shape)))
        note = _note(f"{name}[{index}]", given[i].item(), used[i].item(), dtype)
        if note:
            return note
    return None


def _note(name: str, given: float, used: float, dtype: str) -> str | None:
    if used == given or not math.isfinite(used) or not math.isfinite(given):
        return None
    shown = shortest(used, dtype)
    if float(shown) == given:
        return None
    keeps = "; use --dtype float64 to keep it (in Python: dtype='float64')" if dtype == "float32" and \
        float(given) == given else ""
    return f"{name} was given as {_given(given)}; {dtype} holds {shown}{keeps}"


def _given(x: float) -> str:
    """A number as it was most likely written: 16777217, not 16777217.0."""
    if isinstance(x, int) or (x.is_integer() and abs(x) < 1e16):
        return str(int(x))
    return repr(x)


def shortest(x: float, dtype: str) -> str:
    """The shortest text that reads back as `x` in `dtype` (float32: at most 9 digits; float64: repr)."""
    if dtype != "float32" or (x.is_integer() and abs(x) < 1e16):
        return _given(x)  # every float64, and every whole float32 below 1e16, reads back exactly so
    for digits in range(1, 10):
        text = f"{x:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == x:
            return text
    return repr(x)


def _unravel(i: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        i, k = divmod(i, size)
        index.append(k)
    return tuple(reversed(index))
