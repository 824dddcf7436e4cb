"""Second derivatives of L wrt the chosen leaves, through torch's create_graph, cuts respected.

Several scalar leaves give the full Hessian matrix H[i][j] = d/d(leaf j) of dL/d(leaf i)
(computed entry by entry: with detach in the program it need not be symmetric).
A tensor leaf gives the Hessian diagonal, one Hessian-vector product per element.
Runs its own forward pass without the engine's measuring views (engine.forward).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from gradflow.engine.forward import forward, make_leaves
from gradflow.errors import EvalError, LimitError
from gradflow.language.graph import Graph
from gradflow.values.jsonable import one_document, to_jsonable
from gradflow.values.tensors import resolve_device, resolve_dtype

MAX_ELEMENTS = 1024  # Hessian-vector products (one backward pass each) per call


@dataclass
class HessianResult:
    wrt: list[str]
    kind: str  # "matrix" (all chosen leaves scalar) or "diagonal"
    matrix: list[list[float | None]] | None = None  # None entries: no gradient reached that leaf
    diagonal: dict[str, Any] = field(default_factory=dict)  # leaf -> tensor of d2L/dw_k^2, or None
    computed_in: str | None = None  # "float64" when the program ran in float16/bfloat16 (see from_explanation)

    def entry(self, i: str, j: str) -> float | None:
        if self.matrix is None:
            raise KeyError("the Hessian of tensor leaves is a diagonal: see .diagonal")
        return self.matrix[self.wrt.index(i)][self.wrt.index(j)]

    @one_document
    def to_dict(self) -> dict:
        out = {"kind": self.kind, "wrt": list(self.wrt),
               "matrix": None if self.matrix is None else [[to_jsonable(v) for v in row] for row in self.matrix],
               "diagonal": {k: to_jsonable(v) for k, v in self.diagonal.items()}}
        return out if self.computed_in is None else {**out, "dtype": self.computed_in}


def _grad(y, x, zero: bool = True, **kw):
    """dy/dx; a y that does not depend on x (or is constant) gives zeros, or None if not `zero`."""
    g = torch.autograd.grad(y, x, allow_unused=True, retain_graph=True, **kw)[0] if y.requires_grad else None
    return torch.zeros_like(x) if g is None and zero else g


def first_grads(graph: Graph, values: dict, wrt: list[str], dtype, device) -> tuple[dict, dict]:
    """(leaf tensors, dL/dleaf with create_graph) from a fresh forward pass with the program's cuts."""
    leaves = make_leaves(graph, values, wrt, dtype, device)
    out = forward(graph, leaves, dtype, device)[graph.output]
    grads = {}
    for w in wrt:
        tracked = leaves[w].requires_grad and out.requires_grad
        grads[w] = _grad(out, leaves[w], zero=False, create_graph=True) if tracked else None
    return leaves, grads


def _matrix(leaves, grads, wrt) -> list[list[float | None]]:
    return [[None if grads[i] is None or grads[j] is None else _grad(grads[i], leaves[j]).item() for j in wrt]
            for i in wrt]


def _diagonal(leaf, g):
    if g is None:
        return None
    flat = torch.zeros(leaf.numel(), dtype=leaf.dtype, device=leaf.device)
    for k in range(leaf.numel()):
        e = torch.zeros_like(flat)
        e[k] = 1
        hv = _grad(g, leaf, grad_outputs=e.reshape(leaf.shape))
        flat[k] = hv.reshape(-1)[k]
    return flat.reshape(leaf.shape)


def second_derivatives(graph: Graph, values: dict, wrt: list[str], dtype=torch.float64,
                       device="cpu") -> HessianResult:
    size = sum(torch.as_tensor(values[w]).numel() for w in wrt)
    if size > MAX_ELEMENTS:
        raise LimitError("hessian_too_large", f"--order 2 needs one backward pass per element: the chosen leaves "
                         f"have {size} elements, the limit is {MAX_ELEMENTS}",
                         hint="choose fewer or smaller leaves with --wrt")
    try:
        leaves, grads = first_grads(graph, values, wrt, dtype, device)
        if all(leaves[w].dim() == 0 for w in wrt):
            return HessianResult(list(wrt), "matrix", matrix=_matrix(leaves, grads, wrt))
        return HessianResult(list(wrt), "diagonal", diagonal={w: _diagonal(leaves[w], grads[w]) for w in wrt})
    except RuntimeError as err:
        raise EvalError("second_order", f"torch could not differentiate twice: {str(err).splitlines()[0]}",
                        hint="second derivatives need every op on the path to be tracked") from None


def hessian(source: str, /, *, wrt: str | list[str] | None = None, dtype: str = "float64", device: str = "cpu",
            values: dict[str, Any] | None = None, **kw_values: Any) -> HessianResult:
    """Second derivatives of the program's output wrt the chosen leaves (cuts respected).

        >>> hessian("(x*y1 - detach(x*y2))^2", x=1, y1=2, y2=7).entry("x", "x")
        8.0
    """
    from gradflow.engine.explain import explain

    return from_explanation(explain(source, wrt=wrt, dtype=dtype, device=device, values=values, **kw_values))


def from_explanation(result) -> HessianResult:
    """Second derivatives for the program, values, leaves, dtype and device of an earlier explain().
    A float16/bfloat16 program's second derivatives are computed in float64 (from its inputs as given): in
    half precision they would mostly measure rounding (3 significant digits or fewer)."""
    half = result.dtype in ("float16", "bfloat16")
    dtype = resolve_dtype("float64" if half else result.dtype)
    out = second_derivatives(result.graph, result.inputs, result.wrt, dtype, resolve_device(result.device))
    out.computed_in = "float64" if half else None
    return out
