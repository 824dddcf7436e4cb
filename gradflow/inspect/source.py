"""Where in the user's code an op ran: the innermost frame outside torch and gradflow.

Torch-free (finds torch's directory without importing it), so error paths can use it.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import sys
from types import FrameType


def _torch_dir() -> str:
    spec = importlib.util.find_spec("torch")
    origin = spec.origin if spec is not None and spec.origin else os.path.join("site-packages", "torch", "x")
    return os.path.dirname(origin) + os.sep


SKIP_DIRS = (_torch_dir(), os.path.dirname(os.path.dirname(__file__)) + os.sep)  # torch and all of gradflow
_FUNCTION_PY = os.path.join("torch", "autograd", "function.py")


def user_code(filename: str) -> bool:
    return not filename.startswith(SKIP_DIRS) and not filename.startswith("<frozen")


def user_line(start: int = 1) -> str | None:
    """`file:line` of the innermost frame outside torch and gradflow (the user's code)."""
    frame: FrameType | None = sys._getframe(start)
    while frame is not None:
        if user_code(frame.f_code.co_filename):
            return f"{short_path(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def in_custom_function() -> bool:
    """Is a custom torch.autograd.Function's forward running? (It runs with grad off, but is no cut.)"""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "apply" and frame.f_code.co_filename.endswith(_FUNCTION_PY):
            return True
        frame = frame.f_back
    return False


@functools.lru_cache(maxsize=512)
def short_path(path: str) -> str:
    """Relative to the working directory when below it, else as given."""
    rel = os.path.relpath(path) if os.path.isabs(path) else path
    return path if rel.startswith("..") else rel
