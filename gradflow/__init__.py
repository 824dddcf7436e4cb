"""gradflow: see how gradients flow through a PyTorch computation.

    >>> from gradflow import explain
    >>> explain("(x*y1 - detach(x*y2))^2", x=1, y1=2, y2=7).grad("x")
    -20.0

Importing gradflow does not import torch; evaluating does.
"""
from __future__ import annotations

from .errors import EvalError, ExitCode, GradflowError, LimitError, NoGradientError, ParseError, ValueInputError

__all__ = ["explain", "check", "hessian", "trace", "parse", "GradflowError", "ParseError", "ValueInputError",
           "EvalError", "LimitError", "NoGradientError", "ExitCode", "__version__"]

try:
    from importlib.metadata import version as _version

    __version__ = _version("gradflow")
except Exception:  # not installed (running from a source tree)
    __version__ = "0+unknown"

_LAZY = {"explain": "api", "parse": "parser", "compile_program": "api", "check": "numcheck",
         "hessian": "secondorder", "trace": "tracer"}


def __getattr__(name: str):  # PEP 562: keep `import gradflow` cheap
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'gradflow' has no attribute {name!r}")
