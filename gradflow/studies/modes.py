"""compare --modes: one program with every cut rewritten to each mechanism in turn.

Mechanisms: detach, no_grad, inference_mode, no cut at all, and
`requires_grad = false` on the leaves the cuts cut off (only expressible when
those leaves reach the output through no other path). Each is a rewritten
Graph; the program text shown per row is only for reading.
"""
from __future__ import annotations

from gradflow.engine.prepare import prepare
from gradflow.errors import Span, ValueInputError
from gradflow.language.compile import compile_program
from gradflow.language.edits import Edit, ancestors, cut_nodes, off_flags
from gradflow.language.graph import Graph
from gradflow.language.ops import CUT_OPS
from gradflow.studies.rows import Comparison, Row
from gradflow.studies.whatif import run_graph

MECHANISMS = (*CUT_OPS, "no cut", "requires_grad = false")
NOTES = {
    "detach": "inner nodes are recorded (require grad); detach() hands on their value with no path back",
    "no_grad": "nothing inside is recorded, so inner nodes do not require grad",
    "inference_mode": "like no_grad, and results are inference tensors: fine unless an op saves one for backward",
    "inference_tensor": "*, /, ^ and most functions save their inputs to compute their own derivative, so an "
                        "inference tensor as their input fails; + and - save nothing, so there it works",
    "no cut": "the true derivative: gradient flows through every path",
    "requires_grad = false": "the cut-off leaves never require grad, so nothing computed from them does",
}


_PREC = {"add": 1, "sub": 1, "mul": 2, "div": 2, "matmul": 2, "neg": 3, "pow": 4}


def _needs_parens(graph: Graph, cut) -> bool:
    """Would `e` need parentheses where `detach(e)` stands (so the shown text parses the same)?"""
    inner = _PREC.get(graph.nodes[cut.args[0]].op, 9)
    parents = [n for n in graph.nodes if cut.id in n.args and n.span.start <= cut.span.start
               and cut.span.end <= n.span.end and n.op in _PREC]
    if not parents:
        return False
    parent = parents[0]
    outer = _PREC[parent.op]
    right = parent.args.index(cut.id) == 1
    return inner < outer or (inner == outer and (right or parent.op == "pow"))


def _display(graph: Graph, mechanism: str, flagged: list[str]) -> str:
    """The program as it would be written with this mechanism (for reading only).

    Each cut `op(e)` is two disjoint edits, its head `op(` and its closing `)`, so nested cuts compose.
    """
    edits = []
    for c in cut_nodes(graph):
        inner = _operand(graph, c)
        head, tail = (c.span.start, inner.start), (inner.end, c.span.end)
        rebind = f"{graph.source[inner.start:inner.end]} = " if dict(c.params).get("inplace") else ""  # y.detach_()
        if mechanism in CUT_OPS:
            edits += [(head, rebind + mechanism + "("), (tail, ")")]
        elif rebind:
            edits += [(head, rebind), (tail, "")]
        else:
            keep = _needs_parens(graph, c)
            edits += [(head, "(" if keep else ""), (tail, ")" if keep else "")]
    text = graph.source
    for (start, end), new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return "".join(f"{leaf}.requires_grad = false; " for leaf in flagged) + text


def _operand(graph: Graph, cut) -> Span:
    """Where the cut's operand is written: inside detach(e), (e).detach(), y.detach_(); without the parentheses
    of (e).detach()."""
    inner = cut.inner or Span(cut.span.start + len(cut.op) + 1, cut.span.end - 1)
    arg = graph.nodes[cut.args[0]].span
    return arg if inner.start <= arg.start and arg.end <= inner.end else inner


def _inner(graph: Graph, cut_spans: list, result) -> dict[str, bool]:
    inside = [n for n in graph.nodes if n.op != "var" and n.op not in CUT_OPS
              and any(s.start <= n.span.start and n.span.end <= s.end for s in cut_spans)]
    return {n.text: result.nodes[n.id].requires_grad for n in inside}


def _cut_off(graph: Graph, leaves: list[str]) -> list[str]:
    """Chosen leaves that the cuts' arguments are computed from (and that are not already set false)."""
    under = set().union(*(ancestors(graph, c.args[0]) for c in cut_nodes(graph)))
    off = {f.node for f in off_flags(graph)}
    return [leaf for leaf in leaves if graph.inputs[leaf] in under and graph.inputs[leaf] not in off]


def _edit(graph: Graph, mechanism: str, flagged: list[str]) -> Graph:
    edit = Edit(graph)
    for c in cut_nodes(graph):
        if mechanism in CUT_OPS:
            edit.set_cut(c.id, mechanism)
        else:
            edit.remove_cut(c.id)
    for leaf in flagged:
        edit.flag_off(leaf)
    return edit.graph()


def _run(graph: Graph, mechanism: str, flagged: list[str], ctx: tuple) -> Row:
    row = Row(mechanism, _display(graph, mechanism, flagged), note=NOTES[mechanism])
    g2 = _edit(graph, mechanism, flagged)
    result, row.error = run_graph(g2, *ctx)
    if row.error is not None and row.error.kind == "inference_tensor":
        row.note = NOTES["inference_tensor"]
    row.grads = {leaf: None for leaf in ctx[1]}
    if result is not None:
        row.fill(result)
        row.inner = _inner(g2, [c.span for c in cut_nodes(graph)], result)
        row.note = "; ".join([row.note] + [w.message for w in result.warnings])
    return row


def _not_expressible(graph: Graph, flagged: list[str], detached: Row) -> Row | None:
    live = [leaf for leaf in flagged if detached.grads.get(leaf) is not None]
    if not flagged or live:
        why = (f"not expressible: {', '.join(live)} also reach{'es' if len(live) == 1 else ''} the output "
               "outside the cuts, so requires_grad = false would cut those paths too") if live else \
              "not expressible: the cuts cut off no chosen leaf (their inputs never require grad)"
        row = Row("requires_grad = false", _display(graph, "no cut", flagged), note=why, skipped=True)
        row.grads = {leaf: None for leaf in detached.grads}
        return row
    return None


def compare_modes(source: str, values: dict, wrt, dtype: str, device: str, strict: bool = False) -> Comparison:
    graph = compile_program(source)
    if not cut_nodes(graph):
        blocks = any(n.block for n in graph.nodes)
        raise ValueInputError("no_cut", "--modes rewrites the program's detach/no_grad/inference_mode cuts, "
                              "and it has none" + (" (it does not rewrite `with` blocks)" if blocks else ""),
                              hint=("write the cut as no_grad(expr) or (expr).detach() instead of a block; "
                                    if blocks else "") + 'e.g. gradflow compare --modes "(x*y1 - detach(x*y2))^2" '
                              "--x 1 --y1 2 --y2 7")
    graph, vals, leaves = prepare(graph, values, wrt, dtype=dtype, strict=strict)
    from gradflow.engine.explain import unused_warnings

    ctx = (vals, leaves, dtype, device)
    rows = [_run(graph, m, [], ctx) for m in MECHANISMS[:4]]
    flagged = _cut_off(graph, leaves)
    rows.append(_not_expressible(graph, flagged, rows[0]) or _run(graph, MECHANISMS[4], flagged, ctx))
    return Comparison(rows, leaves, modes=True, warnings=unused_warnings(values, graph.inputs))
