"""Record a real PyTorch forward pass: ops, cuts, parameter uses and their source lines.

    with gradflow.trace() as t:
        loss = model(batch).mean()
    report = t.explain(loss, params=model)

A `TorchFunctionMode` sees every torch call while it runs. Tensors are tracked by
identity (weak references, no copies of data); each op keeps the serial numbers of
its tensor inputs and outputs, whether grad / inference mode was on, and which
module was running. Source lines (the innermost frame outside torch and gradflow)
are computed only for cuts, parameter uses, flag changes and top-level ops. Each
use of a leaf that requires grad gets a hook on the autograd node that consumes
it, so the gradient along every use is measured, not inferred. Results of the
user's code are unchanged: every call runs as it would without the trace.

Also recorded: how gradients were switched off (torch.no_grad(), torch.set_grad_enabled(False), a decorator),
values that leave torch (`.item()`, `float(t)`, `.tolist()`, `.numpy()`: followed by identity into the ops
they are given to), and the ops inside each reentrant checkpoint, whose forward runs with grad off: `explain`
maps its recomputation in backward onto them (`replaying`).
"""
from __future__ import annotations

import contextlib
import gc
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from gradflow.inspect.reasons import ESCAPES, REWRAP
from gradflow.inspect.source import custom_function, grad_switch, lines
from gradflow.language.ops import OPS

_DETACH = {name for op in OPS.values() if op.role == "cut" for name in op.torch_names}  # detach, detach_, .data
_FLAGS = {"requires_grad_", "requires_grad="}  # requires_grad_(v) and `t.requires_grad = v`
_CONSUMER_SEARCH_LIMIT = 256  # autograd nodes visited per op when looking for parameter uses
_LOW = (torch.float16, torch.bfloat16)  # half precision: its ops' autograd nodes are kept (inspect/precision.py)
# Ops that read only the dtype / device / shape of their first tensor, never its values: no use, no data flow.
METADATA_ONLY = {"new_tensor", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided", "new",
                 "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like"}
_FOLLOWED_OBJECTS = 10_000  # Python values followed per trace
_SCAN_BUDGET = 1_000  # arguments looked at per op for a followed Python value
_FOLLOWED_LIST = 4_096  # elements: a longer list from .tolist() is not followed
_GC_EVERY = 1 << 16  # ops: with the collector deferred (gc_deferred), a young collection this often
_UNUSUAL = {"_set_grad_enabled", "__setitem__", *_FLAGS, *ESCAPES, *METADATA_ONLY}  # never on the fast path


def tensors_in(obj, out: list) -> list:
    """Every tensor in args / kwargs / results (nested tuples, lists, dicts), in order."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            tensors_in(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            tensors_in(x, out)
    return out


def op_name(func) -> str:
    """`linear`, `detach`, or the attribute for property access (`data`, `T`; `requires_grad=` to set)."""
    name = getattr(func, "__name__", None) or str(func)
    if name in ("__get__", "__set__"):
        attr = getattr(getattr(func, "__self__", None), "__name__", name)
        return attr + "=" if name == "__set__" else attr
    return name


@dataclass(slots=True)
class OpRecord:
    index: int
    name: str
    ins: tuple[int, ...]  # serials of the tensor inputs
    outs: tuple[int, ...]  # serials of the tensor outputs (an in-place target keeps its serial)
    grad_enabled: bool
    inference: bool
    module: int | None  # id() of the innermost module whose forward was running
    cut: str | None = None  # detach | no_grad | inference_mode | item | rewrap | nondiff (an input required grad,
    #                         no output does)
    line: str | None = None  # the user's own line (the call that entered library code, when the op ran there)
    inside: str | None = None  # the custom autograd.Function whose forward ran this op (grad off, but no cut)
    library_line: str | None = None  # where in library code (transformers, ...) the op ran, when not the user's
    how: str | None = None  # for a no_grad cut: what switched gradients off (torch.set_grad_enabled(False), ...)


@dataclass(slots=True)
class Use:
    """One op consuming a leaf that requires grad; `flow` is the gradient it sent back."""

    serial: int
    op: int  # index into Trace.ops
    flow: Any = None  # torch.Tensor | None, filled by autograd-node hooks during backward
    hidden: bool = False  # inside a custom Function that was not given this leaf: autograd has no edge to see
    whole: bool = False  # the leaf's only use, its edge found but not hooked: its flow is the leaf's whole grad

    def add(self, grad):
        if grad is not None:
            self.flow = grad if self.flow is None else self.flow + grad


@dataclass
class FlagEvent:
    serial: int
    value: bool
    op: str  # requires_grad_ | requires_grad= (attribute assignment)
    line: str | None


@dataclass
class TraceFailure:
    """torch raised inside the trace because an inference tensor was used in training."""

    message: str
    op: str
    line: str | None
    origin_op: str | None
    origin_line: str | None

    def describe(self) -> str:
        origin = f"`{self.origin_op}` at {self.origin_line or 'an unknown line'}" if self.origin_op else \
            "code run before the trace started"
        return (f"`{self.op}` at {self.line or 'an unknown line'} used a tensor created under "
                f"torch.inference_mode() by {origin}; torch said: {self.message}")


@dataclass
class TraceState:
    ops: list[OpRecord] = field(default_factory=list)
    uses: list[Use] = field(default_factory=list)
    flags: list[FlagEvent] = field(default_factory=list)
    failure: TraceFailure | None = None
    modules: dict[int, Any] = field(default_factory=dict)  # id -> module (kept alive by the model)
    roots: list[Any] = field(default_factory=list)  # modules called from outside any module
    stack: list[Any] = field(default_factory=list)
    stats_updated: dict[int, Any] = field(default_factory=dict)  # norm layers run in training mode
    functions: set[str] = field(default_factory=set)  # custom autograd.Functions whose forward ran ops
    outside: list[tuple[int, int]] = field(default_factory=list)  # (op, serial): a tensor computed outside the
    #                                  trace (another thread, before it started) came in here; the first 100
    low_nodes: dict[int, tuple[Any, int, Any]] = field(default_factory=dict)  # id(node) -> (autograd node, op
    #                                  index, dtype) of every op with a float16/bfloat16 result that requires grad


@dataclass
class _Region:
    """A stretch of code with gradient recording switched on or off; a reentrant checkpoint's own no_grad (its
    forward) and enable_grad (its recomputation in backward) carry the checkpoint's ctx id."""

    value: bool
    how: str
    checkpoint: int | None = None
    recompute: bool = False
    count: int = 0  # ops recorded in it (a recomputation)
    dead: tuple[str, str | None] | None = None  # a checkpoint autograd will not record: (cut kind, how)
    nested: bool = False  # a checkpoint inside another's forward: recomputed only as part of that one's


