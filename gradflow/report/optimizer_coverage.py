"""Optimizer coverage: which parameters the optimizer holds, against which ones get a gradient.

A parameter that gets gradient but is in no param group never trains (`untrained`); one in a group that gets
no gradient is never updated (`orphan`; frozen ones are left out: holding them is harmless). torch's
optimizers skip a parameter whose `.grad` is None, so both are silent in training.
"""
from __future__ import annotations

from gradflow.errors import GradflowError

UNTRAINED = "gets gradient, but is in no optimizer param group: it never trains"
ORPHAN = "in optimizer param group {group}, but gets no gradient: the optimizer never updates it"


def param_groups(optimizer) -> list[list]:
    """The tensors of each param group (torch.optim.Optimizer, or anything with the same `param_groups`)."""
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, list) or not all(isinstance(g, dict) and "params" in g for g in groups):
        raise GradflowError("bad_optimizer", f"the optimizer must be a torch.optim.Optimizer (with param_groups), "
                            f"not {type(optimizer).__name__}",
                            hint="pass the optimizer itself: explain(loss, params=model, optimizer=opt)")
    return [list(g["params"]) for g in groups]


def group_of(optimizer) -> dict[int, int]:
    """id(tensor) -> index of the first param group holding it."""
    out: dict[int, int] = {}
    for i, params in enumerate(param_groups(optimizer)):
        for t in params:
            out.setdefault(id(t), i)
    return out


def cover(report, optimizer, tensors: list) -> None:  # (an InspectReport: its module imports this one)
    """Mark every parameter of the report (tensors: in the same order) with its param group; note strays."""
    groups = group_of(optimizer)
    for p, t in zip(report.params, tensors):
        p.optimizer_group = groups.get(id(t))
        p.in_optimizer = p.optimizer_group is not None
    mine = {id(t) for t in tensors}
    foreign = sum(1 for k in groups if k not in mine)
    untrained = [p.name for p in report.params if p.in_optimizer is False and p.grad is not None]
    orphan = [p.name for p in report.params if p.in_optimizer and p.grad is None and p.requires_grad]
    report.optimizer = {"groups": len(param_groups(optimizer)), "params": len(groups),
                        "untrained": untrained, "orphan": orphan, "foreign": foreign}
    if foreign:
        report.warnings.append(
            f"the optimizer holds {foreign} tensor{'s' * (foreign != 1)} that {'are' if foreign != 1 else 'is'} "
            "not among the parameters reported: was it built for another model (a copy, or one made before "
            "the model was rebuilt)?")


def note(p) -> str | None:
    """The optimizer's part of a parameter's reason (None without an optimizer, or when all is well)."""
    if getattr(p, "in_optimizer", None) is None:
        return None
    if not p.in_optimizer and p.grad is not None:
        return UNTRAINED
    if p.in_optimizer and p.grad is None and p.requires_grad:
        return ORPHAN.format(group=p.optimizer_group)
    return None
