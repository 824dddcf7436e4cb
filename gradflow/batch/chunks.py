"""`batch --jobs N`, the command's bookkeeping (pool.py runs the loop): the chunks of lines in input order, the
workers, and what a dead worker's chunk becomes."""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from gradflow.batch.records import Out, crashed_record, out
from gradflow.errors import ExitCode, GradflowError


class Chunk:
    """Consecutive input lines, first numbered `first`; their records as they come, `done` once all have."""

    __slots__ = ("first", "lines", "out", "done", "given", "message")

    def __init__(self, first: int, lines: list[str], out: list[Out] | None = None):
        self.first, self.lines = first, lines
        self.out: list[Out] = out or []
        self.done = out is not None
        self.given = 0  # records already yielded
        self.message: bytes | None = None  # what goes to its worker, once made (Pool._give)


class Worker:
    """A worker process, its end of the pipe, the line it is on (shared memory) and its chunks: the first is
    the one it runs, the next waits in the pipe (pool.QUEUED)."""

    __slots__ = ("proc", "conn", "current", "chunks")

    def __init__(self, proc: Any, conn: Any, current: Any) -> None:
        self.proc, self.conn, self.current = proc, conn, current
        self.chunks: deque[Chunk] = deque()


class Order:
    """A batch in flight, as the command's loop sees it (Pool.records): every chunk not yet yielded, in input
    order; those no worker has yet; the lines read and not yet in a chunk, the first numbered `first`."""

    __slots__ = ("chunks", "todo", "building", "first", "ended", "end_error")

    def __init__(self, first: int) -> None:
        self.chunks: deque[Chunk] = deque()
        self.todo: deque[Chunk] = deque()
        self.building: list[str] = []
        self.first = first
        self.ended = False  # the reader is done: it read the last line, or failed with `end_error`
        self.end_error: BaseException | None = None


class WorkerBug(RuntimeError):
    """A worker's exception under --debug: carries its traceback."""


def split(chunk: Chunk, current: int, crashed: Callable[[int, str], Out]) -> list[Chunk]:
    """A worker died on `chunk`, on line `current` (0: between records): what the chunk becomes. The records that
    came stay, the lines it made but did not send run again, the line in flight gets `crashed(number, line)`,
    the rest run again."""
    lines = chunk.lines
    covered = chunk.out[-1][0] - chunk.first + 1 if chunk.out else 0  # lines whose records came (and blanks)
    at = current - chunk.first
    if not covered <= at < len(lines):  # it died between records: run the rest of the chunk again
        at = len(lines)
    pieces = []
    if covered:  # the chunk keeps the records that came (and what of them is yielded already)
        chunk.lines, chunk.done = chunk.lines[:covered], True
        pieces.append(chunk)
    if covered < at:
        pieces.append(Chunk(chunk.first + covered, lines[covered:at]))
    if at < len(lines):
        pieces.append(Chunk(chunk.first + at, [], [crashed(chunk.first + at, lines[at])]))
    if at + 1 < len(lines):
        pieces.append(Chunk(chunk.first + at + 1, lines[at + 1:]))
    return pieces


def crash_out(number: int, line: str, exitcode: int | None, text: bool, encode: Callable[[dict], str]) -> Out:
    """The `crashed` record of the line a worker died on, by how it ended."""
    import signal

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
