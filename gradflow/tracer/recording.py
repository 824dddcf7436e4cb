"""How the tracer records one op (tracer/trace.py's Trace, as its methods `_record`, `_fast_op`, `_leaf_op`,
`_leaf_general`, `_append` and `_collect`): the general path, which asks everything of every op, and the shortcuts
for the common one (an op inside a module, gradients on, nothing followed) and for a torch leaf module recorded
whole, each sending what it does not expect to the general path. The hot path of a traced forward: a call per op."""
from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING

import torch

from gradflow.tracer.records import LOW, OpRecord, requires_grad, tensors_in
from gradflow.tracer.source_lines import custom_function, lines
from gradflow.tracer.torch_mode import leaf_lines

if TYPE_CHECKING:  # the tracer imports this module: types only, no cycle
    from gradflow.tracer.trace import Trace

_ref, _Tensor, _F32 = weakref.ref, torch.Tensor, torch.float32
GC_EVERY = 1 << 16  # ops: with the collector deferred (gc_deferred), a young collection this often


def new_serial(ids: dict, refs: list, a, s: int | None) -> int:
    """A new serial number for tensor `a` (Trace._ids, Trace._refs), whose id had serial `s` or none: `s`, if any,
    was a dead tensor's (its id is this one's now)."""
    if s is not None:
        refs[s] = None
    ids[id(a)] = s = len(refs)
    refs.append(_ref(a))
    return s


