"""The autograd graph torch recorded for a traced forward, named by the user's code (`inspect --autograd`,
`script --autograd`). What it is drawn from besides the trace is a GraphSource: inspect's report, or a script's
backward() (script/autograd.py), each giving the loss, its leaves with their names and statuses, the modules'
names and the flow graph of the recorded ops.

torch's own graph, found as torchviz finds it: from the loss's grad_fn through `next_functions`, one
AccumulateGrad per parameter (so a tied weight, one tensor under two names, is one node). A trace made with
`trace(autograd=True)` knows which op made each node: a node is named by its module and, for an op run in the
user's own code, by the line and the variable it was assigned to; a node torch made inside an op (the `t()` of a
linear) takes the name of the op that used it. What torch's graph has no node for comes from the trace: each cut
(detach, no_grad, inference_mode, .item()) on a path to the loss, red at its line, and the frozen parameters,
grey. Repeated blocks of the same ops (`h.0` … `h.11`) are drawn once (`h.0–h.11 ×12`); `depth` draws each
module at that depth, with everything inside it, as one node.
"""
from __future__ import annotations

import functools
import linecache
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gradflow.display import Drawn
from gradflow.report.module_picture import WORST

if TYPE_CHECKING:  # types only
    from gradflow.report.reasons import FlowGraph
    from gradflow.tracer.trace import Trace

SHOWN_CUTS = ("detach", "no_grad", "inference_mode", "item", "rewrap")  # (nondiff: an integer result, no cut)
# `h = ...`, `a, b = ...`, `h += ...`: the names a line assigns (patterns as strings: re caches them)
_ASSIGNED = r"\s*([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*(?:[-+*/@]?=)(?!=)"


class Leaf(Protocol):
    """A named leaf of the graph: inspect's ParamReport, a script's parameter (script/autograd.py)."""

    @property
    def serial(self) -> int | None: ...
    @property
    def name(self) -> str: ...
    @property
    def status(self) -> str: ...  # live, frozen, cut, unused, ... (module_picture.STATUS_FILL's colours)
    @property
    def aliases(self) -> list[str]: ...


class GraphSource(Protocol):
    """What the graph is drawn from, besides the trace: the loss, its leaves named, the modules named and the
    trace's flow graph (the cuts on the paths to the loss). inspect's InspectReport is one; a script's backward()
    gives another (script/autograd.py)."""

    @property
    def loss(self) -> Any: ...
    @property
    def params(self) -> Sequence[Leaf]: ...
    @property
    def module_names(self) -> dict[int, str]: ...
    @property
    def graph(self) -> FlowGraph | None: ...


@dataclass
class OpNode:
    key: str
    fn: str  # torch's node type (AddmmBackward0, AccumulateGrad), the cut's op, or '' for a module drawn whole
    kind: str  # op | param | frozen | cut | module
    name: str = ""  # module path, or a parameter's name
    line: str | None = None  # the user's line, for an op run in their own code
    variable: str | None = None  # the name that line assigns
    status: str | None = None  # a parameter's (or a module drawn whole: its worst parameter's) status
    aliases: list[str] = field(default_factory=list)  # a tied parameter's other names
    order: tuple = (0, 0)  # forward order: (op index, steps from the node that op made)
    fold: int | None = None  # index into OpGraph.folds
    ops: int = 0  # a module drawn whole: how many of torch's nodes it stands for, and how many parameters
    params: int = 0
    how: str | None = None  # a cut: its kind (detach, no_grad, inference_mode, item, rewrap)


@dataclass
class Fold:
    """Blocks of the same ops drawn once: `prefix` is `transformer.h`, `first` the block drawn (`transformer.h.0`)."""

    prefix: str
    first: str
    label: str  # transformer.h.0–h.11 ×12
    count: int


