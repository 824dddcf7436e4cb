"""Record a real PyTorch forward pass: ops, cuts, parameter uses and their source lines.

    with gradflow.trace() as t:
        loss = model(batch).mean()
    report = t.explain(loss, params=model)

A `TorchFunctionMode` sees every torch call while it runs and hands it to `Trace.on_torch_function`, the one path
that records an op (`_record`). Tensors are tracked by identity (weak references, no copies of data); each op keeps
the serial numbers of its tensor inputs and outputs, whether grad / inference mode was on, and which module was
running (module calls are seen through tracer/module_calls.py). Source lines (the innermost frame outside torch
and gradflow) are computed only for cuts, parameter uses, flag changes and top-level ops. Each use of a leaf used
more than once gets a hook on the autograd node that consumes it at explain (`arm`), so the gradient along every
use is measured, not inferred (a leaf's only use carries its whole gradient). Results of the user's code are
unchanged: every call runs as it would without the trace.

Also recorded: how gradients were switched off (torch.no_grad(), torch.set_grad_enabled(False), a decorator: the
regions of tracer/grad_regions.py), values that leave torch (`.item()`, `float(t)`, `.tolist()`, `.numpy()`:
followed by identity into the ops they are given to, tracer/followed_values.py), and the ops inside each reentrant
checkpoint, whose forward runs with grad off: `replaying` maps its recomputation in backward onto them.

Tensor versions (in-place writes) belong in `_record`: every op passes there once with its inputs and outputs.
"""
from __future__ import annotations

import contextlib
import weakref
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode

from gradflow.errors import text_of
from gradflow.tracer.followed_values import FollowedValues
from gradflow.tracer.grad_regions import GradRegions
from gradflow.tracer.module_calls import NOT_RUN, calls_seen_by, running_mean
from gradflow.tracer.records import (
    ESCAPES,
    FLAGS,
    LOW,
    METADATA_ONLY,
    FlagEvent,
    OpRecord,
    TraceFailure,
    TraceState,
    Use,
    cut_kind,
    flag_value,
    grad_fn,
    inputs,
    is_leaf,
    op_name,
    requires_grad,
    tensors_in,
)
from gradflow.tracer.source_lines import custom_function, lines
from gradflow.tracer.use_hooks import Listening, UseHooks

__all__ = ["METADATA_ONLY", "FLAGS", "FlagEvent", "OpRecord", "Trace", "TraceFailure", "TraceState", "Use",
           "TraceMode", "op_name", "tensors_in"]

# Properties of a tensor's metadata: never a tensor, so nothing to record and no failure to tell: run at once.
_METADATA_GETS = {"shape", "dtype", "device", "ndim"}
# torch has no public way to ask which autograd nodes an op made; the sequence number the next node gets bounds the
# search for an op's own nodes (older ones computed its inputs). Without it, the inputs' nodes bound it.
_next_node = getattr(torch._C._autograd, "_get_sequence_nr", None)


class TraceMode(TorchFunctionMode):
    """Hands every torch call to its trace while the trace records."""

    def __init__(self, trace: Trace):
        super().__init__()
        self.t: Trace | None = trace  # None once the trace has left it (Trace.__exit__: no Trace <-> mode cycle)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        t = self.t
        if t is None:  # left on torch's stack by a mode entered inside the block and never left: run, not record
            return func(*args, **(kwargs or {}))
        return t.on_torch_function(func, args, kwargs or {})


