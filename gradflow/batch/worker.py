"""`gradflow batch --jobs N`, the worker side (pool.py is the command's): what a worker process runs, and how
workers start without surprises (no re-run of the caller's __main__, no fork server inherited from a parent)."""
from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gradflow.batch.records import Out, out

SEND_AFTER = 0.05  # seconds: a worker sends what it has made so far once a chunk has run this long


def work(conn, current, encode: Callable[[dict], str], options: dict) -> None:
    """A worker: chunks in, encoded records out, until the command closes the pipe (or sends None)."""
    import gc
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's to handle: it kills the workers
    import torch

    torch.set_num_threads(1)  # N workers on N cores are the parallelism already (pool.py)
    # What the fork server preloaded (torch's ~10^6 objects) lives as long as this process: frozen out of the
    # collector's reach, so no collection walks them (nor writes to their shared pages). The one speed trick the
    # pool keeps: bench/README.md, `--jobs 2` speed-up.
    gc.freeze()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the command is gone
            return
        if msg is None or not _run_chunk(conn, current, encode, options, *msg):
            return


def _run_chunk(conn, current, encode: Callable[[dict], str], options: dict, first: int, lines: list[str]) -> bool:
    """Run one chunk (lines numbered from `first`) and send its records; False when this worker should end (the
    command is gone, or a bug under --debug was sent)."""
    from gradflow.batch.run import run_batch

    def numbered() -> Iterator[str]:
        for i, line in enumerate(lines):
            current.value = first + i  # the line in flight, for the command if this process dies
            yield line

    made: list[Out] = []
    sent = time.monotonic()
    try:
        for rec in run_batch(numbered(), first_line=first, **options):
            made.append(out(rec, encode))
            if time.monotonic() - sent > SEND_AFTER:  # slow records: each goes out soon, not with its chunk
                conn.send(("part", made))
                made, sent = [], time.monotonic()
    except (BrokenPipeError, OSError):  # the command is gone
        return False
    except Exception:  # only with debug: run_batch turns every other exception into an error record
        current.value = 0
        conn.send(("bug", traceback.format_exc()))
        return False
    current.value = 0
    try:
        conn.send(("done", made))
    except (BrokenPipeError, OSError):
        return False
    return True


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


def stop_forkserver() -> None:
    """End multiprocessing's fork server now, when the command that started it is about to exit: left to itself,
    it ends once the command has gone, by the interpreter's whole teardown of torch, while it still holds the
    command's stdout and stderr (a reader of the output, `| jq`, waits for that). It holds nothing of the
    batch's, so SIGKILL. (The same private attributes as forget_forkserver.)"""
    import signal
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:  # gone already, or reaped elsewhere
        pass
    forget_forkserver()


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
