"""The autograd graph as torch records it, named from the expression, with flows and cuts.

`picture()` re-runs the program without the engine's measuring views (engine.forward), walks
torch's graph from the output (grad_fn -> next_functions, AccumulateGrad for leaves)
and maps every torch node back to the program node that made it (torch's own inner
steps of one op, like matmul's Unsqueeze and Mm, are folded into that op). What torch does
not record -- values that carry no gradient, detach points, no_grad/inference_mode
regions -- comes from the program's Graph and the engine's cut flags; every edge
carries the flow the engine measured. Renderers (render/graph_text.py) only read a Picture.
An engine helper: imports torch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from gradflow.analysis.explanation import Explanation, Status
from gradflow.analysis.status import reaches_output
from gradflow.engine.forward import forward, make_leaves
from gradflow.language.graph import Graph
from gradflow.language.ops import is_cut, is_region
from gradflow.values.tensors import resolve_device, resolve_dtype
from gradflow.values.text import format_tensor


@dataclass
class PNode:
    key: str  # "n<id>": program node id
    label: str  # the name or expression text
    op: str
    fn: str | None  # torch's node: MulBackward0, AccumulateGrad, ...; None if torch recorded none
    requires_grad: bool
    in_torch: bool  # reached by walking torch's graph from the output
    status: Status = "off"  # as in the table
    value: str = ""
    grad: str | None = None
    cluster: str | None = None  # key of the no_grad/inference_mode box it sits in
    inner: list[str] = field(default_factory=list)  # torch's own steps inside this op (matmul: Mm, Unsqueeze)


# in torch's graph, gradient flows | cut | the same tensor (a region) | no grad | in torch's graph, but nothing
# flows along it (its end is cut off from the output further on: x -> x*y2 in `x*y1 - detach(x*y2)`)
EdgeKind = Literal["torch", "cut", "same", "off", "idle"]


@dataclass
class PEdge:
    src: str
    dst: str
    pos: int
    kind: EdgeKind
    flow: str | None = None  # the gradient carried back along it


@dataclass
class Cluster:
    key: str
    label: str  # the region's expression, e.g. no_grad(x*y2)
    mode: str


@dataclass
class Picture:
    source: str
    output: str
    nodes: list[PNode] = field(default_factory=list)
    edges: list[PEdge] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"output": self.output, "nodes": [asdict(n) for n in self.nodes],
                "edges": [asdict(e) for e in self.edges], "clusters": [asdict(c) for c in self.clusters]}


def _walk(out):
    """Torch's graph from `out`: the nodes reached and the (child fn, parent fn, input pos) edges."""
    seen, edges = set(), []
    stack = [out.grad_fn] if out.grad_fn is not None else []
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        for pos, (child, _) in enumerate(fn.next_functions):
            if child is not None:
                edges.append((child, fn, pos))
                stack.append(child)
    return seen, edges


def _owners(graph: Graph, t: dict) -> dict:
    """torch node -> program node id (the first node holding that tensor; leaves via AccumulateGrad)."""
    owner: dict = {}
    for n in graph.nodes:
        key = t[n.id].grad_fn if t[n.id].grad_fn is not None else ("leaf", id(t[n.id]))
        owner.setdefault(key, n.id)
    return owner


def _resolve(graph: Graph, nid: int) -> int:
    """Through identity wrappers (no_grad(x) on an outside x returns x itself)."""
    while is_region(graph.nodes[nid].op) and graph.nodes[graph.nodes[nid].args[0]].region != nid:
        nid = graph.nodes[nid].args[0]
    return nid


def torch_graph(graph: Graph, values: dict, wrt: list[str], dtype, device) -> tuple[dict, dict, set]:
    """Walk torch's graph from the output of a run without measuring views. Returns (program node key -> torch
    class name, key -> torch's own inner steps no program node made (e.g. matmul's Unsqueeze/Mm),
    {(src key, dst key, input position)} between program nodes)."""
    t = forward(graph, make_leaves(graph, values, wrt, dtype, device), dtype, device)
    owner = _owners(graph, t)
    seen, raw = _walk(t[graph.output])

    def key(fn) -> str | None:
        k = ("leaf", id(fn.variable)) if type(fn).__name__ == "AccumulateGrad" else fn
        return f"n{owner[k]}" if k in owner else None

    absorbed: dict = {}
    inner: dict[str, list[str]] = {}
    for c, p, _ in raw:  # discovery order: a parent is placed before its children
        if key(c) is None and c not in absorbed:
            absorbed[c] = key(p) or absorbed[p]
            inner.setdefault(absorbed[c], []).append(type(c).__name__)
    edges = {(key(c) or absorbed[c], key(p) or absorbed[p], pos) for c, p, pos in raw}
    return {key(fn): type(fn).__name__ for fn in seen if key(fn)}, inner, {e for e in edges if e[0] != e[1]}


def picture(result: Explanation) -> Picture:
    """Build the picture for an explain() result (same program, values, leaves, dtype, device)."""
    graph = result.graph
    fns, inner, tedges = torch_graph(graph, result.inputs, result.wrt, resolve_dtype(result.dtype),
                                     resolve_device(result.device))
    pic = Picture(result.source, f"n{graph.output}")
    reach = reaches_output(graph)
    _add_nodes(pic, graph, result, fns, reach)
    for n in pic.nodes:
        n.inner = inner.get(n.key, [])
    _add_edges(pic, graph, result, tedges, reach)
    return pic


def _add_nodes(pic: Picture, graph: Graph, result: Explanation, fns: dict, reach: list[bool]):
    ids = any(n.abbreviated for n in graph.nodes)  # a name refers to others as %ID: every label shows its own
    for n in graph.nodes:
        if not reach[n.id]:
            continue
        r = result.nodes[n.id]
        fn = fns.get(f"n{n.id}") if not is_region(n.op) else None
        if fn is None and r.requires_grad and r.is_leaf and n.op == "var":
            fn = "AccumulateGrad"
        elif fn is None and r.grad_fn and not is_cut(n.op):
            fn = r.grad_fn  # recorded by torch, but cut off from the output
        region = n.id if is_region(n.op) else n.region
        label = f"%{n.id} = {r.name}" if ids else r.name
        pic.nodes.append(PNode(f"n{n.id}", label, n.op, fn, r.requires_grad, f"n{n.id}" in fns, r.status,
                               format_tensor(r.value), None if r.grad is None else format_tensor(r.grad),
                               None if region is None else f"r{region}"))
        if is_region(n.op):
            pic.clusters.append(Cluster(f"r{n.id}", n.text, n.op))


def _add_edges(pic: Picture, graph: Graph, result: Explanation, tedges: set, reach: list[bool]):
    for e in result.edges:
        if not reach[e.dst]:
            continue
        dst = graph.nodes[e.dst]
        kind: EdgeKind
        if e.cut:
            kind = "cut"
        elif is_region(dst.op) and result.nodes[e.src].requires_grad:
            kind = "same"
        else:
            walked = (f"n{_resolve(graph, e.src)}", f"n{e.dst}", e.pos) in tedges
            recorded = result.nodes[e.src].requires_grad and result.nodes[e.dst].requires_grad
            kind = ("torch" if result.nodes[e.dst].status == "live" else "idle") if walked or recorded else "off"
        flow = None if e.flow is None else format_tensor(e.flow)
        pic.edges.append(PEdge(f"n{e.src}", f"n{e.dst}", e.pos, kind, flow))
