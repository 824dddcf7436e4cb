"""torch's autograd graph of a traced forward (report/op_graph.py) as Graphviz DOT or Mermaid text.

Drawn as data flows, inputs at the top and the loss at the bottom. A parameter is filled by its status (the
module picture's colours: green live, grey frozen, red cut, yellow zero/unused); a frozen parameter, which has
no node in torch's graph, is grey with a grey dashed edge; a cut is a red octagon at its line with a red dashed
edge; a folded block is a dashed box named `h.0–h.11 ×12`.
"""
from __future__ import annotations

from gradflow.display import dot_string, mermaid_text
from gradflow.report.module_picture import FROZEN_LINE, FROZEN_TEXT, STATUS_FILL
from gradflow.report.op_graph import OpGraph, OpNode

RED, GREY, GREY_TEXT, BLUE = "#c62828", FROZEN_LINE, FROZEN_TEXT, "#1565c0"
LOSS_FILL, CUT_FILL, OP_FILL = "#d0e0ff", "#ff9a9a", "#ffffff"


def label(graph: OpGraph, node: OpNode) -> str:
    """The node's text: what torch made it as, then the user's names for it."""
    name = graph.shown_name(node)
    where = f"{node.variable} = …  {node.line}" if node.variable else node.line
    if node.kind == "cut":
        return "\n".join(x for x in (f"✂ {node.fn}{_under(node)}", name, where) if x)
    if node.kind in ("param", "frozen"):
        tied = "".join(f"\n= {a} (tied)" for a in node.aliases)
        return f"{name}{tied}\n{node.status}"
    if node.kind == "module":
        counts = [f"{n} {what}{'s' * (n != 1)}" for n, what in ((node.ops, "op"), (node.params, "param")) if n]
        return f"{name}\n" + ", ".join(counts + ([node.status] if node.status else []))
    text = "\n".join(x for x in (node.fn, name, where) if x)
    return "loss\n" + text if node.key == graph.root else text


def _under(node: OpNode) -> str:
    """What cut an op that is no cut itself: `✂ linear under no_grad`, `✂ tensor (rewrap)`."""
    if node.how in ("no_grad", "inference_mode"):
        return f" under {node.how}"
    return f" ({node.how})" if node.how and node.how != node.fn else ""


def _fill(graph: OpGraph, node: OpNode) -> str:
    if node.key == graph.root:
        return LOSS_FILL
    if node.kind == "cut":
        return CUT_FILL
    return STATUS_FILL.get(node.status or "", OP_FILL) if node.kind != "op" else OP_FILL


def _dot_node(graph: OpGraph, node: OpNode) -> str:
    shape = "octagon" if node.kind == "cut" else "ellipse" if node.key == graph.root else "box"
    grey = f', color="{GREY}", fontcolor="{GREY_TEXT}"' if node.kind == "frozen" or node.status == "frozen" else ""
    red = f', color="{RED}"' if node.kind == "cut" else ""
    return (f'  {node.key} [label={dot_string(label(graph, node))}, shape={shape}, '
            f'fillcolor="{_fill(graph, node)}"{grey}{red}];')


_DOT_EDGE = {"flow": "", "cut": f' [style=dashed, color="{RED}", label="✂ cut", fontcolor="{RED}"]',
             "off": f' [style=dashed, color="{GREY}"]'}


def to_dot(graph: OpGraph) -> str:
    lines = ["digraph autograd {", "  rankdir=TB;", f"  label={dot_string(graph.title)};",
             '  node [style="rounded,filled", fontname="Helvetica", fontsize=11];',
             '  edge [fontname="Helvetica", fontsize=9];']
    for i, fold in enumerate(graph.folds):
        lines += [f"  subgraph cluster_fold{i} {{", f"    label={dot_string(fold.label)};",
                  f'    style="dashed,rounded"; color="{BLUE}"; fontcolor="{BLUE}";']
        lines += ["  " + _dot_node(graph, n) for n in graph.nodes.values() if n.fold == i]
        lines.append("  }")
    lines += [_dot_node(graph, n) for n in graph.nodes.values() if n.fold is None]
    lines += [f"  {a} -> {b}{_DOT_EDGE[how]};" for (a, b), how in graph.edges.items()]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid_class(graph: OpGraph, node: OpNode) -> str:
    if node.key == graph.root:
        return "loss"
    if node.kind == "cut":
        return "cutop"  # (a parameter's status `cut` is a class of its own: red fill, a box)
    return node.status or "op" if node.kind != "op" else "op"


def to_mermaid(graph: OpGraph) -> str:
    """The same picture for GitHub; frozen parameters greyed as in DOT (classDef)."""
    lines = ["flowchart TB"]
    shapes = {"cutop": ('{{"', '"}}'), "loss": ('(["', '"])')}
    for i, fold in enumerate(graph.folds):
        lines.append(f'  subgraph fold{i}["{mermaid_text(fold.label)}"]')
        lines += ["  " + _m_node(graph, n, shapes) for n in graph.nodes.values() if n.fold == i]
        lines.append("  end")
    lines += [_m_node(graph, n, shapes) for n in graph.nodes.values() if n.fold is None]
    arrows = {"flow": "-->", "cut": '-.->|"✂ cut"|', "off": "-.->"}
    lines += [f"  {a} {arrows[how]} {b}" for (a, b), how in graph.edges.items()]
    lines += _m_classes(graph)
    cut_edges = [str(i) for i, how in enumerate(graph.edges.values()) if how == "cut"]
    if cut_edges:
        lines.append(f"  linkStyle {','.join(cut_edges)} stroke:{RED},color:{RED}")
    return "\n".join(lines) + "\n"


def _m_node(graph: OpGraph, node: OpNode, shapes: dict) -> str:
    left, right = shapes.get(_mermaid_class(graph, node), ('["', '"]'))
    return f"  {node.key}{left}{mermaid_text(label(graph, node))}{right}"


def _m_classes(graph: OpGraph) -> list[str]:
    style = {"loss": f"fill:{LOSS_FILL},stroke:#555", "cutop": f"fill:{CUT_FILL},stroke:{RED}",
             "op": f"fill:{OP_FILL},stroke:#555",
             "frozen": f"fill:{STATUS_FILL['frozen']},stroke:{GREY},color:{GREY_TEXT}"}
    members: dict[str, list[str]] = {}
    for node in graph.nodes.values():
        members.setdefault(_mermaid_class(graph, node), []).append(node.key)
    out = []
    for cls, keys in members.items():
        out.append(f"  classDef {cls} {style.get(cls) or f'fill:{STATUS_FILL.get(cls, OP_FILL)},stroke:#555'}")
        out.append(f"  class {','.join(keys)} {cls}")
    return out
