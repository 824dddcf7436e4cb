"""Tensors and numbers as strict JSON (RFC 8259): non-finite numbers become strings; tensors in full.

A JSON document (one --json output, one batch or sweep record) is built inside `document()`: every tensor it
prints in full counts against the `json` limit (gradflow/limits.py), so an accident cannot print gigabytes, and
with `summary=True` a tensor over JSON_FULL_MAX elements becomes a summary object instead. A tensor's type in
the output never depends on its size unless summaries were asked for: over the limit is an error, never a
silent summary. Torch-free: only tensor methods are used.
"""
from __future__ import annotations

import contextvars
import functools
import json
import math

from gradflow.errors import LimitError
from gradflow.limits import JSON_FULL_MAX, current


class _Document:
    """The JSON document being built: summaries or not, and the tensor elements it may still print in full."""

    __slots__ = ("summary", "limit", "spent")

    def __init__(self, summary: bool, limit: int):
        self.summary, self.limit, self.spent = summary, limit, 0

    def spend(self, count: int) -> None:
        self.spent += count
        if self.spent > self.limit:
            bigger = max(self.limit * 10, self.spent)
            raise LimitError("limit_json", f"the JSON output would print more than {self.limit:,} tensor elements "
                             f"in full; the limit is {self.limit:,}",
                             hint=f"print tensors over {JSON_FULL_MAX:,} elements as summaries with --summary, or "
                                  f"raise the limit with --limit json={bigger}")


_DOCUMENT: contextvars.ContextVar[_Document | None] = contextvars.ContextVar("gradflow_json_document", default=None)


class document:  # noqa: N801 - used as `with document():`, like contextlib's context managers
    """Build one JSON document inside this (see the module's docstring); the limit is the `json` one in force
    (limits.using). Nested: the outermost document counts and decides. A class, not a generator: every batch
    record enters it twice."""

    __slots__ = ("summary", "token")

    def __init__(self, summary: bool = False):
        self.summary = summary
        self.token: contextvars.Token | None = None

    def __enter__(self) -> None:
        if _DOCUMENT.get() is None:
            self.token = _DOCUMENT.set(_Document(self.summary, current().json))

    def __exit__(self, *exc: object) -> None:
        if self.token is not None:
            _DOCUMENT.reset(self.token)


def one_document(to_dict):
    """A to_dict method builds one document (unless it is part of a bigger one already)."""
    @functools.wraps(to_dict)
    def wrapper(*args, **kwargs):
        with document():
            return to_dict(*args, **kwargs)
    return wrapper


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, list):
        return x if _finite_flat(x) else [_clean(v) for v in x]
    return x


SUMMARY_CHUNK = 1 << 20  # elements widened to float64 at a time


def dense(t):
    """A sparse tensor (an nn.Embedding(sparse=True)'s gradient) as the dense one it stands for, for its numbers,
    norms and shares; others (and None) as they are."""
    layout = getattr(t, "layout", None)
    return t.to_dense() if layout is not None and str(layout) != "torch.strided" else t


def summary(t) -> dict:
    """{"shape", "dtype", "mean", "min", "max", "norm"} of a non-empty tensor (statistics in float64).

    A large tensor is widened a chunk at a time: a float64 copy of all of it would be the largest allocation of
    the whole command (twice a float32 value), beyond what the `total` limit counts."""
    head = {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
    flat = dense(t.detach()).reshape(-1)
    if flat.numel() <= SUMMARY_CHUNK:
        f = flat.double()
        return {**head, "mean": f.mean().item(), "min": f.min().item(), "max": f.max().item(),
                "norm": f.norm().item()}
    total = squares = 0.0
    low, high = math.inf, -math.inf
    for part in flat.split(SUMMARY_CHUNK):
        f = part.double()
        total += f.sum().item()
        squares += f.square().sum().item()
        low, high = min(low, f.min().item()), max(high, f.max().item())
    return {**head, "mean": total / flat.numel(), "min": low, "max": high, "norm": math.sqrt(squares)}


def _finite_flat(x: list) -> bool:
    """A flat list of finite numbers (a 1-d tensor's tolist(), the common case): nothing to replace."""
    try:
        return all(map(math.isfinite, x))
    except TypeError:  # nested lists, strings, None
        return False


def to_jsonable(t, strict: bool = True, full: bool = True):
    """A tensor as a number (0-d) or nested list (a summary() dict when over JSON_FULL_MAX elements and not
    `full`, or the document asks for summaries); non-finite numbers as strings if strict. Inside a document(),
    the elements printed count against its limit (LimitError beyond it)."""
    if t is None:
        return None
    numel = getattr(t, "numel", None)  # one look-up, not hasattr then the call: this runs per value, grad, flow
    if numel is not None:
        doc, count = _DOCUMENT.get(), numel()
        if count > JSON_FULL_MAX and (not full or (doc is not None and doc.summary)):
            return {k: _clean(v) if strict else v for k, v in summary(t).items()}
        if doc is not None:
            doc.spend(count)
    if hasattr(t, "tolist"):
        if t.dim() == 0:
            x = t.item()
            return _clean(x) if strict and x.__class__ is float and not math.isfinite(x) else x
        t = dense(t).tolist()  # no detach()/cpu(): tolist copies out as it is
    return _clean(t) if strict else t


class _Unconverted:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCONVERTED"


UNCONVERTED = _Unconverted()  # a tensor left as a tensor by `plain` (too big to hold as Python numbers)
PLAIN_MAX = 64  # elements: a tensor up to this size is read into Python numbers once (`plain`)


def plain(t):
    """A small tensor's numbers, read once (`tolist()`: a number for a 0-d tensor, else nested lists), for the
    JSON, the nan/inf scan and the table to share; UNCONVERTED for a tensor over PLAIN_MAX elements (its numbers
    are read where needed, or summarised); None stays None."""
    if t is None:
        return None
    return dense(t).tolist() if t.numel() <= PLAIN_MAX else UNCONVERTED


def plain_json(x, count: int):
    """`plain(t)`'s numbers as to_jsonable(t) gives them (strict: non-finite numbers as strings; lists are new
    lists), its `count` elements counted against the document being built; None (no tensor) counts nothing."""
    if x is None:
        return None
    doc = _DOCUMENT.get()
    if doc is not None:
        doc.spend(count)
    if x.__class__ is float:
        return x if math.isfinite(x) else _clean(x)
    return fresh(x) if x.__class__ is list else x


def fresh(x):
    """Plain numbers for a document: a new list (its reader may change it), non-finite numbers as strings."""
    if x.__class__ is list:
        return x[:] if _finite_flat(x) else [fresh(v) for v in x]
    return _clean(x)


def plain_finite(x) -> bool | None:
    """Are all of `plain(t)`'s numbers finite? None when it cannot say at once (nested lists, UNCONVERTED)."""
    if x.__class__ is float:
        return math.isfinite(x)
    if x.__class__ is list:
        return _finite_flat(x) or (None if any(v.__class__ is list for v in x) else False)
    return None if x is UNCONVERTED else True  # int, bool (and None: no tensor)


def dumps(obj, **kw) -> str:
    """Strict RFC 8259 JSON: a stray NaN raises instead of producing invalid output."""
    return json.dumps(obj, allow_nan=False, **kw)
