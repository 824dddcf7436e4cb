"""Record, while the user's code runs, what explains a failing backward: in-place writes, ops with their lines, and
the backward() calls, so that when torch raises, the lines that caused it can be named (tracer/failures.py).

The commands and `with gradflow.explain_errors():` record while the code runs (a block cannot be run twice);
the function form of explain_errors runs plain and records only a second run of a call that failed
(tracer/explain_errors.py). What it keeps is small and bounded:
- every in-place write (`x += 1`, `h[:, 0] = 0`, `relu_()`, `out=`, an optimizer's step): the tensor's storage, its
  version after the write, the op and the user's line. A view shares its base's storage and version counter, so
  a write through a view is found for the base (CopySlices) too;
- every op that ran with gradients on and a tensor input requiring grad (the ops that may save a tensor for
  backward): its name, its tensors (storage, version, shape) and the user's line;
- every backward() call: its line, whether it kept the graph, and (when it did not) its root's autograd node,
  to find later which part of a graph it freed;
- every reentrant checkpoint none of whose inputs requires grad (autograd records nothing of it).
One recorder, two ways in: where a command already traces (`gradflow script`, `inspect`), the trace hands each
call of the user's to `FailureLog.call` (Trace.run; its one shortcut, run_leaf, to `op_ran`), so the calls are
dispatched once; `explain_errors()`, which has no trace, puts a FailureMode of its own on torch's stack.
Each is a ring buffer, so a long training loop keeps only its recent steps. Saved-tensor hooks would name the
saved tensors exactly, but torch skips its version check for tensors that went through a pack hook: the very
error to explain would vanish, and backward would return wrong gradients.
"""
from __future__ import annotations

import itertools
import warnings
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.overrides import TorchFunctionMode

from gradflow.tracer.grad_regions import DeadCheckpoint
from gradflow.tracer.records import storage_of
from gradflow.tracer.records import written as written_by
from gradflow.tracer.source_lines import grad_switch, lines, user_frame
from gradflow.tracer.trace import step_aside, step_back

OPS_KEPT = 20_000  # ops with gradients on, most recent first out
WRITES_KEPT = 20_000
BACKWARDS_KEPT = 8
_BACKWARDS = {"backward", "grad"}  # Tensor.backward, torch.autograd.backward, torch.autograd.grad
_ATTRIBUTES = {"__get__", "__set__", "__delete__"}  # x.grad, x.shape, x.grad = None: no op, nothing saved
_GRAD = torch.Tensor.grad  # the descriptor: its __get__ is a new object each time, its __self__ this one


class Seen(NamedTuple):  # (a NamedTuple: one is made per tensor of every op recorded, the cheapest to make)
    """A tensor as an op saw it: its storage (shared by its views), its version then, its shape."""

    storage: int
    version: int
    shape: tuple[int, ...]


@dataclass(frozen=True)
class OpSeen:
    index: int
    name: str
    ins: tuple[Seen, ...]
    outs: tuple[Seen, ...]
    line: str | None


@dataclass(frozen=True)
class Write:
    """An in-place write: the tensor written (after the write: its version is the one it made) and where."""

    index: int
    name: str
    tensor: Seen
    line: str | None
    optimizer: bool  # run inside torch.optim (an optimizer's step)


@dataclass
class BackwardSeen:
    index: int  # in the order of ops and writes
    number: int  # 1, 2, ...: the how-manieth backward() of the block
    line: str | None
    retain_graph: bool
    roots: list  # the roots' autograd nodes, kept (once it ran) only when the call freed the graph


@dataclass
class LeafWrite:
    """The in-place op torch refused on a leaf that requires grad (or a view of one), as it was called."""

    name: str
    line: str | None
    shape: tuple[int, ...]


@dataclass
class NonLeafGrad:
    """`.grad` read on a tensor that is not a leaf and does not retain its grad (torch warns and gives None)."""

    tensor: torch.Tensor
    line: str | None


def seen(t: torch.Tensor) -> Seen:
    storage = storage_of(t)  # none: a tensor without storage (sparse, a functional wrapper) stands for itself
    return Seen(id(t) if storage is None else storage, t._version, t.shape)  # (torch.Size is a tuple)


def warn_at(message: Warning | str, category: type[Warning], file: str | None, line: int, scope: dict | None = None,
            stacklevel: int = 1) -> None:
    """Give a warning at the user's `file:line` (`scope`: that frame's globals, whose module and registry
    warnings.warn would use); without a file, `stacklevel` frames above the caller."""
    if file is None:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    elif scope is None:
        warnings.warn_explicit(message, category, file, line)
    else:
        warnings.warn_explicit(message, category, file, line, module=scope.get("__name__"),
                               registry=scope.setdefault("__warningregistry__", {}))


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


