"""A plain re-run of a lowered Graph in torch, for the views that need their own run.

Unlike the engine's run, there are no per-edge alias views: torch's graph is
exactly the program's (the picture walks it, second derivatives go through it).
Two switches make the variants the numeric check needs:
  cuts=False  detach / no_grad / inference_mode act as identity and
              requires_grad flags are ignored (the derivative with the cuts removed);
  frozen      node id -> tensor: that node's value is fixed (a cut held at its forward value).
An engine helper: imports torch, and is itself imported lazily.
"""
from __future__ import annotations

import contextlib

import torch

from gradflow.errors import EvalError
from gradflow.language.ops import OPS
from gradflow.language.graph import FlagStep, Graph, Node

CUTS = ("detach", "no_grad", "inference_mode")


def _context(node: Node, cuts: bool):
    if not cuts or node.mode is None:
        return contextlib.nullcontext()
    return torch.no_grad() if node.mode == "no_grad" else torch.inference_mode()


def _compute(node: Node, args: list, leaves: dict, cuts: bool, dtype, device):
    if node.op == "var":
        return leaves[node.names[0]]
    with _context(node, cuts):
        if node.op == "const":
            return torch.tensor(node.value, dtype=dtype, device=device)
        if node.op in CUTS:
            return args[0].detach() if cuts and node.op == "detach" else args[0]
        return OPS[node.op].fn(*args)


def replay(graph: Graph, leaves: dict, *, cuts: bool = True, frozen: dict | None = None) -> dict:
    """Evaluate every node; `leaves` maps each input name to its (prepared) tensor.

    Returns node id -> tensor. Raises EvalError if torch fails (the engine's own run
    normally meets such errors first and explains them better).
    """
    frozen = frozen or {}
    some = next(iter(leaves.values()), None)  # a program of constants only has no leaves
    dtype, device = (some.dtype, some.device) if some is not None else (torch.float64, "cpu")
    t: dict[int, torch.Tensor] = {}
    for step in graph.steps:
        if isinstance(step, FlagStep):
            if cuts:
                t[step.node].requires_grad_(step.value)
            continue
        if step.id in frozen:
            t[step.id] = frozen[step.id]
            continue
        try:
            t[step.id] = _compute(step, [t[a] for a in step.args], leaves, cuts, dtype, device)
        except (RuntimeError, TypeError, ValueError, IndexError, ArithmeticError) as err:
            raise EvalError("torch", f"torch failed at '{step.text}': {str(err).splitlines()[0]}",
                            span=step.span, source=graph.source) from None
    return t


def make_leaves(graph: Graph, values: dict, wrt: list[str], dtype=torch.float64, device="cpu") -> dict:
    """Fresh leaf tensors for every input; the chosen ones require grad."""
    return {name: torch.as_tensor(values[name], dtype=dtype, device=device).detach().clone()
            .requires_grad_(name in wrt) for name in graph.inputs}
