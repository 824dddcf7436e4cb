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


def ended(pid: int, wait: float = 5.0) -> bool:
    """The process has exited (gone, or a zombie nobody has reaped yet: in a container without an init that reaps,
    an orphan's zombie stays), waiting up to `wait` seconds for a kill to land."""
    deadline = time.monotonic() + wait
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return True
        if state in ("Z", "X") or time.monotonic() > deadline:
            return state in ("Z", "X")
        time.sleep(0.05)


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


# ---- many short gradflow runs from one start ----------------------------------------------------------------

_FORKER = r'''
import json, os, select, sys
spec = json.load(sys.stdin)
for name in spec["preload"]:  # paid once, before forking: each run then costs only its own work
    __import__(name)
from gradflow.cli.app import app, run

if spec["warm"]:  # first runs of a process load lazy modules, parse tables, torch's dispatch: do them here once
    from typer.testing import CliRunner

    for args in spec["warm"]:
        CliRunner().invoke(app, args)

go_read, go_write = os.pipe()
started, masters = [], {}  # masters: pty master fd -> the file its output is saved to
for job in spec["jobs"]:
    ptys = {fd: os.openpty() for fd in (1, 2) if job["streams"][fd - 1] == "pty"}  # fd -> (master, slave)
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.close(go_write)
            os.read(go_read, 1)  # every run waits here; the parent lets them all go at once
            os.environ.update(job["env"])
            os.chdir(job["cwd"])
            os.dup2(os.open(job["stdin"], os.O_RDONLY), 0)
            for fd in (1, 2):
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                os.dup2(ptys[fd][1] if fd in ptys else os.open(job["streams"][fd - 1], flags, 0o644), fd)
            enc = job["encoding"]  # as Python makes its standard streams at start-up (PYTHONIOENCODING)
            sys.stdin = open(0, "r", encoding=enc, closefd=False)
            sys.stdout = open(1, "w", encoding=enc, errors="strict", closefd=False)
            sys.stderr = open(2, "w", encoding=enc, errors="backslashreplace", closefd=False, buffering=1)
            exec(job["setup"])
            sys.argv = ["gradflow", *job["args"]]
            run()
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        finally:
            os._exit(code)
    for fd, (master, slave) in ptys.items():
        os.close(slave)
        masters[master] = open(job["saved"][fd - 1], "wb")
    started.append(pid)
os.close(go_read)
os.close(go_write)  # end of file on the pipe: every run starts now

while masters:  # drain the terminals (a full one would block its writer) until each run has closed its side
    for m in select.select(list(masters), [], [], 5.0)[0]:
        try:
            data = os.read(m, 65536)
        except OSError:  # EIO: the other side is closed
            data = b""
        if data:
            masters[m].write(data)
        else:
            masters.pop(m).close()
            os.close(m)
print(json.dumps([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in started]))
'''


def forked(jobs: list[dict], tmp: Path, *, preload=("torch",), warm=(), env: dict | None = None,
           timeout: float = DEADLINE) -> list[dict]:
    """Run several `gradflow ...` as real processes, forked from one child that imported `preload` first
    (torch once instead of once per run), all released at the same instant. A job is a dict: "args"; optional
    "stdout" / "stderr": a path ("/dev/full" works) or "pty" (a pseudo-terminal the harness drains; default: a
    file in `tmp`), "stdin" (a path), "env" (set in the run before it starts), "encoding" (what
    PYTHONIOENCODING would set; default utf-8), "setup" (Python run just before the command), "cwd". `warm`:
    commands (argument lists) run once in the parent before forking, so each run skips first-run costs.
    Returns, per job, {"code", "stdout", "stderr"}: what the run wrote (bytes; None for a path given)."""
    import json

    spec = []
    for i, job in enumerate(jobs):
        saved = [str(tmp / f"run{i}.out"), str(tmp / f"run{i}.err")]  # stdout's, stderr's
        streams = [str(job.get(name, path)) for name, path in zip(("stdout", "stderr"), saved)]
        spec.append({"args": [str(a) for a in job["args"]], "env": job.get("env", {}), "streams": streams,
                     "saved": saved, "stdin": str(job.get("stdin", os.devnull)),
                     "encoding": job.get("encoding", "utf-8"), "setup": job.get("setup", ""),
                     "cwd": str(job.get("cwd", tmp))})
    todo = {"preload": list(preload), "warm": [[str(a) for a in w] for w in warm], "jobs": spec}
    res = run(PYTHON + ["-c", _FORKER], input=json.dumps(todo).encode(),
              env=env, timeout=timeout)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-3000:]
    results = []
    for code, job in zip(json.loads(res.stdout), spec):
        got = {name: Path(path).read_bytes() if stream in ("pty", path) else None
               for name, stream, path in zip(("stdout", "stderr"), job["streams"], job["saved"])}
        results.append({"code": code, **got})
    return results


def processes_left(marker: str) -> list[str]:
    """The processes still running whose environment holds `marker` (set for the command: what it started
    inherits it), as their command lines; Linux only (/proc), else nothing is found. multiprocessing's
    resource tracker ends by itself once its pipe closes and is not counted."""
    left = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (proc / "environ").read_bytes():
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if "resource_tracker" not in cmdline:
                    left.append(cmdline)
        except OSError:
            continue
    return left
