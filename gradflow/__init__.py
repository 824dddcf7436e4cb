"""gradflow: see how gradients flow through a PyTorch computation.

    >>> from gradflow import explain
    >>> explain("(x*y1 - detach(x*y2))^2", x=1, y1=2, y2=7).grad("x")
    -20.0

Importing gradflow does not import torch; evaluating does.
"""
from __future__ import annotations

from gradflow.errors import (
    EvalError,
    ExitCode,
    GradflowError,
    LimitError,
    NoGradientError,
    ParseError,
    ValueInputError,
)

__all__ = ["explain", "sweep", "check", "hessian", "trace", "autograd_graph", "watch", "whatif", "compare",
           "run_batch", "parse", "explain_errors", "GradflowError", "ParseError", "ValueInputError", "EvalError",
           "LimitError", "NoGradientError", "ExitCode", "__version__"]

_LAZY = {"explain": "engine.explain", "parse": "language.parser", "check": "studies.numcheck",
         "hessian": "studies.hessian", "trace": "report.build", "autograd_graph": "report.op_graph",
         "watch": "report.watch", "sweep": "studies.sweeps", "whatif": "studies.whatif", "compare": "studies.compare",
         "run_batch": "batch.run", "explain_errors": "tracer.explain_errors"}


def _version() -> str:
    try:  # importlib.metadata is slow to import: only when asked
        from importlib.metadata import version

        return version("gradflow")
    except Exception:  # not installed (running from a source tree)
        return "0+unknown"


def __getattr__(name: str):  # PEP 562: keep `import gradflow` cheap
    if name == "__version__":
        return _version()
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # found directly from now on: no import machinery per `gradflow.trace()`
        return value
    raise AttributeError(f"module 'gradflow' has no attribute {name!r}")
