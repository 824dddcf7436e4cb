"""FSDP's own training step, run for real in a child process per rank (`python -m gradflow.cli.fsdp_probe`).

A rank-dependent FSDP layout does not raise like DDP: the ranks' collectives stop pairing up, and gloo either
waits until the group's timeout or aborts the whole process from its own thread ("Received data size doesn't
match expected size", SIGABRT). So the step runs in a child the rank watches as the launcher watches the ranks
(ddp/launch.py): the child tells where it is through its status pipe, prints its outcome (JSON) as the last
line of its stdout, and is stopped if it stays in one place past the timeout. The children form their own group
through the job's store (MASTER_ADDR:MASTER_PORT, a key prefix of their own), so it works the same under
gradflow's launcher and under torchrun.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gradflow.ddp.launch import Rank, spawn, tell, watch

PREFIX = "gradflow/fsdp-step"
JOINED = "joined its group"


def run(path: Path, name: str, rank: int, world: int, timeout: float, join_floor: float,
        say: Callable[[str], None]) -> dict:
    """Run the child for this rank and wait for it; its outcome (the JSON on its stdout), or how it hung or died."""
    args = {"path": str(path), "name": name, "rank": rank, "world": world, "timeout": timeout,
            "join_floor": join_floor}
    child = spawn([sys.executable, "-m", "gradflow.cli.fsdp_probe", json.dumps(args)], dict(os.environ))
    said: list[str] = []
    beat = [0.0]

    def tick() -> None:  # the launcher counts a rank silent for --timeout + 10 s as hung: this one is not
        if time.monotonic() - beat[0] > 1.0:
            say(f"running FSDP's own step: {child.at}")
            beat[0] = time.monotonic()

    outcome = watch([child], timeout, lambda _, line: said.append(line), tick)
    last = outcome.report.strip().splitlines()[-1:]
    if child.proc.returncode == 0 and last and last[0].startswith("{"):
        return json.loads(last[0])
    return _lost(child, bool(outcome.hung), said, timeout)


def _lost(child: Rank, hung: bool, lines: list[str], timeout: float) -> dict:
    said = [line.strip() for line in lines if line.strip()]
    gloo = next((line.split("what():", 1)[1].strip() for line in said if "what():" in line), None)
    out = {"ok": False, "stage": child.at, "hung": hung, "aborted": None,
           "message": gloo or (said[-1] if said else "")}
    if hung:
        out["message"] = f"no answer within {timeout:g} s; gradflow stopped it"
    else:
        out["aborted"] = child.killed_by
    return out


# ---- in the child ----------------------------------------------------------------------------------------------
def say_at(text: str) -> None:
    tell(f"at {text}")


def join(rank: int, world: int, timeout: float, join_floor: float):
    """The children's own gloo group, through the job's store; every child there before any collective."""
    import torch.distributed as dist

    host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"])
    store = dist.PrefixStore(PREFIX, dist.TCPStore(host, port, is_master=False,
                                                   timeout=datetime.timedelta(seconds=join_floor)))
    store.set(f"joined/{rank}", "1")
    store.wait([f"joined/{r}" for r in range(world)])
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))
    say_at(JOINED)
    return store


def finish(store, rank: int, world: int, outcome: dict) -> None:
    """Print the outcome (the last line of stdout); wait (briefly) until every child has, so none closes a
    connection another still reads; then leave without running torch's teardown, which may abort on a group left
    mid-collective."""
    print(json.dumps(outcome), flush=True)
    with contextlib.suppress(Exception):
        store.set(f"done/{rank}", "1")
        store.wait([f"done/{r}" for r in range(world)], datetime.timedelta(seconds=3))
    sys.stderr.flush()
    os._exit(0)
