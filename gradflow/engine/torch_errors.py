"""torch's errors at one node, in torch's words plus what to do about it (each a GradflowError, exit 2)."""
from __future__ import annotations

from typing import Any

from gradflow.errors import EvalError, GradflowError
from gradflow.language.graph import Node
from gradflow.language.ops import OPS, OpInputError

_SHAPE_WORDS = ("size of tensor", "shapes cannot", "mat1 and mat2", "dimension", "at least 1D", "size mismatch",
                "inconsistent", "Sizes of tensors", "must have same number of dimensions", "equal size",
                "expects a tensor with <= 2 dimensions", "is invalid for input of size", "Expected target size")


def _shape(a) -> str:
    return str(tuple(a.shape)) if hasattr(a, "shape") else repr(a)


def torch_error(node: Node, args, err: Exception, source: str) -> GradflowError:
    """`err`, raised by torch while computing `node` from `args`, as a gradflow error pointing at the node."""
    text = str(err).split("\n")[0]
    shapes = " and ".join(_shape(a) for a in args)
    first: Any = args[0] if args else None

    def error(kind: str, message: str, hint: str | None = None) -> EvalError:
        return EvalError(kind, message, hint=hint, span=node.span, source=source)

    if isinstance(err, OpInputError):
        return error(err.kind, f"at '{node.text}': {text}", err.hint)
    if "Inference tensors cannot be saved for backward" in text:
        return error("inference_tensor", f"'{node.text}' needs to save a tensor made under inference_mode() for "
                     f"backward, which torch refuses. torch says: {text}",
                     "use no_grad() instead of inference_mode() there, or detach()")
    if "Dimension out of range" in text:
        ndim = first.dim() if hasattr(first, "dim") else 0
        return error("shape", f"dim out of range at '{node.text}': its input has {ndim} dimension"
                     f"{'' if ndim == 1 else 's'} (shape {_shape(first)}). torch says: {text}",
                     f"dims count from 0 to {max(ndim - 1, 0)}, or from -1 backwards" if ndim else
                     "a single number has no dims to reduce or index along")
    if isinstance(err, IndexError) or "out of bounds" in text or "too many indices" in text:
        target = "class indices run from 0 to C-1 (C: the number of classes)" if "Target" in text else \
            f"its input has shape {_shape(first)}: along a dim of size n, indices run 0..n-1 (or -n..-1)"
        return error("index", f"index out of range at '{node.text}'. torch says: {text}", target)
    if "view size is not compatible" in text:
        return error("shape", f"cannot view '{node.text}': its input is not contiguous in memory. torch says: "
                     f"{text}", "use .reshape(...) instead of .view(...)")
    if "is invalid for input of size" in text:
        n = first.numel() if hasattr(first, "numel") else "?"
        return error("shape", f"cannot reshape at '{node.text}': the new shape must hold the {n} elements of "
                     f"{_shape(first)}. torch says: {text}", "-1 in a shape stands for the size that fits")
    if "Can't detach views in-place" in text:
        return error("torch", f"torch failed at '{node.text}': {text.split('. If ')[0]}",
                     f"{node.text.replace('.detach_()', '.detach()')} makes a detached copy instead")
    if "where expected condition to be a boolean tensor" in text:
        return error("torch", f"torch failed at '{node.text}': {text}",
                     "the condition is a comparison, e.g. torch.where(x > 0, x, 0)")
    if any(k in text for k in _SHAPE_WORDS):
        return error("shape", f"shape mismatch at '{node.text}': {OPS[node.op].name} of shapes {shapes}. "
                     f"torch says: {text}", "make the shapes agree (or broadcast), or reduce with sum()/mean() first")
    return error("torch", f"torch failed at '{node.text}': {text}")
