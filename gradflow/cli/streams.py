"""Standard streams at the edges of the process: pipes, closed streams, Ctrl-C.

`run_safely(main)` wraps the console entry point, so every command (eval, ops,
batch, sweep, ...) inherits it:
- the reader of stdout went away (`gradflow ... | head -1`): point stdout at
  /dev/null and exit quietly with 0 (Python docs, "Note on SIGPIPE");
- Ctrl-C: exit 130 without a traceback (whatever was flushed stays written);
- a closed stdout/stderr (`>&-`): output is discarded instead of crashing;
- a closed stdin (`<&-`): reading it is a package error (exit 2), in every command;
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable
from typing import BinaryIO, NoReturn

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

    @property
    def buffer(self):
        raise _stdin_closed()


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


def run_safely(main: Callable[[], object]) -> NoReturn:
    """Run a Click/Typer app (which ends in SystemExit) and exit with its code, quietly."""
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
    from gradflow.cli.startup import before_exit

    before_exit()
    sys.exit(code)


def stdin_bytes() -> BinaryIO:
    """stdin as bytes: the readers decode it themselves, the same way as a file (whatever the locale says)."""
    if sys.stdin is None:
        raise _stdin_closed()
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream put in by someone (not a process's stdin): encode what it holds
        return io.BytesIO(sys.stdin.read().encode("utf-8", "surrogateescape"))
    return buffer


def read_text(stream: BinaryIO, limit: int, what: str) -> str:
    """A program from a binary stream: at most `limit` characters are read (a program longer than that is
    refused without reading the rest: `--file /dev/zero`), a UTF-8 byte-order mark is skipped, and a byte that
    is not UTF-8 is kept as a lone surrogate, which the parser reports with its position. Newlines as Python's
    text mode reads them (\r\n -> \n)."""
    from gradflow.limits import too_long

    text = io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape")
    try:
        program = text.read(limit + 2).removeprefix("\ufeff")  # +1 for a BOM, +1 to see a program too long
    finally:
        text.detach()  # the caller owns the stream (stdin stays open)
    if len(program) > limit:
        raise too_long("length", f"the program text {what} has", limit=limit)
    return program


def read_stdin(limit: int) -> str:
    """The program on stdin (see read_text), or a package error saying why it cannot be read."""
    try:
        return read_text(stdin_bytes(), limit, "on stdin")
    except (OSError, ValueError) as err:
        raise ValueInputError("usage", f"cannot read the program from stdin: {err}") from None
