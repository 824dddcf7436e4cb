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
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from gradflow.inspect.source import custom_function, user_line
from gradflow.language.ops import OPS

_DETACH = {name for op in OPS.values() if op.role == "cut" for name in op.torch_names}  # detach, detach_, .data
_FLAGS = {"requires_grad_", "requires_grad="}  # requires_grad_(v) and `t.requires_grad = v`
_CONSUMER_SEARCH_LIMIT = 256  # autograd nodes visited per op when looking for parameter uses
_LOW = (torch.float16, torch.bfloat16)  # half precision: its ops' autograd nodes are kept (inspect/precision.py)


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
    cut: str | None = None  # detach | no_grad | inference_mode | nondiff (an input required grad, no output does)
    line: str | None = None
    inside: str | None = None  # the custom autograd.Function whose forward ran this op (grad off, but no cut)


@dataclass
class Use:
    """One op consuming a leaf that requires grad; `flow` is the gradient it sent back."""

    serial: int
    op: int  # index into Trace.ops
    flow: Any = None  # torch.Tensor | None, filled by autograd-node hooks during backward
    hidden: bool = False  # inside a custom Function that was not given this leaf: autograd has no edge to see

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


class _Mode(TorchFunctionMode):
    def __init__(self, trace: Trace):
        super().__init__()
        self.t = trace

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        ins = tensors_in(kwargs, tensors_in(args, []))
        if name in _FLAGS and ins:
            self.t._flag(name, ins[0], args, kwargs)
        in_rg = [a.requires_grad for a in ins]
        # Only ops that consume a leaf get hooks; their search stops at the inputs' nodes. Other ops never touch
        # grad_fn: a node Python has touched is freed recursively by torch (docs/limits.md, long graphs).
        stop = {a.grad_fn for a in ins if a.grad_fn is not None} \
            if any(rg and a.is_leaf for a, rg in zip(ins, in_rg)) else None
        try:
            out = func(*args, **kwargs)
        except RuntimeError as err:
            self.t._maybe_failure(name, ins, err)
            raise
        if name not in _FLAGS:
            self.t._record(name, ins, in_rg, out, stop)
        return out


class Trace:
    """The recorder. Use as a context manager; then `explain(loss, params=...)`."""

    def __init__(self) -> None:
        self.state = TraceState()
        self._ids: dict[int, tuple[weakref.ref, int]] = {}  # id(tensor) -> (weak reference, serial)
        self._next = 0
        self._mode = _Mode(self)
        self._hooks: list = []
        self._failed_with: BaseException | None = None

    # ---- context manager -------------------------------------------------------------
    def __enter__(self) -> Trace:
        from torch.nn.modules import module as m

        self._hooks = [m.register_module_forward_pre_hook(self._enter_module),
                       m.register_module_forward_hook(self._leave_module, always_call=True)]
        self._mode.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._mode.__exit__(exc_type, exc, tb)
        for h in self._hooks:
            h.remove()
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
        if module.training and getattr(module, "running_mean", None) is not None:
            st.stats_updated[id(module)] = module  # BatchNorm & co. update their running stats

    def _leave_module(self, module, args, output):
        st = self.state
        while st.stack:  # also unwinds modules left by an exception
            if st.stack.pop() is module:
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

    def _record(self, name: str, ins: list, in_rg: list[bool], out, stop):
        outs = tensors_in(out, []) if name != "__setitem__" else ins[:1]  # x[i] = y writes into x
        if not outs:
            return
        st = self.state
        grad_on, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        first = self._next  # serials from here on are new: a tensor that requires grad, not a leaf, seen first
        serials = tuple(self.serial(a) for a in ins)  # here came from outside the trace
        came_in = [a for a, rg, s in zip(ins, in_rg, serials) if s >= first and rg and not a.is_leaf]
        rec = OpRecord(len(st.ops), name, serials, tuple(self.serial(o) for o in outs), grad_on, inference,
                       id(st.stack[-1]) if st.stack else None)
        given: set[int] | None = None  # inside a custom Function's forward: the tensors it was applied to
        if any(in_rg) and not any(o.requires_grad for o in outs):
            rec.cut = "detach" if name in _DETACH else "inference_mode" if inference else \
                "no_grad" if not grad_on else "nondiff"
            function = custom_function() if rec.cut == "no_grad" else None
            if function is not None:
                rec.cut, rec.inside = None, function[0]  # the Function's own backward carries the gradient
                st.functions.add(function[0])
                given = {id(a) for a in tensors_in(function[1], [])}
        leaves = [a for a, rg in zip(ins, in_rg) if rg and a.is_leaf and not any(a is o for o in outs)]
        if rec.cut or leaves or inference or rec.module is None or came_in:
            rec.line = user_line()
        if came_in and len(st.outside) < 100:
            st.outside += [(rec.index, s) for a, rg, s in zip(ins, in_rg, serials)
                           if s >= first and rg and not a.is_leaf]
        st.ops.append(rec)
        low = outs[0].dtype if outs[0].dtype in _LOW else ins[0].dtype if ins and ins[0].dtype in _LOW else None
        if low is not None and outs[0].grad_fn is not None:  # half precision: where a gradient under/overflows
            st.low_nodes[id(outs[0].grad_fn)] = (outs[0].grad_fn, rec.index, low)
            rec.line = rec.line or user_line()
        if leaves:
            self._uses(rec, leaves, outs, stop, given)

    def _uses(self, rec: OpRecord, leaves: list, outs: list, stop, given: set[int] | None = None):
        uses = {id(a): Use(self.serial(a), rec.index, hidden=given is not None and id(a) not in given)
                for a in leaves}
        self.state.uses.extend(uses.values())
        if not rec.grad_enabled:
            return
        for node, i, var in _consumers(outs, set(uses), stop or set()):
            node.register_hook(lambda gi, go, use=uses[var], i=i: use.add(gi[i]))

    def _flag(self, name: str, t: torch.Tensor, args, kwargs):
        value = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
        self.state.flags.append(FlagEvent(self.serial(t), bool(value), name, user_line()))

    def _maybe_failure(self, name: str, ins: list, err: RuntimeError):
        bad = [a for a in ins if a.is_inference()]
        if not bad or torch.is_inference_mode_enabled() or self.state.failure is not None:
            return
        self._failed_with = err
        origin = self.producer(self.known(bad[0]))
        self.state.failure = TraceFailure(str(err).split("\n")[0], name, user_line(),
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

    def explain(self, loss, params=None, *, retain_graph: bool = False, optimizer=None):
        """Run backward from `loss` and report every parameter: grad, routes, and why not (and, given the
        optimizer, the parameters it never trains)."""
        from gradflow.inspect.report import build_report

        return build_report(self, loss, params, retain_graph=retain_graph, optimizer=optimizer)


def _consumers(outs: list, leaf_ids: set[int], stop: set):
    """(autograd node, input index, id(leaf)) for every edge from this op's new nodes into a leaf."""
    found: list = []
    seen: set = set()
    todo = [o.grad_fn for o in outs if o.grad_fn is not None]
    while todo and len(seen) < _CONSUMER_SEARCH_LIMIT:
        node = todo.pop()
        if node in seen or node in stop:
            continue
        seen.add(node)
        for i, (nxt, _) in enumerate(node.next_functions):
            var = getattr(nxt, "variable", None) if nxt is not None else None
            if var is not None and id(var) in leaf_ids:
                found.append((node, i, id(var)))
            elif nxt is not None and var is None:
                todo.append(nxt)
    return found


def trace() -> Trace:
    """Start recording: `with gradflow.trace() as t: loss = model(x).mean()`."""
    return Trace()
