"""FSDP's own training step, run for real in a child process per rank (`python -m gradflow.cli.fsdp_probe`).

A rank-dependent FSDP layout does not raise like DDP: the ranks' collectives stop pairing up, and gloo either
waits until the group's timeout or aborts the whole process from its own thread ("Received data size doesn't
match expected size", SIGABRT). So the step runs in a child the rank watches: the child tells where it is on
its stderr (`gradflow-at WHERE`), prints its outcome (JSON) as the last line of its stdout, and is stopped if it
stays in one place past the timeout. The children form their own group through the job's store
(MASTER_ADDR:MASTER_PORT, a key prefix of their own), so it works the same under gradflow's launcher and under
torchrun.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

AT = "gradflow-at "  # the child's lines that say where it is
PREFIX = "gradflow/fsdp-step"
GRACE = 10.0  # seconds past the group's timeout before a child that said nothing more is stopped
JOINED = "joined its group"
STARTING = "starting (importing torch)"


def run(path: Path, name: str, rank: int, world: int, timeout: float, join_floor: float,
        say: Callable[[str], None]) -> dict:
    """Run the child for this rank and wait for it; its outcome (the JSON on its stdout), or how it hung or died."""
    args = {"path": str(path), "name": name, "rank": rank, "world": world, "timeout": timeout,
            "join_floor": join_floor}
    proc = subprocess.Popen([sys.executable, "-m", "gradflow.cli.fsdp_probe", json.dumps(args)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    streams = {1: bytearray(), 2: bytearray()}
    try:
        where, hung = _watch(proc, streams, timeout, join_floor, say)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out, err = (streams[k].decode(errors="replace") for k in (1, 2))
    last = out.strip().splitlines()[-1:] if out.strip() else []
    if proc.returncode == 0 and last and last[0].startswith("{"):
        return json.loads(last[0])
    return _lost(proc.returncode, where, hung, err, timeout)


def _watch(proc: subprocess.Popen, streams: dict[int, bytearray], timeout: float, join_floor: float,
           say: Callable[[str], None]) -> tuple[str, bool]:
    """Read the child's stdout and stderr until it exits; (where it last was, whether it was stopped for staying
    there past the timeout)."""
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    for which, stream in ((1, proc.stdout), (2, proc.stderr)):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream.fileno(), selectors.EVENT_READ, which)
    where, since, beat = STARTING, time.monotonic(), 0.0
    while sel.get_map():
        for key, _ in sel.select(timeout=0.1):
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fd)
            streams[key.data] += data
        now = time.monotonic()
        last = _last_at(streams[2])
        if last and last != where:
            where, since = last, now
        if now - beat > 1.0:  # the launcher counts a rank silent for --timeout + 10 s as hung: this one is not
            say(f"running FSDP's own step: {where}")
            beat = now
        if now - since > (timeout if where != STARTING else max(timeout, join_floor)) + GRACE:
            return where, True
    return where, False


def _last_at(err: bytearray) -> str | None:
    lines = err.decode(errors="replace").splitlines()
    return next((line[len(AT):] for line in reversed(lines) if line.startswith(AT)), None)


def _lost(code: int | None, where: str, hung: bool, text: str, timeout: float) -> dict:
    said = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(AT)]
    gloo = next((line.split("what():", 1)[1].strip() for line in said if "what():" in line), None)
    out = {"ok": False, "stage": where, "hung": hung, "aborted": None, "message": gloo or (said[-1] if said else "")}
    if hung:
        out["message"] = f"no answer within {timeout:g} s; gradflow stopped it"
    elif code is not None and code < 0:
        with contextlib.suppress(ValueError):
            out["aborted"] = signal.Signals(-code).name
    return out


# ---- in the child ----------------------------------------------------------------------------------------------
def say_at(text: str) -> None:
    print(AT + text, file=sys.__stderr__, flush=True)


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
