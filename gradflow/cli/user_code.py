"""Running someone else's code (`gradflow inspect FILE.py:FUNCTION`) so that it cannot take the command with it.

While their code runs (the import, FUNCTION, the backward pass with their hooks):
- stdout: what it writes goes to stderr, at the file-descriptor level (fd 1 points at stderr), so print,
  sys.__stdout__, os.write(1, ...) and a C extension's printf all stay out of `--json`; Python's and C's
  buffers are flushed before fd 1 is given back;
- sys.path: their file's folder comes first, as with `python FILE.py` (their sibling modules import), and is
  taken off afterwards; gradflow imports what it needs beforehand (`preload`), so a `rich.py` beside the model
  shadows nothing of gradflow's;
- failures: any exception, SystemExit (sys.exit) and a KeyboardInterrupt they raise included, is their failure
  (UserCodeError, exit 5, with their frames of the traceback); a real Ctrl-C (SIGINT) stays an interrupt (130).
Threads they leave running are reported; the command then exits without waiting for them (streams.exit_hard).
A process their code forks that comes back into gradflow (it returned or raised) ends there, quietly: only the
process gradflow started reports. What ends the process itself (os._exit, a signal, a crash) is seen by the
command's watching parent (cli/work_process.py).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from gradflow.errors import GradflowError


def preload() -> None:
    """Import everything the command needs after the user's code ran, while sys.path is still gradflow's own."""
    import ctypes  # noqa: F401  (flushing C's stdio buffers)

    import rich.console  # noqa: F401
    import rich.table  # noqa: F401

    import gradflow.analysis.explanation  # noqa: F401
    import gradflow.render.node_table  # noqa: F401
    import gradflow.report.build  # noqa: F401
    import gradflow.report.inspect_report  # noqa: F401
    import gradflow.report.module_picture  # noqa: F401
    import gradflow.report.param_table  # noqa: F401
    import gradflow.tracer.teardown  # noqa: F401
    import gradflow.values.jsonable  # noqa: F401


class UserCode:
    """What `contained` yields: `run` calls into the user's code; `leftover_threads` after it."""

    def __init__(self) -> None:
        self.pid = os.getpid()  # a process their code forks runs on from their call: it is not this one
        self.threads = set(threading.enumerate())
        from gradflow.tracer.source_lines import Interrupts

        self.interrupts = Interrupts()  # a real Ctrl-C, or a KeyboardInterrupt their code raised

    def run(self, what: str, fn: Callable[..., Any], *args, all_errors: bool = True, **kwargs):
        """fn(*args, **kwargs); what it raises is the user's failure (`what` names the step), except
        gradflow's own errors, a real Ctrl-C, and with all_errors=False any Exception (gradflow sorted those)."""
        from gradflow.cli.work_process import at
        from gradflow.tracer.source_lines import raised_by_them, user_failure

        at(what)
        try:
            result = fn(*args, **kwargs)
        except BaseException as err:
            self._end_forked_copy(1)
            if isinstance(err, GradflowError):
                raise
            if isinstance(err, KeyboardInterrupt) and not self.interrupts.theirs(err):
                raise
            if not all_errors and isinstance(err, Exception) and not raised_by_them(err):
                raise
            raise user_failure(what, err) from err
        self._end_forked_copy(0)
        return result

    def _end_forked_copy(self, code: int) -> None:
        """A process their code forked came back here (it returned or raised): it ends now, quietly, with 0 or 1,
        as its own code would; only the process gradflow started reports."""
        if os.getpid() != self.pid:
            flush_all()
            os._exit(code)

    def leftover_threads(self) -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t not in self.threads and t.is_alive() and not t.daemon]


@contextlib.contextmanager
def contained(folder: str) -> Iterator[UserCode]:
    user = UserCode()
    with stdout_to_stderr(), user.interrupts:
        sys.path.insert(0, folder)
        try:
            yield user
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[int | None]:
    """While the user's code runs, everything written to stdout goes to stderr: sys.stdout, and fd 1 itself
    (sys.__stdout__, os.write(1, ...), C's printf). Yields a duplicate of the real stdout's fd (None if stdout or
    stderr is closed), for output that must still reach stdout meanwhile (`script`'s records)."""
    saved = _stdout_to_stderr()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield saved
    finally:
        _give_stdout_back(saved)


def flush_all() -> None:
    """Python's standard streams and C's stdio buffers (a C extension's printf)."""
    for stream in (sys.stdout, sys.__stdout__, sys.stderr, sys.__stderr__):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()  # type: ignore[union-attr]
    with contextlib.suppress(OSError, AttributeError, TypeError):
        import ctypes

        ctypes.CDLL(None).fflush(None)


def _stdout_to_stderr() -> int | None:
    """Point fd 1 at stderr; returns a duplicate of the old fd 1 (None if either is closed)."""
    flush_all()
    try:
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


def _give_stdout_back(saved: int | None) -> None:
    flush_all()  # what their code buffered goes to stderr, before fd 1 is stdout again
    if saved is not None:
        os.dup2(saved, 1)
        os.close(saved)
