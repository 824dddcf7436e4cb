"""Record a real PyTorch forward pass: ops, cuts, parameter uses and their source lines.

    with gradflow.trace() as t:
        loss = model(batch).mean()
    report = t.explain(loss, params=model)

A `TorchFunctionMode` sees every torch call while it runs. Tensors are tracked by
identity (weak references, no copies of data); each op keeps the serial numbers of
its tensor inputs and outputs, whether grad / inference mode was on, and which
module was running. Source lines (the innermost frame outside torch and gradflow)
are computed only for cuts, parameter uses, flag changes and top-level ops. Each
use of a leaf used more than once gets a hook on the autograd node that consumes
it at explain, so the gradient along every use is measured, not inferred (a leaf's
only use carries its whole gradient). Results of the user's code are unchanged:
every call runs as it would without the trace.

Also recorded: how gradients were switched off (torch.no_grad(), torch.set_grad_enabled(False), a decorator),
values that leave torch (`.item()`, `float(t)`, `.tolist()`, `.numpy()`: followed by identity into the ops
they are given to), and the ops inside each reentrant checkpoint, whose forward runs with grad off: `explain`
maps its recomputation in backward onto them (`replaying`).

Its rooms: trace_mode.py (the TorchFunctionMode and the module calls it sees), trace_records.py (what is
recorded), trace_uses.py (the per-use gradient hooks), trace_replay.py (grad on/off contexts, reentrant
checkpoints), trace_values.py (values that leave torch); this file is the Trace that ties them together.
"""
from __future__ import annotations

import gc
import weakref
from typing import Any

import torch

from gradflow.inspect.source import custom_function, lines
from gradflow.inspect.trace_mode import Mode, calls_seen_by, leaf_lines, running_mean
from gradflow.inspect.trace_records import (
    DETACH,
    FLAGS,
    LOW,
    METADATA_ONLY,
    FlagEvent,
    OpRecord,
    TraceFailure,
    TraceState,
    Use,
    cut_kind,
    gc_deferred,
    grad_fn,
    op_name,
    tensors_in,
)
from gradflow.inspect.trace_replay import (
    Region,
    Replay,
    grad_off,
    listening,
    replayed,
    replaying,
    serial_or_alias,
    switch_grad,
    unrecorded,
)
from gradflow.inspect.trace_uses import arm, by_node, hook, release
from gradflow.inspect.trace_values import escape, follow, followed, followed_in

_DETACH = DETACH  # (tests/language/test_op_table.py)
_Mode = Mode  # (inspect/script_trace.py subclasses it)
__all__ = ["METADATA_ONLY", "FLAGS", "FlagEvent", "OpRecord", "Trace", "TraceFailure", "TraceState", "Use",
           "gc_deferred", "op_name", "tensors_in", "trace"]
_ref, _Tensor, _F32 = weakref.ref, torch.Tensor, torch.float32
_GC_EVERY = 1 << 16  # ops: with the collector deferred (gc_deferred), a young collection this often


