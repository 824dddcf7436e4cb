"""A model the user sharded with FSDP2 (`torch.distributed.fsdp.fully_shard`): its units, a local step, a real one.

Under FSDP2 the registered parameters are DTensor shards and the forward runs on unsharded copies, so inspect's
`autograd.grad` on the registered parameters sees nothing. `local_mode` first all-gathers every unit (the same
collectives on every rank, in the same order) and turns off gradient reduction: the forward and backward that
follow run no collective at all, the module's parameters are the unsharded ones, and each rank's own autograd
graph can be explained as under DDP's no_sync(). What FSDP itself does with the step (hang, abort, silent) is
shown by `real_step`, run in a child process of its own (ddp/fsdp_child.py): gloo aborts the whole process on a
mismatched collective, which no Python code survives.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from gradflow.ddp.fsdp_merge import show

try:
    from torch.distributed.fsdp import FSDPModule
except ImportError:  # a torch without FSDP2: no model is sharded
    FSDPModule = ()  # type: ignore[assignment,misc]


def is_fsdp(model: Any) -> bool:
    return isinstance(model, torch.nn.Module) and any(isinstance(m, FSDPModule) for m in model.modules())


def units(model: torch.nn.Module) -> list[tuple[str, Any]]:
    """(FQN, module) of every fully_shard unit, outermost first ('' is the root)."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, FSDPModule)]


def layout(model: torch.nn.Module) -> list[dict]:
    """Every unit with the parameters it shards (by FQN; a nested unit's are its own), frozen ones apart."""
    owner: dict[str, str] = {}
    for unit, _ in units(model):  # outermost first: a nested unit takes its parameters over
        prefix = f"{unit}." if unit else ""
        for name, _ in model.named_parameters():
            if name.startswith(prefix):
                owner[name] = unit
    out = []
    for unit, _ in units(model):
        params = [(n, p) for n, p in model.named_parameters() if owner.get(n) == unit]
        out.append({"unit": unit, "params": [n for n, _ in params],
                    "frozen": [n for n, p in params if not p.requires_grad],
                    "numel": sum(p.numel() for _, p in params)})
    return out


@contextlib.contextmanager
def local_mode(model: torch.nn.Module) -> Iterator[None]:
    """Every unit unsharded, kept so through forward and backward, its gradients not reduced: no collective runs
    until the end, where every unit is resharded (its local gradients dropped: they are not FSDP's)."""
    found = [m for _, m in units(model)]
    for m in found:
        m.unshard()
        m.set_requires_gradient_sync(False, recurse=False)
        m.set_reshard_after_forward(False, recurse=False)
        m.set_reshard_after_backward(False, recurse=False)
    try:
        yield
    finally:
        for m in found:
            m.set_requires_gradient_sync(True, recurse=False)
            m.set_reshard_after_forward(True, recurse=False)
            m.set_reshard_after_backward(True, recurse=False)
            m.reshard()
        model.zero_grad(set_to_none=True)


@contextlib.contextmanager
def forwards(model: torch.nn.Module, say: Callable[[str], None]) -> Iterator[list[str]]:
    """The units whose forward ran, in order, while inside; `say` is told `forward of UNIT` as each starts."""
    ran: list[str] = []

    def hook(unit: str):
        def pre(module, args):
            ran.append(unit)
            say(f"the forward of {show(unit)}")
        return pre

    # prepend: said before FSDP's own pre-forward hook all-gathers the unit (where a mismatch stops the rank)
    handles = [m.register_forward_pre_hook(hook(name), prepend=True) for name, m in units(model)]
    try:
        yield ran
    finally:
        for h in handles:
            h.remove()


def real_step(model: torch.nn.Module, step: Callable[[Any], Any], loss_of: Callable[[Any], Any],
              say: Callable[[str], None]) -> dict:
    """One real FSDP training step (forward, backward with its reduce-scatters); which parameters keep grad None.
    A collective that never completes raises after the group's timeout; `say` tells where the rank is."""
    with forwards(model, say) as ran:
        loss = loss_of(step(model))
        say(f"the backward (last forward: {show(ran[-1]) if ran else 'none'})")
        loss.backward()
    return {"ok": True, "units_run": list(dict.fromkeys(ran)),
            "grad_none": [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]}