@dataclass(repr=False)
class OpGraph(Drawn):
    """Nodes keyed n0, n1, ... (n0: the loss's node); edges (input, consumer) -> flow | cut | off (no gradient
    flows: from a frozen parameter, or into a cut)."""

    nodes: dict[str, OpNode]
    edges: dict[tuple[str, str], str]
    root: str | None
    folds: list[Fold] = field(default_factory=list)
    title: str = ""
    recorded: int = 0  # how many nodes torch's graph has (before modules are drawn whole and blocks folded)

    def shown_name(self, node: OpNode) -> str:
        """The node's name, inside a folded block relative to the block (`attn.c_attn`; the block's own ops:
        `transformer.h.0–h.11`)."""
        if node.fold is None:
            return node.name
        fold = self.folds[node.fold]
        if node.name == fold.first:  # the block's own ops (its residual adds)
            return fold.label.rsplit(" ×", 1)[0]
        return node.name[len(fold.first) + 1:] if node.name.startswith(fold.first + ".") else node.name

    def count(self, fn: str) -> int:
        """How many nodes of this torch type are drawn."""
        return sum(n.fn == fn for n in self.nodes.values())


def torch_graph(root) -> tuple[list, list[tuple]]:
    """Every autograd node reachable from `root` (breadth first, root first) and each edge as (input node,
    consuming node), walked through `next_functions` as torchviz's make_dot walks it."""
    seen, order, edges = {root}, [root], []
    i = 0
    while i < len(order):
        node = order[i]
        i += 1
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            edges.append((nxt, node))
            if nxt not in seen:
                seen.add(nxt)
                order.append(nxt)
    return order, edges


def autograd_graph(report: GraphSource, trace: Trace, depth: int | None = None, fold: bool = True,
                   title: str = "autograd graph of the loss") -> OpGraph:
    """torch's autograd graph of `report.loss`, named from `trace` (made with `trace(autograd=True)`); `report`:
    inspect's report, or any GraphSource."""
    root = getattr(report.loss, "grad_fn", None)
    graph = OpGraph({}, {}, None, title=title)
    if root is None:
        return graph
    order, edges = torch_graph(root)
    keys = {node: f"n{i}" for i, node in enumerate(order)}
    graph.root, graph.recorded = keys[root], len(order)
    _Namer(report, trace, graph).name(order, keys)
    graph.edges = {(keys[a], keys[b]): "flow" for a, b in edges}
    _Outside(report, trace, graph, keys).add()
    if depth is not None:
        _collapse(graph, depth)
    if fold:
        _fold(graph)
    return graph


class _Namer:
    """Names each node: its op's module, line and variable; a parameter's names and status."""

    def __init__(self, report: GraphSource, trace: Trace, graph: OpGraph):
        self.report, self.trace, self.graph = report, trace, graph
        self.made = trace.state.nodes
        self.by_serial = {p.serial: p for p in report.params if p.serial is not None}

    def name(self, order: list, keys: dict) -> None:
        nodes = self.graph.nodes
        for node in order:
            key = keys[node]
            fn = type(node).__name__
            variable = getattr(node, "variable", None) if fn == "AccumulateGrad" else None
            nodes[key] = self._param(key, variable) if variable is not None else self._op(key, fn, node)
            for nxt, _ in node.next_functions:  # nodes made inside an op take its name, one step further on
                if nxt is not None and keys[nxt] not in nodes and id(nxt) not in self.made:
                    inherit = nodes[key]
                    nodes[keys[nxt]] = OpNode(keys[nxt], type(nxt).__name__, "op", inherit.name if
                                              inherit.kind == "op" else "", order=(inherit.order[0],
                                                                                    inherit.order[1] + 1))

    def _op(self, key: str, fn: str, node) -> OpNode:
        known = self.made.get(id(node))
        if known is None:
            return self.graph.nodes.get(key) or OpNode(key, fn, "op")
        rec = self.trace.ops[known[1]]
        module = self.report.module_names.get(rec.module, "") if rec.module is not None else ""
        mine = rec.library_line is None and rec.line is not None  # run in the user's own code
        line = rec.line if mine else None
        return OpNode(key, fn, "op", module, line, variable_at(line) if line else None, order=(rec.index, 0))

    def _param(self, key: str, tensor) -> OpNode:
        serial = self.trace.known(tensor)
        p = self.by_serial.get(serial) if serial is not None else None
        if p is None:
            shape = "×".join(map(str, tensor.shape)) or "scalar"
            return OpNode(key, "AccumulateGrad", "param", f"leaf ({shape})", status="live", order=(_first_use(
                self.report, serial), -1))
        return OpNode(key, "AccumulateGrad", "param", p.name, status=p.status, aliases=list(p.aliases),
                      order=(_first_use(self.report, serial), -1))


