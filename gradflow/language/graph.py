"""Lowering a parsed Program (syntax.py) to a flat Graph.

`lower()` turns it into a `Graph`: the nodes in evaluation
order (each expression occurrence is one node, each input variable one leaf),
plus the requires_grad statements between them. The engine walks that list in
order; nothing here imports torch.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from gradflow.errors import Span
from gradflow.language.ops import is_region
from gradflow.language.syntax import Assign, Call, Expr, Num, Program, SetFlag, Var

# ---- the lowered graph --------------------------------------------------------------

@dataclass(frozen=True)
class Node:
    id: int
    op: str  # a registry name, or "var" (input leaf) / "const"
    args: tuple[int, ...]
    text: str  # source text of the expression
    span: Span
    names: tuple[str, ...] = ()
    value: float = 0.0  # for const
    region: int | None = None  # id of the innermost enclosing no_grad/inference_mode call
    modes: tuple[str, ...] = ()  # every enclosing region's op, outermost first: torch enters them all

    @property
    def label(self) -> str:
        return self.names[0] if self.names else self.text


@dataclass(frozen=True)
class FlagStep:
    node: int
    value: bool
    span: Span
    text: str


@dataclass(frozen=True)
class Graph:
    """Immutable: compile_program caches it and every evaluation shares it (edits.py makes new ones)."""

    source: str
    nodes: tuple[Node, ...]
    steps: tuple[Node | FlagStep, ...]  # evaluation order, flags interleaved
    inputs: Mapping[str, int]  # input variable name -> leaf node id (read-only)
    output: int

    def consumers(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for a in n.args:
                out[a].append(n.id)
        return out


class _Lowering:
    def __init__(self, source: str):
        self.source = source
        self.nodes: list[Node] = []
        self.steps: list[int | FlagStep] = []  # node ids and flags, in evaluation order
        self.env: dict[str, int] = {}
        self.inputs: dict[str, int] = {}
        self.regions: dict[int, Call] = {}  # node id -> its enclosing no_grad/inference_mode call

    def new(self, op, args, span, value=0.0, regions: tuple = ()) -> int:
        """A node; `regions`: the enclosing (region call, op) pairs, outermost first."""
        nid = len(self.nodes)
        modes = tuple(mode for _, mode in regions)
        self.nodes.append(Node(nid, op, tuple(args), self.source[span.start:span.end], span, value=value, modes=modes))
        if regions:
            self.regions[nid] = regions[-1][0]
        self.steps.append(nid)
        return nid

    def name(self, nid: int, name: str) -> None:
        node = self.nodes[nid]
        if name not in node.names:
            self.nodes[nid] = replace(node, names=(*node.names, name))

    def lookup(self, var: Var) -> int:
        if var.name not in self.env:
            nid = self.new("var", (), var.span)
            self.name(nid, var.name)
            self.env[var.name] = self.inputs[var.name] = nid
        return self.env[var.name]

    def expr(self, root: Expr) -> int:
        """Post-order walk with an explicit stack (deep nesting must not recurse)."""
        results: dict[int, int] = {}
        stack: list[tuple[Any, bool, tuple]] = [(root, False, ())]  # Num | Var | Call, enclosing regions
        while stack:
            e, done, reg = stack.pop()
            if isinstance(e, Num):
                results[id(e)] = self.new("const", (), e.span, value=e.value, regions=reg)
            elif isinstance(e, Var):
                results[id(e)] = self.lookup(e)
            elif not done:
                stack.append((e, True, reg))
                inner = reg
                if is_region(e.op):
                    inner = (*reg, (e, e.op))
                for a in reversed(e.args):
                    stack.append((a, False, inner))
            else:
                args = [results[id(a)] for a in e.args]
                results[id(e)] = self.new(e.op, args, e.span, regions=reg)
        return results[id(root)]

    def run(self, program: Program) -> Graph:
        last = -1
        for st in program.stmts:
            if isinstance(st, SetFlag):
                name_span = Span(st.span.start, st.span.start + len(st.name))
                target = self.lookup(Var(name_span, name_span, st.name))
                self.steps.append(FlagStep(target, st.value, st.span,
                                           self.source[st.span.start:st.span.end]))
                continue
            nid = self.expr(st.expr)
            if isinstance(st, Assign):
                self.env[st.name] = nid
                self.name(nid, st.name)
            last = nid
        self._fix_regions()
        nodes = tuple(self.nodes)
        steps = tuple(nodes[s] if isinstance(s, int) else s for s in self.steps)
        return Graph(self.source, nodes, steps, MappingProxyType(self.inputs), last)

    def _fix_regions(self):
        # regions were recorded as the enclosing Call expression; map them to its node id
        by_span = {(n.span.start, n.span.end, n.op): n.id for n in self.nodes}
        for nid, call in self.regions.items():
            self.nodes[nid] = replace(self.nodes[nid], region=by_span[(call.span.start, call.span.end, call.op)])


def lower(program: Program) -> Graph:
    """Flatten a parsed program into the evaluation-ordered graph."""
    from gradflow.errors import ParseError

    if not any(not isinstance(s, SetFlag) for s in program.stmts):
        raise ParseError("empty", "the program has no expression to evaluate",
                         hint='write an expression, e.g. "(x*y1 - detach(x*y2))^2"')
    return _Lowering(program.source).run(program)