def record(t: Trace, name: str, ins: list, in_rg: list[bool], out, stop, *, in_leaf: list[bool] | None = None,
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
    st = t.state
    grad_on, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    first = t._next  # serials from here on are new: a tensor that requires grad, not a leaf, seen first
    ids, refs, serial = t._ids, t._refs, t.serial
    serials = []
    for a in ins:
        s = ids.get(id(a))
        serials.append(s if s is not None and refs[s]() is a else serial(a))
    came_in = [s for rg, leaf, s in zip(in_rg, in_leaf, serials) if s >= first and rg and not leaf] \
        if t._next > first else ()  # here came from outside the trace
    out_serials = []
    for o in outs:
        s = ids.get(id(o))
        out_serials.append(s if s is not None and refs[s]() is o else serial(o))
    stack = st.stack
    rec = OpRecord(len(st.ops), name, (*serials, *extra), tuple(out_serials), grad_on, inference,
                   id(stack[-1]) if stack else None)
    given: set[int] | None = None  # inside a custom Function's forward: the tensors it was applied to
    if True in in_rg and not any(o.requires_grad for o in outs):
        rec.cut = t._cut_kind(name, grad_on, inference)
        dead = t._dead is not None and rec.cut == "no_grad"  # in a checkpoint autograd does not record
        if dead:
            rec.cut, rec.how = t._dead  # type: ignore[misc]
        function = custom_function() if rec.cut == "no_grad" and not dead else None
        if function is not None:
            rec.cut, rec.inside = None, function[0]  # the Function's own backward carries the gradient
            st.functions.add(function[0])
            given = {id(a) for a in tensors_in(function[1], [])}
        elif rec.cut == "no_grad" and not dead:
            rec.how = t._grad_off()
    leaves = [a for a, leaf in zip(ins, in_leaf) if leaf and not any(a is o for o in outs)] \
        if True in in_leaf else ()
    if rec.cut or leaves or inference or rec.module is None or came_in or t._checkpoint is not None:
        rec.line, rec.library_line = lines()  # (a checkpoint's: its recomputation may find a cut here)
    if came_in and len(st.outside) < 100:
        st.outside += [(rec.index, s) for s in came_in]
    t._append(rec)
    dtype = outs[0].dtype
    low = dtype if dtype in LOW else ins[0].dtype if ins and ins[0].dtype in LOW else None
    if low is not None and outs[0].grad_fn is not None:  # half precision: where a gradient under/overflows
        st.low_nodes[id(outs[0].grad_fn)] = (outs[0].grad_fn, rec.index, low)
        if rec.line is None:
            rec.line, rec.library_line = lines()
    if leaves:
        t._uses(rec, leaves, outs, stop, given)

def fast_op(t: Trace, name: str, ins: list, in_rg: list[bool], in_leaf: list[bool] | None, out, stop):
    """_record for the common op (inside a module, gradients on, no checkpoint, nothing followed): the same
    record, with less asked per op, its uses kept as numbers (TraceState.add_uses: no Use object). Anything else
    it meets (a cut, a tensor from outside the trace, half precision) goes to _record."""
    outs = [out] if isinstance(out, torch.Tensor) else tensors_in(out, [])
    if not outs:
        return
    if (in_leaf is not None and True not in map(requires_grad, outs)) or \
            ((d := outs[0].dtype) is not _F32 and d in LOW) or (ins and (d := ins[0].dtype) is not _F32 and
                                                                d in LOW):
        return t._record(name, ins, in_rg, out, stop, in_leaf=in_leaf)
    ids, refs = t._ids, t._refs
    serials = []
    for a in ins:
        s = ids.get(id(a))
        if s is not None and refs[s]() is a:
            serials.append(s)
        elif a.requires_grad and not a.is_leaf:  # computed outside the trace: _record tells
            return t._record(name, ins, in_rg, out, stop, in_leaf=in_leaf)
        else:
            serials.append(new_serial(ids, refs, a, s))
    out_serials = []
    for o in outs:
        s = ids.get(id(o))
        out_serials.append(s if s is not None and refs[s]() is o else new_serial(ids, refs, o, s))
    st = t.state
    index = len(st.ops)
    rec = OpRecord(index, name, tuple(serials), tuple(out_serials), True, False, id(st.stack[-1]))
    leaves = []  # serials of the leaves it used (not given back as a result), each once: kept as numbers
    if in_leaf is not None and True in in_leaf:
        for leaf, s in zip(in_leaf, serials):  # (a result with an input's serial is that input)
            if leaf and s not in leaves and s not in out_serials:
                leaves.append(s)
        if leaves:
            rec.line, rec.library_line = lines(3)  # (frames 1-2: the tracer's)
    st.ops.append(rec)
    if not index % GC_EVERY and index:
        t._collect(index)
    if leaves:
        st.add_uses(leaves, index)
        t._listen(outs, None, stop, index)

def leaf_op(t: Trace, name: str, x, params: list, out, stop, module):
    """_fast_op for a torch leaf module recorded whole (trace_mode.LEAVES): its input x, the module's own
    tensors, one result, each input's flags read once; what is not that plain (a cut, half precision, a tensor
    from outside the trace, a result that is an input) goes to _fast_op, which tells (_leaf_general). Its uses go
    into the trace state's columns (serial, op index): no Use object, and for arm() only its result's node."""
    if type(out) is not _Tensor or ((d := out.dtype) is not _F32 and d in LOW) or \
            ((d := x.dtype) is not _F32 and d in LOW) or \
            (not out.requires_grad and (x.requires_grad or any(p.requires_grad for p in params))):
        return t._leaf_general(name, x, params, out, stop, module)
    ids, refs = t._ids, t._refs
    get = ids.get
    st = t.state
    index = len(st.ops)
    serials = []
    leaves = []  # serials of the leaves that require grad, each once (a Linear may be given its own weight)
    for a in (x, *params):  # each flag asked once, and is_leaf only of a tensor that requires grad
        s = get(id(a))
        if s is not None and refs[s]() is a:  # seen: x, usually
            if a.requires_grad and a.is_leaf and s not in leaves:
                leaves.append(s)
        elif a is out or (rg := a.requires_grad) and not a.is_leaf:  # (not a leaf: computed outside the trace)
            return t._leaf_general(name, x, params, out, stop, module)
        else:  # seen the first time (a parameter, usually)
            s = new_serial(ids, refs, a, s)
            if rg:
                leaves.append(s)
        serials.append(s)
    s = get(id(out))
    if s is not None and refs[s]() is out:
        return t._leaf_general(name, x, params, out, stop, module)
    s = new_serial(ids, refs, out, s)
    rec = OpRecord(index, name, tuple(serials), (s,), True, False, id(module))
    st.ops.append(rec)
    if not index % GC_EVERY and index:
        t._collect(index)
    if leaves:
        st.add_uses(leaves, index)
        rec.line, rec.library_line = leaf_lines()  # lines(4): from the caller of _module_call
        node = out.grad_fn
        if node is not None:
            t._found += node, stop, index  # (one node: no list, arm() tells)

def leaf_general(t: Trace, name: str, x, params: list, out, stop, module):
    """_fast_op's arguments as the mode gives them (inputs' flags, and `stop` only if a leaf is used), with the
    module on the stack as when the mode sees its op (_leaf_call does not push it)."""
    ins = [x, *params]
    in_rg = [a.requires_grad for a in ins]
    in_leaf = [rg and a.is_leaf for a, rg in zip(ins, in_rg)] if True in in_rg else None
    stack = t.state.stack
    stack.append(module)
    try:
        return t._fast_op(name, ins, in_rg, in_leaf, out, stop if in_leaf and True in in_leaf else None)
    finally:
        stack.pop()


def collect(t: Trace, index: int) -> None:
    if t._gc.was_on:  # a long block: its young garbage, and all of it now and then
        gc.collect(1 if index % (8 * GC_EVERY) else 2)

def append(t: Trace, rec: OpRecord):
    t.state.ops.append(rec)
    if not rec.index % GC_EVERY and rec.index:
        t._collect(rec.index)
    if t._checkpoint is not None:
        t.checkpoint_ops[t._checkpoint].append(rec.index)
