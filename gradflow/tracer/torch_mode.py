"""The recording side of the tracer (tracer/trace.py): the TorchFunctionMode that sees every torch call, and the
module calls, seen through nn.Module._call_impl while a trace records.

Most ops take the fast path: inside a module, gradients on, no checkpoint, no Python value followed. It asks each
op only what a report can need (its inputs' requires_grad and leaves; for an op using a parameter, the sequence
number of the first autograd node it makes) and gives the rest to Trace._fast_op; every other op goes through
`_general`. A call of one of torch's own leaf modules (LEAVES: Linear, LayerNorm, GELU, ...) in that common state
is recorded whole, as the one op it runs, with the mode off inside it (_leaf_call): the same record, without the
mode's dispatch.
"""
from __future__ import annotations

import sys
from types import FrameType
from typing import TYPE_CHECKING

import torch
from torch.overrides import TorchFunctionMode

from gradflow.tracer.records import ESCAPES, FLAGS, METADATA_ONLY, grad_fn, inputs, op_name, requires_grad
from gradflow.tracer.source_lines import _KINDS, _SKIPPED, lines_from

if TYPE_CHECKING:  # the tracer imports this module: types only, no cycle
    from gradflow.tracer.trace import Trace

# Never on the fast path: a property (its name is the attribute's), or an op with its own bookkeeping.
_UNUSUAL = {None, "", "__get__", "__set__", "_set_grad_enabled", "__setitem__", *FLAGS, *ESCAPES, *METADATA_ONLY}
# Properties of a tensor's metadata: never a tensor, so no record on any path (_record and _replayed find no result
# tensor and return) and no failure to tell (they do not raise): run at once.
_METADATA_GETS = {"shape", "dtype", "device", "ndim"}
_grad_on, _inference_on = torch.is_grad_enabled, torch.is_inference_mode_enabled
_next_node = getattr(torch._C._autograd, "_get_sequence_nr", None)  # the sequence number the next node gets


class Mode(TorchFunctionMode):
    def __init__(self, trace: Trace):
        super().__init__()
        self.t: Trace | None = trace  # None once the trace has left it (Trace.__exit__: no Trace <-> mode cycle)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        t = self.t
        if t is None:  # left on torch's stack by a mode entered inside the block and never left: run, not record
            return func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", None)
        if name in _UNUSUAL or not t._plain or not t.state.stack or not _grad_on() or _inference_on():
            return self._general(t, op_name(func), func, args, kwargs or {})
        # The common op: inside a module, gradients on, nothing followed (see _fast_op).
        kwargs = kwargs or {}
        ins = inputs(args, kwargs)
        in_rg = list(map(requires_grad, ins))
        in_leaf = stop = None
        if True in in_rg:
            in_leaf = [rg and a.is_leaf for a, rg in zip(ins, in_rg)]
            if True in in_leaf:  # where the search for its uses stops (see trace_uses)
                stop = _next_node() if _next_node is not None else _input_nodes(ins)
        try:
            out = func(*args, **kwargs)
        except RuntimeError as err:
            t._maybe_failure(name, ins, err)
            raise
        t._fast_op(name, ins, in_rg, in_leaf, out, stop)
        return out

    @staticmethod
    def _general(t: Trace, name: str, func, args, kwargs: dict):
        if name in _METADATA_GETS and func.__name__ == "__get__":  # x.shape, x.dtype: nothing to record
            return func(*args, **kwargs)
        if name == "_set_grad_enabled":
            t._grad_switch(bool(args[0]) if args else bool(kwargs.get("mode", True)))
            return func(*args, **kwargs)
        ins = inputs(args, kwargs)
        if name in METADATA_ONLY and t.follows_numbers:
            ins = ins[1:]
        if name in FLAGS and ins and t._replay is None:
            t._flag(name, ins[0], args, kwargs)
        in_rg = list(map(requires_grad, ins))
        in_leaf = [rg and a.is_leaf for a, rg in zip(ins, in_rg)]  # before the op: in place it may change
        # Only ops that consume a leaf get hooks; their search stops at the nodes made before the op (in the
        # forward: below its first sequence number; replaying: the inputs' nodes). Other ops never touch grad_fn:
        # a node Python has touched is freed recursively by torch (docs/limits.md, long graphs).
        stop = None
        if True in in_leaf:
            stop = _next_node() if t._replay is None and _next_node is not None else _input_nodes(ins)
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
        elif name not in FLAGS:
            extra = t._followed_in(args, kwargs, ins) if t._objs else ()
            t._record(name, ins, in_rg, out, stop, in_leaf=in_leaf, extra=extra)
        return out


def _input_nodes(ins: list) -> set:
    return {g for g in map(grad_fn, ins) if g is not None}


