"""One rank of `gradflow ddp`: join the group, wrap the model in DDP, turn inspect's report into this rank's
verdicts, run torch's own DDP step for real, and gather JSON over the process group.

Every collective runs under the group's timeout. Before each gather a rank writes where it is into the group's
store (a key per rank), so a rank that times out can say which ranks never arrived and what they were doing.
"""
from __future__ import annotations

import datetime
import gc
import json
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from gradflow.ddp.launch import tell
from gradflow.errors import DistributedError, GradflowError, text_of
from gradflow.values.jsonable import dumps, to_jsonable

_INDICES = r"Parameter indices which did not receive grad for rank (\d+): ([\d ]+)"


# ---- the group ------------------------------------------------------------------------------
def join(timeout: float) -> tuple[int, int]:
    """init_process_group from RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (env://), gloo on CPU. `timeout` is
    how long to wait for the other ranks to arrive (gradflow's own launcher gives them time to import torch)."""
    try:
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=timeout))
        return dist.get_rank(), dist.get_world_size()
    except (RuntimeError, ValueError) as err:  # DistStoreError, a port in use, a rank that never came
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        said = text_of(err).splitlines()[0] if text_of(err) else type(err).__name__
        raise DistributedError("rendezvous", f"rank {os.environ.get('RANK', '?')} could not join the process "
                               f"group at {where} within {timeout:g} s; torch said: {said}",
                               hint="every rank must start (and reach the group) within --timeout") from None


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class Phases:
    """Where this rank is, in the group's store (and told to gradflow's launcher, when it started the rank)."""

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        self.store = _store()

    def at(self, doing: str) -> None:
        tell(f"at {doing}")
        self._set(f"gradflow/at/{self.rank}", doing)

    def arrive(self, gather: str) -> None:
        self.at(f"waiting for the other ranks ({gather})")
        self._set(f"gradflow/{gather}/{self.rank}", "1")

    def _set(self, key: str, value: str) -> None:
        if self.store is not None:
            try:
                self.store.set(key, value)
            except RuntimeError:  # the store's host (rank 0) is gone: the gather that follows says so
                self.store = None

    def wait_all(self, gather: str, seconds: float) -> None:
        if self.store is not None:
            self.store.wait([f"gradflow/{gather}/{r}" for r in range(self.world)], datetime.timedelta(seconds=seconds))

    def missing(self, gather: str) -> list[tuple[int, str]]:
        """(rank, what it was last doing) of every rank that has not arrived at this gather."""
        if self.store is None:
            return []
        out = []
        for r in range(self.world):
            try:
                if not self.store.check([f"gradflow/{gather}/{r}"]):
                    at = self.store.get(f"gradflow/at/{r}").decode() if self.store.check([f"gradflow/at/{r}"]) \
                        else "starting"
                    out.append((r, at))
            except RuntimeError:  # the store's host is gone (rank 0 died): nothing more to learn
                return out
        return out


def _store():
    try:
        return dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return None


def gather_json(obj: Any, phases: Phases, gather: str, group=None, wait: float | None = None) -> list:
    """Every rank's `obj` (JSON-able), on every rank, in rank order; raises DistributedError if one never comes.
    With `wait`, the ranks may arrive up to that many seconds apart (the store is asked before the gather)."""
    phases.arrive(gather)
    try:
        if wait is not None:
            phases.wait_all(gather, wait)
        return _all_gather_json(obj, group)
    except RuntimeError as err:
        raise distributed_error(err, phases, gather) from None


def _all_gather_json(obj: Any, group) -> list:
    world = dist.get_world_size(group)
    data = torch.frombuffer(bytearray(dumps(obj).encode()), dtype=torch.uint8)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64), group=group)
    longest = max(int(s) for s in sizes)
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[:data.numel()] = data
    bufs = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(bufs, padded, group=group)
    return [json.loads(b[:int(s)].numpy().tobytes().decode()) for b, s in zip(bufs, sizes)]


def distributed_error(err: BaseException, phases: Phases, gather: str) -> DistributedError:
    missing = phases.missing(gather)
    said = text_of(err).splitlines()[0] if text_of(err) else type(err).__name__
    if missing:
        who = "; ".join(f"rank {r} (last: {at})" for r, at in missing)
        text = f"rank {phases.rank} waited for the other ranks ({gather}); these never arrived: {who}"
    else:
        text = f"rank {phases.rank} lost the other ranks while waiting for them ({gather})"
    return DistributedError("rank_lost", f"{text}; torch said: {said}",
                            hint="a rank that hangs or dies in your code stops the others: run FUNCTION on that "
                                 "rank alone (gradflow inspect) or raise --timeout if it is only slow")