@dataclass
class _Replay:
    """The explaining backward, run through reentrant checkpoints: their forward ran with grad off, so the
    recomputation in backward is what shows how each parameter used inside gets its gradient. Its k-th op is
    the forward's k-th op inside the same checkpoint."""

    uses: dict  # forward op index -> its uses
    alias: dict = field(default_factory=dict)  # id(detached input) -> (weak ref, serial of the forward tensor)
    cuts: dict = field(default_factory=dict)  # checkpoint -> [(forward op, kind, how, line, library line)]
    found: dict = field(default_factory=dict)  # checkpoint -> [forward uses the recomputation measured]
    counts: dict = field(default_factory=dict)  # checkpoint -> ops its recomputation ran
    broken: set = field(default_factory=set)  # checkpoints whose recomputation ran other ops


def _grad_fn(a: torch.Tensor):
    try:
        return a.grad_fn
    except RuntimeError:  # a view made under no_grad whose base changed in place: torch refuses to say
        return None


class _Mode(TorchFunctionMode):
    def __init__(self, trace: Trace):
        super().__init__()
        self.t = trace

    def __torch_function__(self, func, types, args=(), kwargs=None):
        t = self.t
        name = op_name(func)
        if name in _UNUSUAL or not t._fast or t._replay is not None or t._objs or t._checkpoint is not None or \
                t._dead is not None or not t.state.stack or not torch.is_grad_enabled() or \
                torch.is_inference_mode_enabled():
            return self._general(t, name, func, args, kwargs or {})
        # The common op: inside a module, gradients on, nothing followed (see _fast_op).
        kwargs = kwargs or {}
        ins = _inputs(args, kwargs)
        in_rg = [a.requires_grad for a in ins]
        in_leaf = [rg and a.is_leaf for a, rg in zip(ins, in_rg)] if True in in_rg else None
        stop = {g for g in map(_grad_fn, ins) if g is not None} if in_leaf and True in in_leaf else None
        try:
            out = func(*args, **kwargs)
        except RuntimeError as err:
            t._maybe_failure(name, ins, err)
            raise
        t._fast_op(name, ins, in_rg, in_leaf, out, stop)
        return out

    @staticmethod
    def _general(t: Trace, name: str, func, args, kwargs: dict):
        if name == "_set_grad_enabled":
            t._grad_switch(bool(args[0]) if args else bool(kwargs.get("mode", True)))
            return func(*args, **kwargs)
        ins = _inputs(args, kwargs)
        if name in METADATA_ONLY and t.follows_numbers:
            ins = ins[1:]
        if name in _FLAGS and ins and t._replay is None:
            t._flag(name, ins[0], args, kwargs)
        in_rg = [a.requires_grad for a in ins]
        in_leaf = [rg and a.is_leaf for a, rg in zip(ins, in_rg)]  # before the op: in place it may change
        # Only ops that consume a leaf get hooks; their search stops at the inputs' nodes. Other ops never touch
        # grad_fn: a node Python has touched is freed recursively by torch (docs/limits.md, long graphs).
        stop = {g for g in map(_grad_fn, ins) if g is not None} if True in in_leaf else None
        try:
            out = func(*args, **kwargs)
        except RuntimeError as err:
            if t._replay is None:
                t._maybe_failure(name, ins, err)
            raise
        if t._replay is not None:
            t._replayed(name, ins, in_rg, in_leaf, out, stop)
        elif name in ESCAPES and t.follows_numbers:
            t._escape(name, ins, in_rg, out)
        elif name not in _FLAGS:
            extra = t._followed_in(args, kwargs, ins) if t._objs else ()
            t._record(name, ins, in_rg, out, stop, in_leaf=in_leaf, extra=extra)
        return out


