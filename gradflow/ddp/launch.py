"""Start the ranks of `gradflow ddp` as plain child processes and watch them (no torch here).

Each rank is `python -m gradflow ddp FILE.py:FUNCTION ...` with the environment torchrun would give it (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, MASTER_PORT free at run time), so the same code runs under torchrun
and here. A rank tells the launcher where it is through a pipe ("at ...", then "done CODE" or "fail MESSAGE");
rank 0's stdout carries the report (JSON). Every rank runs in its own session, so Ctrl-C reaches the launcher
only, which stops them all. A rank that exits without "done" died; one that stays in the same place past the
timeout hung. Either way the others are stopped and the outcome says who and where.
"""
from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ENV_STATUS = "GRADFLOW_DDP_STATUS_FD"  # the pipe a rank reports to (set by this launcher only)
GRACE = 3.0  # seconds the other ranks get to finish once one rank is done or gave up
JOIN_FLOOR = 60.0  # seconds the ranks this launcher starts get to import torch and meet (room for a busy machine)


def under_launcher() -> tuple[int, int] | None:
    """(RANK, WORLD_SIZE) when a launcher (torchrun, this one) started this process as a rank."""
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None


def tell(line: str) -> None:
    """In a rank this launcher started: a line for it ("at WHERE", "done CODE", "fail MESSAGE"); elsewhere, or
    once the launcher is gone (it stops the ranks anyway), nothing."""
    fd = os.environ.get(ENV_STATUS, "")
    if fd.isdigit():
        with contextlib.suppress(OSError):
            os.write(int(fd), (line.replace("\n", " ") + "\n").encode())


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Rank:
    rank: int
    proc: subprocess.Popen
    status_fd: int
    at: str = "starting (importing torch)"
    since: float = field(default_factory=time.monotonic)
    done: int | None = None  # the exit code it announced
    failed: str | None = None  # what it said when it gave up (lost the other ranks)
    stopped: bool = False  # killed by the launcher
    heard: bool = False  # it said where it is at least once (it has joined the group)
    out: bytearray = field(default_factory=bytearray)
    partial: dict[int, bytearray] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        """It said it is done, or that it gave up on the others (it did not die)."""
        return self.done is not None or self.failed is not None

    @property
    def killed_by(self) -> str | None:
        """The signal that killed it (SIGABRT, ...), if one did."""
        code = self.proc.returncode
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return signal.Signals(-code).name
        return None

    def death(self) -> str:
        if self.killed_by is not None:
            return f"killed by {self.killed_by}"
        return f"exited with code {self.proc.returncode} without finishing"


@dataclass
class Outcome:
    ranks: list[Rank]
    report: str  # rank 0's stdout
    died: list[Rank]
    hung: list[Rank]


def _child_env(rank: int, world: int, port: int) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # this gradflow, first: the ranks run the same code
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
               GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does with several ranks on one machine
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # torch's C++ warnings carry times and pids; gradflow explains
    return env


def _own_session() -> None:  # in the child, before exec: Ctrl-C is the launcher's to handle; die with it
    os.setsid()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: the launcher gone, the rank goes too
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn(command: list[str], env: dict, rank: int = 0) -> Rank:
    """Start one watched child in its own session, its status pipe passed as ENV_STATUS (for `tell`)."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(command, env={**env, ENV_STATUS: str(write_fd)}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(write_fd,),
                            preexec_fn=_own_session)
    os.close(write_fd)
    return Rank(rank, proc, read_fd)


def start(args: list[str], world: int) -> list[Rank]:
    port = free_port()
    return [spawn([sys.executable, "-m", "gradflow", "ddp", *args], _child_env(r, world, port), r)
            for r in range(world)]


def stop(ranks: list[Rank]) -> None:
    for rk in ranks:
        if rk.proc.poll() is None:
            rk.stopped = True
        with contextlib.suppress(ProcessLookupError, PermissionError):  # its session, even when the rank itself
            os.killpg(rk.proc.pid, signal.SIGKILL)  # has exited: no process the user's code forked outlives us
    for rk in ranks:
        rk.proc.wait()


def launch(args: list[str], world: int, timeout: float, echo: Callable[[int, str], None]) -> Outcome:
    """Run the ranks to the end; `echo(rank, line)` gets what each rank writes to stderr, line by line."""
    return watch(start(args, world), timeout, echo)


def watch(ranks: list[Rank], timeout: float, echo: Callable[[int, str], None],
          tick: Callable[[], None] | None = None) -> Outcome:
    """Watch started children to the end (`tick` is called between reads), then stop any left."""
    try:
        _watch(ranks, timeout, echo, tick)
    finally:  # Ctrl-C included: no rank outlives the launcher
        stop(ranks)
        for rk in ranks:
            for fd, rest in rk.partial.items():
                if rest and fd != 1:
                    echo(rk.rank, rest.decode(errors="replace"))
            with contextlib.suppress(OSError):
                os.close(rk.status_fd)
    died = [rk for rk in ranks if not rk.finished and not rk.stopped]
    hung = [rk for rk in ranks if rk.stopped and not rk.finished]
    return Outcome(ranks, ranks[0].out.decode(errors="replace"), died, hung)


def _watch(ranks: list[Rank], timeout: float, echo, tick) -> None:
    """Read every rank's streams until all have exited, one died, the others outstayed their grace after one
    finished, or nobody moved for longer than any collective may take."""
    sel = selectors.DefaultSelector()
    for rk in ranks:
        for which, fd in _fds(rk).items():
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ, (rk, which))
    finished_at: float | None = None
    while True:
        for key, _ in sel.select(timeout=0.1):
            rk, which = key.data
            _read(sel, key.fd, rk, which, echo)
        if tick is not None:
            tick()
        now = time.monotonic()
        exited = [rk for rk in ranks if rk.proc.poll() is not None]
        for rk in exited:
            for which, fd in _fds(rk).items():  # what it wrote before exiting
                if fd in sel.get_map():
                    while _read(sel, fd, rk, which, echo):
                        pass
        if len(exited) == len(ranks) or any(not rk.finished for rk in exited):
            return
        finished_at = finished_at or (now if exited else None)
        if finished_at is not None and now - finished_at > GRACE:
            return
        joined = all(rk.heard for rk in ranks)  # importing torch is not a collective: it gets the floor
        if now - max(rk.since for rk in ranks) > (timeout if joined else max(timeout, JOIN_FLOOR)) + 10:
            return


def _fds(rk: Rank) -> dict[int, int]:
    assert rk.proc.stdout is not None and rk.proc.stderr is not None
    return {1: rk.proc.stdout.fileno(), 2: rk.proc.stderr.fileno(), 3: rk.status_fd}


def _read(sel, fd: int, rk: Rank, which: int, echo) -> bool:
    """Read what is there; at end of file, stop watching the stream. True if something was read."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return False
    if not data:
        sel.unregister(fd)
        return False
    _take(rk, which, data, echo)
    return True


def _take(rk: Rank, which: int, data: bytes, echo) -> None:
    if which == 1:
        rk.out += data
        return
    buf = rk.partial.setdefault(which, bytearray())
    buf += data
    *lines, rest = buf.split(b"\n")
    rk.partial[which] = bytearray(rest)
    for raw in lines:
        line = raw.decode(errors="replace")
        if which == 2:
            echo(rk.rank, line)
        elif line.startswith("at "):
            rk.at, rk.since, rk.heard = line[3:], time.monotonic(), True
        elif line.startswith("done "):
            rk.done, rk.since = int(line[5:]), time.monotonic()
        elif line.startswith("fail "):
            rk.failed, rk.since = line[5:], time.monotonic()
