"""What a trace records (tracer/trace.py): one OpRecord per op, one Use per parameter use, flag changes, the
failure; and the helpers that find the tensors among an op's arguments."""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch

from gradflow.language.ops import OPS

DETACH = {name for op in OPS.values() if op.role == "cut" for name in op.torch_names}  # detach, detach_, .data
FLAGS = {"requires_grad_", "requires_grad="}  # requires_grad_(v) and `t.requires_grad = v`
LOW = (torch.float16, torch.bfloat16)  # half precision: its ops' autograd nodes are kept (report/precision.py)
# Ops that read only the dtype / device / shape of their first tensor, never its values: no use, no data flow.
METADATA_ONLY = {"new_tensor", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided", "new",
                 "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like"}

IN_PLACE_NAMES = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
                  "__imatmul__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__setitem__",
                  "data="}
NOT_WRITES = {"requires_grad_", "detach_", "share_memory_", "retain_grad_", "_fix_weakref"}  # flags, not values

# A value leaves torch as a Python number, list or numpy array: its gradient stops there (a cut when it required
# grad); the object is followed by identity into the ops it is given to (torch.tensor(...), x * number).
ESCAPES = {"item": ".item()", "tolist": ".tolist()", "__float__": "float()", "__int__": "int()",
           "__complex__": "complex()", "numpy": ".numpy()"}
REWRAP = {"tensor": "torch.tensor(...)", "as_tensor": "torch.as_tensor(...)", "asarray": "torch.asarray(...)",
          "new_tensor": ".new_tensor(...)"}


def tensors_in(obj, out: list) -> list:
    """Every tensor in args / kwargs / results (nested tuples, lists, dicts), in order."""
    return _into((obj,), out)


def written(name: str, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors this call writes into: `out=`, the target of an in-place method or operator (`add_`,
    `+=`, `x[i] = v`, `p.data = t`), the list of a `_foreach_*_` op."""
    if kwargs.get("out") is not None:
        return tensors_in(kwargs["out"], [])
    if not args or not (name in IN_PLACE_NAMES or name.endswith("_") and not name.startswith("__")
                        and name not in NOT_WRITES):
        return []
    return tensors_in(args[0], []) if name.startswith("_foreach_") else \
        [args[0]] if isinstance(args[0], torch.Tensor) else []


def storage_of(t: torch.Tensor) -> int | None:
    """The address of the memory a tensor's elements live in (shared by its views, `.data` and `detach()`);
    None for a tensor without one (sparse, meta, a subclass that has none)."""
    try:
        return t.untyped_storage().data_ptr() or None
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def op_name(func) -> str:
    """`linear`, `detach`, or the attribute for property access (`data`, `T`; `requires_grad=` to set)."""
    name = getattr(func, "__name__", None) or str(func)
    if name in ("__get__", "__set__"):
        attr = getattr(getattr(func, "__self__", None), "__name__", name)
        return attr + "=" if name == "__set__" else attr
    return name


def inputs(args, kwargs: dict) -> list:
    """tensors_in(args) then tensors_in(kwargs) (every op comes here)."""
    out = _into(args, [])
    if kwargs:
        _into(kwargs.values(), out)
    return out


def _into(items, out: list) -> list:
    """The tensors among `items` and in the lists, tuples and dicts among them, in order, appended to `out`. An
    argument of a type that holds no tensor is passed by its exact type first: for a non-tensor, isinstance against
    torch.Tensor goes through its metaclass's __instancecheck__."""
    for x in items:
        kind = type(x)
        if kind is _Tensor:
            out.append(x)
        elif kind in _NO_TENSOR:
            continue
        elif isinstance(x, _Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            _into(x, out)
        elif isinstance(x, dict):
            _into(x.values(), out)
    return out


_Tensor = torch.Tensor
# Types an op's arguments and results often have that are neither tensors nor containers of tensors (torch.Size is
# a tuple of ints): what _into passes without looking further, as its isinstance checks would.
_NO_TENSOR = frozenset({int, float, bool, str, type(None), slice, torch.Size, torch.dtype, torch.device})
requires_grad = operator.attrgetter("requires_grad")  # list(map(requires_grad, ins)): each input's flag, in C


def grad_fn(a: torch.Tensor):
    try:
        return a.grad_fn
    except RuntimeError:  # a view made under no_grad whose base changed in place: torch refuses to say
        return None


def flag_value(args: tuple, kwargs: dict) -> bool:
    """The requires_grad a flag call sets: `t.requires_grad_(v)` (default True) or `t.requires_grad = v`."""
    return bool(args[1] if len(args) > 1 else kwargs.get("requires_grad", True))


def is_leaf(a: torch.Tensor) -> bool:
    """`a.is_leaf`; False for a view made under no_grad whose base changed in place (nn.Embedding's padding row):
    torch refuses to say, and the user's code may still use that view under no_grad, so the recorder must not ask."""
    try:
        return a.is_leaf
    except RuntimeError:
        return False


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
    # The parameter uses (`uses`): those made as Use objects, then those recorded as two numbers (serial, op index)
    # in two columns, made into Use objects in order when `uses` is first read. The forward's shortcuts (a leaf
    # module's call, the common op) record their uses so (add_uses): on a model whose every parameter is used
    # once, explain reads them only as numbers (use_columns); the general path makes Use objects.
    made: list[Use] = field(default_factory=list)
    use_serials: list[int] = field(default_factory=list)
    use_ops: list[int] = field(default_factory=list)
    whole_below: int = 0  # the columns' uses below this index are their leaf's only use (Use.whole; arm() sets it)
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
    nodes: dict[int, tuple[Any, int]] = field(default_factory=dict)  # id(node) -> (autograd node, op index) of
    #                                  every op's results, kept only by a trace made to draw torch's graph

    @property
    def uses(self) -> list[Use]:
        """Every parameter use in order, as Use objects (the columns' made now: add new Use objects through this)."""
        if self.use_serials:
            whole = self.whole_below
            self.made += [Use(s, op, whole=i < whole) for i, (s, op) in enumerate(zip(self.use_serials, self.use_ops))]
            self.use_serials, self.use_ops, self.whole_below = [], [], 0
        return self.made

    def add_uses(self, serials: list[int], op: int) -> None:
        """Op `op` used these leaves (serials, each once): kept as numbers, after every use made so far."""
        self.use_serials += serials
        self.use_ops += [op] * len(serials)

    def use_columns(self) -> tuple[list[int], list[int]]:
        """(serials, op indices) of every use in order, without making Use objects."""
        made = self.made
        if not made:
            return self.use_serials, self.use_ops
        return [u.serial for u in made] + self.use_serials, [u.op for u in made] + self.use_ops


def cut_kind(name: str, grad_on: bool, inference: bool) -> str:
    """Why an op whose input required grad gave no result that does."""
    return "detach" if name in DETACH else "rewrap" if name in REWRAP else "inference_mode" if inference \
        else "no_grad" if not grad_on else "nondiff"
