"""`gradflow.explain_errors`, the Python entry to the failures gradflow explains (tracer/failures.py), in two forms:

    @gradflow.explain_errors            # a function: runs plain; re-run once, recorded, only if torch raised
    def step(batch): ...

    with gradflow.explain_errors():     # a block that cannot be re-run: recorded as it runs
        train()

Both re-raise torch's own exception (the same object, its type and traceback unchanged) with the explanation
added to its message and as `err.gradflow` (a BackwardFailure).

Why two: recording as the code runs puts a torch function mode on torch's stack, and a mode that does nothing
costs more than gradflow's target (1.2x a training step, bench/explain_errors_cost.py). A function can be run
again, so the function form runs it plain and records only a second run of the call that failed, after torch's
RNG state is put back as it was (dropout draws the same mask). What that asks of the function: to be safe to run
twice up to the failure (it fails before `optimizer.step()`, or repeating what ran before the failure does not
matter). A second run that fails differently, or not at all, leaves torch's error as it was, with a note that
gradflow could not reproduce it. What happened before the call (a graph a backward() of an earlier call freed)
is not in the record: said as far as the call's arguments show it.
"""
from __future__ import annotations

import functools
import inspect
import re
import warnings
from collections.abc import Callable
from contextvars import ContextVar
from types import TracebackType
from typing import Any, TypeVar, overload

import torch

from gradflow.errors import text_of
from gradflow.tracer.failure_log import FailureLog, FailureMode
from gradflow.tracer.failure_words import BackwardFailure
from gradflow.tracer.failures import (
    attach,
    explain_failure,
    explains,
    graph_nodes,
    second_time,
    warn_nonleaf_reads,
)
from gradflow.tracer.source_lines import lines_from

F = TypeVar("F", bound=Callable[..., Any])
_RECORDING: ContextVar[bool] = ContextVar("gradflow_recording", default=False)  # inside a with-form or a re-run


class ExplainErrors:
    """The with-form: records every torch call of the block (FailureMode); explains torch's error at its end.
    Used as a decorator (`@gradflow.explain_errors()`), it is the function form."""

    def __enter__(self) -> FailureLog:
        self.log = FailureLog()
        self._mode = FailureMode(self.log)
        self._token = _RECORDING.set(True)
        self._mode.__enter__()
        return self.log

    def __exit__(self, kind, err: BaseException | None, tb: TracebackType | None) -> None:
        log = self.log
        try:
            self._mode.__exit__(kind, err, tb)
        finally:
            _RECORDING.reset(self._token)
        if isinstance(err, (RuntimeError, AttributeError, TypeError)):
            failure = explain_failure(log, err)
            if failure is not None:
                attach(err, failure)
                if failure.kind == "nonleaf_grad":
                    log.nonleaf_grads.clear()  # told in the error: not again as a warning
        warn_nonleaf_reads(log)

    def __call__(self, step: F) -> F:
        return explain_errors(step)


@overload
def explain_errors() -> ExplainErrors: ...


@overload
def explain_errors(step: F) -> F: ...


def explain_errors(step=None):
    """Explain a failing backward: `with gradflow.explain_errors():` around a block, or `@gradflow.explain_errors`
    on a function (`gradflow.explain_errors(step)(batch)`), which costs nothing until torch raises, then runs the
    same call again, recorded, to explain it; the function must be safe to run twice (it fails before
    `optimizer.step()`). torch's own exception comes out with the explanation added to its message and as
    `err.gradflow`; in the with-form `.grad` read on a non-leaf also warns with the leaf to read instead."""
    if step is None:
        return ExplainErrors()
    if not callable(step):
        raise TypeError(f"gradflow.explain_errors() takes a function to explain, not {type(step).__name__}")

    def explained(*args, **kwargs):
        if _RECORDING.get():  # an outer with-form records this call already
            return step(*args, **kwargs)
        rng = _rng_state()
        try:
            return step(*args, **kwargs)
        except (RuntimeError, AttributeError, TypeError) as err:
            if not hasattr(err, "gradflow") and explains(err):
                _explain_by_rerun(err, step, args, kwargs, rng)
            raise

    return functools.update_wrapper(explained, step, updated=())