class Trace:
    """The recorder. Use as a context manager; then `explain(loss, params=...)`."""

    keeps_nodes = False  # name torch's autograd nodes by their op (report/op_graph.py): set by trace(autograd=True)

    def __init__(self, explain=None, failures=None) -> None:
        self._explain = explain  # report.build.build_report, given by gradflow.trace()
        self.failures = failures  # a tracer.failure_log.FailureLog: what explains a failing backward, recorded
        #                           from this trace's calls (the commands give one; None: not recorded)
        self.state = TraceState()
        self._ids: dict[int, int] = {}  # id(tensor) -> serial
        self._refs: list = []  # serial -> weak reference to its tensor (None: a Python value's, or a dead tensor's
        #                        whose id another one took)
        self._mode = TraceMode(self)
        self._failed_with: BaseException | None = None
        self.regions = GradRegions()  # gradient contexts and reentrant checkpoints (tracer/grad_regions.py)
        self._values = FollowedValues()
        self._recording = False  # inside the `with` block
        self._hooks = UseHooks()  # the gradient along each use of a leaf (tracer/use_hooks.py)
        self._keeps_stats: dict[int, bool] = {}  # id(module) -> does it keep running statistics (asked once)

    # ---- context manager -------------------------------------------------------------
    def __enter__(self) -> Trace:
        calls_seen_by(self, True)
        self.regions.base = torch.is_grad_enabled()
        self._mode.t = self
        if self.failures is not None:
            self.failures.start()
        self._mode.__enter__()
        self._recording = True
        return self

    def __exit__(self, exc_type, exc, tb):
        self._recording = False
        self._mode.__exit__(exc_type, exc, tb)
        self._mode.t = None  # the mode holds its trace only while on: a dropped trace is freed at once, not by a
        #                      later collection of the Trace <-> mode cycle
        if self.failures is not None:
            self.failures.stop()
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

    # ---- module calls (tracer/module_calls.py) ------------------------------------------
    def enter_module(self, module) -> None:
        self._see_module(module)
        self.state.stack.append(module)

    def _see_module(self, module) -> None:
        st, key = self.state, id(module)
        stats = self._keeps_stats.get(key)
        if stats is None:  # the first call of this module the trace sees
            if not st.stack:
                st.roots.append(module)
            st.modules[key] = module
            stats = self._keeps_stats[key] = running_mean(module) is not None
        if stats and module.training:
            st.stats_updated[key] = module  # BatchNorm & co. update their running stats

    def leave_module(self, module) -> None:
        stack = self.state.stack
        while stack:  # also unwinds modules left by an exception
            if stack.pop() is module:
                break

    def run_leaf(self, module, args: tuple, kwargs: dict):
        """The one shortcut beside on_torch_function: a call of one of torch's own leaf modules (_LEAVES), in the
        common state, runs torch's own forward with the trace's mode off, and its one op is recorded by `_record`
        as the mode would have recorded it, without the mode's dispatch (bench/inspect_speed.py, many small ops:
        the step took about half again as long without it). NOT_RUN for any other call."""
        leaf = _LEAVES.get(type(module))
        regions = self.regions
        if leaf is None or kwargs or len(args) != 1 or type(args[0]) is not torch.Tensor or \
                regions.replay is not None or regions.checkpoint is not None or regions.dead is not None or \
                self._values or not _bare(module):
            return NOT_RUN
        if not step_aside(self._mode):  # a mode of the user's own is innermost: it must see the op
            return NOT_RUN
        try:
            name, tensors = leaf
            ins = tensors(module, args[0])
            in_rg = list(map(requires_grad, ins))
            in_leaf = [rg and is_leaf(a) for a, rg in zip(ins, in_rg)]
            stop = (_next_node() if _next_node is not None else _input_nodes(ins)) if True in in_leaf else None
            self._see_module(module)  # (not pushed on the module stack: nothing inside its forward reads it)
            try:
                out = type(module).forward(module, args[0])
            except RuntimeError as err:
                self._maybe_failure(name, ins, err)
                raise
            self._record(name, ins, in_rg, out, stop, in_leaf, module=module)
            if self.failures is not None:
                self.failures.op_ran(name, ins, out)
        finally:
            _push_mode(self._mode)
        return out

    # ---- bookkeeping -----------------------------------------------------------------
    def serial(self, t: torch.Tensor) -> int:
        """This tensor's serial number (a new one for a tensor seen the first time; a dead tensor's id reused by a
        new one gets a new serial)."""
        s = self._ids.get(id(t))
        if s is not None and self._refs[s]() is t:
            return s
        if s is not None:
            self._refs[s] = None
        self._ids[id(t)] = s = len(self._refs)
        self._refs.append(weakref.ref(t))
        return s

    def _value_serial(self) -> int:
        """A serial for a Python value that left torch (no tensor to refer to)."""
        self._refs.append(None)
        return len(self._refs) - 1

    def known(self, t: torch.Tensor) -> int | None:
        """This tensor's serial number, if the trace has seen it (an id reused by a new tensor is not a match)."""
        s = self._ids.get(id(t))
        return s if s is not None and self._refs[s]() is t else None

    def known_all(self, tensors: list) -> list[int | None]:
        """known() of each (explain asks it of every parameter)."""
        ids, refs = self._ids, self._refs
        return [s if (s := ids.get(id(t))) is not None and refs[s]() is t else None for t in tensors]

    def producer(self, serial: int | None) -> OpRecord | None:
        """The last op that wrote this tensor (its creator, or its last in-place update)."""
        for rec in reversed(self.state.ops):
            if serial in rec.outs:
                return rec
        return None

    def seen(self) -> list[torch.Tensor]:
        """Every tensor the trace has seen that is still alive."""
        return [t for ref in self._refs if ref is not None and (t := ref()) is not None]  # (a serial's reference
        #                                                     is None once a new tensor took its id: each one once)

    def used_leaves(self) -> list[tuple[torch.Tensor, int]]:
        """(tensor, serial) of every live leaf that requires grad and was used by an op."""
        used = set(self.state.use_columns()[0])
        live = [(self._refs[s](), s) for s in list(self._ids.values()) if s in used]
        return [(t, s) for t, s in live if t is not None and is_leaf(t) and t.requires_grad]

    @property
    def ops(self) -> list[OpRecord]:
        return self.state.ops

    @property
    def failure(self) -> TraceFailure | None:
        return self.state.failure

    # ---- every torch call --------------------------------------------------------------
    def on_torch_function(self, func, args, kwargs: dict):
        """Run the call as asked and record it: an op, a switch of grad mode, a flag change, a value leaving
        torch, or (explain's backward) a reentrant checkpoint's recomputation."""
        name = op_name(func)
        if name in _METADATA_GETS and func.__name__ == "__get__":  # x.shape, x.dtype: nothing to record
            return func(*args, **kwargs)
        if name == "_set_grad_enabled":
            self.regions.switch(bool(args[0]) if args else bool(kwargs.get("mode", True)), self)
            return func(*args, **kwargs)
        replay = self.regions.replay
        ins = inputs(args, kwargs)
        if name in METADATA_ONLY:
            ins = ins[1:]
        if name in FLAGS and ins and replay is None:
            self._flag(name, ins[0], args, kwargs)
        in_rg = list(map(requires_grad, ins))
        in_leaf = [rg and is_leaf(a) for a, rg in zip(ins, in_rg)]  # before the op: in place it may change
        # Only ops that consume a leaf get hooks; their search stops at the nodes made before the op. Other ops
        # never touch grad_fn: a node Python has touched is freed recursively by torch (docs/limits.md).
        stop = None
        if True in in_leaf:
            stop = _next_node() if replay is None and _next_node is not None else _input_nodes(ins)
        try:
            out = self.run(func, args, kwargs)
        except RuntimeError as err:
            if replay is None:
                self._maybe_failure(name, ins, err)
            raise
        if replay is not None:
            hooked = self.regions.replayed(name, ins, in_rg, in_leaf, out, self.known, self.state.ops)
            if hooked is not None:
                self._hooks.hook(*hooked, stop)
        elif name in ESCAPES:  # followed into later ops (a tensor made from x.item() names the .item() that cut it)
            self._escape(name, ins, in_rg, out)
        elif name not in FLAGS:
            extra = self._values.serials_in(args, kwargs, ins, self.known)
            self._record(name, ins, in_rg, out, stop, in_leaf, extra)
        return out

    def run(self, func, args, kwargs: dict):
        """Run one torch call of the user's, seen by the failure log when there is one."""
        if self.failures is None or self.regions.replay is not None:
            return func(*args, **kwargs)
        return self.failures.call(func, args, kwargs)

    def _record(self, name: str, ins: list, in_rg: list[bool], out, stop, in_leaf: list[bool],
                extra: tuple[int, ...] = (), module=None) -> None:
        """The one way an op is recorded: its serials, its cut (if an input required grad and no result does),
        its source line where a report can show it, and its uses of leaves. `module`: the module it ran in, when
        not the innermost one on the stack (run_leaf)."""
        outs = ins[:1] if name == "__setitem__" else [out] if type(out) is torch.Tensor else tensors_in(out, [])
        if not outs:  # (x[i] = y writes into x)
            return
        serials, came_in, leaves = self._in_serials(ins, in_rg, in_leaf)
        out_serials = tuple(map(self.serial, outs))
        st = self.state
        grad_on, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        if module is None and st.stack:
            module = st.stack[-1]
        rec = OpRecord(len(st.ops), name, (*serials, *extra), out_serials, grad_on, inference,
                       None if module is None else id(module))
        given = self._cut(rec, outs) if True in in_rg and True not in map(requires_grad, outs) else None
        used = [s for s in leaves if s not in out_serials] if leaves else ()  # (in place: x.add_() writes x)
        if rec.cut or used or inference or rec.module is None or came_in or self.regions.checkpoint is not None:
            rec.line, rec.library_line = lines()  # (a checkpoint's: its recomputation may find a cut here)
        if came_in and len(st.outside) < 100:  # computed outside the trace (another thread, before it began)
            st.outside += [(rec.index, s) for s in came_in]
        self._append(rec)
        if self.keeps_nodes:
            self._keep_nodes(rec, outs)
        if outs[0].dtype in LOW or (ins and ins[0].dtype in LOW):
            self._note_low_precision(rec, ins, outs)
        if used:
            self._uses(rec, used, outs, stop, given)

    def _in_serials(self, ins: list, in_rg: list[bool], in_leaf: list[bool]) -> tuple[list[int], list[int], list[int]]:
        """(each input's serial; those of the inputs seen here first that require grad and are not leaves: computed
        outside the trace; those of the leaves, each once). One pass over the inputs: an op has a few."""
        first = len(self._refs)  # serials from here on are new
        serials: list[int] = []
        came_in: list[int] = []
        leaves: list[int] = []
        for a, rg, leaf in zip(ins, in_rg, in_leaf):
            s = self.serial(a)
            if leaf:
                if s not in leaves:
                    leaves.append(s)
            elif s >= first and rg:
                came_in.append(s)
            serials.append(s)
        return serials, came_in, leaves

    def _cut(self, rec: OpRecord, outs: list) -> set[int] | None:
        """Mark the op's cut (an input required grad, no result does); inside a custom Function's forward (no cut:
        its own backward carries the gradient), the ids of the tensors the Function was applied to."""
        rec.cut = cut_kind(rec.name, rec.grad_enabled, rec.inference)
        dead = self.regions.dead
        if dead is not None and rec.cut == "no_grad":  # in a checkpoint autograd does not record
            rec.cut, rec.how = dead
            return None
        function = custom_function() if rec.cut == "no_grad" else None
        if function is not None:
            rec.cut, rec.inside = None, function[0]
            self.state.functions.add(function[0])
            return {id(a) for a in tensors_in(function[1], [])}
        if rec.cut == "no_grad":
            rec.how = self.regions.grad_off()
        return None

    def _note_low_precision(self, rec: OpRecord, ins: list, outs: list) -> None:
        """Half precision: the op's autograd node is kept to find where a gradient under/overflows."""
        dtype = outs[0].dtype
        low = dtype if dtype in LOW else ins[0].dtype if ins and ins[0].dtype in LOW else None
        node = outs[0].grad_fn if low is not None else None
        if node is not None:
            self.state.low_nodes[id(node)] = (node, rec.index, low)
            if rec.line is None:
                rec.line, rec.library_line = lines()

    def _keep_nodes(self, rec: OpRecord, outs: list) -> None:
        """Only to draw torch's own graph: each result's autograd node -> this op, and the op's line even where
        the report needs none. The nodes are held, so that an id stays theirs; torch frees them when the trace
        goes, earliest first, each one step from a node already gone."""
        if rec.line is None:
            rec.line, rec.library_line = lines()
        for o in outs:
            node = grad_fn(o)
            if node is not None:
                self.state.nodes.setdefault(id(node), (node, rec.index))

    def _append(self, rec: OpRecord) -> None:
        self.state.ops.append(rec)
        self.regions.recorded(rec.index)

    def _flag(self, name: str, t: torch.Tensor, args, kwargs):
        self.state.flags.append(FlagEvent(self.serial(t), flag_value(args, kwargs), name, lines()[0]))

    def _maybe_failure(self, name: str, ins: list, err: RuntimeError):
        bad = [a for a in ins if a.is_inference()]
        if not bad or torch.is_inference_mode_enabled() or self.state.failure is not None:
            return
        self._failed_with = err
        origin = self.producer(self.known(bad[0]))
        self.state.failure = TraceFailure(text_of(err).split("\n")[0], name, lines()[0],
                                          origin.name if origin else None, origin.line if origin else None)

    # ---- values that leave torch (tracer/followed_values.py) ----------------------------
    def _escape(self, name: str, ins: list, in_rg: list[bool], out):
        """`.item()`, `float(t)`, `.tolist()`, `.numpy()`: an op whose output is a Python value, followed by id."""
        if not ins:
            return
        st = self.state
        serial = self._value_serial()
        self._values.follow(out, serial)
        rec = OpRecord(len(st.ops), name, (self.serial(ins[0]),), (serial,), torch.is_grad_enabled(),
                       torch.is_inference_mode_enabled(), id(st.stack[-1]) if st.stack else None,
                       cut="item" if in_rg[0] else None)
        rec.line, rec.library_line = lines()
        self._append(rec)

    # ---- per-use gradients (tracer/use_hooks.py) ----------------------------------------
    def _uses(self, rec: OpRecord, used: list[int], outs: list, stop, given: set[int] | None = None):
        """Op `rec` used these leaves (serials, each once). Kept as numbers (TraceState.add_uses), unless a custom
        Function hides some of them (`given`: the ids of the tensors it was applied to): then as Use objects."""
        if given is None:
            self.state.add_uses(used, rec.index)
            uses = None
        else:
            leaves = {s: self._refs[s]() for s in used}
            uses = {id(a): Use(s, rec.index, hidden=id(a) not in given) for s, a in leaves.items()}
            self.state.uses.extend(uses.values())
        if not rec.grad_enabled:
            return
        if self.regions.replay is None:  # the gradient along each use: the op's nodes kept for arm() at explain
            self._hooks.keep(outs, stop, rec.index)
        else:  # ... hooked at once while a checkpoint's recomputation runs in explain's backward
            self._hooks.hook(outs, uses or {}, stop)

    def arm(self) -> None:
        """Hook, before explain's backward, the uses of leaves used more than once (tracer/use_hooks.py)."""
        self._hooks.arm(self.state, self._refs)

    def listening(self) -> Listening:
        """The per-use hooks record what flows back while this is open."""
        return self._hooks.listening()

    # ---- reentrant checkpoints (tracer/grad_regions.py) -----------------------------------
    @contextmanager
    def replaying(self):
        """Run a plain backward inside this: the reentrant checkpoints' recomputations are recorded, and each of
        their forward's ops gets the cut and the per-use gradients of its recomputed twin."""
        try:
            if not self._recording:
                self._mode.t = self  # (the mode holds its trace only while on)
            with self.regions.replaying(self.state.uses), self.listening(), \
                    contextlib.nullcontext() if self._recording else self._mode:
                yield
        finally:
            if not self._recording:
                self._mode.t = None

    # ---- the report ------------------------------------------------------------------
    def explain(self, loss, params=None, *, retain_graph: bool = True, optimizer=None):
        """Run backward from `loss` and report every parameter: grad, routes, and why not (and, given the
        optimizer, the parameters it never trains). The graph is kept (`retain_graph`), so the user's own
        `loss.backward()` still works afterwards; `.grad` is left alone. The report is gradflow.report's, given to
        the trace by `gradflow.trace()` (the report layer sits above the recorder)."""
        if self._explain is None:
            raise TypeError("this trace was not made by gradflow.trace(): it records, but cannot explain")
        return self._explain(self, loss, params, retain_graph=retain_graph, optimizer=optimizer)


