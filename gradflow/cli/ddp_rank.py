"""One rank of `gradflow ddp` (started by gradflow's launcher or by torchrun): join the group, run the user's
FUNCTION and step contained (as inspect does), trace the step, gather the verdicts, run torch's own DDP step,
gather what it said; rank 0 merges the report.

Between the gathers no rank runs a collective the others do not: FUNCTION's results are gathered before the
model is wrapped, gradflow's DDP does not broadcast buffers in the traced forward, and torch's real DDP step runs
in a group of its own, freed on failure so a rank blocked in it is released.
"""
from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path
from typing import Any

from gradflow.cli.inspect_command import load_function, run_function
from gradflow.cli.user_code import contained, preload
from gradflow.ddp.launch import ENV_STATUS, JOIN_FLOOR
from gradflow.errors import ExitCode, GradflowError, NoGradientError, UserCodeError


def _failure(rank: int, err: GradflowError) -> dict:
    return {"rank": rank, "failure": {**err.to_dict(), "exit_code": int(err.exit_code)}}


RANK_NAMES = ("rank", "local_rank", "global_rank")
WORLD_NAMES = ("world_size", "world", "nprocs", "num_ranks")


def rank_arguments(func, rank: int, world: int) -> tuple[tuple, dict]:
    """FUNCTION's arguments: its first two required parameters get rank and world size, in that order, and so
    does any parameter named for them (`rank`, `world_size`, ...) even with a default, so a FUNCTION written to
    run alone too (`def main(rank=0, world_size=1)`) still learns its rank."""
    params = list(inspect.signature(func).parameters.values())
    named = {p.name: rank if p.name in RANK_NAMES else world for p in params
             if p.name in RANK_NAMES + WORLD_NAMES and p.kind != p.POSITIONAL_ONLY}
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty and p.name not in named]
    return (rank, world)[:len(required)], named


def call_function(func, name: str, rank: int, world: int):
    """FUNCTION(rank, world_size), FUNCTION(rank) or FUNCTION() (see rank_arguments); it must return
    (model, step)."""
    args, kwargs = rank_arguments(func, rank, world)
    value = func(*args, **kwargs)
    pair = isinstance(value, tuple) and len(value) == 2
    if not pair or not callable(value[1]) or hasattr(value[0], "grad_fn"):  # (loss, model): inspect's shape
        got = "(loss, model), as for gradflow inspect" if pair and hasattr(value[0], "grad_fn") else \
            type(value).__name__
        raise GradflowError("bad_return", f"{name}() must return (model, step), where step(model) returns the "
                            f"loss (DDP must wrap the model before its forward); it returned {got}",
                            hint="def main(rank, world_size): model = Net(); return model, lambda m: m(x).mean()")
    return value