def _first_use(report: GraphSource, serial: int | None) -> int:
    g = report.graph
    if g is None or serial is None:
        return 0
    return min(g.consumers.get(serial, [0]))


def variable_at(line: str) -> str | None:
    """`h` for a line `model.py:12` that reads `h = self.fc1(x)` (the name a value is assigned to there)."""
    path, _, number = line.rpartition(":")
    if not number.isdigit():
        return None
    m = re.match(_ASSIGNED, linecache.getline(path, int(number)))
    return m.group(1).replace(" ", "") if m else None


class _Outside:
    """What torch's graph has no node for: the cuts on paths to the loss and the frozen parameters, each joined
    to the drawn nodes its values flow into."""

    def __init__(self, report: GraphSource, trace: Trace, graph: OpGraph, keys: dict):
        self.report, self.graph, self.flow = report, graph, report.graph
        self.op_key: dict[int, str] = {}
        for node, index in trace.state.nodes.values():
            if node in keys:
                self.op_key.setdefault(index, keys[node])

    def add(self) -> None:
        if self.flow is None:
            return
        flow, nodes = self.flow, self.graph.nodes
        for rec in flow.relevant_ops():
            if rec.cut in SHOWN_CUTS:
                key = f"cut{rec.index}"
                nodes[key] = OpNode(key, rec.name, "cut", self.report.module_names.get(rec.module, "") if
                                    rec.module is not None else "", rec.line, variable_at(rec.line) if rec.line
                                    else None, order=(rec.index, 0), how=rec.cut)
                self._join(key, rec.outs, "cut")
                self._from(key, rec)
        fed = {b for a, b in self.graph.edges if b.startswith("cut") and a.startswith("n")}
        for leaf, cuts in flow.cuts_by_leaf().items():  # a cut fed by no drawn node: the parameters behind it
            into = [f"cut{c.index}" for c in cuts if f"cut{c.index}" in nodes]
            if into and not fed.intersection(into):
                self._leaf(leaf, into)
        for p in self.report.params:
            if p.status == "frozen" and p.serial is not None:
                frozen = self._leaf(p.serial, [])
                if frozen is not None:
                    self._join(frozen, (p.serial,), "off")

    def _from(self, key: str, rec) -> None:
        """Edges into a cut from the drawn nodes that made its inputs (a value cut off from the loss)."""
        flow = self.flow
        assert flow is not None
        for s in rec.ins:
            made = [i for i in flow.producers.get(s, ()) if i < rec.index]
            if made and made[-1] in self.op_key:
                self.graph.edges[(self.op_key[made[-1]], key)] = "off"

    def _leaf(self, serial: int, into: list[str]) -> str | None:
        """A node for a parameter torch's graph does not reach (frozen, or behind a cut)."""
        p = next((p for p in self.report.params if p.serial == serial), None)
        if p is None:
            return None
        drawn = next((k for k, n in self.graph.nodes.items() if n.kind == "param" and n.name == p.name), None)
        if drawn is not None:  # reached on another path too: its edge into the cut, grey
            for cut in into:
                self.graph.edges[(drawn, cut)] = "off"
            return None
        key = f"p{serial}"
        kind = "frozen" if p.status == "frozen" else "param"
        self.graph.nodes[key] = OpNode(key, "", kind, p.name, status=p.status, aliases=list(p.aliases),
                                       order=(_first_use(self.report, serial), -1))
        for cut in into:
            self.graph.edges[(key, cut)] = "off"
        return key

    def _join(self, key: str, serials, how: str) -> None:
        """Edges from `key` to the first drawn nodes that the values `serials` flow into (through ops torch's
        graph has no node for: those that needed no gradient)."""
        flow = self.flow
        assert flow is not None
        seen, todo = set(serials), list(serials)
        while todo:
            for i in flow.consumers.get(todo.pop(), ()):
                if i in self.op_key:
                    self.graph.edges[(key, self.op_key[i])] = how
                    continue
                for o in flow.ops[i].outs:
                    if o not in seen and len(seen) < 10_000:
                        seen.add(o)
                        todo.append(o)


