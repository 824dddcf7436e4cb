"""Where a leaf's gradient comes from: its grad split by use.

A leaf's grad is the sum of the gradients carried back along its outgoing
edges (one per use). The engine measures every edge's flow exactly; this module
groups them per chosen leaf, names each use by its consumer and says which uses
were cut (their flow counts as 0). Torch-free: only tensor methods are used.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gradflow.language.ops import is_region
from gradflow.values.jsonable import to_jsonable

Explanation = Any  # explanation.py's Explanation, which imports this module (in Explanation.flows)


@dataclass(slots=True)
class Contribution:
    """One use of a leaf: the gradient that came back through `via`."""

    via: str  # the consumer's label (or "L itself" when the leaf is the output)
    flow: Any  # tensor shaped like the leaf; zeros when cut or unused
    cut: bool = False
    cut_by: str | None = None  # the detach / no_grad / inference_mode that stopped it
    to_id: int | None = None
    pos: int = 0  # which argument of the consumer the leaf is
    unused: bool = False  # the consumer does not lead to the output

    def to_dict(self, full: bool = True) -> dict:
        return {"via": self.via, "flow": to_jsonable(self.flow, full=full), "cut": self.cut, "cut_by": self.cut_by,
                "to_id": self.to_id, "pos": self.pos, "unused": self.unused}


def _use(result: Explanation, edge, zeros: Callable[[], Any]) -> Contribution:
    dst = result.nodes[edge.dst]
    part = Contribution(dst.name, edge.flow, to_id=dst.id, pos=edge.pos)
    if edge.cut or (edge.flow is None and dst.status == "cut"):
        part.cut, part.cut_by, part.flow = True, dst.cut_by, zeros()
    elif edge.flow is None and dst.status == "unused":
        part.unused = True
    if part.flow is None:
        part.flow = zeros()
    return part


def _is_output(result: Explanation, leaf_id: int) -> bool:
    """Is the output this leaf's own tensor (the leaf, or region wrappers of it)?"""
    n = result.output
    while is_region(n.op):
        n = result.nodes[n.args[0]]
    return n.id == leaf_id


def leaf_contributions(result: Explanation, leaf: str) -> list[Contribution]:
    """The chosen leaf's gradient split by use, in evaluation order."""
    leaf_id = next(n.id for n in result.nodes if n.op == "var" and n.name == leaf)
    value = result.nodes[leaf_id].value
    zeros = functools.cache(lambda: value.new_zeros(value.shape))  # made on first use: most evaluations cut nothing
    if _is_output(result, leaf_id):
        grad = result.grads.get(leaf)
        return [Contribution("L itself", grad if grad is not None else zeros(), to_id=result.output.id)]
    parts = [_use(result, e, zeros) for e in result.edges if e.src == leaf_id]
    if not result.nodes[leaf_id].requires_grad:  # `leaf.requires_grad = false`: every use is cut at the leaf
        for part in parts:
            part.cut, part.cut_by = True, f"{leaf}.requires_grad = false"
    return parts


def contributions(result: Explanation) -> dict[str, list[Contribution]]:
    """Per chosen leaf, its gradient split by use (what `Explanation.flows` returns)."""
    return {leaf: leaf_contributions(result, leaf) for leaf in result.wrt}

