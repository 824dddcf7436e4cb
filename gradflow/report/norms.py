"""Gradient norms and dot products for inspect's report: torch's own, batched where that is bit for bit the same,
and in float64 where float32 under- or overflows."""
from __future__ import annotations

import math

import torch


def dot(a, b) -> float:
    """<a, b> without copies (in the tensors' own dtype: float32 models give ~7 digits); in float64 when that
    under- or overflows (float32 squares of 1e-23 are 0, of 1e20 inf), and then relative to a's largest element."""
    out = float(torch.dot(a.reshape(-1), b.reshape(-1)))
    if (out == 0.0 or not math.isfinite(out)) and a.numel() and b.numel():
        big = float(a.abs().max())
        if big > 0 and math.isfinite(big):
            out = float(torch.dot((a / big).reshape(-1).double(), b.reshape(-1).double())) * big
    return out


def grad_norm(g) -> float:
    """The 2-norm; in float64, relative to the largest element, when the dtype's sum of squares under- or
    overflows (a float32 gradient of 1e-30 in every element has norm 0 in float32)."""
    out = float(torch.linalg.vector_norm(g))
    if out == 0.0 or math.isinf(out):
        big = float(g.abs().max()) if g.numel() else 0.0
        if big > 0 and math.isfinite(big):
            out = float(torch.linalg.vector_norm((g / big).double())) * big
    return out


_BATCHED = (torch.float32, torch.float64)
_INF = math.inf
_STACKED = 32768  # elements: no larger tensor's norm is split between threads (torch's grain size), so a row of a
#                   stack of them is reduced in the same order as the tensor alone


def grad_norms(grads: list) -> list[float]:
    """grad_norm of each: the small contiguous float32/float64 ones stacked by shape, one torch norm over the rows
    per shape; the other dense ones in one torch call per dtype and device (torch's own per-tensor norm inside).
    Bit for bit the per-tensor norms, with fewer torch calls on a model of hundreds of small tensors."""
    out: list = [None] * len(grads)
    groups: dict[tuple, list[int]] = {}
    shapes: dict[tuple, list[int]] = {}
    kinds: dict[tuple, list[int]] = {}  # (dtype, device, shape, contiguous) -> indices, each tensor asked once
    strided = torch.strided
    for k, g in enumerate(grads):
        dtype = g.dtype
        if g.layout is not strided or dtype not in _BATCHED:
            out[k] = grad_norm(g)
            continue
        key = (dtype, None if g.is_cpu else g.device, g.shape, g.is_contiguous())  # (None: the CPU, without a
        ks = kinds.get(key)  # device object per tensor)
        if ks is None:
            kinds[key] = [k]
        else:
            ks.append(k)
    for (dtype, device, shape, contiguous), ks in kinds.items():
        n = shape.numel()
        if not n:
            for k in ks:
                out[k] = grad_norm(grads[k])
        elif n > _STACKED:
            groups.setdefault((dtype, device), []).extend(ks)
        elif contiguous:
            shapes[(dtype, device, shape, False)] = ks
        else:
            for k in ks:
                g = grads[k]
                if g.dim() == 2 and g.stride() == (1, shape[0]):  # g.mT is contiguous: a Linear weight's grad (its
                    #                                                elements in memory order), asked without a view
                    shapes.setdefault((dtype, device, shape, True), []).append(k)
                else:
                    groups.setdefault((dtype, device), []).append(k)
    for (dtype, device, _, transposed), ks in shapes.items():
        if len(ks) == 1:
            groups.setdefault((dtype, device), []).append(ks[0])
            continue
        rows = [grads[k].mT if transposed else grads[k] for k in ks]
        values = torch.linalg.vector_norm(torch.stack(rows).reshape(len(ks), -1), dim=1)
        _settle_norms(out, grads, ks, values.tolist())
    for ks in groups.values():
        if len(ks) == 1:
            out[ks[0]] = grad_norm(grads[ks[0]])
            continue
        _settle_norms(out, grads, ks, list(map(float, torch._foreach_norm([grads[k] for k in ks]))))  # (each a
        #  float at once)
    return out


def _settle_norms(out: list, grads: list, ks: list[int], values: list[float]) -> None:
    for k, v in zip(ks, values):  # 0 and inf: grad_norm tells a float32 underflow / overflow from a real one
        out[k] = v if v != 0.0 and v != _INF else grad_norm(grads[k])  # (a norm is never -inf)
