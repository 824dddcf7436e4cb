"""The one registry of operations: the single source of what an op means and how a program may write it.

Each row names an operation, its parameters (torch's names, kinds and defaults), the tensor code that
computes it, a one-line doc, its autograd role and every spelling a program may use:
  functions  gradflow's own bare names: `exp(a)`;
  methods    tensor methods, as torch has them: `a.exp()` (the tensor is the first parameter);
  torch      qualified names: `torch.exp(a)`, `torch.nn.functional.relu(a)` (also written `F.relu(a)`);
  symbol     an operator: `a * b`.
Autograd roles:
  plain   an ordinary op: gradient flows back through it;
  cut     its result carries no path back (detach);
  region  its argument is computed under a torch context that records nothing
          (no_grad, inference_mode); the op itself returns that argument.
Rows of kind "flag" (requires_grad_, retain_grad) are spellings the lowering turns into steps, not nodes.
The parser checks calls against it, the engine evaluates through it, the budget asks it for result shapes,
the analysis, flows, edits, graph text and inspect ask it what is a cut, error messages suggest from it
and `gradflow ops` lists it. Adding an operation is adding a row here; the grammar does not change.

Torch-free to import: the callables use tensor methods, or torch's functions reached through the tensors'
own module (loaded by then: they only ever run on tensors). An operator or a method without arguments is
operator's function or a methodcaller: the same call as `a + b` or `a.exp()`, without a Python frame per op.
"""
from __future__ import annotations

import functools
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass
from operator import methodcaller
from typing import Any, Literal

Role = Literal["plain", "cut", "region"]
F_PREFIX = "torch.nn.functional."  # what `F.` stands for (import torch.nn.functional as F)
REQUIRED = object()  # a parameter's default when it has none


@dataclass(frozen=True)
class Param:
    """One parameter, as torch names it. Kinds: tensor (an operand: an expression; a number becomes a constant),
    tensors (a list of operands), int, dims (an int, a tuple of ints or None), shape (ints), bool, number, str."""

    name: str
    kind: str = "tensor"
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()  # a str parameter's allowed values
    aliases: tuple[str, ...] = ()  # other keywords for it: numpy's axis= for dim=, keepdims= for keepdim=

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class Op:
    name: str
    params: tuple[Param, ...]
    fn: Callable[..., Any]  # operands positionally, the other parameters by name (a region returns its argument)
    doc: str
    symbol: str | None = None  # operator spelling, e.g. "*" (None: call syntax only)
    kind: str = "function"  # how `gradflow ops` groups it
    role: Role = "plain"
    torch_names: tuple[str, ...] = ()  # cuts: the tensor methods / torch contexts that do this in real code
    functions: tuple[str, ...] = ()  # bare names: exp(a)
    methods: tuple[str, ...] = ()  # a.exp()
    torch: tuple[str, ...] = ()  # torch.exp(a), torch.nn.functional.relu(a)
    shape: str = "broadcast"  # the budget's rule for the result's shape (engine/budget.py)
    contexts: tuple[str, ...] = ()  # regions: how a `with` block enters them
    properties: tuple[str, ...] = ()  # a.T

    @property
    def min_args(self) -> int:
        return sum(1 for p in self.params if p.required)

    # What every call's binding reads (language/calls.py): worked out once per op, not per call.
    @functools.cached_property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @functools.cached_property
    def required_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.required)

    @functools.cached_property
    def needed_operands(self) -> int:
        return sum(1 for p in self.params if p.required and p.kind in ("tensor", "tensors"))

    @property
    def max_args(self) -> int:
        return len(self.params)

    @property
    def arity(self) -> str:
        if self.min_args == self.max_args:
            return str(self.min_args)
        return f"{self.min_args}-{self.max_args}"

    @property
    def operands(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind in ("tensor", "tensors"))

    def spellings(self) -> list[str]:
        """Every way a program writes this op (what `gradflow ops` lists): operands as a, b, c."""
        letters = iter("abc")
        shown = [p.name if p.kind not in ("tensor", "tensors") else "[a, b]" if p.kind == "tensors"
                 else "cond" if p.name == "condition" else next(letters) for p in self.params if p.required]
        call, rest = ", ".join(shown), ", ".join(shown[1:])
        out = []
        if self.symbol == "[]":
            out.append("a[i]")
        elif self.symbol and len(shown) == 2:
            out += [f"a {s} b" for s in self.symbol.split()]
        elif self.symbol:
            out.append(f"{self.symbol}a")
        out += [f"{f}({call})" for f in self.functions]
        out += [f"a.{m}({rest})" for m in self.methods]
        out += [f"a.{p}" for p in self.properties]
        out += [f"{short(t)}({call})" for t in self.torch]
        out += [f"{t}({call})" for t in self.torch if t.startswith(F_PREFIX)]
        out += [f"with {c}():" for c in self.contexts]
        return out

    def aliases(self) -> str:
        """Other keywords its parameters take: `axis= for dim=, keepdims= for keepdim=` ('' if none)."""
        return ", ".join(f"{a}= for {p.name}=" for p in self.params for a in p.aliases)

    def signature(self) -> str:
        """Its parameters as torch names them: input, dim=None, keepdim=False."""
        return ", ".join(p.name if p.required else f"{p.name}={p.default!r}" for p in self.params)


