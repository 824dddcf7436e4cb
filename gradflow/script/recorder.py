"""Record a whole script for `gradflow script`: every op with its arguments, and each backward() call.

A `ScriptTrace` is the tracer (tracer/trace.py) with three additions:
- each recorded op keeps its arguments as a template: a tensor as a `Ref` (its serial, the op that last wrote
  it, whether it had a grad_fn), a Python number, bool, string or None as it is, an index of ints and slices
  (a tuple of dims, a shape) as it is, anything else as an `Opaque` marker. That is enough to spell the op
  again in gradflow's language (program_writer.py, spelling.py);
- the values of tensors without a grad_fn (leaves, constants) of at most VALUE_CAP elements are copied when an
  op uses them, once per distinct value, so the program gets the values the script used even if the script
  changed them afterwards (`w.data -= lr * w.grad.data` is invisible to autograd's version counters);
- `Tensor.backward()` and `torch.autograd.backward()` go through the mode too: before the real call, every
  tensor the script has named (the locals of the calling frames and the script's globals) gets a hook that
  catches the gradient reaching it; after it, `on_backward` receives a `BackwardCall`.
Per-use flows (inspect's routes) are not measured: a script may run many steps.
"""
from __future__ import annotations

import functools
import inspect as pyinspect
import linecache
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch.nn.parameter import is_lazy

from gradflow.display import Drawn
from gradflow.errors import text_of
from gradflow.report.reasons import SHOWN_CUTS, Cut, OpIndex, cut_of
from gradflow.script.autograd import BackwardOps
from gradflow.script.named_reasons import failed_backward, frozen_lines, give_reasons, unfrozen_lines
from gradflow.script.program_writer import VALUE_CAP, Call, NoProgram, Opaque, Program, Ref, build_program
from gradflow.script.spelling import plain_index
from gradflow.script.writes import Write, Writes
from gradflow.tracer.failure_log import FailureLog
from gradflow.tracer.followed_values import FollowedValues
from gradflow.tracer.module_calls import NOT_RUN
from gradflow.tracer.records import FLAGS, flag_value, grad_fn, inputs, is_leaf, storage_of, written
from gradflow.tracer.source_lines import lines, short_path, user_code, user_frame
from gradflow.tracer.trace import Trace, op_name, tensors_in

MAX_VALUES = 20_000  # copies kept per script run (a long training loop stops copying after that)
UNRECORDED = "its ops were not recorded (in a loop, only the first backward() at each line is): rerun with " \
             "--steps {k}:{k} to record this one"
MAX_NAMED = 64  # tensors named through one container (a module's parameters, a list)
NO_GRAD_MESSAGE = "does not require grad"  # torch's words when backward has nothing to differentiate
_FLAG_CALLS = {"requires_grad_", "__set__"}  # the __name__ of the calls that may set requires_grad (FLAGS)


@dataclass
class Named:
    """A tensor the script has named at a backward call: its first name and the others."""

    name: str
    tensor: Any
    aliases: list[str] = field(default_factory=list)
    serial: int | None = None
    grad: Any = None  # the gradient that reached it in this backward (a hook's), None if none did
    accumulated: bool = False  # a leaf whose .grad was already non-zero before the call
    grad_before: Any = None  # that .grad, when small enough to copy
    cuts: list[Cut] = field(default_factory=list)  # the cuts it was made by or computed through (named_reasons.py)
    reason: str | None = None  # why it is cut, frozen or got nothing, with the lines (named_reasons.py)
    unfrozen: str | None = None  # the line that set requires_grad back to True, if the script did (a loop's change)

    @property
    def cut(self) -> Cut | None:
        """The first cut on the way to it (the one that made it, when that op cut)."""
        return self.cuts[0] if self.cuts else None

    @property
    def status(self) -> str:
        if self.grad is not None:
            return "live"
        if self.cut is not None and not self.tensor.requires_grad:
            return "cut"
        return "none" if self.tensor.requires_grad else "off"