# ---- the model ------------------------------------------------------------------------------
def wrap(model: Any, group) -> tuple[Any, torch.nn.Module, dict]:
    """(the DDP to trace with, the module inside it, how it is set up). The user's own DDP is used as it is."""
    if isinstance(model, DDP):
        return model, model.module, {"wrapped_by": "you",
                                     "find_unused_parameters": bool(getattr(model, "find_unused_parameters", False)),
                                     "static_graph": bool(getattr(model, "static_graph", False))}
    if not isinstance(model, torch.nn.Module):
        raise GradflowError("bad_return", f"FUNCTION must return (model, step), and model must be an nn.Module "
                            f"(or your DistributedDataParallel), not {type(model).__name__}",
                            hint="def main(rank, world_size): model = Net(); return model, lambda m: m(x).mean()")
    return DDP(model, process_group=group, **_no_buffer_sync()), model, {
        "wrapped_by": "gradflow", "find_unused_parameters": False, "static_graph": False}


def _no_buffer_sync() -> dict:
    """The traced forward must run no collective (a rank that failed would not join it): no buffer broadcast."""
    import inspect

    known = inspect.signature(DDP).parameters
    return {"forward_sync_buffers": False} if "forward_sync_buffers" in known else {"broadcast_buffers": False}


def loss_of(value: Any):
    """The step's result: a loss, or (loss, ...) as inspect's FUNCTION returns it."""
    return value[0] if isinstance(value, tuple) and value else value


# ---- this rank's verdicts ---------------------------------------------------------------------
def verdicts(report, rank: int) -> dict:
    """JSON-able: every parameter with its status on this rank, why, where; the user lines this rank ran."""
    graph = report.graph
    params = []
    for p in report.params:
        uses = [u for u in graph.uses.get(p.serial, [])] if graph is not None and p.serial is not None else []
        use_lines = list(dict.fromkeys(graph.ops[u.op].line for u in uses if graph.ops[u.op].line)) \
            if graph is not None else []
        line = p.cuts[0].line if p.cuts and p.cuts[0].line else (use_lines[0] if use_lines else None)
        params.append({"name": p.name, "numel": p.numel, "status": p.status, "grad": p.grad is not None,
                       "requires_grad": p.requires_grad, "reason": p.why, "line": line, "uses": use_lines[:8],
                       # what inspect's gate reads of its JSON (report/fail_on.py rows_of), for --fail-on
                       "aliases": list(p.aliases), "grad_is_none": p.grad is None,
                       "grad_norm": to_jsonable(_norm(p)), "routes": [r.to_dict() for r in p.routes[:1]],
                       "cuts": [c.line for c in p.cuts]})
    lines = sorted({r.line for r in graph.ops if r.line}) if graph is not None else []
    return {"rank": rank, "loss": to_jsonable(report.loss.detach()), "params": params, "lines": lines,
            "warnings": list(report.warnings), "error": None if report.error is None else report.error.to_dict()}


def _norm(p) -> float | None:
    """The grad norm; inf when a huge but finite gradient overflows it would read as nonfinite: say so only
    when some element is nan or inf."""
    if p.grad is None or p.grad_norm is None or math.isfinite(p.grad_norm) or not bool(p.grad.isfinite().all()):
        return p.grad_norm
    return sys.float_info.max


# ---- torch's own DDP, for real ------------------------------------------------------------------
def probe(inner: torch.nn.Module, step: Callable[[Any], Any], groups: list, iterations: int = 2) -> dict:
    """Run `iterations` real DDP steps with find_unused_parameters=False in the group `groups.pop()` (the caller
    keeps no reference to it); torch's error, if any, captured.

    Then the DDP and the group are freed at once: gloo closes its connections, so a rank blocked in backward
    waiting for an all-reduce this rank will never start gets an error now, not at the timeout."""
    group = groups.pop()
    names = [n for n, p in inner.named_parameters() if p.requires_grad]
    out: dict[str, Any] = {"iterations": 0, "ok": True, "stage": None, "message": None, "unused": {}}
    stage, ddp, loss = "DistributedDataParallel(model)", None, None
    try:
        ddp = DDP(inner, process_group=group, find_unused_parameters=False)
        for i in range(iterations):
            stage = f"iteration {i + 1}, forward"
            loss = loss_of(step(ddp))
            stage = f"iteration {i + 1}, backward"
            loss.backward()
            out["iterations"] = i + 1
    except Exception as err:  # torch's DDP error is the point; the user's own failure is told the same way
        out.update(ok=False, stage=stage, message=text_of(err) or type(err).__name__)
    finally:
        ddp = loss = None
        for p in inner.parameters():
            p.grad = None
        dist.destroy_process_group(group)
        group = None
        gc.collect()
    for m in re.finditer(_INDICES, out["message"] or ""):
        out["unused"][m.group(1)] = [names[int(i)] for i in m.group(2).split() if int(i) < len(names)]
    return out


def new_group(timeout: float):
    return dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout))

