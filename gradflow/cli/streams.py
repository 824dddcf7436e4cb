"""Standard streams at the edges of the process: pipes, closed streams, Ctrl-C.

`run_safely(main)` wraps the console entry point, so every command (eval, ops,
batch, sweep, ...) inherits it:
- the reader of stdout went away (`gradflow ... | head -1`): point stdout at
  /dev/null and exit quietly with 0 (Python docs, "Note on SIGPIPE");
- Ctrl-C: exit 130 without a traceback (whatever was flushed stays written);
- a closed stdout/stderr (`>&-`): output is discarded instead of crashing;
- a closed stdin (`<&-`): reading it is a package error (exit 2), in every command;
- stdout (or stderr) that cannot be written (`> /dev/full`, a disk quota, a file-size limit): "cannot write the
  output: No space left on device", exit 2, also when it only shows at the final flush;
- a terminal whose encoding has no ●, ✂, — (PYTHONIOENCODING=ascii, a latin-1 locale): ASCII marks instead.
- a command that ran someone else's code (`inspect`) asks for `exit_hard`: once the output is flushed, the
  process ends with os._exit, so threads that code left running cannot hang the exit, and its exit handlers
  and objects (a long autograd graph in a global) are not run or freed after the report.
"""
from __future__ import annotations

import codecs
import contextlib
import errno
import io
import os
import sys
from collections.abc import Callable
from typing import BinaryIO, NoReturn, TypeGuard

from gradflow.errors import ExitCode, ValueInputError


def _devnull():
    return open(os.devnull, "w")  # noqa: SIM115 - lives until the process exits


def to_devnull(stream):
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
        return to_devnull(stream)


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
    sys.stdout = to_devnull(sys.stdout)
    return int(ExitCode.OK)


@contextlib.contextmanager
def unread():
    """Write a message that may find its reader gone: then silence both streams and go on.

    rich answers a broken pipe by pointing stdout at /dev/null and raising SystemExit(1).
    """
    try:
        yield
    except BrokenPipeError:
        sys.stdout, sys.stderr = to_devnull(sys.stdout), to_devnull(sys.stderr)
    except SystemExit as done:
        if done.code != 1:
            raise
        sys.stderr = to_devnull(sys.stderr)


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
    from gradflow.cli.work_process import finished

    if isinstance(code, str):
        print(code, file=sys.stderr, flush=True)
    number = code if isinstance(code, int) else 0 if code is None else 1
    finished(number)  # the parent watching this process (cli/work_process.py) hears that it finished
    os._exit(number)


def run_safely(main: Callable[[], object]) -> NoReturn:
    """Run a Click/Typer app (which ends in SystemExit) and exit with its code, quietly."""
    _EXIT_HARD.clear()
    _ensure_streams()
    ascii_fallback()
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
    except OSError as exc:  # --help, --version or a usage message into a full disk
        if not cannot_write(exc):
            raise
        code = output_failed(exc)
    try:  # output still buffered (a file is written in blocks) meets the full disk only now
        sys.stdout.flush()
    except OSError as exc:
        code = output_failed(exc) if cannot_write(exc) else code
    except ValueError:
        pass
    sys.stdout, sys.stderr = _flush(sys.stdout), _flush(sys.stderr)
    _end_batch_fork_server()
    if _EXIT_HARD:
        _exit_now(code)
    from gradflow.cli.startup import before_exit

    before_exit()
    sys.exit(code)


def _end_batch_fork_server() -> None:
    """The process is about to exit: a `batch --jobs N`'s fork server goes now. Left to itself it would end only
    after this process, by the interpreter's whole teardown of torch, while still holding our stdout (a reader of
    the output, `| jq`, waits for that). Run in-process (the library, a test runner, a notebook), it stays up
    for the next batch, which then starts its workers without importing torch again."""
    pool = sys.modules.get("gradflow.batch.pool")
    if pool is not None:
        pool.end_of_command()


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


# ---- output that cannot be written -----------------------------------------------------------------------

_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # only writes fail so: the output (or a -o file) is at fault


def cannot_write(exc: BaseException) -> TypeGuard[OSError]:
    """Is this the error of a write that found no room (full disk, quota, file-size limit)?"""
    return isinstance(exc, OSError) and exc.errno in _NO_ROOM


def output_failed(exc: OSError) -> int:
    """stdout or stderr could not be written: say so on stderr if it still takes text; the exit code (2).

    What stdout still holds is dropped, so the exit flush does not fail again; if stdout flushes, it was
    stderr that failed, and stdout keeps its output."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        sys.stdout = to_devnull(sys.stdout)
    from gradflow.render.plain import print_error

    error = ValueInputError("output", f"cannot write the output: {exc.strerror or exc}",
                            hint="make room on the disk, or send the output somewhere else")
    try:
        print_error(error)
    except (OSError, ValueError):
        sys.stderr = to_devnull(sys.stderr)
    return int(ExitCode.INPUT)


# ---- terminals that cannot show the marks ----------------------------------------------------------------

_MARKS = {"●": "*", "✂": "x", "◌": "o", "○": "-", "⚠": "!", "—": "-", "–": "-", "→": "->", "↑": "^", "↺": "^",
          "≈": "~", "≤": "<=", "≥": ">=", "·": ".", "•": "*", "×": "x", "✓": "+", "✗": "x", "…": "..."}
_BOX = {0x2500: "-", 0x2501: "-", 0x2502: "|", 0x2503: "|", 0x2550: "=", 0x2551: "|"}  # others: +
ASCII_ERRORS = "gradflow-ascii"


def ascii_mark(ch: str) -> str:
    """The ASCII stand-in for a character the output's encoding lacks: a mark as a mark, plotille's braille
    dots as * (blank as a space), anything else as its escape (\\u00e9), so no character is lost silently."""
    code = ord(ch)
    if ch in _MARKS:
        return _MARKS[ch]
    if 0x2800 <= code <= 0x28FF:
        return " " if code == 0x2800 else "*"
    if 0x2500 <= code <= 0x257F:
        return _BOX.get(code, "+")
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _replace(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    return "".join(ascii_mark(ch) for ch in err.object[err.start:err.end]), err.end


def ascii_fallback() -> None:
    """stdout/stderr whose encoding cannot write the marks (● ✂ —) write ASCII stand-ins instead of failing.
    UTF-8 streams are left alone. rich sees the encoding too and draws its boxes in ASCII."""
    codecs.register_error(ASCII_ERRORS, _replace)
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not encoding or not hasattr(stream, "reconfigure"):
            continue
        try:
            "●✂—".encode(encoding)
        except UnicodeEncodeError:
            stream.reconfigure(errors=ASCII_ERRORS)
        except LookupError:
            continue