def _inputs(args, kwargs: dict) -> list:
    """tensors_in(args) then tensors_in(kwargs), without a call per flat argument (every op comes here)."""
    out: list = []
    for x in args:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple, dict)):
            tensors_in(x, out)
    if kwargs:
        tensors_in(kwargs, out)
    return out


class Trace:
    """The recorder. Use as a context manager; then `explain(loss, params=...)`."""

    follows_numbers = True  # follow values that leave torch (.item(), .tolist(), .numpy()) into later ops

    def __init__(self) -> None:
        self.state = TraceState()
        self._ids: dict[int, tuple[weakref.ref, int]] = {}  # id(tensor) -> (weak reference, serial)
        self._next = 0
        self._mode = _Mode(self)
        self._failed_with: BaseException | None = None
        self._regions: list[_Region] = []  # gradient on/off contexts entered and not left, innermost last
        self._checkpoint: int | None = None  # the reentrant checkpoint whose forward is running
        self._dead: tuple[str, str | None] | None = None  # ... when autograd does not record it: (cut kind, how)
        self._grad_base = True  # gradients on when the trace began
        self.checkpoint_ops: dict[int, list[int]] = {}  # reentrant checkpoint (ctx id) -> its forward's ops
        self._objs: dict[int, tuple[Any, int]] = {}  # id(Python value) -> (it or a weak ref, serial)
        self._arrays: dict[int, int] = {}  # data pointer of a followed numpy array -> serial (torch.from_numpy)
        self._ear = [False]  # the per-use hooks listen only while explain runs its backward
        self._replay: _Replay | None = None
        self._recording = False  # inside the `with` block
        self._gc = gc_deferred()
        self._found: list = []  # ([autograd nodes of an op's results], stop, {id(leaf): Use}), for arm()
        self._fast = type(self)._record is Trace._record and type(self)._uses is Trace._uses  # _fast_op
        weakref.finalize(self, _release, self._found)  # never explained: let them go latest first too

    # ---- context manager -------------------------------------------------------------
    def __enter__(self) -> Trace:
        _calls_seen_by(self, True)
        self._grad_base = torch.is_grad_enabled()
        self._gc = gc_deferred()
        self._gc.__enter__()
        self._mode.__enter__()
        self._recording = True
        return self

    def __exit__(self, exc_type, exc, tb):
        self._recording = False
        self._mode.__exit__(exc_type, exc, tb)
        self._gc.__exit__(exc_type, exc, tb)
        _calls_seen_by(self, False)
        failure = self.failure_of(exc)
        if failure is not None and hasattr(exc, "add_note"):
            exc.add_note(f"gradflow: {failure.describe()}")
        return False

    def failure_of(self, exc: BaseException | None) -> TraceFailure | None:
        """The recorded inference-tensor failure if `exc` is (or was raised from) torch's error for it."""
        while exc is not None:
            if exc is self._failed_with:
                return self.state.failure
            exc = exc.__cause__ or exc.__context__
        return None

    def _enter_module(self, module, args):
        st = self.state
        if not st.stack and id(module) not in st.modules:
            st.roots.append(module)
        st.modules[id(module)] = module
        st.stack.append(module)
        if module.training and _running_mean(module) is not None:
            st.stats_updated[id(module)] = module  # BatchNorm & co. update their running stats

    def _leave_module(self, module):
        stack = self.state.stack
        while stack:  # also unwinds modules left by an exception
            if stack.pop() is module:
                break

    # ---- bookkeeping -----------------------------------------------------------------
    def serial(self, t: torch.Tensor) -> int:
        """This tensor's serial number (a new one for a tensor seen the first time)."""
        entry = self._ids.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        s = self._next
        self._ids[id(t)] = (weakref.ref(t), s)
        self._next += 1
        return s

    def known(self, t: torch.Tensor) -> int | None:
        """This tensor's serial number, if the trace has seen it (an id reused by a new tensor is not a match)."""
        entry = self._ids.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    @staticmethod
    def _cut_kind(name: str, grad_on: bool, inference: bool) -> str:
        return "detach" if name in _DETACH else "rewrap" if name in REWRAP else "inference_mode" if inference \
            else "no_grad" if not grad_on else "nondiff"

    def _record(self, name: str, ins: list, in_rg: list[bool], out, stop, *, in_leaf: list[bool] | None = None,
                extra: tuple[int, ...] = ()):
        if name == "__setitem__":  # x[i] = y writes into x
            outs = ins[:1]
        elif isinstance(out, torch.Tensor):
            outs = [out]
        else:
            outs = tensors_in(out, [])
        if not outs:
            return
        if in_leaf is None:
            in_leaf = [rg and a.is_leaf for a, rg in zip(ins, in_rg)]
        st = self.state
        grad_on, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        first = self._next  # serials from here on are new: a tensor that requires grad, not a leaf, seen first
        ids, serial = self._ids, self.serial
        serials = []
        for a in ins:
            entry = ids.get(id(a))
            serials.append(entry[1] if entry is not None and entry[0]() is a else serial(a))
        came_in = [s for rg, leaf, s in zip(in_rg, in_leaf, serials) if s >= first and rg and not leaf] \
            if self._next > first else ()  # here came from outside the trace
        out_serials = []
        for o in outs:
            entry = ids.get(id(o))
            out_serials.append(entry[1] if entry is not None and entry[0]() is o else serial(o))
        stack = st.stack
        rec = OpRecord(len(st.ops), name, (*serials, *extra), tuple(out_serials), grad_on, inference,
                       id(stack[-1]) if stack else None)
        given: set[int] | None = None  # inside a custom Function's forward: the tensors it was applied to
        if True in in_rg and not any(o.requires_grad for o in outs):
            rec.cut = self._cut_kind(name, grad_on, inference)
            dead = self._dead is not None and rec.cut == "no_grad"  # in a checkpoint autograd does not record
            if dead:
                rec.cut, rec.how = self._dead  # type: ignore[misc]
            function = custom_function() if rec.cut == "no_grad" and not dead else None
            if function is not None:
                rec.cut, rec.inside = None, function[0]  # the Function's own backward carries the gradient
                st.functions.add(function[0])
                given = {id(a) for a in tensors_in(function[1], [])}
            elif rec.cut == "no_grad" and not dead:
                rec.how = self._grad_off()
        leaves = [a for a, leaf in zip(ins, in_leaf) if leaf and not any(a is o for o in outs)] \
            if True in in_leaf else ()
        if rec.cut or leaves or inference or rec.module is None or came_in or self._checkpoint is not None:
            rec.line, rec.library_line = lines()  # (a checkpoint's: its recomputation may find a cut here)
        if came_in and len(st.outside) < 100:
            st.outside += [(rec.index, s) for s in came_in]
        self._append(rec)
        dtype = outs[0].dtype
        low = dtype if dtype in _LOW else ins[0].dtype if ins and ins[0].dtype in _LOW else None
        if low is not None and outs[0].grad_fn is not None:  # half precision: where a gradient under/overflows
            st.low_nodes[id(outs[0].grad_fn)] = (outs[0].grad_fn, rec.index, low)
            if rec.line is None:
                rec.line, rec.library_line = lines()
        if leaves:
            self._uses(rec, leaves, outs, stop, given)

    def _fast_op(self, name: str, ins: list, in_rg: list[bool], in_leaf: list[bool] | None, out, stop):
        """_record for the common op (inside a module, gradients on, no checkpoint, nothing followed): the same
        record, with less asked per op. Anything else it meets (a cut, a tensor from outside the trace, half
        precision) goes to _record."""
        outs = [out] if isinstance(out, torch.Tensor) else tensors_in(out, [])
        if not outs:
            return
        if (in_leaf is not None and not any(o.requires_grad for o in outs)) or outs[0].dtype in _LOW or \
                (ins and ins[0].dtype in _LOW):
            return self._record(name, ins, in_rg, out, stop, in_leaf=in_leaf)
        ids = self._ids
        serials = []
        for a in ins:
            entry = ids.get(id(a))
            if entry is not None and entry[0]() is a:
                serials.append(entry[1])
            elif a.requires_grad and not a.is_leaf:  # computed outside the trace: _record tells
                return self._record(name, ins, in_rg, out, stop, in_leaf=in_leaf)
            else:
                serials.append(self._next)
                ids[id(a)] = (weakref.ref(a), self._next)
                self._next += 1
        out_serials = []
        for o in outs:
            entry = ids.get(id(o))
            if entry is not None and entry[0]() is o:
                out_serials.append(entry[1])
            else:
                out_serials.append(self._next)
                ids[id(o)] = (weakref.ref(o), self._next)
                self._next += 1
        st = self.state
        rec = OpRecord(len(st.ops), name, tuple(serials), tuple(out_serials), True, False, id(st.stack[-1]))
        uses = None
        if in_leaf is not None and True in in_leaf:
            uses = {id(a): Use(s, rec.index) for a, leaf, s in zip(ins, in_leaf, serials)
                    if leaf and not any(a is o for o in outs)}
            if uses:
                rec.line, rec.library_line = lines()
        st.ops.append(rec)
        if not rec.index % _GC_EVERY and rec.index:
            self._collect(rec.index)
        if uses:
            st.uses.extend(uses.values())
            self._listen(outs, uses, stop)

    def _collect(self, index: int) -> None:
        if self._gc.was_on:  # a long block: its young garbage, and all of it now and then
            gc.collect(1 if index % (8 * _GC_EVERY) else 2)

    def _append(self, rec: OpRecord):
        self.state.ops.append(rec)
        if not rec.index % _GC_EVERY and rec.index:
            self._collect(rec.index)
        if self._checkpoint is not None:
            self.checkpoint_ops[self._checkpoint].append(rec.index)

    def _uses(self, rec: OpRecord, leaves: list, outs: list, stop, given: set[int] | None = None):
        uses = {id(a): Use(self.serial(a), rec.index, hidden=given is not None and id(a) not in given)
                for a in leaves}
        self.state.uses.extend(uses.values())
        if not rec.grad_enabled:
            return
        self._listen(outs, uses, stop)

    def _listen(self, outs: list, uses: dict, stop):
        """Hooks on the autograd nodes that consume each leaf: the gradient sent along each use (one hook per node,
        however many leaves it consumes: LayerNorm's weight and bias)."""
        nodes = [g for g in map(_grad_fn, outs) if g is not None]
        if self._replay is None:  # the forward: searched and hooked by arm() at explain, when a report needs
            if nodes:  # the flow (a leaf used once needs neither)
                self._found.append((nodes, stop, uses))
            return
        for node, pairs in _by_node(nodes, uses, stop).items():
            self._hook(node, pairs)

    def _hook(self, node, pairs: list):
        if len(pairs) == 1:
            node.register_hook(partial(_heard, self._ear, *pairs[0]))
        else:
            node.register_hook(partial(_heard_all, self._ear, tuple(pairs)))

    def arm(self) -> None:
        """Hook the autograd nodes found in the forward, before explain's backward: those of leaves used more
        than once (a leaf's only use sends it its whole gradient: `whole`, no hook, no Python call in backward).
        Everything is hooked when part of the computation came from outside the trace, where a leaf may have
        other uses. The nodes are then let go latest first, each freed alone (docs/limits.md, long graphs)."""
        pending = list(self._found)
        self._found.clear()
        counts: dict[int, int] = {}
        for use in self.state.uses:
            counts[use.serial] = counts.get(use.serial, 0) + 1
        for use in self.state.uses:  # a trace entered again: an earlier only use is one no longer
            if use.whole and counts[use.serial] > 1:
                use.whole = False
        everything = bool(self.state.outside)
        for nodes, stop, uses in pending:
            if not everything and all(counts[u.serial] == 1 for u in uses.values()):
                for use in uses.values():  # its only use: no search for the node that consumes it, no hook
                    use.whole = True
                continue
            for node, pairs in _by_node(nodes, uses, stop).items():
                if not everything:
                    for _, use in pairs:
                        use.whole = counts[use.serial] == 1
                    pairs = [(i, use) for i, use in pairs if not use.whole]
                if pairs:
                    self._hook(node, pairs)
        while pending:
            pending.pop()

    def _flag(self, name: str, t: torch.Tensor, args, kwargs):
        value = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
        self.state.flags.append(FlagEvent(self.serial(t), bool(value), name, lines()[0]))

    # ---- gradient on/off contexts, reentrant checkpoints -------------------------------------
    def _grad_switch(self, value: bool):
        switch = grad_switch(value)
        regions = self._regions
        if switch.action == "exit" and regions:
            region = regions.pop()
            if region.recompute and self._replay is not None and region.checkpoint is not None:
                self._replay.counts[region.checkpoint] = region.count
        elif switch.action == "enter":
            region = _Region(value, switch.how, switch.checkpoint, switch.recompute)
            if switch.checkpoint is not None and not switch.recompute and self._replay is None:
                region.nested = any(r.checkpoint is not None and not r.nested and r.dead is None for r in regions)
                region.dead = None if region.nested else self._unrecorded(switch.inputs_require_grad)
                if region.dead is None and not region.nested:
                    self.state.functions.add("CheckpointFunction")
                    self.checkpoint_ops.setdefault(switch.checkpoint, [])
            regions.append(region)
        inner = next((r for r in reversed(regions) if r.checkpoint is not None), None)
        forward = inner is not None and not inner.recompute and self._replay is None
        live = forward and inner.dead is None and not inner.nested  # type: ignore[union-attr]
        self._checkpoint = inner.checkpoint if live else None  # type: ignore[union-attr]
        self._dead = inner.dead if forward else None  # type: ignore[union-attr]

    def _unrecorded(self, inputs_require_grad: bool) -> tuple[str, str | None] | None:
        """A reentrant checkpoint starting: autograd records it only if gradients were on where it was called and
        one of its inputs requires grad; else the parameters used inside get nothing -- (cut kind, how)."""
        outer = self._regions[-1] if self._regions else None
        if not (outer.value if outer is not None else self._grad_base):
            return "no_grad", outer.how if outer is not None else None
        return None if inputs_require_grad else ("checkpoint", None)

    def _grad_off(self) -> str | None:
        """How the innermost context switched gradients off, when the trace saw it do so."""
        region = self._regions[-1] if self._regions else None
        return region.how if region is not None and not region.value else None

    @contextmanager
    def listening(self):
        """The per-use hooks record what flows back while this is open."""
        self._ear[0] = True
        try:
            yield
        finally:
            self._ear[0] = False

    @contextmanager
    def replaying(self):
        """Run a plain backward inside this: the reentrant checkpoints' recomputations are recorded, and each of
        their forward's ops gets the cut and the per-use gradients of its recomputed twin."""
        by_op: dict[int, list[Use]] = {}
        for use in self.state.uses:
            by_op.setdefault(use.op, []).append(use)
        saved, self._regions = self._regions, []
        self._replay = _Replay(by_op)
        try:
            with self.listening(), contextlib.nullcontext() if self._recording else self._mode:
                yield
        finally:
            replay, self._replay, self._regions = self._replay, None, saved
            self._checkpoint = None
        for key, ops in self.checkpoint_ops.items():  # only recomputations that ran exactly the forward's ops
            if key in replay.broken or replay.counts.get(key) != len(ops):
                continue
            for rec, kind, how, line, library in replay.cuts.get(key, []):
                rec.cut, rec.how = kind, how
                rec.line, rec.library_line = rec.line or line, rec.library_line or library
            for use in replay.found.get(key, []):
                use.hidden = False

    def _replayed(self, name: str, ins: list, in_rg: list[bool], in_leaf: list[bool], out, stop):
        """An op run during the explaining backward: a reentrant checkpoint's recomputation, or anything else."""
        replay = self._replay
        assert replay is not None
        if name in _DETACH and ins:  # the checkpoint detaches its saved inputs before recomputing
            for o in tensors_in(out, []):
                serial = self.known(ins[0])
                if serial is not None:
                    replay.alias[id(o)] = (weakref.ref(o), serial)
        region = next((r for r in reversed(self._regions) if r.checkpoint is not None), None)
        outs = tensors_in(out, []) if name != "__setitem__" else ins[:1]
        if region is None or not region.recompute or name in _FLAGS or not (outs or name in ESCAPES):
            return
        key, k = region.checkpoint, region.count
        region.count += 1
        ops = self.checkpoint_ops.get(key)  # type: ignore[arg-type]
        if ops is None or k >= len(ops) or self.state.ops[ops[k]].name != name:
            replay.broken.add(key)
            return
        rec = self.state.ops[ops[k]]
        if any(in_rg) and (name in ESCAPES or not any(o.requires_grad for o in outs)):
            kind = "item" if name in ESCAPES else self._cut_kind(name, torch.is_grad_enabled(),
                                                                   torch.is_inference_mode_enabled())
            line, library = lines()
            replay.cuts.setdefault(key, []).append((rec, kind, self._grad_off() if kind == "no_grad" else None,
                                                    line, library))
        uses = {}
        for a, leaf in zip(ins, in_leaf):
            serial = self._serial_or_alias(a) if leaf and not any(a is o for o in outs) else None
            use = next((u for u in replay.uses.get(rec.index, []) if u.serial == serial), None)
            if use is not None:
                uses[id(a)] = use
                replay.found.setdefault(key, []).append(use)
        if uses and torch.is_grad_enabled():
            self._listen(outs, uses, stop)

    def _serial_or_alias(self, t: torch.Tensor) -> int | None:
        serial = self.known(t)
        if serial is None and self._replay is not None:
            entry = self._replay.alias.get(id(t))
            serial = entry[1] if entry is not None and entry[0]() is t else None
        return serial

    # ---- values that leave torch ---------------------------------------------------------
    def _escape(self, name: str, ins: list, in_rg: list[bool], out):
        """`.item()`, `float(t)`, `.tolist()`, `.numpy()`: an op whose output is a Python value, followed by id."""
        if not ins:
            return
        st = self.state
        serial = self._next
        self._next += 1
        self._follow(out, serial)
        rec = OpRecord(len(st.ops), name, (self.serial(ins[0]),), (serial,), torch.is_grad_enabled(),
                       torch.is_inference_mode_enabled(), id(st.stack[-1]) if st.stack else None,
                       cut="item" if in_rg[0] else None)
        rec.line, rec.library_line = lines()
        self._append(rec)

    def _follow(self, obj, serial: int, depth: int = 0):
        if len(self._objs) >= _FOLLOWED_OBJECTS or obj is None or isinstance(obj, bool):
            return
        if isinstance(obj, int) and -5 <= obj <= 256:  # small ints are shared objects: not this value's own
            return
        if isinstance(obj, list) and len(obj) > _FOLLOWED_LIST:  # kept alive while followed: not a huge one
            return
        if isinstance(obj, (int, float, complex, list)):
            self._objs[id(obj)] = (obj, serial)
            if isinstance(obj, list) and depth < 2:
                for x in obj[:64]:
                    self._follow(x, serial, depth + 1)
            return
        try:
            self._objs[id(obj)] = (weakref.ref(obj), serial)  # a numpy array: its memory is the tensor's
        except TypeError:
            return
        pointer = getattr(obj, "__array_interface__", {}).get("data", (0,))[0]
        if pointer and getattr(obj, "size", 0):
            self._arrays[pointer] = serial

    def _followed(self, obj) -> int | None:
        entry = self._objs.get(id(obj))
        if entry is None:
            return None
        held = entry[0]() if isinstance(entry[0], weakref.ref) else entry[0]
        return entry[1] if held is obj else None

    def _followed_in(self, args, kwargs, ins: list) -> tuple[int, ...]:
        """Serials of followed Python values among an op's arguments (nested lists, tuples, dicts), and of the
        numpy arrays whose memory an input tensor the trace has not seen uses (torch.from_numpy is not an op)."""
        found: list[int] = [self._arrays[p] for p in (a.data_ptr() for a in ins if self._arrays and
                                                      self.known(a) is None) if p in self._arrays]
        todo: list = [args, tuple(kwargs.values())]
        budget = _SCAN_BUDGET
        while todo and budget > 0:
            x = todo.pop()
            budget -= 1
            if isinstance(x, torch.Tensor):
                continue
            serial = self._followed(x)
            if serial is not None:
                found.append(serial)
            elif isinstance(x, (list, tuple)):
                todo.extend(x)
            elif isinstance(x, dict):
                todo.extend(x.values())
        return tuple(dict.fromkeys(found))

    def _maybe_failure(self, name: str, ins: list, err: RuntimeError):
        bad = [a for a in ins if a.is_inference()]
        if not bad or torch.is_inference_mode_enabled() or self.state.failure is not None:
            return
        self._failed_with = err
        origin = self.producer(self.known(bad[0]))
        self.state.failure = TraceFailure(str(err).split("\n")[0], name, lines()[0],
                                          origin.name if origin else None, origin.line if origin else None)

    def producer(self, serial: int | None) -> OpRecord | None:
        """The last op that wrote this tensor (its creator, or its last in-place update)."""
        for rec in reversed(self.state.ops):
            if serial in rec.outs:
                return rec
        return None

    def seen(self) -> list[torch.Tensor]:
        """Every tensor the trace has seen that is still alive."""
        return [t for t in (ref() for ref, _ in list(self._ids.values())) if t is not None]

    def used_leaves(self) -> list[tuple[torch.Tensor, int]]:
        """(tensor, serial) of every live leaf that requires grad and was used by an op."""
        used = {u.serial for u in self.state.uses}
        live = [(ref(), s) for ref, s in list(self._ids.values()) if s in used]
        return [(t, s) for t, s in live if t is not None and t.is_leaf and t.requires_grad]

    @property
    def ops(self) -> list[OpRecord]:
        return self.state.ops

    @property
    def failure(self) -> TraceFailure | None:
        return self.state.failure

    def explain(self, loss, params=None, *, retain_graph: bool = True, optimizer=None):
        """Run backward from `loss` and report every parameter: grad, routes, and why not (and, given the
        optimizer, the parameters it never trains). The graph is kept (`retain_graph`), so the user's own
        `loss.backward()` still works afterwards; `.grad` is left alone."""
        from gradflow.inspect.report import build_report

        with gc_deferred():
            return build_report(self, loss, params, retain_graph=retain_graph, optimizer=optimizer)


