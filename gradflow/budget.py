"""Element budgets during evaluation: refuse a result before allocating it.

Uses only tensor methods (no torch import): the shape of a result is found by
running the operation on "meta" tensors, which have shapes but no data.
"""
from __future__ import annotations

import math

from .limits import check, check_elements, current
from .program import Node


def precheck(node: Node, fn, args, source: str) -> None:
    """Refuse `fn(*args)` when its result would exceed the per-tensor element limit.

    A result can only be that large when the inputs' element counts multiply past
    the limit (broadcasting, outer products, matmul), so the meta run is rare.
    """
    tensors = [a for a in args if hasattr(a, "new_empty")]  # the engine may pass a number (x^2's exponent)
    if len(tensors) < 2 or math.prod(a.numel() for a in tensors) <= current().elements:
        return
    try:
        shape_only = fn(*[a.new_empty(a.shape, device="meta") if hasattr(a, "new_empty") else a for a in args])
    except Exception:  # noqa: BLE001 - the real call reports the problem with a proper message
        return
    check_elements(shape_only.numel(), f"the result of '{node.text}' would have", span=node.span, source=source)


def account(total: int, node: Node, value, source: str) -> int:
    """Add a computed value to the running total; check both limits. Returns the new total."""
    n = value.numel()
    check_elements(n, f"'{node.text}' has", span=node.span, source=source)
    total += n
    check("total", total, f"the values up to '{node.text}' have", span=node.span, source=source)
    return total
