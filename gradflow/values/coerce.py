"""What happens to a variable's value on its way to a tensor, said in words.

Every value becomes a fresh floating-point leaf of the chosen dtype and device
(so `--x 1` can require grad); this module refuses what cannot be converted
faithfully (complex numbers) and describes conversions worth knowing about.
Torch-free: it only reads `.dtype` / `.device` attributes.
"""
from __future__ import annotations

from gradflow.errors import EvalError


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
