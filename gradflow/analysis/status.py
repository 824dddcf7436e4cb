"""Reasons: which nodes are live, cut or off, and why a chosen leaf got no gradient.

Works on the lowered graph plus the facts the engine measured (requires_grad,
grads, cut edges); imports no torch itself.
"""
from __future__ import annotations

from gradflow.analysis.explanation import Explanation, Warning
from gradflow.language.graph import FlagStep, Graph
from gradflow.language.ops import CLASS_TARGETS, role


def depends_on(graph: Graph, leaves: list[str]) -> list[int]:
    """Per node, a bitmask of the chosen leaves it is computed from (ignoring cuts)."""
    bits = {graph.inputs[name]: 1 << i for i, name in enumerate(leaves)}
    deps: list[int] = []
    for n in graph.nodes:
        mask = bits.get(n.id, 0)
        for a in n.args:
            mask |= deps[a]
        deps.append(mask)
    return deps


def reaches_output(graph: Graph) -> list[bool]:
    """Per node: is there any path from it to the output?"""
    reach = [False] * len(graph.nodes)
    reach[graph.output] = True
    for n in reversed(graph.nodes):
        if reach[n.id]:
            for a in n.args:
                reach[a] = True
    return reach


def _cutter(graph: Graph, node_id: int) -> str:
    """The label of the construct that cut edges into this node."""
    n = graph.nodes[node_id]
    if role(n.op) == "cut":
        return n.label
    if n.region is None:
        return n.block or n.label  # the `with` block it is computed in, or the node itself
    return graph.nodes[n.region].label


def _downstream_cuts(result: Explanation, graph: Graph, reach: list[bool]) -> list[list[str]]:
    """Per node: the cut constructs on its paths to the output."""
    out: list[list[str]] = [[] for _ in graph.nodes]
    for e in reversed(result.edges):
        if not reach[e.dst]:
            continue
        found = [_cutter(graph, e.dst)] if e.cut else out[e.dst]
        out[e.src] += [c for c in found if c not in out[e.src]]
    return out


def _out(result: Explanation) -> str:
    """How messages call the output: its assigned name, else L."""
    return result.output.name if result.output.name != result.output.expr else "L"


def _status(result: Explanation, graph: Graph, deps: list[int], reach: list[bool]):
    down = _downstream_cuts(result, graph, reach)
    cut_into = {e.dst for e in result.edges if e.cut}
    for r in result.nodes:
        if r.id in cut_into:
            r.cut_by = _cutter(graph, r.id)
        elif not r.requires_grad:
            ups = [c for a in r.args if (c := result.nodes[a].cut_by)]
            r.cut_by = " and ".join(dict.fromkeys(ups)) or None
        if r.requires_grad and r.grad is not None:
            r.status = "live"
        elif r.requires_grad:
            r.status = "unused" if not reach[r.id] else ("cut" if down[r.id] else "unreached")
            if down[r.id] and r.status == "cut":
                r.cut_by = " and ".join(down[r.id])
        else:
            r.status = "cut" if deps[r.id] and r.cut_by else "off"


def _why(result: Explanation, graph: Graph, leaf: str, i: int, deps, reach, flags) -> str:
    nid = graph.inputs[leaf]
    off = [f for f in flags if f.node == nid and not f.value]
    if off:
        return f"{leaf}.requires_grad was set to false by `{off[-1].text}`"
    if not reach[nid]:
        return f"{leaf} is not used in computing {_out(result)}"
    cuts = []
    for e in result.edges:
        if e.cut and deps[e.src] >> i & 1 and reach[e.dst]:
            label = _cutter(graph, e.dst)
            if label not in cuts:
                cuts.append(label)
    if cuts:
        return f"every path from {leaf} to {_out(result)} is cut by " + " and ".join(cuts)
    indices = _class_indices(result, deps, i)
    if indices:
        return (f"{leaf} is the class indices of {' and '.join(indices)}: whole numbers, taken as integers, "
                "carry no gradient")
    flat = _no_gradient_ops(result, deps, reach, i)
    if flat:
        integer = any(result.nodes[e.dst].op in ("argmax", "argmin") for e in result.edges
                      if result.nodes[e.dst].name in flat)
        return (f"every path from {leaf} to {_out(result)} goes through {' and '.join(flat)}, which carr"
                f"{'ies' if len(flat) == 1 else 'y'} no gradient (" + ("argmax and argmin give integer indices, as "
                "in torch" if integer else "a comparison gives a boolean tensor") + ")")
    if result.error is not None:
        return f"backward did not run: {result.error.message}"
    return f"no gradient reached {leaf}"


def _class_indices(result: Explanation, deps, i: int) -> list[str]:
    """cross_entropy and nll_loss nodes whose target (from leaf i) holds class indices: one dim fewer than the input."""
    nodes = result.nodes
    return [nodes[e.dst].name for e in result.edges if e.pos == 1 and nodes[e.dst].op in CLASS_TARGETS
            and deps[e.src] >> i & 1 and nodes[e.src].value.dim() == nodes[nodes[e.dst].args[0]].value.dim() - 1]


def _no_gradient_ops(result: Explanation, deps, reach: list[bool], i: int) -> list[str]:
    """Nodes on the leaf's paths whose result does not require grad although an input does, with no cut:
    ops with no derivative (comparisons)."""
    nodes = result.nodes
    return list(dict.fromkeys(nodes[e.dst].name for e in result.edges if not e.cut and deps[e.src] >> i & 1
                              and reach[e.dst] and nodes[e.src].requires_grad and not nodes[e.dst].requires_grad))


def tracked_from(result: Explanation, graph: Graph) -> list[int]:
    """Per node, a bitmask of the chosen leaves reaching it along tracked (uncut) edges."""
    bits = {graph.inputs[name]: 1 << i for i, name in enumerate(result.wrt)}
    deps = [bits.get(r.id, 0) if r.requires_grad else 0 for r in result.nodes]
    for e in result.edges:  # in evaluation order: a source's mask is final before it is used
        if not e.cut and result.nodes[e.src].requires_grad:
            deps[e.dst] |= deps[e.src]
    return deps


def _flag_warnings(result: Explanation, graph: Graph, flags: list[FlagStep]):
    if not flags:
        return
    deps = tracked_from(result, graph)
    for f in flags:
        r = result.nodes[f.node]
        if f.value and not deps[f.node] and result.wrt and r.op != "var":
            result.warnings.append(Warning(
                "requires_grad_no_path", r.name,
                f"`{f.text}` makes backward run, but {r.name} is not computed from any chosen leaf "
                f"({', '.join(result.wrt)}) through a tracked path, so "
                + ("no chosen leaf receives a gradient" if all(g is None for g in result.grads.values())
                   else f"no gradient reaches them through {r.name}")))


def annotate(result: Explanation, graph: Graph, flags: list[FlagStep]):
    """Fill node status/cut_by, per-leaf reasons and flag warnings; enrich a no-gradient error."""
    deps = depends_on(graph, result.wrt)
    reach = reaches_output(graph)
    _status(result, graph, deps, reach)
    for i, leaf in enumerate(result.wrt):
        if result.grads[leaf] is None:
            result.why[leaf] = _why(result, graph, leaf, i, deps, reach, flags)
    _flag_warnings(result, graph, flags)
    if result.error is not None and result.error.kind == "no_gradient":
        reasons = "; ".join(result.why.values()) or "no chosen leaf requires grad"
        result.error.message += f". Why: {reasons}."
        result.error.hint = ("remove the cut on the path (detach, no_grad, inference_mode or requires_grad = false), "
                             "or choose other leaves with --wrt")
