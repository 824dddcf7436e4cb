"""Run a user's Python script as `python FILE.py` would, reporting every backward() it calls.

`run_script` executes the file with runpy as `__main__` (so `if __name__ == "__main__":` blocks run) with
`sys.argv` set to the file and its arguments and its folder first on `sys.path`, inside a `ScriptTrace`;
`on_backward` gets each `BackwardCall`. The user's exceptions are raised again as GradflowErrors naming the
exception and the user's file:line. Running the file is the point: it is the user's own code, never text
from elsewhere. The library does not redirect the script's prints; `gradflow script` sends them to stderr.
"""
from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from gradflow.errors import GradflowError, NoGradientError, UserCodeError, ValueInputError, text_of
from gradflow.script.optimizer import OptimizerWatch
from gradflow.script.recorder import NO_GRAD_MESSAGE, BackwardCall, InternalFailure, ScriptTrace
from gradflow.tracer.failures import explained, warn_nonleaf_reads
from gradflow.tracer.source_lines import Interrupts, short_path, user_code


class StopScript(BaseException):
    """Raised by an `on_backward` callback to end the script there (a closed stdout, say).

    A BaseException, as KeyboardInterrupt is, so the script's own `except Exception:` does not catch it."""


def run_script(path: Path, args: list[str], on_backward: Callable[[BackwardCall], None],
               records: Callable[[int], bool] | None = None, optimizers: OptimizerWatch | None = None,
               autograd: bool = False) -> int:
    """Run the script; return how many backward() calls it made (at least one, or NoGradientError).

    `records(k)`: are backward k's ops recorded (a loop's other steps run unrecorded: see ScriptTrace); None:
    every one. `optimizers`: watches the optimizers the script creates while it runs. `autograd`: each recorded
    backward can draw the graph torch recorded (BackwardCall.autograd_graph())."""
    if not path.is_file():
        raise ValueInputError("file_not_found", f"no such file: {path}", hint="give the path of a Python script")
    saved = sys.argv, list(sys.path)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))  # as python does for a script: its folder first
    trace = ScriptTrace(str(path), on_backward, records, autograd)
    pid = os.getpid()
    interrupts = Interrupts()
    try:
        with interrupts, trace, optimizers or contextlib.nullcontext():
            runpy.run_path(str(path), run_name="__main__")  # runpy swaps sys.modules["__main__"] and back
    except StopScript:
        return trace.count
    except KeyboardInterrupt as err:
        if not interrupts.theirs(err):
            raise  # Ctrl-C
        raise _raised(path, err, trace) from err
    except InternalFailure as bug:
        raise bug.error from None
    except SystemExit as done:
        if done.code not in (None, 0):
            raise UserCodeError("user_code", f"{path} called sys.exit({done.code!r})",
                                hint="the script ended with a failure status: see its output above") from None
    except SyntaxError as err:
        where = f"{short_path(err.filename or str(path))}:{err.lineno}" if err.lineno else str(path)
        raise UserCodeError("user_code", f"{where}: {type(err).__name__}: {err.msg}",
                            hint="fix the script: python cannot run it either") from err
    except Exception as err:
        raise explained(_raised(path, err, trace), trace.failures, err) from err
    finally:
        sys.argv, sys.path[:] = saved
        _end_forked_copy(pid)
    warn_nonleaf_reads(trace.failures)
    if trace.count == 0:
        raise NoGradientError("no_backward", f"{path} ran to its end without calling backward()",
                              hint="call loss.backward() in the script; for a function that returns a loss, "
                                   "use gradflow inspect FILE.py:FUNCTION")
    return trace.count


def _end_forked_copy(pid: int) -> None:
    """A process the script forked ran on to the script's end: it exits there, as under `python FILE.py` (0, or
    1 if it raised; a sys.exit code as given); only the process that started the script reports."""
    if os.getpid() == pid:
        return
    err = sys.exc_info()[1]
    code = 0 if err is None else err.code if isinstance(err, SystemExit) and isinstance(err.code, int) else 1
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _raised(path: Path, err: BaseException, trace: ScriptTrace) -> GradflowError:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if user_code(f.filename)]
    where = f" (at {short_path(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    said = text_of(err)
    message = f"{path} raised {type(err).__name__}{': ' + said.splitlines()[0] if said else ''}{where}"
    if err is trace.failed and NO_GRAD_MESSAGE in said:
        call = trace.failed_call
        if call is not None and call.no_grad is not None:  # the line that cut every path, before torch's words
            name = next((n for n in call.root_names if n), "its output")
            return NoGradientError("no_gradient", f"`{call.code}` at {call.line}: {name} does not require grad: "
                                   f"{call.no_grad[0]}. torch said: {said.splitlines()[0]}", hint=call.no_grad[1])
        return NoGradientError("no_gradient", message, hint="nothing it differentiates requires grad: see the "
                               "table above for what was cut or never required grad")
    return UserCodeError("user_code", message, hint="fix the error in your script "
                                                    "(rerun with --debug for the full traceback)")
