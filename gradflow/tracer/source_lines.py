"""Where in the user's code an op ran, or their code failed: the innermost frames outside torch and gradflow.

Torch-free (finds torch's directory without importing it), so error paths can use it.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from types import FrameType, TracebackType

from gradflow.errors import UserCodeError, text_of


def _torch_dir() -> str:
    spec = importlib.util.find_spec("torch")
    origin = spec.origin if spec is not None and spec.origin else os.path.join("site-packages", "torch", "x")
    return os.path.dirname(origin) + os.sep


GRADFLOW_DIR = os.path.dirname(os.path.dirname(__file__)) + os.sep
SKIP_DIRS = (_torch_dir(), GRADFLOW_DIR)  # torch and all of gradflow
_FUNCTION_PY = os.path.join("torch", "autograd", "function.py")
_GRAD_MODE_PY = os.path.join("torch", "autograd", "grad_mode.py")
_CONTEXTLIB_PY = os.path.join("torch", "utils", "_contextlib.py")
_CHECKPOINT_PY = os.path.join("torch", "utils", "checkpoint.py")


def user_code(filename: str) -> bool:
    return not filename.startswith(SKIP_DIRS) and not filename.startswith("<frozen")


def user_frame(start: int = 1) -> FrameType | None:
    """The innermost frame outside torch and gradflow (the user's code)."""
    frame: FrameType | None = sys._getframe(start + 1)
    while frame is not None and not user_code(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_line(start: int = 1) -> str | None:
    """`file:line` of the innermost frame outside torch and gradflow (the user's code)."""
    frame = user_frame(start + 1)
    return None if frame is None else f"{short_path(frame.f_code.co_filename)}:{frame.f_lineno}"


def lines(start: int = 1) -> tuple[str | None, str | None]:
    """(the user's own line, the library line the op ran at when that is not the user's): the innermost frame of
    the user's own code (not torch, gradflow, the standard library or an installed package such as transformers),
    which is the call that entered library code; and the innermost frame outside torch and gradflow. Without a
    frame of the user's own, the library line is the line."""
    return lines_from(sys._getframe(start))


def lines_from(frame: FrameType | None) -> tuple[str | None, str | None]:
    """lines() from this frame up."""
    library = None
    kinds = _KINDS
    while frame is not None:
        name = frame.f_code.co_filename
        kind = kinds.get(name)
        if kind is None:
            kind = kinds[name] = _kind(name)
        if kind == _THEIRS or (kind == _LIBRARY and library is None):
            key = (frame.f_code, frame.f_lasti)  # the same instruction of the same code: the same line
            at = _AT.get(key)
            if at is None:
                if len(_AT) >= _AT_MAX:
                    _AT.clear()
                at = _AT[key] = f"{short_path(name) if kind == _THEIRS else library_path(name)}:{frame.f_lineno}"
            if kind == _THEIRS:
                return at, library
            library = at
        frame = frame.f_back
    return library, None


_SKIPPED, _LIBRARY, _THEIRS = 0, 1, 2
_KINDS: dict[str, int] = {}  # file -> how lines() counts its frames (asked for every op that uses a parameter)
_AT: dict[tuple, str] = {}  # (code object, instruction) -> its `file:line` as lines() spells it
_AT_MAX = 4096


def _kind(filename: str) -> int:
    if not user_code(filename):
        return _SKIPPED
    return _LIBRARY if filename.startswith(_library_dirs()) else _THEIRS


@dataclass(frozen=True)
class GradSwitch:
    """torch._C._set_grad_enabled was called: by which context (spelled as the user wrote it), entering or
    leaving it, and whether a reentrant checkpoint did it (the id of its ctx; backward: its recomputation)."""

    action: str  # enter | exit | again (set_grad_enabled's __enter__ after its __init__ already switched)
    how: str  # torch.no_grad() | torch.set_grad_enabled(False) | @torch.no_grad() | ...
    checkpoint: int | None = None
    recompute: bool = False
    inputs_require_grad: bool = True  # a checkpoint's forward: does any tensor it was given require grad?


_GRAD_CONTEXTS = {"no_grad": "torch.no_grad()", "enable_grad": "torch.enable_grad()"}


def grad_switch(value: bool) -> GradSwitch:
    """Who is switching gradient recording to `value` (called from the trace's torch-function handler)."""
    frame: FrameType | None = sys._getframe(1)
    names: list[tuple[str, str]] = []  # (class, method) of torch's grad-mode frames, innermost first
    decorated = False
    while frame is not None:  # gradflow's handler, torch's mode machinery, grad_mode.py's contexts, the caller
        file = frame.f_code.co_filename
        if file.endswith(_GRAD_MODE_PY):
            names.append((type(frame.f_locals.get("self")).__name__, frame.f_code.co_name))
        elif file.endswith(_CONTEXTLIB_PY):
            decorated = True
        elif names or not file.startswith(SKIP_DIRS):
            break
        frame = frame.f_back
    methods = {m for _, m in names}
    action = "exit" if methods & {"__exit__", "__call__"} else "again" if names[:1] == [("set_grad_enabled",
                                                                                          "__enter__")] else "enter"
    cls = names[-1][0] if names else None
    how = _GRAD_CONTEXTS.get(cls or "", f"torch.set_grad_enabled({value})" if cls == "set_grad_enabled" else
                             f"torch._C._set_grad_enabled({value})")
    checkpoint, recompute, inputs = None, False, True
    if frame is not None and frame.f_code.co_filename.endswith(_CHECKPOINT_PY) \
            and frame.f_code.co_name in ("forward", "backward") and "ctx" in frame.f_locals:
        local = frame.f_locals
        checkpoint, recompute = id(local["ctx"]), frame.f_code.co_name == "backward"
        inputs = any(getattr(a, "requires_grad", False) is True for a in local.get("args", ()))
    return GradSwitch(action, "@" + how if decorated else how, checkpoint, recompute, inputs)


def custom_function() -> tuple[str, tuple] | None:
    """The custom torch.autograd.Function whose forward is running, if any (it runs with grad off, but is no cut):
    its class name and the arguments it was applied to."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "apply" and frame.f_code.co_filename.endswith(_FUNCTION_PY):
            local = frame.f_locals
            return getattr(local.get("cls"), "__name__", "Function"), tuple(local.get("args", ()))
        frame = frame.f_back
    return None


@functools.lru_cache(maxsize=512)
def short_path(path: str) -> str:
    """Relative to the working directory when below it, else as given."""
    rel = os.path.relpath(path) if os.path.isabs(path) else path
    return path if rel.startswith("..") else rel


# ---- the user's code failed --------------------------------------------------------------
class Interrupts:
    """While the user's code runs: tells a real Ctrl-C from a KeyboardInterrupt their code raised (theirs is
    their failure, exit 5; a Ctrl-C stops gradflow, 130). Only the main thread can set a SIGINT handler; where
    another handler is in place, every KeyboardInterrupt counts as a Ctrl-C."""

    def __init__(self) -> None:
        self.interrupted = False  # a real SIGINT arrived while their code ran
        self.can_tell = False
        self._old: object = None  # the handler to put back

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is not threading.main_thread():
            return self
        old = signal.getsignal(signal.SIGINT)
        if old is signal.SIG_IGN:  # (started in the background, or by nohup): no Ctrl-C reaches this process
            self.can_tell = True
        elif old is signal.default_int_handler:
            self._old = old
            signal.signal(signal.SIGINT, self._on_sigint)
            self.can_tell = True
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)  # type: ignore[arg-type]  # (default_int_handler)
            self._old = None

    def _on_sigint(self, signum, frame):
        self.interrupted = True
        raise KeyboardInterrupt

    def theirs(self, err: BaseException) -> bool:
        """A KeyboardInterrupt their code raised (not a Ctrl-C)."""
        return isinstance(err, KeyboardInterrupt) and self.can_tell and not self.interrupted


FIX_HINT = "fix the error in your code (rerun with --debug for the full traceback)"
EXIT_HINT = ("return the loss instead of exiting: code that exits (sys.exit, argparse) belongs under "
             "`if __name__ == \"__main__\":`")


@functools.lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    """torch, the standard library and site-packages: code the user calls, not theirs."""
    import sysconfig

    paths = sysconfig.get_paths()
    return (SKIP_DIRS[0], *(os.path.join(paths[k], "") for k in ("stdlib", "platstdlib", "purelib", "platlib")))


@functools.lru_cache(maxsize=512)
def library_path(path: str) -> str:
    """An installed package's file as its import path shows it: `transformers/pytorch_utils.py`."""
    for root in sorted(_library_dirs()[1:], key=len, reverse=True):
        if path.startswith(root):
            return path[len(root):]
    return short_path(path)


def their_code(filename: str) -> bool:
    """A frame of the user's own code: not gradflow's, torch's, the standard library's or an installed package's."""
    return user_code(filename) and not filename.startswith(_library_dirs()) and not filename.startswith("<")


def user_frames(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    """The traceback's frames in the user's own code only: a library's frames (torch's autograd engine, argparse)
    are not theirs to fix, and the message already says what the library raised; --debug shows every frame."""
    return [f for f in traceback.extract_tb(tb) if their_code(f.filename)]


def raised_by_gradflow(err: BaseException) -> bool:
    """Did the innermost frame of the traceback run gradflow's own code (a bug, not the user's failure)?"""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(GRADFLOW_DIR)


def raised_by_them(err: BaseException) -> bool:
    """Did the innermost frame of the traceback run the user's own code (a method of an object they returned,
    say), so that the failure is theirs even when gradflow made the call?"""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and their_code(frames[-1].filename)


def user_failure(what: str, err: BaseException, hint: str | None = None) -> UserCodeError:
    """`main() raised ValueError: bad batch size (at model.py:12)`, with the user's frames of the traceback."""
    frames = user_frames(err.__traceback__)
    where = f"{short_path(frames[-1].filename)}:{frames[-1].lineno}" if frames else None
    if isinstance(err, SyntaxError) and err.filename:
        where = f"{short_path(err.filename)}:{err.lineno}"
    if isinstance(err, SystemExit):
        text = f"{what} called sys.exit({'' if err.code is None else repr(err.code)})"
        hint = hint or EXIT_HINT
    else:
        said = f": {text_of(err)}" if text_of(err) else ""
        text = f"{what} raised {type(err).__name__}{said}"
    return UserCodeError("user_code", text + (f" (at {where})" if where else ""), hint=hint or FIX_HINT,
                         frames=[(short_path(f.filename), f.lineno or 0, f.name, (f.line or "").strip())
                                 for f in frames])