def _module_at(node: OpNode, depth: int) -> str | None:
    """The module a node is drawn in when the modules at `depth` are drawn whole (None: drawn itself)."""
    path = node.name.rsplit(".", 1)[0] if node.kind in ("param", "frozen") and "." in node.name else \
        "" if node.kind in ("param", "frozen") else node.name
    parts = path.split(".") if path else []
    return ".".join(parts[:depth]) if len(parts) >= depth else None


def _collapse(graph: OpGraph, depth: int) -> None:
    into: dict[str, str] = {}
    keys: dict[str, str] = {}  # module name -> its node's key (m0, m1, ...: DOT and Mermaid ids)
    for node in list(graph.nodes.values()):
        module = _module_at(node, depth) if node.key != graph.root and node.kind != "cut" else None
        if module is None:
            continue
        key = into[node.key] = keys.setdefault(module, f"m{len(keys)}")
        whole = graph.nodes.get(key) or OpNode(key, "", "module", module, order=node.order)
        whole.ops += node.kind == "op"
        whole.params += node.kind != "op"
        whole.order = min(whole.order, node.order)
        if node.status is not None and (whole.status is None or WORST.index(node.status) < WORST.index(whole.status)):
            whole.status = node.status
        graph.nodes[key] = whole
        del graph.nodes[node.key]
    _remap(graph, into)


def _remap(graph: OpGraph, into: dict[str, str], drop=lambda a, b: False) -> None:
    edges: dict[tuple[str, str], str] = {}
    for (a, b), how in graph.edges.items():
        a2, b2 = into.get(a, a), into.get(b, b)
        if a2 != b2 and not drop(a, b):
            edges[(a2, b2)] = how if edges.get((a2, b2), "flow") == "flow" else edges[(a2, b2)]
    graph.edges = edges


def _across(block_of: dict[str, int], a: str, b: str) -> bool:
    """An edge from one folded block into another (h.3 -> h.4): drawn as the fold itself."""
    return a in block_of and b in block_of and block_of[a] != block_of[b]


_NUMBERED = r"^(.*?)\.(\d+)(?:\.|$)"


def _blocks(graph: OpGraph) -> dict[str, dict[int, list[OpNode]]]:
    """prefix (`transformer.h`) -> block number -> its nodes."""
    found: dict[str, dict[int, list[OpNode]]] = defaultdict(lambda: defaultdict(list))
    for node in graph.nodes.values():
        m = re.match(_NUMBERED, node.name)
        if m and node.key != graph.root:
            found[m.group(1)][int(m.group(2))].append(node)
    return found


def _fold(graph: OpGraph) -> None:
    """Draw blocks of the same ops once: block k's nodes are drawn as block 0's; the edges between blocks go."""
    for prefix, blocks in _blocks(graph).items():
        if len(blocks) < 2:
            continue
        numbers = sorted(blocks)
        rows = {b: sorted(blocks[b], key=lambda n: (n.kind != "op", n.order if n.kind == "op" else n.name))
                for b in numbers}
        first = f"{prefix}.{numbers[0]}"
        shapes = {b: [(n.fn, n.kind, n.name[len(f'{prefix}.{b}'):]) for n in rows[b]] for b in numbers}
        if any(shapes[b] != shapes[numbers[0]] for b in numbers):
            continue  # blocks that differ are all drawn
        graph.folds.append(Fold(prefix, first, f"{first}–{prefix.rsplit('.', 1)[-1]}.{numbers[-1]} "
                                               f"×{len(numbers)}", len(numbers)))
        block_of = {n.key: b for b in numbers for n in rows[b]}
        for n in rows[numbers[0]]:
            n.fold = len(graph.folds) - 1
        into = {n.key: rep.key for b in numbers[1:] for n, rep in zip(rows[b], rows[numbers[0]])}
        _remap(graph, into, functools.partial(_across, block_of))
        for key in into:
            del graph.nodes[key]
