"""Tensors and numbers as strict JSON (RFC 8259): non-finite numbers become strings, big tensors summaries.

Torch-free: only tensor methods are used.
"""
from __future__ import annotations

import json
import math

from gradflow.limits import JSON_FULL_MAX


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, list):
        return x if _finite_flat(x) else [_clean(v) for v in x]
    return x


def summary(t) -> dict:
    """{"shape", "dtype", "mean", "min", "max", "norm"} of a non-empty tensor (statistics in float64)."""
    f = t.detach().double()
    return {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "mean": f.mean().item(),
            "min": f.min().item(), "max": f.max().item(), "norm": f.norm().item()}


def _finite_flat(x: list) -> bool:
    """A flat list of finite numbers (a 1-d tensor's tolist(), the common case): nothing to replace."""
    try:
        return all(map(math.isfinite, x))
    except TypeError:  # nested lists, strings, None
        return False


def to_jsonable(t, strict: bool = True, full: bool = True):
    """A tensor as a number (0-d) or nested list (a summary() dict when over JSON_FULL_MAX
    elements and not `full`); non-finite numbers as strings if strict."""
    if t is None:
        return None
    if hasattr(t, "tolist"):
        if t.dim() == 0:  # the common case first: one number (a node of a long program is usually one)
            x = t.item()
            return _clean(x) if strict and x.__class__ is float and not math.isfinite(x) else x
        if not full and t.numel() > JSON_FULL_MAX:
            return {k: _clean(v) if strict else v for k, v in summary(t).items()}
        t = t.tolist()  # no detach()/cpu(): tolist copies out as it is
    return _clean(t) if strict else t


def dumps(obj, **kw) -> str:
    """Strict RFC 8259 JSON: a stray NaN raises instead of producing invalid output."""
    return json.dumps(obj, allow_nan=False, **kw)