class gc_deferred:
    """Python's cyclic garbage collector off while the trace records and explain runs, back on as it was after.
    Each op leaves ~10 small objects, and torch keeps ~1 million: collections triggered by the trace's own
    allocations cost more than the recording itself (tens of ms per step on a model of many small layers).
    In a long block (a script of many steps) the trace collects young garbage every _GC_EVERY ops, and all of
    it every 8 times that."""

    def __init__(self) -> None:
        self.was_on = False

    def __enter__(self) -> gc_deferred:
        self.was_on = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc) -> None:
        if self.was_on:
            gc.enable()


def _running_mean(module):
    """getattr(module, "running_mean", None) without nn.Module.__getattr__ raising and catching AttributeError
    for every module that has none (every module call of a traced forward asks)."""
    d = module.__dict__
    buffers = d.get("_buffers")
    if buffers is not None and "running_mean" in buffers:
        return buffers["running_mean"]
    if "running_mean" in d:
        return d["running_mean"]
    cls = type(module)
    on_class = _CLASS_RUNNING_MEAN.get(cls)
    if on_class is None:  # hasattr on a class that has none raises and catches AttributeError: once per class
        on_class = _CLASS_RUNNING_MEAN[cls] = hasattr(cls, "running_mean")
    return getattr(module, "running_mean", None) if on_class else None


