"""Commands that run someone else's code (`inspect`, `script`) do their work in a child process the command
watches, so that whatever that code does to its process, the command still reports it.

The parent forks before torch is imported (the child inherits only the command line's modules), then waits.
The child is the command as it always was; its last act is to write "finished CODE" into a pipe and exit with
CODE. A child that ends without that word was ended by the user's code: `os._exit(N)` (or C's `exit`), a
signal (a self-SIGKILL, the out-of-memory killer), a crash in C (SIGSEGV): the parent reports that death, where
the code was (the child says "at WHAT" before each step of user code), and exits 5. So no run exits 0
without a report.

The child leads a process group of its own, and everything the user's code starts inherits it: when the child
is done, the parent kills the group, so no process the user's code forked (one ignoring SIGTERM included)
outlives the command. Ctrl-C: a terminal's goes to the child's group (it is the terminal's foreground group
while it runs); a SIGINT sent to the parent is passed on to it. Either way the child exits 130, as before.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from gradflow.errors import ExitCode, UserCodeError

FINISHED = "finished"
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_status: list[int] = []  # [the pipe to the parent, the work process's pid], in the work process only


def at(what: str) -> None:
    """In the work process: tell the parent which step of the user's code runs now (named in a death report)."""
    _say(f"at {what}")


def finished(code: int) -> None:
    """In the work process: the command is done and exits with `code` (anything else is a death)."""
    _say(f"{FINISHED} {code}")


def _say(line: str) -> None:
    if _status and os.getpid() == _status[1]:  # a process the user's code forked never speaks for the command
        with contextlib.suppress(OSError):
            os.write(_status[0], (line.replace("\n", " ") + "\n").encode())


def run_watched(work: Callable[[], object], died: Callable[[UserCodeError], int]) -> NoReturn:
    """Run `work` (the command: it ends by calling `finished`, then os._exit) in a child; exit as it did, or with
    `died(error)` (which reports the death) when it ended without finishing."""
    read_end, write_end = os.pipe()
    child: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: _forward(child, signum)) for s in _FORWARDED}
    pid = os.fork()
    if pid == 0:
        for s, handler in old.items():
            signal.signal(s, handler)
        os.close(read_end)
        _work(work, write_end)
    os.close(write_end)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # also done in the child: whichever runs first, the group exists before any signal
    child.append(pid)
    tty = _hand_terminal(pid)
    try:
        status = _wait(pid)
    finally:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)  # what the user's code left running: nothing outlives the command
        _reap(pid)
        for s, handler in old.items():
            signal.signal(s, handler)
        _take_terminal_back(tty)
    said = _read_all(read_end)
    code = _finished_code(said)
    if code is None:
        code = died(death(status, _last_step(said)))
    os._exit(code)


def _work(work: Callable[[], object], status_fd: int) -> NoReturn:
    """The child: a process group of its own, then the command; it never returns into the parent's code."""
    code = int(ExitCode.INTERNAL)
    try:
        os.setpgid(0, 0)
        _die_with_parent()
        _status[:] = [status_fd, os.getpid()]
        work()
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
    except BaseException:  # noqa: BLE001 - a bug in gradflow: show it, exit 1
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        finished(code)
        os._exit(code)


def _die_with_parent() -> None:
    """If the parent is killed (SIGKILL: it cannot pass anything on), the child is killed too."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _forward(child: list[int], signum: int) -> None:
    """A signal sent to the parent goes on to the child's group (before the child exists: it is dropped, and the
    child, started with the parent's own handlers, has not run anything yet)."""
    with contextlib.suppress(OSError):
        if child:
            os.killpg(child[0], signum)


def _wait(pid: int) -> int:
    """The child's wait status, leaving it a zombie (WNOWAIT): its pid, which names its process group, cannot be
    reused before the group is killed."""
    while True:
        try:
            result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            return 0
        if result is not None:
            return _as_status(result)


def _as_status(result) -> int:
    """waitid's result as waitpid's status number (for os.waitstatus_to_exitcode)."""
    if result.si_code == os.CLD_EXITED:
        return (result.si_status & 0xFF) << 8
    return result.si_status & 0x7F


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _read_all(fd: int) -> str:
    """What the child said; a process the user's code forked may hold the pipe open still, so never block."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def _finished_code(said: str) -> int | None:
    for line in reversed(said.splitlines()):
        word, _, code = line.partition(" ")
        if word == FINISHED and code.lstrip("-").isdigit():
            return int(code)
    return None


def _last_step(said: str) -> str | None:
    steps = [line[3:] for line in said.splitlines() if line.startswith("at ")]
    return steps[-1] if steps else None


def death(status: int, step: str | None) -> UserCodeError:
    """The error that says how the process running the user's code ended without finishing (exit 5)."""
    code = os.waitstatus_to_exitcode(status)
    where = f" while running {step}" if step else ""
    if code < 0:
        name = _signal_name(-code)
        why = {"SIGSEGV": " (a crash in C code: a segmentation fault)", "SIGKILL": " (kill -9, or the system's "
               "out-of-memory killer)", "SIGABRT": " (abort(), e.g. a failed check in C code)"}.get(name, "")
        text = f"the process running your code was killed by {name}{where}{why}"
    else:
        text = f"your code ended the process with exit status {code}{where} (os._exit({code}) or C's exit())"
    return UserCodeError("process_ended", text + ", so gradflow could not finish its report",
                         hint="gradflow reports only a run that returns: return the loss instead of ending the "
                              "process; a crash in C code needs the same code run under plain python to debug")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _hand_terminal(pid: int) -> int | None:
    """Make the child's group the terminal's foreground (so Ctrl-C and reading the terminal reach it); returns
    the terminal's fd to take back, or None when stdin is not the terminal this process has in front."""
    with contextlib.suppress(OSError):
        if os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp():
            os.tcsetpgrp(0, pid)
            return 0
    return None


def _take_terminal_back(fd: int | None) -> None:
    if fd is None:
        return
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group asking for the terminal is stopped
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, os.getpgrp())
    finally:
        signal.signal(signal.SIGTTOU, old)
