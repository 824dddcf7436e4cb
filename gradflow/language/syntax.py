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
    """An operator or function application; `op` names a registry row."""

    op: str
    args: list[Expr]


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


Stmt = Assign | SetFlag | ExprStmt


@dataclass
class Program:
    source: str
    stmts: list[Stmt]
