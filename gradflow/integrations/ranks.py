"""Under torchrun (DDP, FSDP2) every rank checks its own step; which parameters got a gradient from some ranks'
own backward and none from the others' is what no rank sees alone (after the step, the gradient sync has given
every rank the same `.grad`). At the first checked step every rank's set is gathered over the default process
group: every rank reaches that point together, as each optimizer step follows a synchronised backward.
"""
from __future__ import annotations

import torch.distributed as dist


def rank_and_world() -> tuple[int, int]:
    """(this rank, the world size); (0, 1) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_reasons(own: dict[str, str]) -> list[dict[str, str]]:
    """Every rank's `own` (name -> why it got no gradient), in rank order (one outside a process group)."""
    _, world = rank_and_world()
    if world < 2:
        return [own]
    every: list = [None] * world
    dist.all_gather_object(every, own)
    return every


def divergent(every: list[list[str]]) -> dict[str, list[int]]:
    """name -> the ranks whose own backward gave it no gradient, for names some other rank's did."""
    sets = [set(names) for names in every]
    out: dict[str, list[int]] = {}
    for name in sorted(set().union(*sets)):
        none_on = [r for r, s in enumerate(sets) if name in s]
        if len(none_on) < len(sets):
            out[name] = none_on
    return out
