"""The module calls a trace sees: nn.Module._call_impl (where torch runs module hooks) is replaced while a trace
records, and each call enters and leaves the trace's module stack (tracer/trace.py: Trace.enter_module).

Not global module hooks: torch's forward hooks do not run when the forward raises (the stack would keep a module
left by an exception), and any global hook sends every module call down torch's slow path of hooks. Not
`__call__`: setting a special method updates the slots of every Module subclass.
"""
from __future__ import annotations

from typing import Protocol

import torch


class Trace(Protocol):
    """What a module call asks of a trace (tracer/trace.py's Trace, which imports this module)."""

    def enter_module(self, module) -> None: ...

    def leave_module(self, module) -> None: ...

    def run_leaf(self, module, args: tuple, kwargs: dict): ...


NOT_RUN = object()  # Trace.run_leaf's answer for a module call it leaves to the general path

_TRACES: list[Trace] = []  # recording now: every module call is seen by each (usually one)
_PLAIN_CALL: list = [torch.nn.Module._call_impl]  # what _module_call runs: _call_impl as the first trace found it


def calls_seen_by(trace: Trace, on: bool) -> None:
    """Start (on) or stop showing module calls to `trace`. Put back as it was when the last trace ends, unless
    something else replaced it meanwhile (then theirs stays, and ours, if theirs calls it, passes every call
    straight on)."""
    if on:
        if not _TRACES and torch.nn.Module._call_impl is not _module_call:
            _PLAIN_CALL[0] = torch.nn.Module._call_impl
            torch.nn.Module._call_impl = _module_call  # type: ignore[method-assign, assignment]
        _TRACES.append(trace)
        return
    if trace in _TRACES:
        _TRACES.remove(trace)
    if not _TRACES and torch.nn.Module._call_impl is _module_call:
        torch.nn.Module._call_impl = _PLAIN_CALL[0]  # type: ignore[method-assign]


def _module_call(module, *args, **kwargs):
    if len(_TRACES) == 1:
        out = _TRACES[0].run_leaf(module, args, kwargs)
        if out is not NOT_RUN:
            return out
    seen = _TRACES[:]
    for t in seen:
        t.enter_module(module)
    try:
        return _PLAIN_CALL[0](module, *args, **kwargs)
    finally:
        for t in seen:
            t.leave_module(module)


def running_mean(module):
    """The module's running mean (BatchNorm & co. keep it as a buffer and update it in training), or None. Read
    from the instance: getattr would have nn.Module.__getattr__ raise and catch AttributeError for every module
    call that has none."""
    d = module.__dict__
    buffers = d.get("_buffers")
    return buffers.get("running_mean") if buffers is not None and "running_mean" in buffers else \
        d.get("running_mean")
