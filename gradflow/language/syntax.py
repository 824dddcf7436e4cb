"""Typed program nodes: the parser's output. Each node carries its source span. Torch-free."""
from __future__ import annotations

from dataclasses import dataclass

from gradflow.errors import Span


@dataclass
class Expr:
    span: Span  # the node's own text
    full: Span  # with any enclosing parentheses (what a parent's text spans)


@dataclass
class Num(Expr):
    value: float


@dataclass
class Var(Expr):
    name: str


@dataclass
class Call(Expr):
    """An operator, function or method application; `op` names a registry row. `args` are its operands (the
    tensors), `params` its other parameters as (name, value) pairs, defaults included."""

    op: str
    args: list[Expr]
    params: tuple = ()
    inner: Span | None = None  # the first operand as written here (edits and modes rewrite a cut around it)
    inplace: bool = False  # a.detach_(), a.requires_grad_(...), a.retain_grad(): acts on a itself


@dataclass
class Namespace(Expr):
    """`torch`, `torch.nn.functional`, `F`: only ever followed by a function name."""

    name: str


# Argument pieces that only ever reach a call's binding (calls.py), never the graph.
@dataclass
class Str(Expr):
    value: str


@dataclass
class Seq(Expr):
    items: list[Expr]


@dataclass
class Keyword:
    name: str
    value: Expr
    span: Span


@dataclass
class Assign:
    name: str
    expr: Expr
    span: Span


@dataclass
class SetFlag:
    name: str
    value: bool
    span: Span


@dataclass
class ExprStmt:
    expr: Expr
    span: Span


@dataclass
class With:
    """`with torch.no_grad():` over a block of statements: every node computed inside enters the region."""

    mode: str  # the region op: no_grad | inference_mode
    header: str  # how the block is named in messages: "with torch.no_grad() (line 2)"
    body: list[Stmt]
    span: Span  # the header


Stmt = Assign | SetFlag | ExprStmt | With


@dataclass
class Program:
    source: str
    stmts: list[Stmt]
