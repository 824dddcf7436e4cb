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
recorded), trace_ops.py (how one op is recorded: the general path and its shortcuts), trace_uses.py (the per-use
gradient hooks), trace_replay.py (grad on/off contexts, reentrant checkpoints), trace_values.py (values that leave
torch); this file is the Trace that ties them together.
"""
from __future__ import annotations

from typing import Any

import torch

from gradflow.tracer.followed_values import escape, follow, followed, followed_in
from gradflow.tracer.grad_regions import (
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
from gradflow.tracer.recording import append, collect, fast_op, leaf_general, leaf_op, new_serial, record
from gradflow.tracer.records import (
    DETACH,
    FLAGS,
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
from gradflow.tracer.source_lines import lines
from gradflow.tracer.torch_mode import Mode, calls_seen_by, running_mean
from gradflow.tracer.use_hooks import arm, by_node, hook

_DETACH = DETACH  # (tests/language/test_op_table.py)
_Mode = Mode  # (script/recorder.py subclasses it)
__all__ = ["METADATA_ONLY", "FLAGS", "FlagEvent", "OpRecord", "Trace", "TraceFailure", "TraceState", "Use",
           "gc_deferred", "op_name", "tensors_in"]


class Trace:
    """The recorder. Use as a context manager; then `explain(loss, params=...)`."""

    follows_numbers = True  # follow values that leave torch (.item(), .tolist(), .numpy()) into later ops

    def __init__(self, explain=None) -> None:
        self._explain = explain  # report.build.build_report, given by gradflow.trace()
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
        self._found: list = []  # [autograd nodes of an op's results] or the one, stop, op index, the next op's...,
        #                         flat (no tuple per op left for the collector), for arm(); never explained, let go
        #                         with the trace, latest first (as a list lets go)
        self._fast = type(self)._record is Trace._record and type(self)._uses is Trace._uses  # _fast_op
        self._plain = self._fast  # _fast_op may record the next op (no replay, checkpoint, followed values)

    # ---- context manager -------------------------------------------------------------
    def __enter__(self) -> Trace:
        calls_seen_by(self, True)
        self._grad_base = torch.is_grad_enabled()
        self._gc.__enter__()  # (each entry notes anew whether the collector was on)
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
        self._met_module(module)
        self.state.stack.append(module)

    def _met_module(self, module):
        """A module call seen: _enter_module without the push, all a leaf module recorded whole needs (nothing
        inside its call reads the stack: its record names its module itself, trace_mode._leaf_call)."""
        st = self.state
        if not st.stack and id(module) not in st.modules:
            st.roots.append(module)
        st.modules[id(module)] = module
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
        return s if s is not None and refs[s]() is t else new_serial(self._ids, refs, t, s)

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

    # how an op is recorded (trace_ops.py), as methods
    _record, _fast_op, _leaf_op, _leaf_general = record, fast_op, leaf_op, leaf_general
    _collect, _append = collect, append

    def _uses(self, rec: OpRecord, leaves: list, outs: list, stop, given: set[int] | None = None):
        uses = {id(a): Use(self.serial(a), rec.index, hidden=given is not None and id(a) not in given)
                for a in leaves}
        self.state.uses.extend(uses.values())
        if not rec.grad_enabled:
            return
        self._listen(outs, uses, stop, rec.index)

    def _listen(self, outs: list, uses: dict | None, stop, index: int):
        """Hooks on the autograd nodes that consume each leaf: the gradient sent along each use (one hook per node,
        however many leaves it consumes: LayerNorm's weight and bias). `uses`: {id(leaf): Use} of op `index`,
        needed only while replaying (the forward's are found by the op's index at explain)."""
        nodes = [g for g in map(grad_fn, outs) if g is not None]
        if self._replay is None:  # the forward: searched and hooked by arm() at explain, when a report needs
            if nodes:  # the flow (a leaf used once needs neither); its uses are those of op `index`
                self._found += nodes, stop, index
            return
        for node, pairs in by_node(nodes, uses or {}, stop).items():
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
        used = set(self.state.use_columns()[0])
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
        `loss.backward()` still works afterwards; `.grad` is left alone. The report is gradflow.report's, given to
        the trace by `gradflow.trace()` (the report layer sits above the recorder)."""
        if self._explain is None:
            raise TypeError("this trace was not made by gradflow.trace(): it records, but cannot explain")
        with gc_deferred():
            return self._explain(self, loss, params, retain_graph=retain_graph, optimizer=optimizer)