def _input_nodes(ins: list) -> set:
    return {g for g in map(grad_fn, ins) if g is not None}


# ---- torch's own leaf modules, run whole (Trace.run_leaf) ------------------------------------------------------
def _weight_bias(m, x: torch.Tensor) -> list:
    """The tensors the functional is given: x, then the weight and bias (read where self.weight reads them)."""
    p = m._parameters
    return [a for a in (x, p.get("weight"), p.get("bias")) if a is not None]


_LEAVES: dict = {torch.nn.Linear: ("linear", _weight_bias), torch.nn.LayerNorm: ("layer_norm", _weight_bias),
                 torch.nn.GELU: ("gelu", lambda m, x: [x])}  # module type -> (its op's name, its tensors)
_FORWARDS = {cls: cls.forward for cls in _LEAVES}  # as torch defines them: one patched by anyone is not run whole
_hooks = torch.nn.modules.module
# torch has no public way to ask whether a torch function mode is on, whether the JIT is tracing, or to take the
# innermost mode off its stack and put it back (TorchFunctionMode.__exit__ pops whichever mode is innermost).
_mode_on, _jit_tracing = torch._C._is_torch_function_mode_enabled, torch._C._get_tracing_state
_pop_mode, _push_mode = torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack


def step_aside(mode: TorchFunctionMode) -> bool:
    """Take `mode` off torch's function-mode stack if it is the innermost one (True); else leave the stack as it is
    (a mode of the user's own is innermost and must go on seeing every call). `step_back(mode)` puts it back."""
    top = _pop_mode()
    if top is mode:
        return True
    _push_mode(top)
    return False


def step_back(mode: TorchFunctionMode) -> None:
    _push_mode(mode)


def _bare(module) -> bool:
    """No hooks of any kind (the module's own and the global ones: nn.Module keeps them as attributes, with no
    public way to ask), its forward torch's own, gradients on, not inference mode, a torch function mode on and the
    JIT not tracing: then its call runs exactly its one functional op."""
    h = _hooks
    return not (module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or
                module._backward_pre_hooks or h._global_forward_hooks or h._global_forward_pre_hooks or
                h._global_backward_hooks or h._global_backward_pre_hooks) and \
        "forward" not in module.__dict__ and type(module).forward is _FORWARDS[type(module)] and \
        torch.is_grad_enabled() and not torch.is_inference_mode_enabled() and _mode_on() and not _jit_tracing()

