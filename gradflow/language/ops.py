"""The one registry of operations: the single source of what an op means.

Each row names an operation, how many arguments it takes, the tensor code that
computes it, a one-line doc, and its autograd role:
  plain   an ordinary op: gradient flows back through it;
  cut     its result carries no path back (detach);
  region  its argument is computed under a torch context that records nothing
          (no_grad, inference_mode); the op itself returns that argument.
The parser checks calls against it, the engine evaluates through it, the analysis,
flows, edits, graph text and inspect ask it what is a cut, error messages suggest
from it and `gradflow ops` lists it. Adding an operation is adding a row here; the
grammar does not change.

Torch-free: the callables only use tensor methods, so importing this module
does not import torch.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["plain", "cut", "region"]


@dataclass(frozen=True)
class Op:
    name: str
    min_args: int
    max_args: int
    fn: Callable[..., Any]  # the torch call (a region op returns its argument: the engine enters the context)
    doc: str
    symbol: str | None = None  # operator spelling, e.g. "*" (None: call syntax only)
    kind: str = "function"  # how `gradflow ops` groups it: operator | function | reduction | cut
    role: Role = "plain"
    torch_names: tuple[str, ...] = ()  # cuts: the tensor methods / torch contexts that do this in real code

    @property
    def arity(self) -> str:
        if self.min_args == self.max_args:
            return str(self.min_args)
        return f"{self.min_args}-{self.max_args}"


def _min(a, b=None):
    return a.min() if b is None else a.minimum(b)


def _max(a, b=None):
    return a.max() if b is None else a.maximum(b)


_ROWS = [
    # operators (the grammar maps the symbols to these names)
    Op("add", 2, 2, lambda a, b: a + b, "a + b", "+", "operator"),
    Op("sub", 2, 2, lambda a, b: a - b, "a - b", "-", "operator"),
    Op("mul", 2, 2, lambda a, b: a * b, "a * b, elementwise", "*", "operator"),
    Op("div", 2, 2, lambda a, b: a / b, "a / b, elementwise", "/", "operator"),
    Op("matmul", 2, 2, lambda a, b: a @ b, "a @ b, matrix product (torch.matmul)", "@", "operator"),
    Op("neg", 1, 1, lambda a: -a, "-a", "-", "operator"),
    Op("pow", 2, 2, lambda a, b: a ** b, "a ^ b (also a ** b, pow(a, b)); right-associative", "^", "function"),
    # cuts
    Op("detach", 1, 1, lambda a: a.detach(), "a's value with no gradient path back (tensor.detach())", kind="cut",
       role="cut", torch_names=("detach", "detach_", "data")),
    Op("no_grad", 1, 1, lambda a: a, "evaluate a under torch.no_grad(): operations inside are not tracked",
       kind="cut", role="region", torch_names=("no_grad",)),
    Op("inference_mode", 1, 1, lambda a: a, "evaluate a under torch.inference_mode(): like no_grad, stricter",
       kind="cut", role="region", torch_names=("inference_mode",)),
    # elementwise functions
    Op("exp", 1, 1, lambda a: a.exp(), "e^a"),
    Op("log", 1, 1, lambda a: a.log(), "natural logarithm"),
    Op("sqrt", 1, 1, lambda a: a.sqrt(), "square root"),
    Op("abs", 1, 1, lambda a: a.abs(), "absolute value"),
    Op("sin", 1, 1, lambda a: a.sin(), "sine"),
    Op("cos", 1, 1, lambda a: a.cos(), "cosine"),
    Op("tan", 1, 1, lambda a: a.tan(), "tangent"),
    Op("tanh", 1, 1, lambda a: a.tanh(), "hyperbolic tangent"),
    Op("sigmoid", 1, 1, lambda a: a.sigmoid(), "1 / (1 + e^-a)"),
    Op("relu", 1, 1, lambda a: a.relu(), "max(a, 0)"),
    # reductions
    Op("sum", 1, 1, lambda a: a.sum(), "sum of all elements", kind="reduction"),
    Op("mean", 1, 1, lambda a: a.mean(), "mean of all elements", kind="reduction"),
    Op("min", 1, 2, _min, "min(a): smallest element; min(a, b): elementwise minimum", kind="reduction"),
    Op("max", 1, 2, _max, "max(a): largest element; max(a, b): elementwise maximum", kind="reduction"),
]

OPS: dict[str, Op] = {op.name: op for op in _ROWS}
CUT_OPS = tuple(op.name for op in _ROWS if op.role != "plain")  # every way the language cuts a gradient path
REGION_OPS = tuple(op.name for op in _ROWS if op.role == "region")
# Names callable as f(...): everything but the operator-only rows.
FUNCTIONS: dict[str, Op] = {op.name: op for op in _ROWS if op.kind != "operator"}


def suggest(name: str) -> str | None:
    """The nearest function name, for 'did you mean' hints."""
    import difflib

    close = difflib.get_close_matches(name, list(FUNCTIONS), n=1, cutoff=0.6)
    return close[0] if close else None


def role(name: str) -> Role:
    """An op's autograd role; graph nodes that are not ops (var, const) are plain."""
    op = OPS.get(name)
    return "plain" if op is None else op.role


def is_cut(name: str) -> bool:
    """Does this op cut the gradient path (detach, or a no_grad / inference_mode region)?"""
    return role(name) != "plain"


def is_region(name: str) -> bool:
    """Is this op a region (no_grad, inference_mode): its argument computed under a context, returned as is?"""
    return role(name) == "region"