_CLASS_RUNNING_MEAN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module class -> has running_mean


def _release(nodes: list) -> None:
    while nodes:
        nodes.pop()


def _heard(ear: list, i: int, use: Use, grad_inputs, grad_outputs) -> None:
    if ear[0]:
        use.add(grad_inputs[i])


def _heard_all(ear: list, pairs: tuple, grad_inputs, grad_outputs) -> None:
    if ear[0]:
        for i, use in pairs:
            use.add(grad_inputs[i])


def _by_node(nodes: list, uses: dict, stop) -> dict:
    """{autograd node: [(input index, Use)]} for the edges from an op's new nodes into the leaves it used."""
    by_node: dict = {}
    for node, i, var in _consumers(nodes, set(uses), stop or set()):
        by_node.setdefault(node, []).append((i, uses[var]))
    return by_node


def _consumers(nodes: list, leaf_ids: set[int], stop: set):
    """(autograd node, input index, id(leaf)) for every edge from this op's new nodes (the autograd nodes of its
    results) into a leaf."""
    found: list = []
    seen: set = set()
    todo = list(nodes)
    while todo and len(seen) < _CONSUMER_SEARCH_LIMIT:
        node = todo.pop()
        if node in seen or node in stop:
            continue
        seen.add(node)
        for i, (nxt, _) in enumerate(node.next_functions):
            if nxt is None or nxt in stop:
                continue
            if type(nxt).__name__ == "AccumulateGrad":  # a leaf's: `variable` is the leaf (no AttributeError
                var = nxt.variable  # raised and caught for every other node, as getattr(node, "variable") does)
                if id(var) in leaf_ids:
                    found.append((node, i, id(var)))
            else:
                todo.append(nxt)
    return found


