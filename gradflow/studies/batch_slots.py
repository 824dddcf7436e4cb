"""`batch --jobs N`, the command's bookkeeping (batch_pool.py runs the loop): the chunks of lines (slots) in input
order, the workers, and what a dead worker's chunk becomes."""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from gradflow.errors import ExitCode, GradflowError
from gradflow.studies.batch_worker import Out, out


class Slot:
    """Consecutive input lines, first numbered `first`; their records as they come, `done` once all have."""

    __slots__ = ("first", "lines", "out", "done", "given", "ahead", "message")

    def __init__(self, first: int, lines: list[str], out: list[Out] | None = None):
        self.first, self.lines = first, lines
        self.out: list[Out] = out or []
        self.done = out is not None
        self.given = 0  # records already yielded
        self.ahead: list | None = None  # its lines' programs, compiled by the command (batch_ahead.py)
        self.message: bytes | None = None  # what goes to its worker, once made (batch_pool._give)


class Worker:
    """A worker process, its end of the pipe, the line it is on (shared memory) and its chunks: the first is
    the one it runs, the next waits in the pipe (batch_pool.QUEUED)."""

    __slots__ = ("proc", "conn", "current", "slots")

    def __init__(self, proc: Any, conn: Any, current: Any) -> None:
        self.proc, self.conn, self.current = proc, conn, current
        self.slots: deque[Slot] = deque()


class Order:
    """A batch in flight, as the command's loop sees it (batch_pool._Pool.records): every slot not yet yielded, in
    input order; those no worker has yet; the lines read and not yet in a slot, the first numbered `first`."""

    __slots__ = ("slots", "todo", "building", "first", "ended", "end_error", "early")

    def __init__(self, first: int) -> None:
        self.slots: deque[Slot] = deque()
        self.todo: deque[Slot] = deque()
        self.building: list[str] = []
        self.first = first
        self.ended = False  # the reader is done: it read the last line, or failed with `end_error`
        self.end_error: BaseException | None = None
        self.early = True  # no worker has started yet: lines are read ahead, their programs compiled here


class WorkerBug(RuntimeError):
    """A worker's exception under --debug: carries its traceback."""


def split(slot: Slot, current: int, crashed: Callable[[int, str], Out]) -> list[Slot]:
    """A worker died on `slot`, on line `current` (0: between records): what the slot becomes. The records that
    came stay, the lines it made but did not send run again, the line in flight gets `crashed(number, line)`,
    the rest run again."""
    lines = slot.lines
    covered = slot.out[-1][0] - slot.first + 1 if slot.out else 0  # lines whose records came (and blanks)
    at = current - slot.first
    if not covered <= at < len(lines):  # it died between records: run the rest of the chunk again
        at = len(lines)
    pieces = []
    if covered:  # the slot keeps the records that came (and what of them is yielded already)
        slot.lines, slot.done = slot.lines[:covered], True
        pieces.append(slot)
    if covered < at:
        pieces.append(Slot(slot.first + covered, lines[covered:at]))
    if at < len(lines):
        pieces.append(Slot(slot.first + at, [], [crashed(slot.first + at, lines[at])]))
    if at + 1 < len(lines):
        pieces.append(Slot(slot.first + at + 1, lines[at + 1:]))
    return pieces


def crash_out(number: int, line: str, exitcode: int | None, text: bool, encode: Callable[[dict], str]) -> Out:
    """The `crashed` record of the line a worker died on, by how it ended."""
    import signal

    from gradflow.studies.batch import crashed_record

    if exitcode is not None and exitcode < 0:
        try:
            how = f"was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
    else:
        how = f"exited with code {exitcode}"
    return out(crashed_record(number, line, text, how), encode)


def kill(workers: list[Worker]) -> None:
    """Kill and reap workers (they hold no state worth saving)."""
    for worker in workers:
        try:
            worker.proc.kill()
        except (OSError, ValueError):
            pass
    for worker in workers:
        worker.proc.join(5)
        worker.conn.close()


def startup_failed(jobs: int) -> GradflowError:
    """Workers die before making any record, again and again: not a batch that can be run so."""
    error = GradflowError("internal", f"the worker processes of --jobs {jobs} keep dying before they make a record",
                          hint="run the batch with --jobs 1 (in this process); if that works, report this with "
                               "--debug output")
    error.exit_code = ExitCode.INTERNAL
    return error