class Trace:
    """The recorder. Use as a context manager; then `explain(loss, params=...)`."""

    follows_numbers = True  # follow values that leave torch (.item(), .tolist(), .numpy()) into later ops

    def __init__(self) -> None:
        self.state = TraceState()
        self._ids: dict[int, int] = {}  # id(tensor) -> serial
        self._refs: list = []  # serial -> weak reference to its tensor (None: a Python value's, or a dead tensor's
        #                        whose id another one took): no tuple per tensor for the collector to scan
        self._mode = Mode(self)
        self._failed_with: BaseException | None = None
        self._regions: list[Region] = []  # gradient on/off contexts entered and not left, innermost last
        self._checkpoint: int | None = None  # the reentrant checkpoint whose forward is running
        self._dead: tuple[str, str | None] | None = None  # ... when autograd does not record it: (cut kind, how)
        self._grad_base = True  # gradients on when the trace began
        self.checkpoint_ops: dict[int, list[int]] = {}  # reentrant checkpoint (ctx id) -> its forward's ops
        self._objs: dict[int, tuple[Any, int]] = {}  # id(Python value) -> (it or a weak ref, serial)
        self._arrays: dict[int, int] = {}  # data pointer of a followed numpy array -> serial (torch.from_numpy)
        self._ear = [False]  # the per-use hooks listen only while explain runs its backward
        self._replay: Replay | None = None
        self._recording = False  # inside the `with` block
        self._gc = gc_deferred()
        self._found: list = []  # ([autograd nodes of an op's results] or the one, stop, {id(leaf): Use}), for arm()
        self._fast = type(self)._record is Trace._record and type(self)._uses is Trace._uses  # _fast_op
        self._plain = self._fast  # _fast_op may record the next op (no replay, checkpoint, followed values)
        weakref.finalize(self, release, self._found)  # never explained: let them go latest first too

    # ---- context manager -------------------------------------------------------------
    def __enter__(self) -> Trace:
        calls_seen_by(self, True)
        self._grad_base = torch.is_grad_enabled()
        self._gc = gc_deferred()
        self._gc.__enter__()
        self._mode.t = self
        self._mode.__enter__()
        self._recording = True
        return self

    def __exit__(self, exc_type, exc, tb):
        self._recording = False
        self._mode.__exit__(exc_type, exc, tb)
        self._mode.t = None  # the mode holds its trace only while on: a dropped trace is freed at once, not by a
        self._gc.__exit__(exc_type, exc, tb)  # later collection of the Trace <-> mode cycle (~4,000 objects here)
        calls_seen_by(self, False)
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

    def _enter_module(self, module):
        st = self.state
        stack = st.stack
        if not stack and id(module) not in st.modules:
            st.roots.append(module)
        st.modules[id(module)] = module
        stack.append(module)
        if module.training and running_mean(module) is not None:
            st.stats_updated[id(module)] = module  # BatchNorm & co. update their running stats

    def _leave_module(self, module):
        stack = self.state.stack
        while stack:  # also unwinds modules left by an exception
            if stack.pop() is module:
                break

    # the tracer's other rooms (trace_uses, trace_replay, trace_values), as methods
    _hook, arm = hook, arm
    _grad_switch, _unrecorded, _grad_off = switch_grad, unrecorded, grad_off
    listening, replaying, _replayed, _serial_or_alias = listening, replaying, replayed, serial_or_alias
    _escape, _follow, _followed, _followed_in = escape, follow, followed, followed_in

    # ---- bookkeeping -----------------------------------------------------------------
    def serial(self, t: torch.Tensor) -> int:
        """This tensor's serial number (a new one for a tensor seen the first time)."""
        refs = self._refs
        s = self._ids.get(id(t))
        if s is not None:
            if refs[s]() is t:
                return s
            refs[s] = None  # a dead tensor's: its id is this one's now
        self._ids[id(t)] = s = len(refs)
        refs.append(weakref.ref(t))
        return s

    @property
    def _next(self) -> int:
        """The serial the next new tensor (or followed Python value) gets."""
        return len(self._refs)

    def known(self, t: torch.Tensor) -> int | None:
        """This tensor's serial number, if the trace has seen it (an id reused by a new tensor is not a match)."""
        s = self._ids.get(id(t))
        return s if s is not None and self._refs[s]() is t else None

    def known_all(self, tensors: list) -> list[int | None]:
        """known() of each (one call for all: explain asks it of every parameter)."""
        ids, refs = self._ids, self._refs
        return [s if (s := ids.get(id(t))) is not None and refs[s]() is t else None for t in tensors]

    _cut_kind = staticmethod(cut_kind)

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
        ids, refs, serial = self._ids, self._refs, self.serial
        serials = []
        for a in ins:
            s = ids.get(id(a))
            serials.append(s if s is not None and refs[s]() is a else serial(a))
        came_in = [s for rg, leaf, s in zip(in_rg, in_leaf, serials) if s >= first and rg and not leaf] \
            if self._next > first else ()  # here came from outside the trace
        out_serials = []
        for o in outs:
            s = ids.get(id(o))
            out_serials.append(s if s is not None and refs[s]() is o else serial(o))
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
        low = dtype if dtype in LOW else ins[0].dtype if ins and ins[0].dtype in LOW else None
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
        if (in_leaf is not None and not any(o.requires_grad for o in outs)) or outs[0].dtype in LOW or \
                (ins and ins[0].dtype in LOW):
            return self._record(name, ins, in_rg, out, stop, in_leaf=in_leaf)
        ids, refs = self._ids, self._refs
        serials = []
        for a in ins:
            s = ids.get(id(a))
            if s is not None and refs[s]() is a:
                serials.append(s)
            elif a.requires_grad and not a.is_leaf:  # computed outside the trace: _record tells
                return self._record(name, ins, in_rg, out, stop, in_leaf=in_leaf)
            else:  # (self.serial(a), inline)
                if s is not None:
                    refs[s] = None
                ids[id(a)] = s = len(refs)
                refs.append(_ref(a))
                serials.append(s)
        out_serials = []
        for o in outs:
            s = ids.get(id(o))
            if s is not None and refs[s]() is o:
                out_serials.append(s)
            else:
                if s is not None:
                    refs[s] = None
                ids[id(o)] = s = len(refs)
                refs.append(_ref(o))
                out_serials.append(s)
        st = self.state
        rec = OpRecord(len(st.ops), name, tuple(serials), tuple(out_serials), True, False, id(st.stack[-1]))
        uses = None
        if in_leaf is not None and True in in_leaf:
            uses = {id(a): Use(s, rec.index) for a, leaf, s in zip(ins, in_leaf, serials)
                    if leaf and not any(a is o for o in outs)}
            if uses:
                rec.line, rec.library_line = lines(3)  # (frames 1-2: the tracer's)
        st.ops.append(rec)
        if not rec.index % _GC_EVERY and rec.index:
            self._collect(rec.index)
        if uses:
            st.uses.extend(uses.values())
            self._listen(outs, uses, stop)

    def _leaf_op(self, name: str, x, params: list, out, stop, module):
        """_fast_op for a torch leaf module recorded whole (trace_mode.LEAVES): its input x, the module's own
        tensors, one result, each input's flags read once; what is not that plain (a cut, half precision, a tensor
        from outside the trace, a result that is an input) goes to _fast_op, which tells (_leaf_general)."""
        if type(out) is not _Tensor or ((d := out.dtype) is not _F32 and d in LOW) or \
                ((d := x.dtype) is not _F32 and d in LOW) or \
                (not out.requires_grad and (x.requires_grad or any(p.requires_grad for p in params))):
            return self._leaf_general(name, x, params, out, stop)
        ids, refs = self._ids, self._refs
        ops = self.state.ops
        index = len(ops)
        serials = []
        uses = {}  # {id(leaf): Use} of the leaves that require grad, made as they are met (dropped if a check below
        #            sends the op to _leaf_general)
        for a in (x, *params):  # each flag asked once, and is_leaf only of a tensor that requires grad
            s = ids.get(id(a))
            if s is not None and refs[s]() is a:  # seen: x, usually
                if a.requires_grad and a.is_leaf:
                    uses[id(a)] = Use(s, index)
            elif a is out:
                return self._leaf_general(name, x, params, out, stop)
            elif a.requires_grad:  # a parameter seen the first time, usually
                if not a.is_leaf:  # computed outside the trace
                    return self._leaf_general(name, x, params, out, stop)
                if s is not None:  # (self.serial(a), inline)
                    refs[s] = None
                ids[id(a)] = s = len(refs)
                refs.append(_ref(a))
                uses[id(a)] = Use(s, index)
            else:
                if s is not None:
                    refs[s] = None
                ids[id(a)] = s = len(refs)
                refs.append(_ref(a))
            serials.append(s)
        s = ids.get(id(out))
        if s is not None:
            if refs[s]() is out:
                return self._leaf_general(name, x, params, out, stop)
            refs[s] = None
        ids[id(out)] = s = len(refs)
        refs.append(_ref(out))
        rec = OpRecord(index, name, tuple(serials), (s,), True, False, id(module))
        ops.append(rec)
        if not index % _GC_EVERY and index:
            self._collect(index)
        if uses:
            self.state.uses.extend(uses.values())
            rec.line, rec.library_line = leaf_lines()  # lines(4): from the caller of _module_call
            node = out.grad_fn
            if node is not None:
                self._found.append((node, stop, uses))  # (one node: no list, arm() tells)

    def _leaf_general(self, name: str, x, params: list, out, stop):
        """_fast_op's arguments as the mode gives them (inputs' flags, and `stop` only if a leaf is used)."""
        ins = [x, *params]
        in_rg = [a.requires_grad for a in ins]
        in_leaf = [rg and a.is_leaf for a, rg in zip(ins, in_rg)] if True in in_rg else None
        return self._fast_op(name, ins, in_rg, in_leaf, out, stop if in_leaf and True in in_leaf else None)

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
        nodes = [g for g in map(grad_fn, outs) if g is not None]
        if self._replay is None:  # the forward: searched and hooked by arm() at explain, when a report needs
            if nodes:  # the flow (a leaf used once needs neither)
                self._found.append((nodes, stop, uses))
            return
        for node, pairs in by_node(nodes, uses, stop).items():
            self._hook(node, pairs)

    def _flag(self, name: str, t: torch.Tensor, args, kwargs):
        value = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
        self.state.flags.append(FlagEvent(self.serial(t), bool(value), name, lines()[0]))

    def _settle_plain(self) -> None:
        self._plain = self._fast and self._replay is None and not self._objs and self._checkpoint is None and \
            self._dead is None

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
        refs = self._refs
        return [t for t in (refs[s]() for s in list(self._ids.values())) if t is not None]

    def used_leaves(self) -> list[tuple[torch.Tensor, int]]:
        """(tensor, serial) of every live leaf that requires grad and was used by an op."""
        used = {u.serial for u in self.state.uses}
        refs = self._refs
        live = [(refs[s](), s) for s in list(self._ids.values()) if s in used]
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


def trace() -> Trace:
    """Start recording: `with gradflow.trace() as t: loss = model(x).mean()`."""
    return Trace()