@dataclass(repr=False)  # repr(): the table as text, never the tensors (display.Shown)
class BackwardCall(Drawn):
    """One backward() of the script, seen right after it ran (or failed)."""

    index: int  # 1, 2, ...
    line: str | None  # file:line of the call in the user's code
    code: str  # the source line
    roots: list[Any]  # the tensors backward ran from
    root_names: list[str | None]
    retain_graph: bool
    named: list[Named]
    program: Any  # program.Program | program.NoProgram
    error: str | None = None  # torch's message when backward raised
    no_grad: tuple[str, str] | None = None  # (why, fix) when it raised because its output does not require grad
    autograd_ops: Any = field(default=None, repr=False)  # script/autograd.py's BackwardOps, recorded with autograd

    def autograd_graph(self, depth: int | None = None, fold: bool = True):
        """The autograd graph torch recorded for this backward, named by the script's lines and variables
        (report/op_graph.py's OpGraph: to_dot(), to_mermaid(), draw(path)). Needs a run with autograd=True."""
        from gradflow.script.autograd import graph_of

        return graph_of(self, depth, fold)


class InternalFailure(BaseException):
    """gradflow's own code failed inside the script's backward(): carried past the script's `except Exception`
    and reported as gradflow's bug (exit 1), not as the script's error."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


class ScriptTrace(Trace):
    """The recorder of `gradflow script`; `on_backward` is called after every backward()."""

    def __init__(self, script: str, on_backward: Callable[[BackwardCall], None],
                 records: Callable[[int], bool] | None = None, autograd: bool = False):
        super().__init__(failures=FailureLog())  # why a backward failed (tracer/failures.py)
        self.keeps_nodes = autograd  # torch's nodes named by their ops, for each recorded backward's graph
        # records(k): are the ops before backward k recorded (its cuts named, its program written)? A loop's
        # other steps run their ops unrecorded: the per-op record is what made a long loop slow and its memory grow
        self.records = records
        self.quiet = records is not None and not records(1)
        self.script = script  # the file name the script's code objects carry
        self.on_backward = on_backward
        self.calls: dict[int, Call] = {}  # op index -> its arguments
        self.writer: dict[int, int] = {}  # serial -> index of the op that last wrote it
        self.values: list[torch.Tensor] = []
        self.latest: dict[int, int] = {}  # serial -> index of its latest copy in values
        self.count = 0
        self.failed: BaseException | None = None  # the error a backward() raised, if one did
        self.failed_call: BackwardCall | None = None  # ... and its call
        self._pending: tuple[tuple, dict] | None = ((), {})  # the arguments of the call being recorded
        self.writes = Writes()  # every in-place write, by the memory it touched (script/writes.py)
        self._values = self._followed = _FreshValues()
        self.index = OpIndex()  # producers and consumers, kept as ops are recorded (named_reasons.py)

    # ---- ops ------------------------------------------------------------------------------
    def on_torch_function(self, func, args, kwargs: dict):
        """backward() runs with hooks on the named tensors (run_backward); every other call keeps its arguments
        as a template for the program (`_record`), then is recorded as the trace records it."""
        # An unrecorded step runs its calls as they are, grad switches too (torch.optim's step() switches without
        # a `with`, so each step would add a region); the failure log still sees them (a bounded ring). Only a
        # change of requires_grad is kept, for the line a freeze schedule's change report names.
        if self.quiet and (called := getattr(func, "__name__", None)) != "backward":
            if called in _FLAG_CALLS:
                self._quiet_flag(func, args, kwargs)
            return self.run(func, args, kwargs)
        name = op_name(func)
        if name == "backward":
            return self.run_backward(func, args, kwargs)
        if self._followed:  # (templates give serials: a tensor first seen here is still new to from_numpy's check)
            self._followed.fresh = {id(a) for a in inputs(args, kwargs) if self.known(a) is None}
        self._pending = (tuple(self.template(a) for a in args), {k: self.template(v) for k, v in kwargs.items()})
        targets = written(name, args, kwargs)
        if not targets:
            out = super().on_torch_function(func, args, kwargs)
            if name == "numpy" and args and isinstance(args[0], torch.Tensor):
                self.writes.escaped(args[0], lines()[0])  # writes through the array are not torch calls
            return out
        position = len(self.state.ops)
        before = [(t, storage_of(t), self._made_by(t)) for t in targets]  # `p.data = t` changes p's memory
        out = super().on_torch_function(func, args, kwargs)
        self._wrote(name, position, before)
        return out

    def _quiet_flag(self, func, args, kwargs: dict) -> None:
        """A freeze (or unfreeze) in a step whose ops are not recorded still keeps its line, so that the loop's
        change report names it; only a real change is kept, so a script that freezes at every step holds one."""
        name = op_name(func)
        if name not in FLAGS:  # (`p.grad = None` in zero_grad() is a __set__ too)
            return
        ins = inputs(args, kwargs)
        if not ins:
            return
        if ins[0].requires_grad != flag_value(args, kwargs):
            self._flag(name, ins[0], args, kwargs)

    def _made_by(self, t: torch.Tensor) -> str | None:
        s = self.known(t)
        return self.ops[self.writer[s]].name if s is not None and s in self.writer else None

    def _wrote(self, name: str, position: int, before: list) -> None:
        """Keep the write (script/writes.py) with the line of its op, or the user's line now."""
        rec = self.ops[position] if len(self.ops) > position else None
        line = rec.line if rec is not None and rec.line else lines()[0]
        for t, storage, via in before:
            if storage is not None:
                self.writes.add(storage, Write(position, self.serial(t), name, via, line))

    def run_leaf(self, module, args: tuple, kwargs: dict):
        """torch's Linear (LayerNorm, GELU) run whole by the trace: no torch function call sets the arguments of
        its one op, which are then its inputs (x, weight, bias: F.linear's), read by `_record`."""
        self._pending = None
        return NOT_RUN if self.quiet else super().run_leaf(module, args, kwargs)

    def _uses(self, rec, used, outs, stop, given=None):
        """The uses of leaves, as numbers (reasons.why_none reads them); no per-use flow hooks (inspect's routes):
        a script may run many steps."""
        self.state.add_uses(list(dict.fromkeys(used)), rec.index)

    def template(self, a):
        if isinstance(a, torch.Tensor):
            return self.ref(a)
        if isinstance(a, (int, float, str)) or a is None or plain_index(a):  # bools too: keepdim=True
            return a  # an index of ints and slices, a tuple of dims or a shape: as is (immutable, small)
        return Opaque(type(a).__name__)

    def ref(self, a: torch.Tensor) -> Ref:
        s = self.serial(a)
        leaf = grad_fn(a) is None
        return Ref(s, self.writer.get(s, -1), leaf, a.requires_grad, self._copy(s, a) if leaf else None)

    def _copy(self, serial: int, a: torch.Tensor) -> int | None:
        """The index of a copy of `a`'s current value (one per distinct value); None if too big to keep."""
        if not _plain(a) or a.numel() > VALUE_CAP:
            return None
        last = self.latest.get(serial)
        if last is not None:
            old = self.values[last]
            same = old.shape == a.shape and old.dtype == a.dtype and old.device == a.device
            if same and torch.equal(old, a.detach()):
                return last
        if len(self.values) >= MAX_VALUES:
            return None
        self.values.append(a.detach().clone())
        self.latest[serial] = len(self.values) - 1
        return len(self.values) - 1

    def _record(self, name: str, ins: list, in_rg: list[bool], out, stop, in_leaf: list[bool],
                extra: tuple[int, ...] = (), module=None) -> None:
        n = len(self.state.ops)
        super()._record(name, ins, in_rg, out, stop, in_leaf, extra, module)
        if len(self.state.ops) == n:
            return
        rec = self.state.ops[-1]
        outs = tensors_in(out, []) if name != "__setitem__" else ins[:1]
        first = outs[0]
        same = bool(ins) and first.dtype == ins[0].dtype and first.shape == ins[0].shape
        node = grad_fn(first)
        fn = type(node).__name__ if node is not None else None
        tensors = (*zip(rec.ins, map(storage_of, ins)), *zip(rec.outs, map(storage_of, outs)))
        pending = self._pending if self._pending is not None else (tuple(map(self.template, ins)), {})
        self.calls[rec.index] = Call(*pending, fn, same, tensors)
        for s in rec.outs:
            self.writer[s] = rec.index

    def _append(self, rec) -> None:  # every op, values leaving torch included, passes here once
        super()._append(rec)
        self.index.add(rec)

    # ---- backward -------------------------------------------------------------------------
    def run_backward(self, func, args, kwargs):
        """Run the script's backward() as asked, with hooks on the named tensors; report it."""
        try:
            bound = _signature(func).bind(*args, **kwargs).arguments
        except TypeError:  # the script's own mistake: torch says what it is
            return func(*args, **kwargs)
        try:
            call, handles, caught = self._before(bound)
        except Exception as bug:  # gradflow's own failure: never reported as the script's
            raise InternalFailure(bug) from bug
        try:
            return self.run(func, args, kwargs)
        except RuntimeError as err:
            self.failed, call.error = err, text_of(err).split("\n")[0]
            call.program = NoProgram("its backward raised: there are no grads for a program to reproduce")
            self.failed_call = call
            raise
        finally:
            for h in handles:
                h.remove()
            for key, g in caught.items():
                call.named[key].grad = g
            try:
                if not self.quiet:  # (reasons are read from the recorded ops)
                    give_reasons(self, call)
                    if self.keeps_nodes:
                        call.autograd_ops = BackwardOps(self, call)
                else:  # a freeze's line is kept even in an unrecorded step
                    frozen_lines(self, call)
                unfrozen_lines(self, call)
                if call.error is not None and NO_GRAD_MESSAGE in call.error:
                    call.no_grad = failed_backward(self, call)
                self.on_backward(call)
            except Exception as bug:
                raise InternalFailure(bug) from bug
            if self.records is not None:
                self.quiet = not self.records(self.count + 1)

    def _before(self, bound: dict):
        given = bound.get("tensors", bound.get("self"))
        roots: list = [given] if isinstance(given, torch.Tensor) else list(given or ())
        grads = bound.get("grad_tensors", bound.get("gradient"))
        grads = [grads] * len(roots) if grads is None or isinstance(grads, torch.Tensor) else list(grads)
        frame = user_frame()
        named = self.named_tensors(frame)
        program: Program | NoProgram
        if self.quiet:
            program = NoProgram(UNRECORDED.format(k=self.count + 1))
        elif all(isinstance(t, torch.Tensor) for t in [*roots, *(g for g in grads if g is not None)]):
            program = build_program(self, [self.ref(r) for r in roots],
                                    [None if g is None else self.ref(g) for g in grads], named, bound.get("inputs"))
        else:
            program = NoProgram("backward() was given a GradientEdge, not a tensor")
            roots = [r for r in roots if isinstance(r, torch.Tensor)]
        handles, caught = self._grad_hooks(named)
        self.count += 1
        root_names = [next((n.name for n in named if n.tensor is r), None) for r in roots]
        call = BackwardCall(self.count, _where(frame), _code(frame), roots, root_names, bool(bound.get("retain_graph")),
                            named, program)
        return call, handles, caught

    def _grad_hooks(self, named: list[Named]):
        handles: list = []
        caught: dict[int, torch.Tensor] = {}
        for i, n in enumerate(named):
            t = n.tensor
            if not t.requires_grad:
                continue
            if t.is_leaf and t.grad is not None and bool(t.grad.ne(0).any()):
                n.accumulated = True  # this backward adds to what an earlier one left in .grad
                n.grad_before = t.grad.detach().clone() if t.grad.numel() <= VALUE_CAP else None
            try:
                handles.append(t.register_hook(lambda g, i=i: caught.__setitem__(i, g + caught[i] if i in caught
                                                                                  else g)))
            except RuntimeError:  # e.g. a view modified in place: no hook, no grad shown
                continue
        return handles, caught

    def named_tensors(self, frame: FrameType | None) -> list[Named]:
        """The tensors named in the calling frames' locals, then the script's globals; by identity."""
        found: dict[int, Named] = {}
        for scope in self._scopes(frame):
            for name, t in _tensors(scope):
                if id(t) in found:
                    if name not in found[id(t)].aliases and name != found[id(t)].name:
                        found[id(t)].aliases.append(name)
                    continue
                n = found[id(t)] = Named(name, t, serial=self.known(t))
                rec = self.ops[self.writer[n.serial]] if n.serial in self.writer else None
                if rec is not None and rec.cut in SHOWN_CUTS:
                    n.cuts = [cut_of(rec, lambda m: None)]
        return list(found.values())

    def _scopes(self, frame: FrameType | None) -> list[dict]:
        """The locals of each user frame from the caller out to the script's module frame, whose are its globals."""
        scopes: list[dict] = []
        while frame is not None:
            if user_code(frame.f_code.co_filename):
                scopes.append(frame.f_locals)
            if frame.f_code.co_name == "<module>" and frame.f_code.co_filename == self.script:
                break
            frame = frame.f_back
        return scopes