class FailureLog:
    """The recorder. Each torch call of the block goes through `call` (run, then recorded): the calls a trace
    sees (`Trace(failures=...)`, as `gradflow script` and `inspect` record), or those of a FailureMode of its
    own (`explain_errors()`). `start()` and `stop()` bracket the block."""

    def __init__(self) -> None:
        self.ops: deque[OpSeen] = deque(maxlen=OPS_KEPT)
        self.writes: deque[Write] = deque(maxlen=WRITES_KEPT)
        self.backwards: deque[BackwardSeen] = deque(maxlen=BACKWARDS_KEPT)
        self.leaf_write: LeafWrite | None = None
        self.nonleaf_grads: deque[NonLeafGrad] = deque(maxlen=16)
        self.failed_in: BackwardSeen | None = None  # the backward() that raised
        self.checkpoints: deque[DeadCheckpoint] = deque(maxlen=8)  # reentrant ones autograd did not record
        self._count = itertools.count()
        self._backward_count = itertools.count(1)
        self._step: tuple | None = None  # inside an optimizer's step(): (its line, its parameters' Seen before)
        self._aside: TorchFunctionMode | None = None  # the mode that steps aside for a step (FailureMode's own)
        self.off = False  # ... and is off torch's stack now
        self._hooks: list = []

    def start(self, aside: TorchFunctionMode | None = None) -> None:
        # An optimizer's step writes every parameter in place, op by op: seen whole through torch's (public,
        # global) step hooks, once per step, instead of one record (and one walk of the stack) per write.
        self._aside = aside
        self._hooks = [register_optimizer_step_pre_hook(self._step_begins),
                       register_optimizer_step_post_hook(self._step_ends)]

    def stop(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _step_begins(self, optimizer, args, kwargs) -> None:
        """The step writes every parameter, op by op, with gradients off: nothing in it is saved for backward, so
        its writes are read from the versions after it, and a mode of the log's own steps aside meanwhile (a
        trace's mode goes on recording: its reports show the step's ops)."""
        params = [p for g in optimizer.param_groups for p in g["params"]]
        self._step = (lines()[0], [(p, p._version) for p in params])
        self.off = self._aside is not None and step_aside(self._aside)

    def _step_ends(self, optimizer, args, kwargs) -> None:
        if self._step is None:
            return
        line, before = self._step
        self._step = None
        for p, version in before:
            if p._version != version:
                self.writes.append(Write(next(self._count), "step", seen(p), line, True))
        if self.off and self._aside is not None:
            step_back(self._aside)
            self.off = False

    def call(self, func, args: tuple, kwargs: dict):
        """Run the call as asked; record it if it writes in place, may save a tensor, or is a backward()."""
        name = getattr(func, "__name__", "")
        if name in _ATTRIBUTES:
            if name == "__get__" and getattr(func, "__self__", None) is _GRAD:
                return self._grad_read(func, args[0])
            return func(*args, **kwargs)
        if name in _BACKWARDS:
            return self._backward(func, args, kwargs)
        if self._step is not None:  # its writes are seen whole when it ends
            return func(*args, **kwargs)
        if name == "_set_grad_enabled" and args and not args[0]:
            self._grad_off()
        written = written_by(name, args, kwargs)
        try:
            out = func(*args, **kwargs)
        except RuntimeError as err:
            if "leaf Variable that requires grad" in str(err):
                shape = tuple(written[0].shape) if written else ()
                self.leaf_write = LeafWrite(name, lines()[0], shape)
            raise
        if written:
            line = lines()[0]
            for t in written:
                self.writes.append(Write(next(self._count), name, seen(t), line, False))
        elif torch.is_grad_enabled():
            self.op_ran(name, _tensors(list(args)), out)
        return out

    def _grad_off(self) -> None:
        """Gradients switched off: a reentrant checkpoint starting with no input that requires grad is kept (a trace
        sees every switch itself, and tells the log: Trace._unrecorded)."""
        switch = grad_switch(False)
        if switch.checkpoint is not None and not switch.recompute and not switch.inputs_require_grad:
            self.checkpoints.append(DeadCheckpoint(*lines()))

    def op_ran(self, name: str, ins: list, out) -> None:
        """An op with gradients on: kept if an input requires grad (it may have saved a tensor for backward)."""
        if any(t.requires_grad for t in ins):
            outs = tuple(map(seen, _tensors(out)))
            self.ops.append(OpSeen(next(self._count), name, tuple(map(seen, ins)), outs, lines()[0]))

    def _grad_read(self, get, t: torch.Tensor):
        if t.is_leaf or t.retains_grad:
            return get(t)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            grad = get(t)
        frame = user_frame(1)  # torch's warning points at the log's own frame: given again where the user reads
        for w in said:
            if frame is None:
                warn_at(w.message, w.category, None, 0, stacklevel=3)
            else:
                warn_at(w.message, w.category, frame.f_code.co_filename, frame.f_lineno, frame.f_globals)
        if grad is None:
            self.nonleaf_grads.append(NonLeafGrad(t, lines()[0]))
        return grad

    def _backward(self, func, args: tuple, kwargs: dict):
        retain = kwargs.get("retain_graph")
        if retain is None and func.__name__ == "backward" and len(args) > 2 and isinstance(args[0], torch.Tensor):
            retain = args[2]
        if retain is None:
            retain = bool(kwargs.get("create_graph", False))
        roots = _tensors(args[0] if args else kwargs.get("tensors", kwargs.get("outputs", [])))
        call = BackwardSeen(next(self._count), next(self._backward_count), lines()[0], bool(retain),
                            [r.grad_fn for r in roots if r.grad_fn is not None])
        try:
            result = func(*args, **kwargs)
        except RuntimeError:
            self.failed_in = call
            raise
        if retain:
            call.roots = []  # a kept graph holds its saved tensors: never keep it alive longer than the user does
        self.backwards.append(call)
        return result


class FailureMode(TorchFunctionMode):
    """The log's own torch function mode, for a block no trace records (`explain_errors()`)."""

    def __init__(self, log: FailureLog) -> None:
        super().__init__()
        self.log = log

    def __enter__(self):
        self.log.start(aside=self)
        return super().__enter__()

    def __exit__(self, *exc):
        self.log.stop()
        if self.log.off:  # a step raised: the mode is off the stack already
            self.log.off = False
            return False
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return self.log.call(func, args, kwargs or {})