_TRACES: list[Trace] = []  # recording now: every module call is seen by each (usually one)
_PLAIN_CALL: list = [torch.nn.Module._call_impl]  # what _module_call runs: _call_impl as the first trace found it


def calls_seen_by(trace: Trace, on: bool) -> None:
    """Module calls are seen through nn.Module._call_impl (where torch runs module hooks), replaced while a trace
    records: global module hooks would send every module call down torch's slow path of hooks (~4 us each, for
    hooks doing nothing). Not `__call__`: setting a special method updates the slots of every Module subclass.
    Put back as it was when the last trace ends, unless something else replaced it meanwhile (then theirs
    stays, and ours, if theirs calls it, passes every call straight on)."""
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
    if not _TRACES:
        _SITES.clear()
        _CLASS_RUNNING_MEAN.clear()


def _module_call(module, *args, **kwargs):
    if len(_TRACES) == 1:
        t = _TRACES[0]
        leaf = LEAVES.get(type(module))
        if leaf is not None and t._plain and len(args) == 1 and not kwargs and type(args[0]) is _Tensor:
            params = leaf(module)
            if params is not None and _bare(module, t):
                out = _leaf_call(t, module, args[0], params)
                if out is not _NOT_BARE:
                    return out
        t._enter_module(module)
        try:
            return _PLAIN_CALL[0](module, *args, **kwargs)
        finally:
            t._leave_module(module)
            if _SITES:
                _SITES.pop(id(_getframe(0)), None)
    seen = _TRACES[:]
    for t in seen:
        t._enter_module(module)
    try:
        return _PLAIN_CALL[0](module, *args, **kwargs)
    finally:
        for t in seen:
            t._leave_module(module)
        if _SITES:
            _SITES.pop(id(_getframe(0)), None)


_getframe = sys._getframe
_SITES: dict[int, tuple] = {}  # id(frame of a _module_call running now) -> (that frame, lines() from it)


def leaf_lines() -> tuple[str | None, str | None]:
    """lines(4) for Trace._leaf_op (frames 1-3: _leaf_op, _leaf_call, _module_call): the same walk, which stops at
    the first _module_call frame of an enclosing module reached through torch's and gradflow's frames only, when
    its answer is known. That answer holds while that call runs (the frames above it wait for it, at the same
    instruction); it is kept with the frame itself (so no later frame can take its id) and dropped when the call
    returns. In a model of nested containers the walk from each leaf call is then a few frames."""
    frame: FrameType | None = _getframe(4)
    passed = None
    kinds = _KINDS
    while frame is not None:
        code = frame.f_code
        if code is _CALL_CODE:
            got = _SITES.get(id(frame))
            if got is not None:
                found = got[1]
                break
            if passed is None:
                passed = [frame]
            else:
                passed.append(frame)
        elif kinds.get(code.co_filename) != _SKIPPED:  # (a file not seen yet, too: lines_from tells)
            found = lines_from(frame)
            break
        frame = frame.f_back
    else:
        found = (None, None)
    if passed:
        if len(_SITES) > 4096:  # (a module call left without its finally: not expected, but never a leak)
            _SITES.clear()
        for f in passed:
            _SITES[id(f)] = (f, found)
    return found


_CALL_CODE = _module_call.__code__


def running_mean(module):
    """getattr(module, "running_mean", None) without nn.Module.__getattr__ raising and catching AttributeError
    for every module that has none (every module call of a traced forward asks)."""
    d = module.__dict__
    buffers = d.get("_buffers")
    if buffers is not None and "running_mean" in buffers:
        return buffers["running_mean"]
    if "running_mean" in d:
        return d["running_mean"]
    cls = type(module)
    has = _CLASS_RUNNING_MEAN.get(cls)
    if has is None:  # hasattr on a class that has none raises and catches AttributeError: once per class
        if len(_CLASS_RUNNING_MEAN) > 4096:  # (classes made by the thousand in one trace: never a leak)
            _CLASS_RUNNING_MEAN.clear()
        has = _CLASS_RUNNING_MEAN[cls] = hasattr(cls, "running_mean")
    return getattr(module, "running_mean", None) if has else None


# module class -> has running_mean: asked once per class while traces record, emptied when the last one ends (so a
# class is held no longer than a trace, and a class made later at a dead one's id is asked again)
_CLASS_RUNNING_MEAN: dict[type, bool] = {}


# ---- torch's own leaf modules, recorded whole --------------------------------------------------------------------
# A torch.nn module of one of these exact types (no subclass, no hooks, its forward torch's own) runs one functional
# op; it is recorded as that op, with the mode off inside it: the same OpRecord and Uses as when the mode sees the
# op (tests/tracer/test_speed_safety.py compares both paths), at a third of the dispatches. Each entry gives
# the op's name and the module's tensors in the order the functional takes them (None: take the general path).
_Tensor = torch.Tensor
_nn = torch.nn
_hooks = torch.nn.modules.module