class _FreshValues(FollowedValues):
    """The followed values of a ScriptTrace: a tensor its templates saw first in this op counts as unseen, as the
    tracer asks, so a tensor made by torch.from_numpy from a followed array is still found by its memory."""

    fresh: set[int] = set()

    def serials_in(self, args, kwargs: dict, ins: list, known: Callable) -> tuple[int, ...]:
        fresh = self.fresh
        return super().serials_in(args, kwargs, ins, lambda a: None if id(a) in fresh else known(a))


@functools.cache
def _signature(func) -> pyinspect.Signature:
    """backward()'s signature, read once (a loop calls it at every step)."""
    return pyinspect.signature(func)


def _plain(t) -> bool:
    """A dense real tensor with data (not sparse, quantized, complex, meta, nor a lazy module's parameter)."""
    return (isinstance(t, torch.Tensor) and t.layout == torch.strided and t.device.type != "meta"
            and not is_lazy(t) and not t.is_quantized and not t.is_complex())


def _answers(t: torch.Tensor) -> bool:
    """Does torch say what `t` is? Not for a view made under no_grad whose base then changed in place (the padding
    row nn.Embedding zeroes): its grad_fn and is_leaf raise, so the table leaves it out rather than fail there."""
    return grad_fn(t) is not None or is_leaf(t)


def _tensors(scope: dict):
    """(name, tensor) for the tensors a scope names: directly, as a module's parameters, in a list/tuple."""
    for name, v in list(scope.items()):
        if name.startswith("__"):
            continue
        if isinstance(v, torch.Tensor):
            found = [(name, v)]
        elif isinstance(v, torch.nn.Module):
            found = [p for _, p in zip(range(MAX_NAMED), v.named_parameters(prefix=name))]
        elif isinstance(v, (list, tuple)) and 0 < len(v) <= MAX_NAMED:
            found = [(f"{name}[{i}]", x) for i, x in enumerate(v)]
        else:
            continue
        yield from ((k, t) for k, t in found if _plain(t) and _answers(t))


def _where(frame: FrameType | None) -> str | None:
    return f"{short_path(frame.f_code.co_filename)}:{frame.f_lineno}" if frame is not None else None


def _code(frame: FrameType | None) -> str:
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip() if frame is not None else ""
