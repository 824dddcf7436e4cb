"""Lowering a parsed Program (syntax.py) to a flat Graph.

`lower()` turns it into a `Graph`: the nodes in evaluation
order (each expression occurrence is one node, each input variable one leaf),
plus the requires_grad statements between them. The engine walks that list in
order; nothing here imports torch.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gradflow.errors import ParseError, Span
from gradflow.language.ops import REGION_OPS
from gradflow.language.syntax import Assign, Call, Expr, ExprStmt, Namespace, Num, Program, SetFlag, Stmt, Var, With

# A node's text is its expression as written, up to this many characters. A longer one names its longest
# operands by id, `%17 + x*6400` (`%` is not in the language, so it never reads as program text), and if it
# is still too long keeps its two ends around a `…`. So every name is short, and a program's names grow with
# its size, not with its size squared (a chain `a+b+c+...` would repeat its whole prefix at every step).
# The full text is the source between the node's span.
NAME_WIDTH = 60
_REGIONS = frozenset(REGION_OPS)  # asked per call: a set look-up, not a function call
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
    params: tuple = ()  # the op's other parameters, (name, value) pairs: (("dim", 0), ("keepdim", False))
    inner: Span | None = None  # the first operand as written in this call (a cut's argument: edits rewrite it)
    block: str | None = None  # the innermost enclosing region when it is a `with` block: how messages name it
    abbreviated: bool = False  # `text` is shorter than the source between `span` (see NAME_WIDTH)

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
class RetainStep:
    """`a.retain_grad()`: nothing to do (every grad is shown), but torch refuses it when a does not require grad."""

    node: int
    span: Span
    text: str


Step = Node | FlagStep | RetainStep


@dataclass(frozen=True)
class Graph:
    """Immutable: compile_program caches it and every evaluation shares it (edits.py makes new ones)."""

    source: str
    nodes: tuple[Node, ...]
    steps: tuple[Step, ...]  # evaluation order, flags interleaved
    inputs: Mapping[str, int]  # input variable name -> leaf node id (read-only)
    output: int

    def consumers(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for a in n.args:
                out[a].append(n.id)
        return out


def _longest_first(operand: tuple[int, int, int]) -> int:
    return operand[0] - operand[1]


class _Lowering:
    def __init__(self, source: str):
        self.source = source
        self.nodes: list[Node] = []
        self.steps: list[int | FlagStep | RetainStep] = []  # node ids and flags, in evaluation order
        self.env: dict[str, int] = {}
        self.inputs: dict[str, int] = {}
        self.regions: dict[int, Call] = {}  # node id -> its enclosing no_grad/inference_mode call
        self.blocks: tuple = ()  # the enclosing `with` blocks: (With, op) pairs, outermost first

    def new(self, op, args, span, value=0.0, regions: tuple = (), call: Call | None = None) -> int:
        """A node; `regions`: the enclosing (region call or `with` block, op) pairs, outermost first."""
        nid = len(self.nodes)
        text, short = self.text(span, call, args)
        block = None
        if regions:
            innermost = regions[-1][0]
            if isinstance(innermost, With):
                block = innermost.header
            elif isinstance(innermost, Call):
                self.regions[nid] = innermost
            modes = tuple(mode for _, mode in regions)
        else:
            modes = ()
        params, inner = ((), None) if call is None else (call.params, call.inner)
        self.nodes.append(Node(nid, op, tuple(args), text, span, value=value, modes=modes, params=params,
                               inner=inner, block=block, abbreviated=short))
        self.steps.append(nid)
        return nid

    def text(self, span: Span, call: Call | None, args) -> tuple[str, bool]:
        """The node's name as text, and whether it is abbreviated: longest operands first become `%ID`
        until it fits NAME_WIDTH, then the middle becomes `…`. Linear: only this call's own characters
        (between its operands) and at most NAME_WIDTH of theirs are copied."""
        start, end = span.start, span.end
        if end - start <= NAME_WIDTH or call is None:
            return self.source[start:end], False
        inside = [(a.full.start, a.full.end, nid) for a, nid in zip(call.args, args)
                  if isinstance(a, Call) and start <= a.full.start and a.full.end <= end]
        inside.sort()
        size, refs = end - start, {}
        for s, t, nid in sorted(inside, key=_longest_first) if len(inside) > 1 else inside:
            if size <= NAME_WIDTH:
                break
            ref = f"%{nid}"
            size -= (t - s) - len(ref)
            refs[nid] = ref
        source, parts, at = self.source, [], start
        for s, t, nid in inside:
            if nid in refs and s >= at:
                parts.append(source[at:s])
                parts.append(refs[nid])
                at = t
        parts.append(source[at:end])
        text = "".join(parts)
        if len(text) > NAME_WIDTH:
            head = NAME_WIDTH // 2
            text = text[:head] + "…" + text[len(text) - (NAME_WIDTH - head - 1):]
        return text, True

    def fail(self, message: str, span: Span, hint: str, kind: str = "syntax") -> ParseError:
        return ParseError(kind, message, hint=hint, span=span, source=self.source)

    def name(self, nid: int, name: str) -> None:
        node = self.nodes[nid]
        if name not in node.names:
            vars(node)["names"] = (*node.names, name)  # a node of this lowering, in no Graph yet

    def lookup(self, var: Var) -> int:
        if var.name in ("True", "False", "None"):
            raise self.fail(f"{var.name} is not a tensor", var.span, "True, False and None are values of "
                            "parameters, e.g. keepdim=True", kind="argument")
        if var.name not in self.env:
            nid = self.new("var", (), var.span)
            self.name(nid, var.name)
            self.env[var.name] = self.inputs[var.name] = nid
        return self.env[var.name]

    def expr(self, root: Expr) -> int:
        """Post-order walk with an explicit stack (deep nesting must not recurse); each node's id goes on `out`,
        where a call finds its operands' ids as the last ones."""
        out: list[int] = []
        stack: list[tuple[Any, tuple, bool]] = [(root, self.blocks, False)]  # expression, enclosing regions, done
        pop, push = stack.pop, stack.append
        while stack:
            e, reg, done = pop()
            if done:
                first = len(out) - len(e.args)
                args = out[first:]
                del out[first:]
                out.append(self.call(e, args, reg))
            elif isinstance(e, Num):
                out.append(self.new("const", (), e.span, value=e.value, regions=reg))
            elif isinstance(e, Var):
                out.append(self.lookup(e))
            elif isinstance(e, Namespace):
                raise self.fail(f"'{e.name}' is a module or function, not a value", e.span, "call a function, "
                                "e.g. torch.sum(x)", kind="unknown_function")
            else:
                push((e, reg, True))
                inner = (*reg, (e, e.op)) if e.op in _REGIONS else reg
                for a in reversed(e.args):
                    push((a, inner, False))
        return out[-1]

    def call(self, e: Call, args: list[int], reg: tuple) -> int:
        """A call's node; the in-place spellings act on their operand: a.requires_grad_(v) is a flag step on
        it, a.detach_() a detach that later uses of the name a read."""
        if e.op == "retain_grad":
            raise self.fail("retain_grad() returns None, so it cannot be used in an expression", e.span,
                            "call it as a statement of its own: y.retain_grad()")
        if e.op == "requires_grad_":
            self.steps.append(FlagStep(args[0], dict(e.params)["requires_grad"], e.span, self.text(e.span, e, args)[0]))
            return args[0]
        if e.op == "detach" and e.inplace:
            if any(mode == "inference_mode" for _, mode in reg):
                return args[0]  # torch's detach_() changes nothing under inference_mode: the tensor stays as it was
            tensor = self.tensor_of(args[0])
            if self.nodes[tensor].op == "var":  # a leaf's detach_(): requires_grad_(False)
                self.steps.append(FlagStep(tensor, False, e.span, self.text(e.span, e, args)[0]))
                return args[0]
            nid = self.new(e.op, args, e.span, regions=reg, call=e)
            self.rebind(tensor, nid)  # every later use of that tensor, by any name, reads it detached
            return nid
        return self.new(e.op, args, e.span, regions=reg, call=e)

    def tensor_of(self, nid: int) -> int:
        """The node whose tensor object `nid` is: a region (no_grad(a), inference_mode(a)) hands back its
        argument itself, as torch's context managers do with a value computed outside them."""
        while self.nodes[nid].op in _REGIONS:
            nid = self.nodes[nid].args[0]
        return nid

    def rebind(self, tensor: int, nid: int) -> None:
        """Every name bound to `tensor` (`b = a`, `b = no_grad(a)`: one tensor object, two names) now reads nid."""
        for name, bound in self.env.items():
            if self.tensor_of(bound) == tensor:
                self.env[name] = nid

    def run(self, program: Program) -> Graph:
        self.last = -1
        self.statements(program.stmts)
        if self.last < 0:
            raise ParseError("empty", "the program has no expression to evaluate",
                             hint='write an expression, e.g. "(x*y1 - detach(x*y2))^2"')
        last = self.last
        self._fix_regions()
        nodes = tuple(self.nodes)
        if len(self.steps) == len(nodes):  # no flag steps: the nodes themselves, in order
            steps: tuple[Step, ...] = nodes
        else:
            steps = tuple(nodes[s] if isinstance(s, int) else s for s in self.steps)
        return Graph(self.source, nodes, steps, MappingProxyType(self.inputs), last)

    def statements(self, stmts: list[Stmt]) -> None:
        """In order; a `with` block's statements inside its region (a stack, not recursion: blocks may nest
        as deep as the depth limit allows)."""
        todo = [(iter(stmts), self.blocks)]
        while todo:
            st = next(todo[-1][0], None)
            if st is None:
                todo.pop()
                continue
            self.blocks = todo[-1][1]
            if isinstance(st, With):
                todo.append((iter(st.body), (*self.blocks, (st, st.mode))))
            elif isinstance(st, SetFlag):
                name_span = Span(st.span.start, st.span.start + len(st.name))
                target = self.lookup(Var(name_span, name_span, st.name))
                self.steps.append(FlagStep(target, st.value, st.span, self.source[st.span.start:st.span.end]))
            elif isinstance(st, ExprStmt) and isinstance(st.expr, Call) and st.expr.op == "retain_grad":
                target = self.expr(st.expr.args[0])
                self.steps.append(RetainStep(target, st.span, self.source[st.span.start:st.span.end]))
            else:
                nid = self.expr(st.expr)
                if isinstance(st, Assign):
                    self.env[st.name] = nid
                    self.name(nid, st.name)
                if isinstance(st, Assign) or not (isinstance(st.expr, Call) and st.expr.inplace):
                    self.last = nid  # `y.detach_()`, `x.requires_grad_(False)` on their own are steps, not L

    def _fix_regions(self):
        """Regions were recorded as the enclosing Call expression: map each to its node id."""
        if not self.regions:
            return  # most programs: no index of every node to build
        by_span = {(n.span.start, n.span.end, n.op): n.id for n in self.nodes}
        for nid, call in self.regions.items():
            vars(self.nodes[nid])["region"] = by_span[(call.span.start, call.span.end, call.op)]


def lower(program: Program) -> Graph:
    """Flatten a parsed program into the evaluation-ordered graph."""
    return _Lowering(program.source).run(program)
