"""Real child processes for the tests: `python -m gradflow ...`, `python -c ...`, a shell pipeline.

Every child started here
- imports the gradflow beside these tests: the repository root goes first on PYTHONPATH (what the parent had
  stays after it), so a work tree's tests never run another checkout's package, and in CI, where this same
  tree is pip-installed, it changes nothing;
- runs without PYTHONUNBUFFERED (set by many CI runners), so its output is buffered as it is for a user;
- starts with SIGINT at its default action, unblocked: a parent that ignores SIGINT (nohup, some CI runners)
  passes the ignored disposition on through exec, Python then never raises KeyboardInterrupt, and a Ctrl-C
  test would wait for an exit that never comes (subprocess's restore_signals resets SIGPIPE and SIGXFSZ only);
- is waited for only so long: `run` has a timeout, and `child` kills the process when its deadline passes, so a
  blocked read on its pipes sees end-of-file and the test fails saying what happened instead of hanging.

Not collected by pytest (no test_ prefix).
"""
from __future__ import annotations

import errno
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GRADFLOW = [sys.executable, "-m", "gradflow"]
PYTHON = [sys.executable]
DEADLINE = 120.0  # seconds for any one child: generous on a busy 2-core machine, finite everywhere


def child_env(extra: dict | None = None) -> dict:
    """The parent's environment, less PYTHONUNBUFFERED, with this tree's root first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *rest])
    env.update(extra or {})
    return env


def _default_sigint() -> None:  # runs in the child between fork and exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a blocked mask is inherited too


def _describe(args) -> str:
    return shlex.join(str(a) for a in args) if not isinstance(args, str) else args


def run(args, *, env: dict | None = None, timeout: float = DEADLINE, **kw) -> subprocess.CompletedProcess:
    """subprocess.run with the set-up above; output captured unless told otherwise; killed after `timeout`."""
    if not any(k in kw for k in ("stdout", "stderr", "capture_output")):
        kw["capture_output"] = True
    try:
        return subprocess.run(args, env=child_env(env), preexec_fn=_default_sigint, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as exc:
        said = f"; its stderr so far: {exc.stderr[-2000:]!r}" if exc.stderr else ""
        pytest.fail(f"{_describe(args)} did not finish in {timeout:g} s and was killed{said}", pytrace=False)


@contextmanager
def child(args, *, env: dict | None = None, timeout: float = DEADLINE, **kw):
    """A Popen (stdout and stderr piped unless told otherwise) that is killed after `timeout` seconds, whatever
    the test is blocked on, and always reaped; a test whose child had to be killed fails with that message."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    proc = subprocess.Popen(args, env=child_env(env), preexec_fn=_default_sigint, **kw)
    expired = threading.Event()

    def expire():
        expired.set()
        proc.kill()  # its pipes close: a read blocked on them returns end-of-file

    watchdog = threading.Timer(timeout, expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield proc
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()  # killed or finished: returns at once
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                try:
                    stream.close()
                except OSError:  # e.g. a stdin whose buffered bytes can no longer be written
                    pass
        if expired.is_set():
            pytest.fail(f"{_describe(args)} was still running after {timeout:g} s and was killed", pytrace=False)


def open_fifo_for_writing(path: Path, timeout: float = DEADLINE):
    """open(path, "w") for a FIFO, but giving up after `timeout`: a plain open blocks until a reader opens the
    other end, for ever if the reader never does."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
            if time.monotonic() > deadline:
                pytest.fail(f"nobody opened the FIFO {path} for reading within {timeout:g} s", pytrace=False)
            time.sleep(0.02)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "w")