def short(qualified: str) -> str:
    """torch.nn.functional.relu -> F.relu (the spelling most code uses)."""
    return "F." + qualified[len(F_PREFIX):] if qualified.startswith(F_PREFIX) else qualified


def _torch():
    return sys.modules["torch"]  # loaded: these callables only run on tensors


def _detach(a, inplace=False):
    """a.detach(); a.detach_() (`inplace`) is modelled by it too: later uses read the detached value, earlier
    ones keep their path, as in torch. torch refuses it on a view: then the real call raises that error."""
    if inplace and a._is_view():
        a.detach_()  # raises before changing anything: "Can't detach views in-place"
    return a.detach()


def _min(a, b=None):
    return a.min() if b is None else a.minimum(b)


def _max(a, b=None):
    return a.max() if b is None else a.maximum(b)


def _sum(a, dim=None, keepdim=False):
    return a.sum() if dim is None and not keepdim else a.sum(dim=dim, keepdim=keepdim)  # a.sum(): SumBackward0


def _mean(a, dim=None, keepdim=False):
    return a.mean() if dim is None and not keepdim else a.mean(dim=dim, keepdim=keepdim)


class OpInputError(ValueError):
    """An op's operands that torch would misread or reject with a message about something else: the engine
    reports `message` and `hint` at the op's node (engine/torch_errors.py)."""

    def __init__(self, kind: str, message: str, hint: str):
        super().__init__(message)
        self.kind, self.hint = kind, hint


IGNORE_INDEX = -100  # torch's default ignore_index: a target of -100 counts for no class


def _class_target(a, target, name="cross_entropy"):
    """cross_entropy's (and nll_loss's) target: class indices when it has one dimension fewer than the input (as
    torch takes them, as integers: they carry no gradient), else class probabilities of the input's shape."""
    if a.dim() == 0:
        raise OpInputError("shape", f"{name} needs a score per class, and its input is a single number",
                           "give C scores as a vector (its target one class index) or an N×C matrix (N indices)")
    if target.dim() != a.dim() - 1:
        return target
    if target.is_floating_point():
        if not bool((target == target.round()).all()):
            raise OpInputError("argument", f"{name}'s target holds class indices (it has one dimension fewer "
                               "than the input), and they must be whole numbers",
                               "give class indices 0..C-1, or class probabilities of the input's shape")
        classes = a.shape[0 if a.dim() == 1 else 1]
        bad = target[((target < 0) | (target >= classes)) & (target != IGNORE_INDEX)]
        if bad.numel():  # before .long(): 1e30 would wrap round to a negative index
            raise OpInputError("index", f"{name}'s target {bad.flatten()[0].item():g} is not a class index: the "
                               f"input has {classes} classes", f"class indices run from 0 to {classes - 1} "
                               f"({IGNORE_INDEX} marks a sample to ignore)")
        target = target.detach().long()
    return target


def _cross_entropy(a, target, reduction="mean"):
    return _torch().nn.functional.cross_entropy(a, _class_target(a, target), reduction=reduction)


def _nll_loss(a, target, reduction="mean"):
    """The negative log-likelihood of class indices, `a` holding log-probabilities (log_softmax's output)."""
    return _torch().nn.functional.nll_loss(a, _class_target(a, target, "nll_loss"), reduction=reduction)


def _var(a, dim=None, correction=1, keepdim=False):
    return a.var(dim=dim, correction=correction, keepdim=keepdim)


def _std(a, dim=None, correction=1, keepdim=False):
    return a.std(dim=dim, correction=correction, keepdim=keepdim)


