"""Element budgets during evaluation: refuse a result before allocating it.

Torch-free: a result's shape is computed from its operands' shapes (broadcasting,
matmul's rules). Running the operation on "meta" tensors would give the same,
but the first such call imports torch._dynamo (~1-2 s).
"""
from __future__ import annotations

import itertools
import math

from gradflow.language.graph import Node
from gradflow.limits import check, check_elements, current


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast shape of `shapes` (torch's and numpy's rule); ValueError when they do not broadcast."""
    out = []
    for dims in itertools.zip_longest(*(reversed(s) for s in shapes), fillvalue=1):
        sizes = set(dims) - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(reversed(out))


def result_shape(op: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The shape of `op` (an elementwise op, or matmul) applied to tensors of `shapes`. Inner sizes are not
    checked: when they do not fit, the real call reports it."""
    if op != "matmul":
        return broadcast(*shapes)
    a, b = shapes
    if not a or not b:
        raise ValueError("matmul needs tensors of at least one dimension")
    if len(a) == 1 and len(b) == 1:
        return ()
    if len(a) == 1:  # a vector loses its dimension: (k)@(...,k,p) -> (...,p), (...,n,k)@(k) -> (...,n)
        return b[:-2] + b[-1:]
    if len(b) == 1:
        return a[:-1]
    return broadcast(a[:-2], b[:-2]) + (a[-2], b[-1])


def precheck(node: Node, args, source: str) -> None:
    """Refuse `node`'s result when its shape would exceed the per-tensor element limit."""
    tensors = [a for a in args if hasattr(a, "shape")]  # x^2's exponent may be a number
    if len(tensors) < 2:
        return  # one operand: the result is no bigger than it (reductions, elementwise functions)
    sizes = [a.numel() for a in tensors]
    if 0 not in sizes and math.prod(sizes) <= current().elements:
        return  # a result has at most the product of its operands' elements ((n,0)@(0,p) has n*p: not here)
    shapes = [tuple(a.shape) for a in tensors]
    try:
        shape = result_shape(node.op, shapes)
    except ValueError:
        return  # the real call reports the mismatch in torch's words
    check_elements(math.prod(shape), f"the result of '{node.text}' would have", span=node.span, source=source)


def account(total: int, node: Node, value, source: str, grad: bool = False) -> int:
    """Add a computed value (and, if `grad`, the gradient it will hold, as big as itself) to the running total;
    check both limits. Returns the new total."""
    n, limits = value.numel(), current()
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
