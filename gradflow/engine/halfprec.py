"""Half precision (float16, bfloat16): where a value or a gradient underflowed to 0, against float64.

With `--dtype float16|bfloat16` the program is evaluated a second time in float64 from the same inputs (the
half-precision leaves, widened exactly; constants as written) and the two runs are compared element by
element. An element that is exactly 0 in half precision but not in float64 underflowed. The warnings name
the first node in evaluation order whose value underflowed while its inputs did not, the first edge in
backward order whose gradient underflowed while the gradient arriving at its consumer did not, and every
chosen leaf whose gradient holds an underflowed element. Overflow to inf is named by the nan/inf warnings
(engine/nonfinite.py), which say the dtype's largest number.
"""
from __future__ import annotations

import torch

from gradflow.analysis.explanation import EdgeResult, NodeResult, Warning
from gradflow.values.text import format_number

TINY = {"float16": "6e-08", "bfloat16": "9.2e-41"}  # the smallest positive (subnormal) number


def underflowed(low, ref) -> torch.Tensor | None:
    """The elements that are 0 in `low` and finite, non-zero in `ref` (None if the tensors cannot be compared)."""
    if low is None or ref is None or low.shape != ref.shape or not low.is_floating_point():
        return None
    return (low == 0) & (ref != 0) & ref.isfinite()


def _example(mask, ref) -> str:
    """What float64 gives: `1e-60` for one element, `2.1e-09 in 1 of 3 elements` (the first) for several."""
    first = format_number(float(ref[mask].reshape(-1)[0]))
    return first if ref.numel() == 1 else f"{first} in {int(mask.sum())} of {ref.numel()} elements"


def compare(nodes: list[NodeResult], edges: list[EdgeResult], ref_nodes: list[NodeResult],
            ref_edges: list[EdgeResult], wrt: dict[str, int], dtype: str) -> list[Warning]:
    """The underflow warnings of a half-precision run `nodes`/`edges` against its float64 twin."""
    out = []
    under = [underflowed(n.value, r.value) for n, r in zip(nodes, ref_nodes)]
    hit = [m is not None and bool(m.any()) for m in under]
    for n in nodes:
        if hit[n.id] and not any(hit[a] for a in n.args):
            out.append(Warning("underflow_value", n.name, _value_message(n, ref_nodes[n.id], under[n.id], dtype)))
            break
    grad_hit = [bool(m.any()) if (m := underflowed(n.grad, r.grad)) is not None else False
                for n, r in zip(nodes, ref_nodes)]
    for e, r in sorted(zip(edges, ref_edges), key=lambda er: -er[0].dst):
        mask = underflowed(e.flow, r.flow)
        if mask is not None and bool(mask.any()) and not grad_hit[e.dst]:
            src, dst = nodes[e.src], nodes[e.dst]
            out.append(Warning("underflow_grad", dst.name, f"the gradient first underflows to 0 in {dtype} in the "
                               f"backward pass on the edge {src.name} → {dst.name}: float64 gives "
                               f"{_example(mask, r.flow)} (the smallest positive {dtype} is about {TINY[dtype]})"))
            break
    for name, i in wrt.items():
        mask = underflowed(nodes[i].grad, ref_nodes[i].grad)
        if mask is not None and bool(mask.any()):
            out.append(Warning("underflow_grad", name, f"{name}.grad underflowed to 0 in {dtype}: float64 gives "
                               f"{_example(mask, ref_nodes[i].grad)}"))
    return out


def _value_message(n: NodeResult, ref: NodeResult, mask, dtype: str) -> str:
    tiny = f"the smallest positive {dtype} is about {TINY[dtype]}"
    if n.op == "const":
        return f"the number {n.expr} is 0 in {dtype} ({tiny})"
    return (f"a value first underflows to 0 in {dtype} at '{n.name}': float64 gives {_example(mask, ref.value)} "
            f"({tiny})")