def _bce(a, target, reduction="mean"):
    return _torch().nn.functional.binary_cross_entropy(a, target, reduction=reduction)


def _l1(a, target, reduction="mean"):
    return _torch().nn.functional.l1_loss(a, target, reduction=reduction)


def _smooth_l1(a, target, reduction="mean", beta=1.0):
    return _torch().nn.functional.smooth_l1_loss(a, target, reduction=reduction, beta=beta)


def index_key(spec) -> Any:
    """The index tuple a[...] uses, from its stored form (ints, ("slice", start, stop, step), "...")."""
    return tuple(Ellipsis if item == "..." else slice(*item[1:]) if isinstance(item, tuple) else item
                 for item in spec)


T, OTHER = Param("input"), Param("other")
_DIM = Param("dim", "dims", None, aliases=("axis",))  # numpy's word too: sum(x, axis=0)
_KEEP = Param("keepdim", "bool", False, aliases=("keepdims",))
_ONE_DIM = Param("dim", "int", None, aliases=("axis",))  # argmax's: one dim, or None for the whole tensor
_CORRECTION = Param("correction", "int", 1, aliases=("ddof",))  # torch's default 1 (numpy's ddof defaults to 0)
_RED = Param("reduction", "str", "mean", ("mean", "sum", "none"))
_TARGET = Param("target")


def _fn(name: str, doc: str, fn, **kw) -> Op:
    """An elementwise function of one tensor with a tensor method and a torch.* name of its own."""
    return Op(name, (T,), fn, doc, functions=(name,), methods=(name,), torch=(f"torch.{name}",), shape="first", **kw)


def _cmp(name: str, symbol: str, fn, doc: str) -> Op:
    return Op(name, (T, OTHER), fn, doc, symbol, "comparison", methods=(name,), torch=(f"torch.{name}",))