def _rng_state() -> tuple:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _explain_by_rerun(err: BaseException, step, args: tuple, kwargs: dict, rng: tuple) -> None:
    """Run the call again under the with-form, as it first ran, and give `err` the explanation of the same error."""
    name = getattr(step, "__qualname__", None) or type(step).__name__
    again, log = _rerun(step, args, kwargs, rng)
    ran = f"gradflow ran `{name}` again"
    if again is None:
        attach(err, None, f"{ran} to explain this, and it did not fail; {_WITH_FORM}")
    elif second_time(again) and not second_time(err):
        attach(err, None, f"{ran} to explain this, but the graph it goes back through was made before the call, "
                          f"and the first run's backward() freed it: explain a function that runs the forward too, "
                          f"or {_WITH_FORM}")
    elif not _same(err, again):
        attach(err, None, f"{ran} to explain this, and it raised {type(again).__name__}: {_first_line(again)}; "
                          f"{_WITH_FORM}")
    else:
        failure = getattr(again, "gradflow", None) or _freed_before(log, err, again, step, (args, kwargs), name)
        if failure is not None:
            attach(err, failure)
        elif isinstance(err, RuntimeError):
            attach(err, None, f"{ran}: what caused this happened before the call; {_WITH_FORM}")


def _rerun(step, args: tuple, kwargs: dict, rng: tuple) -> tuple[Exception | None, FailureLog]:
    """The call once more, recorded, with torch's RNG as it was before the first run: what it raised, if anything."""
    torch.set_rng_state(rng[0])
    if rng[1] is not None:
        torch.cuda.set_rng_state_all(rng[1])
    recording = ExplainErrors()
    try:
        with warnings.catch_warnings(), recording as log:
            warnings.simplefilter("ignore")  # torch's warnings were given by the first run
            step(*args, **kwargs)
    except Exception as again:  # noqa: BLE001 - whatever the second run raised is compared with the first
        return again, recording.log
    return None, log


_WITH_FORM = "put the code in `with gradflow.explain_errors():` to record it as it first runs"


def _same(err: BaseException, again: BaseException) -> bool:
    """The same error: its type, and torch's message up to its numbers (the versions a write made may differ)."""
    def words(e):
        return re.sub(r"\d+", "#", text_of(e).split("\n\nwhy backward failed:")[0])
    return type(err) is type(again) and words(err) == words(again)


def _first_line(err: BaseException) -> str:
    line = text_of(err).split("\n")[0]
    return line if len(line) <= 120 else line[:119] + "…"


# ---- what only the function form meets: a graph freed before the call -----------------------------------------
def _freed_before(log: FailureLog, err: BaseException, again: BaseException, step, given: tuple,
                  name: str) -> BackwardFailure | None:
    """Backward met a graph that no backward() of this call freed: one before the call did. The tensor that
    carries it in is one the call was given (or a global it reads), named as the function names it."""
    if not second_time(again) or log.failed_in is None:
        return None
    failing = graph_nodes(log.failed_in.roots)
    carrier = next((n for n, t in _given(step, *given) if t.grad_fn is not None and id(t.grad_fn) in failing),
                   None)
    caller = lines_from(err.__traceback__.tb_frame)[0] if err.__traceback__ is not None else None
    call = {"op": f"{name}()", "line": caller, "argument": carrier}
    t = f"`{carrier}`" if carrier else "a tensor kept from an earlier call (an argument, a global, an attribute)"
    fix = (f"a backward() before this call of `{name}()` freed the graph {t} brings in: detach it between calls "
           f"(`{carrier or 'h'} = {carrier or 'h'}.detach()`), so each backward() covers one call; or pass "
           "retain_graph=True to that earlier backward() if the gradient must go through both")
    return BackwardFailure("graph_freed", carrier, fix, call=call, message=text_of(again))


def _given(step, args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of what the call was given, as the function names it (`hidden`, `state[0]`), then of the
    globals its code reads."""
    try:
        bound = inspect.signature(step).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {f"argument {i + 1}": a for i, a in enumerate(args)} | kwargs
    code = getattr(step, "__code__", None)
    scope = getattr(step, "__globals__", {})
    read = {n: scope[n] for n in (code.co_names if code is not None else ()) if n in scope}
    return [found for name, value in (*bound.items(), *read.items()) for found in _tensors_in(name, value)]


def _tensors_in(name: str, value) -> list[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        return [(name, value)]
    if isinstance(value, (list, tuple)):
        return [f for i, v in enumerate(value) for f in _tensors_in(f"{name}[{i}]", v)]
    return []

