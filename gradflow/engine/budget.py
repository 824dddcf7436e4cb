"""Element budgets during evaluation: refuse a result before allocating it.

Torch-free: a result's shape is computed from its operands' shapes by the op row's rule (broadcasting,
matmul's, cat's, stack's). Running the operation on "meta" tensors would give the same, but the first such
call imports torch._dynamo, which is slow to import.
"""
from __future__ import annotations

import itertools
import math

from gradflow.language.graph import Node
from gradflow.language.ops import OPS
from gradflow.limits import Limits, check, check_elements, current


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast shape of `shapes` (torch's and numpy's rule); ValueError when they do not broadcast."""
    out = []
    for dims in itertools.zip_longest(*(reversed(s) for s in shapes), fillvalue=1):
        sizes = set(dims) - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(reversed(out))


def result_shape(op: str, shapes: list[tuple[int, ...]], params: dict | None = None) -> tuple[int, ...]:
    """The shape of `op` applied to tensors of `shapes` (its row's rule: broadcast, matmul, cat, stack).
    Inner sizes are not always checked: when they do not fit, the real call reports it. ValueError when the
    shapes cannot combine; ops whose result is never bigger than their first operand have no rule here."""
    rule = OPS[op].shape if op in OPS else "broadcast"
    if rule == "broadcast":
        return broadcast(*shapes)
    if rule == "matmul":
        return _matmul(*shapes)
    if rule == "linear":  # input (..., in) and weight (out, in) or (in): input @ weight.T (the bias broadcasts)
        return _matmul(shapes[0], shapes[1][::-1])
    dim = (params or {}).get("dim", 0)
    if rule == "stack":
        if len(set(shapes)) != 1:
            raise ValueError("stack needs tensors of one shape")
        return _stack(shapes[0], dim, len(shapes))
    if rule == "cat":
        return _cat(shapes, dim)
    raise ValueError(f"no shape rule for {op}")


def _matmul(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise ValueError("matmul needs tensors of at least one dimension")
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(a) == 1:  # a vector loses its dimension: (k)@(...,k,p) -> (...,p), (...,n,k)@(k) -> (...,n)
        return b[:-2] + b[-1:]
    if len(b) == 1:
        return a[:-1]
    return broadcast(a[:-2], b[:-2]) + (a[-2], b[-1])


def _axis(dim: int, ndim: int) -> int:
    if not -ndim <= dim < ndim:
        raise ValueError(f"dim {dim} out of range")
    return dim % ndim


def _stack(shape: tuple[int, ...], dim: int, n: int) -> tuple[int, ...]:
    d = _axis(dim, len(shape) + 1)
    return shape[:d] + (n,) + shape[d:]


def _cat(shapes: list[tuple[int, ...]], dim: int) -> tuple[int, ...]:
    full = [s for s in shapes if s != (0,)]  # torch skips 1-d empty tensors in cat
    if not full:
        return (0,)
    ndim = len(full[0])
    if ndim == 0 or any(len(s) != ndim for s in full):
        raise ValueError("cat needs tensors of one number of dimensions")
    d = _axis(dim, ndim)
    rest = {s[:d] + s[d + 1:] for s in full}
    if len(rest) != 1:
        raise ValueError("cat needs tensors of one shape but for dim")
    return full[0][:d] + (sum(s[d] for s in full),) + full[0][d + 1:]


# the rules whose result may outgrow every operand
_GROWING = frozenset(("broadcast", "matmul", "linear", "cat", "stack"))


def precheck(node: Node, args, source: str) -> None:
    """Refuse `node`'s result when its shape would exceed the per-tensor element limit."""
    op = OPS.get(node.op)
    rule = op.shape if op is not None else "broadcast"
    if rule not in _GROWING:
        return  # the result is no bigger than one operand (reductions, elementwise functions, losses, shapes)
    sizes = [a.numel() for a in args if hasattr(a, "numel")]  # x^2's exponent may be a number
    if len(sizes) < 2:
        return
    bound = sum(sizes) if rule in ("cat", "stack") else math.prod(sizes)
    if 0 not in sizes and bound <= current().elements:
        return  # at most the product of the operands' elements ((n,0)@(0,p) has n*p: not here); cat: their sum
    shapes = [tuple(a.shape) for a in args if hasattr(a, "numel")]
    try:
        shape = result_shape(node.op, shapes, dict(node.params))
    except ValueError:
        return  # the real call reports the mismatch in torch's words
    check_elements(math.prod(shape), f"the result of '{node.text}' would have", span=node.span, source=source)


def account(total: int, node: Node, value, source: str, limits: Limits, grad: bool = False) -> int:
    """Add a computed value (and, if `grad`, the gradient it will hold, as big as itself) to the running total;
    check both `limits`. Returns the new total."""
    n = value.numel()
    held = 2 * n if grad else n
    if n <= limits.elements and total + held <= limits.total:
        return total + held  # the common case, without building the messages below
    check_elements(n, f"'{node.text}' has", span=node.span, source=source)
    total += held
    check("total", total, f"the values and gradients up to '{node.text}' have", span=node.span, source=source)
    return total


def account_flow(total: int, node: Node, arg: Node, size: int, source: str) -> int:
    """Add the gradient one use of `arg` will hold (its own flow, measured per use: as big as `arg`)."""
    total += size
    if total > current().total:
        check("total", total, f"the values and gradients up to '{node.text}', with the gradient measured along "
              f"each use of '{arg.text}', have", span=node.span, source=source)
    return total