class RankRun:
    """The state of this rank between the gathers."""

    def __init__(self, path: Path, name: str, timeout: float):
        from gradflow.ddp import rank as r

        self.path, self.name, self.r, self.timeout = path, name, r, timeout
        launched = ENV_STATUS in os.environ  # started together by gradflow: importing torch may take a while
        self.rank, self.world = r.join(max(timeout, JOIN_FLOOR) if launched else timeout)
        self.gathers = r.new_group(timeout)  # gradflow's own gathers: --timeout each
        self.phases = r.Phases(self.rank, self.world)
        self.group = r.new_group(timeout)  # torch's real DDP step runs here
        self.model: Any = None
        self.step: Any = None
        self.inner: Any = None
        self.settings: dict = {}

    def build(self, user) -> dict:
        self.phases.at(f"running {self.name}()")
        try:
            func = user.run(f"importing {self.path}", load_function, self.path, self.name)
            self.model, self.step = user.run(f"{self.name}()", call_function, func, self.name, self.rank, self.world)
        except GradflowError as err:
            return _failure(self.rank, err)
        return {"rank": self.rank}

    @property
    def fsdp(self) -> bool:
        return bool(self.settings.get("fsdp"))

    def trace(self, user) -> dict:
        from gradflow.ddp import fsdp

        self.phases.at("running step(model) under gradflow's trace")
        try:
            if fsdp.is_fsdp(self.model):
                return self._trace_fsdp(user)
            ddp, self.inner, self.settings = user.run("wrapping the model in DDP", self.r.wrap, self.model, None)
            with ddp.no_sync():
                return self._explain(user, ddp)
        except GradflowError as err:
            return _failure(self.rank, err)

    def _trace_fsdp(self, user) -> dict:
        """The user's fully_shard model, every unit unsharded and its gradients kept local (ddp/fsdp.py)."""
        from gradflow.ddp import fsdp

        self.inner = self.model
        self.settings = {"wrapped_by": "you", "fsdp": True, "units": fsdp.layout(self.model)}
        with fsdp.local_mode(self.model), fsdp.forwards(self.model, lambda _: None) as ran:
            out = self._explain(user, self.model)
        return {**out, "units_run": list(dict.fromkeys(ran))}

    def _explain(self, user, model) -> dict:
        t, loss, _, _ = user.run("step(model)", run_function, functools.partial(self.step, model), "step")
        self.phases.at("backward (gradflow's trace)")
        report = user.run("backward", t.explain, self.r.loss_of(loss), params=self.inner, all_errors=False)
        if isinstance(report.error, NoGradientError):  # nothing to compare: say why, exit 3
            raise report.error
        return self.r.verdicts(report, self.rank)

    def probe(self, user) -> dict:
        if self.fsdp:
            from gradflow.ddp import fsdp_child

            self.phases.at("running FSDP's own step")
            self.drop_group()
            return fsdp_child.run(self.path, self.name, self.rank, self.world, self.timeout, JOIN_FLOOR,
                                  self.phases.at)
        self.phases.at("running torch's own DDP step (2 iterations)")
        groups, self.group = [self.group], None  # the probe frees it: no other reference may keep it open
        return user.run("torch's DDP step", self.r.probe, self.inner, self.step, groups)

    def gather(self, obj, what: str, wait: float | None = None) -> list:
        """`wait`: seconds the ranks may arrive apart (beyond --timeout), when one may be stopping a child."""
        self.phases.at(f"gathering ({what})")
        return self.r.gather_json(obj, self.phases, what, self.gathers, wait)

    def drop_group(self) -> None:
        import torch.distributed as dist

        dist.destroy_process_group(self.group)


def run_rank(path: Path, name: str, target: str, timeout: float, fail_on: tuple[str, ...] = (),
             allow: tuple[str, ...] = ()) -> tuple[dict, int]:
    """(the report or an error document, the exit code) — the same on every rank. With `fail_on`, the report
    gets its `gate` (ddp/fail_on.py), read from every rank's verdicts."""
    preload()
    import gradflow.ddp.fail_on  # noqa: F401
    import gradflow.ddp.fsdp_merge  # noqa: F401
    import gradflow.ddp.merge  # noqa: F401  (imported while sys.path is gradflow's own)

    run = RankRun(path, name, timeout)
    with contained(str(path.resolve().parent)) as user:
        built = run.gather(run.build(user), "after FUNCTION")
        failed = [v for v in built if "failure" in v]
        verdicts = failed or run.gather(run.trace(user), "after the traced step")
        failed = [v for v in verdicts if "failure" in v]
        probes = None
        if failed:
            run.drop_group()
        else:
            probes = run.gather(run.probe(user), "after torch's own step", 2 * (timeout + JOIN_FLOOR))
    run.r.leave()
    if failed:
        return _error_doc(target, failed), int(failed[0]["failure"]["exit_code"])
    from gradflow.ddp.merge import merge

    doc = merge(target, str(path), run.settings, verdicts, probes)
    if run.fsdp:
        from gradflow.ddp.fsdp_merge import finish

        doc = finish(doc, run.settings, verdicts, probes)
    if fail_on:
        from gradflow.ddp.fail_on import gate

        doc["gate"] = gate(verdicts, doc, fail_on, allow)
    return doc, 0


def _error_doc(target: str, failed: list[dict]) -> dict:
    real = [v for v in failed if "Connection closed" not in v["failure"]["message"]] or failed
    first = real[0]
    return {"schema": 1, "target": target, "error": {**first["failure"], "rank": first["rank"]}}


def error_from(doc: dict) -> GradflowError:
    """The error a rank reported, rebuilt for printing (its exit code kept)."""
    e = doc["error"]
    where = f"rank {e.get('rank')}: " if e.get("rank") is not None else ""
    if e.get("traceback"):
        err: GradflowError = UserCodeError(e["kind"], where + e["message"], hint=e.get("hint"),
                                           frames=[(f["file"], f["line"], f["function"], f["code"])
                                                   for f in e["traceback"]])
    else:
        err = GradflowError(e["kind"], where + e["message"], hint=e.get("hint"))
    err.exit_code = ExitCode(e.get("exit_code", int(err.exit_code)))
    return err