_ROWS = [
    # operators (the grammar maps the symbols to these names)
    Op("add", (T, OTHER), operator.add, "a + b", "+", "operator", methods=("add",), torch=("torch.add",)),
    Op("sub", (T, OTHER), operator.sub, "a - b", "-", "operator", methods=("sub",), torch=("torch.sub",)),
    Op("mul", (T, OTHER), operator.mul, "a * b, elementwise", "*", "operator", methods=("mul",),
       torch=("torch.mul",)),
    Op("div", (T, OTHER), operator.truediv, "a / b, elementwise", "/", "operator", methods=("div",),
       torch=("torch.div",)),
    Op("matmul", (T, OTHER), operator.matmul, "a @ b, matrix product (torch.matmul)", "@", "operator",
       methods=("matmul",), torch=("torch.matmul",), shape="matmul"),
    Op("neg", (T,), operator.neg, "-a", "-", "operator", methods=("neg",), torch=("torch.neg",), shape="first"),
    Op("pow", (T, Param("exponent")), operator.pow, "a ^ b (also a ** b, pow(a, b)); right-associative",
       "^ **", "function", functions=("pow",), methods=("pow",), torch=("torch.pow",)),
    # comparisons: boolean tensors, no gradient (torch.where's condition)
    _cmp("gt", ">", operator.gt, "a > b, elementwise: a boolean tensor (no gradient)"),
    _cmp("lt", "<", operator.lt, "a < b, elementwise"),
    _cmp("ge", ">=", operator.ge, "a >= b, elementwise"),
    _cmp("le", "<=", operator.le, "a <= b, elementwise"),
    _cmp("eq", "==", operator.eq, "a == b, elementwise"),
    _cmp("ne", "!=", operator.ne, "a != b, elementwise"),
    # indexing: a[0], a[1:3], a[:, 0], a[..., -1] (the grammar makes the index; gradient scatters back)
    Op("index", (T, Param("index", "index")), lambda a, index: a[index_key(index)],
       "a[i], a[i:j:k], a[:, i], a[..., i]: indexing and slicing", "[]", "indexing", shape="first"),
    # cuts
    Op("detach", (T,), _detach, "a's value with no gradient path back (tensor.detach(); "
       "a.detach_() also makes later uses of a read it)", kind="cut", role="cut",
       torch_names=("detach", "detach_", "data"), functions=("detach",), methods=("detach", "detach_"),
       torch=("torch.detach",), shape="first", properties=("data",)),
    Op("no_grad", (T,), lambda a: a, "evaluate a under torch.no_grad(): operations inside are not tracked",
       kind="cut", role="region", torch_names=("no_grad",), functions=("no_grad",), shape="first",
       contexts=("torch.no_grad",)),
    Op("inference_mode", (T,), lambda a: a, "evaluate a under torch.inference_mode(): like no_grad, stricter",
       kind="cut", role="region", torch_names=("inference_mode",), functions=("inference_mode",), shape="first",
       contexts=("torch.inference_mode",)),
    # flags: statements on a tensor (the lowering makes them steps, not nodes)
    Op("requires_grad_", (T, Param("requires_grad", "bool", True)), lambda a, requires_grad=True:
       a.requires_grad_(requires_grad), "set a leaf's requires_grad, as `a.requires_grad = ...` does; returns a",
       kind="flag", methods=("requires_grad_",), shape="first"),
    Op("retain_grad", (T,), lambda a: a.retain_grad(), "keep a computed tensor's grad: accepted, and changes "
       "nothing here (gradflow shows every node's grad); a must require grad", kind="flag",
       methods=("retain_grad",), shape="first"),
    # elementwise functions
    _fn("exp", "e^a", methodcaller("exp")),
    _fn("log", "natural logarithm", methodcaller("log")),
    _fn("sqrt", "square root", methodcaller("sqrt")),
    _fn("abs", "absolute value", methodcaller("abs")),
    _fn("sin", "sine", methodcaller("sin")),
    _fn("cos", "cosine", methodcaller("cos")),
    _fn("tan", "tangent", methodcaller("tan")),
    Op("tanh", (T,), methodcaller("tanh"), "hyperbolic tangent", functions=("tanh",), methods=("tanh",),
       torch=("torch.tanh", F_PREFIX + "tanh"), shape="first"),
    Op("sigmoid", (T,), methodcaller("sigmoid"), "1 / (1 + e^-a)", functions=("sigmoid",), methods=("sigmoid",),
       torch=("torch.sigmoid", F_PREFIX + "sigmoid"), shape="first"),
    Op("relu", (T,), methodcaller("relu"), "max(a, 0)", functions=("relu",), methods=("relu",),
       torch=("torch.relu", F_PREFIX + "relu"), shape="first"),
    Op("clamp", (T, Param("min", "number", None), Param("max", "number", None)),
       lambda a, min=None, max=None: a.clamp(min=min, max=max), "a limited to [min, max] (numbers; either may "
       "be left out); gradient 1 inside, 0 where clamped", functions=("clamp",), methods=("clamp", "clip"),
       torch=("torch.clamp", "torch.clip"), shape="first"),
    Op("maximum", (T, OTHER), lambda a, b: a.maximum(b), "elementwise maximum", functions=("maximum",),
       methods=("maximum",), torch=("torch.maximum",)),
    Op("minimum", (T, OTHER), lambda a, b: a.minimum(b), "elementwise minimum", functions=("minimum",),
       methods=("minimum",), torch=("torch.minimum",)),
    Op("round", (T, Param("decimals", "int", 0)), lambda a, decimals=0: a.round(decimals=decimals),
       "a rounded to the nearest whole number (halves to even), or to `decimals` places; gradient 0, as in torch",
       functions=("round",), methods=("round",), torch=("torch.round",), shape="first"),
    _fn("floor", "the largest whole number <= a; gradient 0, as in torch", methodcaller("floor")),
    _fn("ceil", "the smallest whole number >= a; gradient 0, as in torch", methodcaller("ceil")),
    _fn("sign", "-1, 0 or 1 by the sign of a; gradient 0, as in torch", methodcaller("sign")),
    Op("where", (Param("condition"), T, OTHER), lambda c, a, b: _torch().where(c, a, b),
       "a where condition is true, else other (condition: a comparison, e.g. x > 0)", functions=("where",),
       torch=("torch.where",)),
    # reductions
    Op("sum", (T, _DIM, _KEEP), _sum, "sum of all elements, or along dim", kind="reduction",
       functions=("sum",), methods=("sum",), torch=("torch.sum",), shape="first"),
    Op("mean", (T, _DIM, _KEEP), _mean, "mean of all elements, or along dim", kind="reduction",
       functions=("mean",), methods=("mean",), torch=("torch.mean",), shape="first"),
    Op("min", (T, Param("other", default=None)), _min, "min(a): smallest element; min(a, b): elementwise "
       "minimum", kind="reduction", functions=("min",), methods=("min",), torch=("torch.min",)),
    Op("max", (T, Param("other", default=None)), _max, "max(a): largest element; max(a, b): elementwise "
       "maximum", kind="reduction", functions=("max",), methods=("max",), torch=("torch.max",)),
    # named `variance`: a graph's `var` nodes are its variables (written var(a), a.var(), torch.var(a))
    Op("variance", (T, _DIM, _CORRECTION, _KEEP), _var, "variance of all elements, or along dim: sum((a - mean)^2) / "
       "(n - correction); torch's correction=1 by default (numpy's ddof=0 is correction=0)", kind="reduction",
       functions=("var",), methods=("var",), torch=("torch.var",), shape="first"),
    Op("std", (T, _DIM, _CORRECTION, _KEEP), _std, "standard deviation: sqrt(var(a, dim, correction))",
       kind="reduction", functions=("std",), methods=("std",), torch=("torch.std",), shape="first"),
    Op("argmax", (T, _ONE_DIM, _KEEP), lambda a, dim=None, keepdim=False: a.argmax(dim=dim, keepdim=keepdim),
       "index of the largest element (of the flattened a, or along dim): an integer tensor, no gradient, as in "
       "torch", kind="reduction", functions=("argmax",), methods=("argmax",), torch=("torch.argmax",),
       shape="first"),
    Op("argmin", (T, _ONE_DIM, _KEEP), lambda a, dim=None, keepdim=False: a.argmin(dim=dim, keepdim=keepdim),
       "index of the smallest element, likewise: an integer tensor, no gradient", kind="reduction",
       functions=("argmin",), methods=("argmin",), torch=("torch.argmin",), shape="first"),
    # along a dimension
    Op("softmax", (T, Param("dim", "int")), lambda a, dim: a.softmax(dim), "e^a / sum(e^a) along dim",
       functions=("softmax",), methods=("softmax",), torch=("torch.softmax", F_PREFIX + "softmax"), shape="first"),
    Op("log_softmax", (T, Param("dim", "int")), lambda a, dim: a.log_softmax(dim),
       "log(softmax(a, dim)), computed stably", functions=("log_softmax",), methods=("log_softmax",),
       torch=("torch.log_softmax", F_PREFIX + "log_softmax"), shape="first"),
    Op("normalize", (T, Param("p", "number", 2.0), Param("dim", "int", 1), Param("eps", "number", 1e-12)),
       lambda a, p=2.0, dim=1, eps=1e-12: _torch().nn.functional.normalize(a, p=p, dim=dim, eps=eps),
       "a / max(norm_p(a) along dim, eps)", functions=("normalize",), torch=(F_PREFIX + "normalize",),
       shape="first"),
    Op("linear", (T, Param("weight"), Param("bias", default=None)),
       lambda a, w, b=None: _torch().nn.functional.linear(a, w, b), "a @ weight.T + bias (torch.nn.Linear's "
       "computation; bias may be left out)", functions=("linear",), torch=(F_PREFIX + "linear",), shape="linear"),
    # losses
    Op("cross_entropy", (T, _TARGET, _RED), _cross_entropy, "log_softmax along the class dim (1, or 0 for "
       "one sample), then the negative log-likelihood of target (class indices or probabilities)",
       kind="loss", functions=("cross_entropy",), torch=(F_PREFIX + "cross_entropy",), shape="first"),
    Op("mse_loss", (T, _TARGET, _RED), lambda a, t, reduction="mean": _torch().nn.functional.mse_loss(
       a, t, reduction=reduction), "mean of (a - target)^2", kind="loss", functions=("mse_loss",),
       torch=(F_PREFIX + "mse_loss",)),
    Op("binary_cross_entropy_with_logits", (T, _TARGET, _RED), lambda a, t, reduction="mean":
       _torch().nn.functional.binary_cross_entropy_with_logits(a, t, reduction=reduction),
       "binary cross-entropy of sigmoid(a) against target, computed stably", kind="loss",
       functions=("binary_cross_entropy_with_logits",), torch=(F_PREFIX + "binary_cross_entropy_with_logits",)),
    Op("binary_cross_entropy", (T, _TARGET, _RED), _bce, "-(target log(a) + "
       "(1 - target) log(1 - a)), a a probability in [0, 1] (sigmoid's output)", kind="loss",
       functions=("binary_cross_entropy",), torch=(F_PREFIX + "binary_cross_entropy",)),
    Op("l1_loss", (T, _TARGET, _RED), _l1, "mean of |a - target|", kind="loss",
       functions=("l1_loss",), torch=(F_PREFIX + "l1_loss",)),
    Op("smooth_l1_loss", (T, _TARGET, _RED, Param("beta", "number", 1.0)), _smooth_l1,
       "0.5 (a - target)^2 / beta where |a - target| < beta, else |a - target| - 0.5 beta; then the mean",
       kind="loss", functions=("smooth_l1_loss",), torch=(F_PREFIX + "smooth_l1_loss",)),
    Op("nll_loss", (T, _TARGET, _RED), _nll_loss, "the negative log-likelihood of class indices target, a holding "
       "log-probabilities (log_softmax along the class dim, 1 or 0 for one sample)", kind="loss",
       functions=("nll_loss",), torch=(F_PREFIX + "nll_loss",), shape="first"),
    # shapes
    Op("reshape", (T, Param("shape", "shape")), lambda a, shape: a.reshape(shape), "a with a new shape (-1: "
       "inferred)", kind="shape", functions=("reshape",), methods=("reshape",), torch=("torch.reshape",),
       shape="reshape"),
    Op("view", (T, Param("shape", "shape")), lambda a, shape: a.view(shape), "a with a new shape, sharing "
       "memory (a must be contiguous; else use reshape)", kind="shape", methods=("view",), shape="reshape"),
    Op("t", (T,), lambda a: a.t(), "transpose of a matrix (at most 2 dimensions)", kind="shape", methods=("t",),
       torch=("torch.t",), shape="t", properties=("T",)),
    Op("clone", (T,), lambda a: a.clone(), "a copy of a (gradient flows back)", kind="shape",
       methods=("clone",), torch=("torch.clone",), shape="first"),
    Op("cat", (Param("tensors", "tensors"), Param("dim", "int", 0)), lambda *ts, dim=0: _torch().cat(ts, dim=dim),
       "tensors joined along an existing dim", kind="shape", functions=("cat",),
       torch=("torch.cat", "torch.concat"), shape="cat"),
    Op("stack", (Param("tensors", "tensors"), Param("dim", "int", 0)),
       lambda *ts, dim=0: _torch().stack(ts, dim=dim), "tensors joined along a new dim", kind="shape",
       functions=("stack",), torch=("torch.stack",), shape="stack"),
]