def _weight_bias(m):
    p = m._parameters
    if "weight" not in p or "bias" not in p:
        return None
    w, b = p["weight"], p["bias"]
    return [w, b] if b is not None and w is not None else [a for a in (w, b) if a is not None]


def _conv(m):
    return _weight_bias(m) if m.padding_mode == "zeros" else None


def _embedding(m):
    p = m._parameters
    return [p["weight"]] if m.max_norm is None and p.get("weight") is not None else None


def _none(m):
    return []


def _not_inplace(m):
    return None if m.inplace else []


_F = torch.nn.functional


def _linear(m, x):  # Linear.forward, its parameters read from _parameters (what self.weight reads, without
    p = m._parameters  # nn.Module.__getattr__ per attribute)
    return _F.linear(x, p["weight"], p["bias"])


def _layer_norm(m, x):  # LayerNorm.forward, likewise
    p = m._parameters
    return _F.layer_norm(x, m.normalized_shape, p["weight"], p["bias"], m.eps)


def _gelu(m, x):  # GELU.forward
    return _F.gelu(x, approximate=m.approximate)


def _leaf(name: str, tensors, run):
    if tensors is _weight_bias and run is not None:  # Linear, LayerNorm: _weight_bias inline (most calls)
        def weight_bias(m):
            p = m._parameters
            if "weight" not in p or "bias" not in p:
                return None
            w, b = p["weight"], p["bias"]
            return (name, [w, b] if b is not None and w is not None else [a for a in (w, b) if a is not None], run)
        return weight_bias

    def leaf(m):
        ts = tensors(m)
        return None if ts is None else (name, ts, run or type(m).forward)
    return leaf


LEAVES: dict = {}  # module type -> module -> (op name, its tensors, its forward) or None (take the general path)
for _cls, _name, _tensors, _run in [
        (_nn.Linear, "linear", _weight_bias, _linear), (_nn.LayerNorm, "layer_norm", _weight_bias, _layer_norm),
        (_nn.Conv1d, "conv1d", _conv, None), (_nn.Conv2d, "conv2d", _conv, None),
        (_nn.Embedding, "embedding", _embedding, None), (_nn.GELU, "gelu", _none, _gelu),
        (_nn.Tanh, "tanh", _none, None), (_nn.Sigmoid, "sigmoid", _none, None),
        (_nn.ReLU, "relu", _not_inplace, None), (_nn.SiLU, "silu", _not_inplace, None),
        (_nn.Dropout, "dropout", _not_inplace, None)]:
    LEAVES[_cls] = _leaf(_name, _tensors, _run)
_FORWARDS = {cls: cls.forward for cls in LEAVES}  # as torch defines them: one patched by anyone takes the general path


def _bare(module, t: Trace) -> bool:
    """No hooks of any kind, its forward torch's own, and a torch function mode on (_leaf_call checks it is this
    trace's, as it takes it off the stack)."""
    h = _hooks
    return not (module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or
                module._backward_pre_hooks or h._global_forward_hooks or h._global_forward_pre_hooks or
                h._global_backward_hooks or h._global_backward_pre_hooks) and \
        "forward" not in module.__dict__ and type(module).forward is _FORWARDS[type(module)] and \
        _grad_on() and not _inference_on() and _mode_on() and not _jit_tracing()


_mode_on, _jit_tracing = torch._C._is_torch_function_mode_enabled, torch._C._get_tracing_state
_pop, _push = torch._C._pop_torch_function_stack, torch._C._push_on_torch_function_stack
_NOT_BARE = object()  # _leaf_call's answer when another mode than the trace's is the innermost one: not recorded


def _leaf_call(t: Trace, module, x, leaf):
    """The module's forward and its record, all with the mode off (under it, even `a.requires_grad` is a call to
    the mode), back on after, also when the forward raises. Its inputs' flags are read after it ran (none of
    LEAVES works in place: they are as before it), except the sequence number where the search for its uses stops
    (see trace_uses), read before, and kept only if it used a leaf. The module is seen (Trace._met_module) but not
    pushed on the trace's module stack: nothing that runs inside it reads the stack. When the innermost mode is not
    this trace's (one entered inside the block), it is put back and nothing runs: _NOT_BARE, the general path then.
    (Popping tells it: no second look at torch's mode stack per call; _bare has checked a mode is on, so the stack
    has one.)"""
    mode = _pop()
    if mode is not t._mode:
        _push(mode)
        return _NOT_BARE
    try:
        name, params, run = leaf
        stop = _next_node() if _next_node is not None else _input_nodes([x, *params])
        t._met_module(module)
        try:
            out = run(module, x)
        except RuntimeError as err:
            t._maybe_failure(name, [x, *params], err)
            raise
        t._leaf_op(name, x, params, out, stop, module)
    finally:
        _push(mode)
    return out
