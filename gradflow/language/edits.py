"""Rewriting a lowered Graph: insert or remove a cut, or change its mechanism.

What-if and compare-modes never edit program text: they copy the Graph, edit
the copy here (nodes keyed by their old ids, new nodes by negative ids) and
renumber once, so ids stay list positions in evaluation order. Torch-free.
"""
from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from gradflow.language.graph import FlagStep, Graph, Node, RetainStep
from gradflow.language.ops import CUT_OPS, is_region


def _inner(text: str) -> str:
    """'detach(x*y2)' -> 'x*y2' (a cut this module wrote itself)."""
    return text[text.index("(") + 1:-1]


class Edit:
    """A graph being rewritten (nodes are immutable: each change makes a new one); `graph()` returns the
    finished Graph."""

    def __init__(self, graph: Graph):
        self.source = graph.source
        self.steps: list[int | FlagStep | RetainStep] = [s.id if isinstance(s, Node) else s for s in graph.steps]
        self.nodes: dict[int, Node] = {n.id: n for n in graph.nodes}
        self.inputs = dict(graph.inputs)
        self.output = graph.output
        self._fresh = 0

    def _change(self, nid: int, **fields) -> Node:
        self.nodes[nid] = replace(self.nodes[nid], **fields)
        return self.nodes[nid]

    def _redirect(self, old: int, new: int, skip: int | None = None):
        for n in list(self.nodes.values()):
            if n.id != skip and old in n.args:
                self._change(n.id, args=tuple(new if a == old else a for a in n.args))
        if self.output == old:
            self.output = new

    def _unwrap(self, cid: int):
        """Region `cid` no longer encloses anything: the nodes inside leave its context (nested regions stay)."""
        c = self.nodes[cid]
        if not is_region(c.op):
            return
        depth = len(c.modes)  # its own context's place in the stack of every node inside it
        for n in self.inside(cid):
            region = c.region if n.region == cid else n.region
            self._change(n.id, modes=n.modes[:depth] + n.modes[depth + 1:], region=region)

    def detach_at(self, nid: int) -> int:
        """Every use of node `nid` reads detach(nid) instead."""
        self._fresh -= 1
        n = self.nodes[nid]
        d = Node(self._fresh, "detach", (nid,), f"detach({n.label})", n.span, region=n.region, modes=n.modes)
        self._redirect(nid, d.id, skip=d.id)
        self.nodes[d.id] = d
        self.steps.insert(self.steps.index(nid) + 1, d.id)
        return d.id

    def remove_cut(self, cid: int):
        """detach(e) / no_grad(e) / inference_mode(e) -> e."""
        c = self.nodes[cid]
        self._unwrap(cid)
        arg = self.nodes[c.args[0]]
        self._change(arg.id, names=(*arg.names, *(name for name in c.names if name not in arg.names)))
        self._redirect(cid, c.args[0])
        self.steps.remove(cid)
        del self.nodes[cid]

    def set_cut(self, cid: int, op: str):
        """Make cut `cid` use mechanism `op` (detach, no_grad or inference_mode)."""
        self._unwrap(cid)
        c = self._change(cid, text=f"{op}({self.operand_text(cid)})", op=op, params=())  # as if written op(e)
        if is_region(op):
            depth = len(c.modes)
            for n in self.inside(cid):
                region = cid if n.region == c.region else n.region
                self._change(n.id, modes=n.modes[:depth] + (op,) + n.modes[depth:], region=region)

    def operand_text(self, cid: int) -> str:
        """How the cut's operand is written: 'x*y2' in detach(x*y2) and (x*y2).detach(), 'y' in y.detach_()."""
        c = self.nodes[cid]
        if c.inner is None:
            return _inner(c.text)
        arg = self.nodes[c.args[0]]
        if c.inner.start <= arg.span.start and arg.span.end <= c.inner.end:
            return arg.text  # written in place: its own text, without parentheses around it
        return self.source[c.inner.start:c.inner.end]  # a name

    def inside(self, cid: int) -> list[Node]:
        """The nodes computed inside a cut call's parentheses (not the leaves it reads)."""
        c = self.nodes[cid]
        return [n for n in self.nodes.values() if n.id != cid and n.op != "var"
                and c.span.start <= n.span.start and n.span.end <= c.span.end and n.id >= 0]

    def flag_off(self, leaf: str):
        """Add `leaf.requires_grad = false` right after the leaf is made."""
        n = self.nodes[self.inputs[leaf]]
        step = FlagStep(n.id, False, n.span, f"{leaf}.requires_grad = false")
        self.steps.insert(self.steps.index(n.id) + 1, step)

    def drop_flag(self, step: FlagStep):
        self.steps = [s for s in self.steps if not (isinstance(s, FlagStep) and s.span == step.span)]

    @staticmethod
    def _renumbered(n: Node, ids: dict[int, int]) -> Node:
        region = None if n.region is None else ids[n.region]
        return replace(n, id=ids[n.id], args=tuple(ids[a] for a in n.args), region=region)

    def graph(self) -> Graph:
        order = [s for s in self.steps if isinstance(s, int)]
        ids = {old: new for new, old in enumerate(order)}
        nodes = tuple(self._renumbered(self.nodes[old], ids) for old in order)
        steps = tuple(nodes[ids[s]] if isinstance(s, int) else replace(s, node=ids[s.node]) for s in self.steps)
        inputs = MappingProxyType({k: ids[v] for k, v in self.inputs.items()})
        return Graph(self.source, nodes, steps, inputs, ids[self.output])


def cut_nodes(graph: Graph) -> list[Node]:
    return [n for n in graph.nodes if n.op in CUT_OPS]


def off_flags(graph: Graph) -> list[FlagStep]:
    return [s for s in graph.steps if isinstance(s, FlagStep) and not s.value]


def ancestors(graph: Graph, nid: int) -> set[int]:
    seen, todo = set(), [nid]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(graph.nodes[n].args)
    return seen

