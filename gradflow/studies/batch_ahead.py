"""`batch --jobs N`: programs compiled by the command for its workers while their fork server starts.

The fork server imports torch (~1-1.5 s) before it can fork the first worker, and the command, which never
imports torch, would only wait for it meanwhile, one core idle. Instead it reads the lines that have arrived
and compiles their programs (parse and lower: ~100 us of the ~600 us a small record costs), and each chunk
goes to its worker with them, as plain tuples (language/packed.py: ~20 us to send and rebuild against ~100 to
compile). The worker puts them in its compile cache and runs its chunk exactly as before (run_batch): the same
code makes every record, a compiled program is only found in the cache instead of parsed. Whatever the command
could not read or compile goes without one (the worker's own path then makes its record, an error record
word for word as before), and so do the lines read once the first worker has started (the cores are the
workers' then).

The compiling runs in a thread of its own at the lowest priority (`Ahead`; Linux: niceness is per thread), so it
only takes CPU time nothing else of this batch wants. On free cores that is a whole core while the fork server
imports torch on the other, as before. On a busy machine (Linux's autogroup gives the session one share of the
CPU, whatever its processes) compiling at the same priority took that share from the fork server's import:
the first worker started ~1-2 s later (3.2-6.0 s against 1.6-3.2 s with nothing compiled, at a load of 4-7),
for ~0.05 ms of worker time saved per line.
"""
from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from gradflow.limits import Limits
from gradflow.studies.batch import _peek

# While no worker has started, the command reads ahead (and compiles) at most this many lines, holding at most
# this many bytes of their text and compiled graphs (language/compile.py's estimate); then it waits as before.
AHEAD_LINES = 32_768
AHEAD_BYTES = 64 << 20
AHEAD_NICE = 19  # the compiling thread's niceness: the lowest priority (a session's other threads run first)


def _program(number: int, line: str, text: bool) -> str | None:
    """The program of a line, as run_batch finds it, also in a line it then refuses (batch._peek, whose "expr"
    is that record's `source`); None: no program can be read from it."""
    return _peek(number, line, text).expr


def compile_ahead(lines: list[str], first: int, text: bool, limits: Limits,
                  stop: Callable[[], bool] = lambda: False) -> tuple[list[Any], int]:
    """For each line (numbered from `first`), its program compiled and packed, or None; and their size in bytes
    (compile.graph_bytes's estimate of the graphs). A line whose program does not compile gets None: its
    worker compiles it again and makes its error record as before. Once `stop()` (the first worker is ready:
    big programs can take long to compile), the rest get None."""
    from gradflow.language.compile import compile_uncached, graph_bytes
    from gradflow.language.packed import pack

    packed: list[Any] = []
    size = 0
    seen: dict[str, Any] = {}
    for number, line in enumerate(lines, first):
        if stop():
            return packed + [None] * (len(lines) - len(packed)), size
        if number == 1:
            line = line.removeprefix("\ufeff")  # as run_batch reads line 1
        source = _program(number, line, text) if line.strip() else None
        data = None
        if source is not None:
            if source in seen:
                data = seen[source]
            else:
                try:
                    graph = compile_uncached(source, limits)
                except Exception:  # noqa: BLE001 - the worker compiles it again: its record says what is wrong
                    graph = None
                if graph is not None and graph.source == source:
                    data = seen[source] = pack(graph)
                    size += graph_bytes(graph)
        packed.append(data)
    return packed, size


def learn(packed: list[Any], limits: Limits) -> None:
    """In a worker: the command's compiled programs into the compile cache (those not in it already)."""
    from gradflow.language.compile import known, remember
    from gradflow.language.packed import unpack

    for data in packed:
        if data is not None and not known(data[0], limits):
            try:
                remember(unpack(data), limits)
            except Exception:  # noqa: BLE001 - not fatal: the worker compiles that program itself
                pass


def lower_priority(nice: int) -> None:
    """This thread at niceness `nice` (or its own, if lower already). Linux only: elsewhere a thread's id is no
    process id (setpriority would reach another process), so other systems compile at the usual priority."""
    if not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(nice, os.getpriority(os.PRIO_PROCESS, tid)))
    except OSError:  # not allowed (a sandbox): compile at the usual priority
        pass


class Ahead:
    """The command's compiling thread: each slot added (an object with `first`, `lines` and `ahead`) gets its
    programs compiled into `ahead`, in order, until stop() (the first worker is ready: the slots go as they are,
    the one being compiled without the rest of its programs). A slot a worker already has may still get them:
    they are only a cache's contents, read when the slot is given."""

    def __init__(self, text: bool, limits: Limits):
        self.text, self.limits = text, limits
        self.todo: deque[Any] = deque()
        self.bytes = 0  # compile.graph_bytes's estimate of the graphs made so far
        self.cond = threading.Condition()
        self.stopped = False
        self.thread: threading.Thread | None = None

    def add(self, slot: Any) -> None:
        with self.cond:
            if self.stopped:
                return
            self.todo.append(slot)
            self.cond.notify()
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, daemon=True, name="gradflow-batch-ahead")
            self.thread.start()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.todo.clear()
            self.cond.notify()

    def _run(self) -> None:
        lower_priority(AHEAD_NICE)
        while True:
            with self.cond:
                while not self.todo and not self.stopped:
                    self.cond.wait()
                if self.stopped:
                    return
                slot = self.todo.popleft()
            slot.ahead, size = compile_ahead(slot.lines, slot.first, self.text, self.limits,
                                             stop=lambda: self.stopped)
            self.bytes += size
