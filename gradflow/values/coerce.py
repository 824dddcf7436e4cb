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

_CHECKED = 10_000  # numbers of a list value looked at for a rounding worth a warning


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
    still reads back as 0.1. Overflow to inf is left to the nan/inf warning (engine/nonfinite.py). In a list,
    the first _CHECKED numbers are looked at."""
    dtype = _dtype_name(tensor) or ""
    if type(value) in (int, float):
        return _note(name, value, tensor.item(), dtype)
    if not isinstance(value, list) or dtype != "float32":  # float64 holds every float of JSON or the CLI
        return None
    given = _first_numbers(value)
    used = tensor.flatten()[:len(given)].tolist()
    shape = tuple(tensor.shape)
    for i, (g, u) in enumerate(zip(given, used)):
        note = _note(name, g, u, dtype, index=i, shape=shape)
        if note:
            return note
    return None


def _first_numbers(value: list) -> list:
    """The first _CHECKED numbers of a nested list, in row-major order (iteratively: lists nest 32 deep)."""
    if list not in map(type, value):  # flat, as most values are: no walk
        return value[:_CHECKED]
    out: list = []
    stack = [iter(value)]
    while stack and len(out) < _CHECKED:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            stack.append(iter(item))
        else:
            out.append(item)
    return out


_END = object()


def _note(name: str, given, used: float, dtype: str, index: int = 0, shape: tuple = ()) -> str | None:
    if used == given or type(given) not in (int, float) or not math.isfinite(used) or not math.isfinite(given):
        return None
    if dtype == "float32" and _reads_back(given, used):
        return None
    shown = shortest(used, dtype)
    if float(shown) == given:
        return None
    keeps = "; use --dtype float64 to keep it (in Python: dtype='float64')" if dtype == "float32" and \
        float(given) == given else ""
    where = f"[{', '.join(str(k) for k in _unravel(index, shape))}]" if shape else ""
    return f"{name}{where} was given as {_given(given)}; {dtype} holds {shown}{keeps}"


def _reads_back(given, used: float) -> bool:
    """The common case, decided with one format: `given` has at most 6 significant digits (FLT_DIG), so the
    float32 `used` printed to 6 digits is `given` again, and no shorter text reads back as `used`."""
    return float(f"{used:.6g}") == given


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