OPS: dict[str, Op] = {op.name: op for op in _ROWS}
CLASS_TARGETS = ("cross_entropy", "nll_loss")  # losses whose target may be class indices (no gradient)
CUT_OPS = tuple(op.name for op in _ROWS if op.role != "plain")  # every way the language cuts a gradient path
REGION_OPS = tuple(op.name for op in _ROWS if op.role == "region")
# Every spelling -> its row: bare names f(...), methods a.f(...), qualified names torch.f(...), `with` contexts.
FUNCTIONS: dict[str, Op] = {f: op for op in _ROWS for f in op.functions}
METHODS: dict[str, Op] = {m: op for op in _ROWS for m in op.methods}
QUALIFIED: dict[str, Op] = {q: op for op in _ROWS for q in op.torch}
CONTEXTS: dict[str, Op] = {c: op for op in _ROWS for c in op.contexts}
PROPERTIES: dict[str, Op] = {p: op for op in _ROWS for p in op.properties}


def qualified(name: str) -> str:
    """F.relu -> torch.nn.functional.relu (the registry's spelling)."""
    return F_PREFIX + name[2:] if name.startswith("F.") else name


def suggest(name: str, among=None) -> str | None:
    """The nearest spelling, for 'did you mean' hints: among bare function names unless told."""
    import difflib

    close = difflib.get_close_matches(name, list(FUNCTIONS if among is None else among), n=1, cutoff=0.6)
    return close[0] if close else None


_ROLES: dict[str, Role] = {op.name: op.role for op in _ROWS}  # asked per node and per edge: one dict look-up
_CUTS, _REGIONS = frozenset(CUT_OPS), frozenset(REGION_OPS)


def role(name: str) -> Role:
    """An op's autograd role; graph nodes that are not ops (var, const) are plain."""
    return _ROLES.get(name, "plain")


def is_cut(name: str) -> bool:
    """Does this op cut the gradient path (detach, or a no_grad / inference_mode region)?"""
    return name in _CUTS


def is_region(name: str) -> bool:
    """Is this op a region (no_grad, inference_mode): its argument computed under a context, returned as is?"""
    return name in _REGIONS
