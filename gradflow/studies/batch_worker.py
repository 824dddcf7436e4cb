"""`gradflow batch --jobs N`, the worker side (batch_pool.py is the command's): what a worker process runs, the
record as it travels back, and how workers start without surprises (no re-run of the caller's __main__, no
fork server inherited from a parent)."""
from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SEND_AFTER = 0.05  # seconds: a worker sends what it has made so far once a chunk has run this long
Out = tuple[int, str, str | None, str | None]  # (line number, the record as one JSON line, its error kind
#                                                  or None, its program's source: for the unused-defaults check)


def out(rec: dict, encode: Callable[[dict], str]) -> Out:
    error, source = rec["error"], rec.get("source")
    return (rec["line"], encode(rec), None if error is None else error["kind"],
            source if isinstance(source, str) else None)


def work(conn, current, encode: Callable[[dict], str], options: dict) -> None:
    """A worker: chunks in, encoded records out, until the command closes the pipe (or sends None)."""
    import gc
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's to handle: it kills the workers
    gc.enable()  # batch_warm did (the fork server preloads with the collector off): also if it failed to load
    import torch

    torch.set_num_threads(1)  # see the module's docstring
    from gradflow.limits import as_limits
    from gradflow.studies.batch import run_batch
    from gradflow.studies.batch_ahead import learn
    from gradflow.studies.batch_freeze import Freezer

    limits = as_limits(options.get("limits"))
    freezer = Freezer()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the command is gone
            return
        if msg is None:
            return
        first, lines, ahead = msg
        if ahead:  # the programs the command compiled (batch_ahead.py): found in the cache, not parsed again
            learn(ahead, limits)

        def numbered(first: int = first, lines: list[str] = lines) -> Iterator[str]:
            for i, line in enumerate(lines):
                current.value = first + i  # the line in flight, for the command if this process dies
                yield line

        made: list[Out] = []
        sent = time.monotonic()
        try:
            for rec in run_batch(numbered(), first_line=first, **options):
                made.append(out(rec, encode))
                freezer.record_done()  # as the command does in one process (batch_freeze.py)
                if time.monotonic() - sent > SEND_AFTER:  # slow records: each goes out soon, not with its chunk
                    conn.send(("part", made))
                    made, sent = [], time.monotonic()
        except (BrokenPipeError, OSError):  # the command is gone
            return
        except Exception:  # only with debug: run_batch turns every other exception into an error record
            current.value = 0
            conn.send(("bug", traceback.format_exc()))
            return
        current.value = 0
        try:
            conn.send(("done", made))
        except (BrokenPipeError, OSError):
            return


def forget_forkserver() -> None:
    """In a child forked from a process that has started multiprocessing's fork server: that server belongs to
    the parent (it is not this process's child, so using it fails with ChildProcessError), and this copy of its
    keep-alive pipe would keep it running. Forget it: the child starts its own when it needs one. (Private
    attributes of multiprocessing.forkserver, Python 3.10-3.13; a test forks from a process that ran a batch.)"""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if server is None or getattr(server, "_forkserver_pid", None) is None:
        return
    if server._forkserver_alive_fd is not None:
        try:
            os.close(server._forkserver_alive_fd)
        except OSError:
            pass
    server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None
    server._inherited_fds = None


@contextmanager
def main_not_rerun():
    """Start a worker without multiprocessing re-running the caller's __main__ in it: the worker's code is all in
    this package, and the main script may be anything (`python -` reads it from stdin, a test runner's, a path
    relative to a directory since left): re-running it failed with FileNotFoundError, or ran the caller's code
    again. multiprocessing decides from __main__'s __spec__ and __file__ when the process starts."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            if k == "__spec__":
                main.__dict__[k] = None
            else:
                del main.__dict__[k]
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