_TRACES: list[Trace] = []  # recording now: every module call is seen by each (usually one)
_PLAIN_CALL: list = []  # nn.Module._call_impl as it was before the first of them began


def _calls_seen_by(trace: Trace, on: bool) -> None:
    """Module calls are seen through nn.Module._call_impl (where torch runs module hooks), replaced while a trace
    records: global module hooks would send every module call down torch's slow path of hooks (~4 us each, for
    hooks doing nothing). Not `__call__`: setting a special method updates the slots of every Module subclass."""
    if on:
        if not _TRACES:
            _PLAIN_CALL[:] = [torch.nn.Module._call_impl]
            torch.nn.Module._call_impl = _module_call  # type: ignore[method-assign]
        _TRACES.append(trace)
        return
    if trace in _TRACES:
        _TRACES.remove(trace)
    if not _TRACES and _PLAIN_CALL:
        torch.nn.Module._call_impl = _PLAIN_CALL.pop()  # type: ignore[method-assign]


def _module_call(module, *args, **kwargs):
    plain = _PLAIN_CALL[0] if _PLAIN_CALL else _ORIGINAL_CALL  # (a stale reference, after every trace ended)
    seen = _TRACES[:]
    for t in seen:
        t._enter_module(module, args)
    try:
        return plain(module, *args, **kwargs)
    finally:
        for t in seen:
            t._leave_module(module)


_ORIGINAL_CALL = torch.nn.Module._call_impl


def trace() -> Trace:
    """Start recording: `with gradflow.trace() as t: loss = model(x).mean()`."""
    return Trace()
