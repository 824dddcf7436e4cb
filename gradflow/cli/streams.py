"""Standard streams at the edges of the process: pipes, closed streams, Ctrl-C.

`run_safely(main)` wraps the console entry point, so every command (eval, ops,
batch, sweep, ...) inherits it:
- the reader of stdout went away (`gradflow ... | head -1`): point stdout at
  /dev/null and exit quietly with 0 (Python docs, "Note on SIGPIPE");
- Ctrl-C: exit 130 without a traceback (whatever was flushed stays written);
- a closed stdout/stderr (`>&-`): output is discarded instead of crashing;
- a closed stdin (`<&-`): reading it is a package error (exit 2), in every command;
- a command that ran someone else's code (`inspect`) asks for `exit_hard`: once the output is flushed, the
  process ends with os._exit, so threads that code left running cannot hang the exit, and its exit handlers
  and objects (a long autograd graph in a global) are not run or freed after the report.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from gradflow.errors import ExitCode, ValueInputError


def _devnull():
    return open(os.devnull, "w")  # noqa: SIM115 - lives until the process exits


def _to_devnull(stream):
    """Point a standard stream's file descriptor at /dev/null; returns the stream to keep using."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stream.fileno())
        os.close(fd)
        return stream
    except (OSError, ValueError, AttributeError):
        return _devnull()


def _flush(stream):
    """Flush a stream; if its reader is gone, silence it. Returns the stream to keep using."""
    try:
        stream.flush()
        return stream
    except (OSError, ValueError):
        return _to_devnull(stream)


class _ClosedStdin(io.StringIO):
    """Stands in for a closed stdin (`<&-`): reading it is a clean error in every command."""

    def _closed(self, *args, **kwargs):
        raise _stdin_closed()

    read = readline = readlines = __iter__ = __next__ = _closed


def _stdin_closed() -> ValueInputError:
    return ValueInputError("usage", "stdin is closed, so nothing can be read from '-'",
                           hint="pipe the input in (echo 'x^2' | gradflow eval - --x 3), or give it as an "
                                "argument or a file")


def _ensure_streams() -> None:
    """A closed stdin/stdout/stderr (`<&-`, `>&-`) shows up as None: stand-ins instead."""
    sys.stdin = sys.stdin or _ClosedStdin()
    sys.stdout = sys.stdout or _devnull()
    sys.stderr = sys.stderr or _devnull()


def stdout_gone() -> int:
    """stdout's reader went away: discard further output; the exit code to use (0, quiet)."""
    sys.stdout = _to_devnull(sys.stdout)
    return int(ExitCode.OK)


@contextlib.contextmanager
def unread():
    """Write a message that may find its reader gone: then silence both streams and go on.

    rich answers a broken pipe by pointing stdout at /dev/null and raising SystemExit(1).
    """
    try:
        yield
    except BrokenPipeError:
        sys.stdout, sys.stderr = _to_devnull(sys.stdout), _to_devnull(sys.stderr)
    except SystemExit as done:
        if done.code != 1:
            raise
        sys.stderr = _to_devnull(sys.stderr)


def _stdout_is_devnull() -> bool:
    try:
        fd, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError, AttributeError):
        return False
    return (fd.st_dev, fd.st_ino) == (null.st_dev, null.st_ino)


def _library_saw_broken_pipe(was_devnull: bool) -> bool:
    """Click/Typer and rich handle EPIPE themselves and exit 1: Click wraps stdout in
    PacifyFlushWrapper, rich points fd 1 at /dev/null. Either way, it was the pipe."""
    return type(sys.stdout).__name__ == "PacifyFlushWrapper" or (not was_devnull and _stdout_is_devnull())


_EXIT_HARD: list[bool] = []  # set by exit_hard() during this run


def exit_hard() -> None:
    """The command runs someone else's code: end the process with os._exit once the output is flushed
    (only in the real process: run_safely honours it; the library and in-process tests never exit)."""
    _EXIT_HARD.append(True)


def _exit_now(code: str | int | None) -> NoReturn:
    """sys.exit(code), without waiting for other threads, exit handlers or the interpreter's teardown."""
    if isinstance(code, str):
        print(code, file=sys.stderr, flush=True)
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def run_safely(main: Callable[[], object]) -> NoReturn:
    """Run a Click/Typer app (which ends in SystemExit) and exit with its code, quietly."""
    _EXIT_HARD.clear()
    _ensure_streams()
    was_devnull = _stdout_is_devnull()
    try:
        main()
        code: str | int | None = 0
    except SystemExit as done:
        code = stdout_gone() if done.code == 1 and _library_saw_broken_pipe(was_devnull) else done.code
    except KeyboardInterrupt:
        code = int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        code = stdout_gone()
    sys.stdout, sys.stderr = _flush(sys.stdout), _flush(sys.stderr)
    if _EXIT_HARD:
        _exit_now(code)
    from gradflow.cli.startup import before_exit

    before_exit()
    sys.exit(code)


def read_stdin() -> str:
    """The whole of stdin as text, or a package error saying why it cannot be read."""
    if sys.stdin is None:
        raise _stdin_closed()
    try:
        return sys.stdin.read()
    except UnicodeDecodeError as err:
        raise ValueInputError("usage", f"stdin is not UTF-8 text (byte {err.start}): {err.reason}",
                              hint="pipe a text file holding the program") from None
    except (OSError, ValueError) as err:
        raise ValueInputError("usage", f"cannot read the program from stdin: {err}") from None

