"""A Picture as Graphviz DOT, Mermaid or a rich Tree.

DOT and Mermaid are plain text for stdout (never through rich). Style: nodes that
require grad are green and bold, the rest grey; a cut is a red dashed edge; a
no_grad / inference_mode region is a dashed box; edges carry their gradient flow.
"""
from __future__ import annotations

import sys

from rich.text import Text
from rich.tree import Tree

from gradflow.display import dot_string, mermaid_text
from gradflow.language.ops import is_cut, is_region
from gradflow.studies.torch_graph import Picture, PNode

GREEN, GREY, RED = "#2e7d32", "#9e9e9e", "#c62828"


def _kind(n: PNode) -> str:
    if n.fn:
        return n.fn + (f" (+ {', '.join(n.inner)})" if n.inner else "")
    if is_region(n.op) and n.requires_grad:
        return f"{n.op}: passes its argument through, nothing cut"
    return f"{n.op}: cut" if is_cut(n.op) else "no grad"


def _sub(n: PNode) -> str:
    return f"{_kind(n)}\nvalue {n.value}" + (f"  grad {n.grad}" if n.grad is not None else "")


def _edge_label(e) -> str:
    if e.kind == "cut":
        return "✂ cut"
    if e.kind == "same":
        return f"same tensor {e.flow}" if e.flow is not None else "same tensor"
    return e.flow or ""


# ---- DOT ----------------------------------------------------------------------------

def _dot_node(n: PNode) -> str:
    border = RED if n.status == "cut" else (GREEN if n.requires_grad else GREY)
    if n.requires_grad:
        style = f'style="rounded,filled,bold", color="{border}", fillcolor="#e8f5e9", penwidth=2'
    else:
        style = f'style="rounded,filled", color="{border}", fillcolor="#f5f5f5", fontcolor="#616161"'
    return f"  {n.key} [label={dot_string(n.label + chr(10) + _sub(n))}, {style}];"


def _dot_edge(e) -> str:
    attrs = [f"label={dot_string(_edge_label(e))}"]
    if e.kind == "cut":
        attrs += ["style=dashed", f'color="{RED}"', f'fontcolor="{RED}"']
    elif e.kind in ("off", "same", "idle"):  # grey: no gradient flows along it
        attrs += [f'color="{GREY}"', f'fontcolor="{GREY}"'] + (["style=dotted"] if e.kind == "same" else [])
    else:
        attrs += [f'color="{GREEN}"', "penwidth=1.5"]
    return f"  {e.src} -> {e.dst} [{', '.join(attrs)}];"


def to_dot(pic: Picture) -> str:
    lines = ["digraph gradflow {", "  rankdir=BT;", '  fontname="Helvetica";',
             f"  label={dot_string(pic.source.strip())};", '  node [shape=box, fontname="Helvetica"];',
             '  edge [fontname="Helvetica", fontsize=10];']
    boxed = {c.key: [n for n in pic.nodes if n.cluster == c.key] for c in pic.clusters}
    for c in pic.clusters:
        lines += [f"  subgraph cluster_{c.key} {{", f"    label={dot_string(c.label)};",
                  f'    style="dashed,rounded"; color="{RED}"; fontcolor="{RED}";']
        lines += ["  " + _dot_node(n) for n in boxed[c.key]]
        lines.append("  }")
    lines += [_dot_node(n) for n in pic.nodes if n.cluster is None]
    lines += [_dot_edge(e) for e in pic.edges]
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---- Mermaid ------------------------------------------------------------------------

def _m(s: str) -> str:
    return '"' + mermaid_text(s) + '"'


def _m_edge(e) -> str:
    label = _edge_label(e)
    if e.kind == "cut":
        return f"  {e.src} -.->|{_m(label)}| {e.dst}"
    return f"  {e.src} -->|{_m(label)}| {e.dst}" if label else f"  {e.src} --> {e.dst}"


def to_mermaid(pic: Picture) -> str:
    lines = ["flowchart BT"]
    for c in pic.clusters:
        lines.append(f"  subgraph {c.key}[{_m(c.label)}]")
        lines += [f"    {n.key}[{_m(n.label + chr(10) + _sub(n))}]" for n in pic.nodes if n.cluster == c.key]
        lines.append("  end")
    lines += [f"  {n.key}[{_m(n.label + chr(10) + _sub(n))}]" for n in pic.nodes if n.cluster is None]
    lines += [_m_edge(e) for e in pic.edges]
    lines += [f"  classDef grad fill:#e8f5e9,stroke:{GREEN},stroke-width:2px",
              f"  classDef nograd fill:#f5f5f5,stroke:{GREY},color:#616161"]
    for cls, keep in (("grad", True), ("nograd", False)):
        keys = [n.key for n in pic.nodes if n.requires_grad == keep]
        if keys:
            lines.append(f"  class {','.join(keys)} {cls}")
    cuts = [i for i, e in enumerate(pic.edges) if e.kind == "cut"]
    if cuts:
        lines.append(f"  linkStyle {','.join(map(str, cuts))} stroke:{RED},color:{RED}")
    for c in pic.clusters:
        lines.append(f"  style {c.key} stroke:{RED},stroke-dasharray:5 5")
    return "\n".join(lines) + "\n"


# ---- rich Tree ----------------------------------------------------------------------

def _tree_label(n: PNode, edge, repeat: bool) -> Text:
    label = Text(n.label, style="bold green" if n.requires_grad else "dim")
    label.append(f"  {_kind(n)}", style="cyan" if n.fn else "dim")
    label.append(f"  value {n.value}")
    if n.grad is not None:
        label.append(f"  grad {n.grad}", style="green")
    if edge is not None and edge.kind == "cut":
        label.append("  ✂ cut here", style="bold red")
    elif edge is not None and edge.flow is not None:
        label.append(f"  ↑ flow {edge.flow}", style="yellow")
    if n.cluster is not None and not is_region(n.op):
        label.append("  (inside a no-grad region)", style="red")
    if repeat:
        label.append("  ↺ shared, shown above", style="dim italic")
    return label


def to_tree(pic: Picture) -> Tree:
    """The output at the root, each node's inputs below it; a shared subexpression is expanded once."""
    nodes = {n.key: n for n in pic.nodes}
    into: dict[str, list] = {}
    for e in sorted(pic.edges, key=lambda e: e.pos):
        into.setdefault(e.dst, []).append(e)
    root = Tree(_tree_label(nodes[pic.output], None, False), guide_style="dim")
    expanded = {pic.output}
    stack = [(root, e) for e in reversed(into.get(pic.output, []))]
    while stack:  # pre-order, so "shown above" is true on the page
        branch, e = stack.pop()
        repeat = e.src in expanded and bool(into.get(e.src))
        child = branch.add(_tree_label(nodes[e.src], e, repeat))
        if not repeat:
            expanded.add(e.src)
            stack += [(child, inner) for inner in reversed(into.get(e.src, []))]
    return root


def print_picture(pic: Picture, fmt: str, out):
    """tree -> through the rich console `out`; dot / mermaid -> plain stdout."""
    if fmt == "tree":
        out.print(to_tree(pic))
    else:
        _write_utf8({"dot": to_dot, "mermaid": to_mermaid}[fmt](pic))


def _write_utf8(text: str) -> None:
    """DOT and Mermaid are files for tools: UTF-8 whatever the terminal's encoding (as `gradflow graph` writes
    them, through click.echo)."""
    out = sys.stdout
    out.flush()
    buffer = getattr(out, "buffer", None)
    if buffer is None:
        out.write(text)
        out.flush()
    else:
        buffer.write(text.encode())
        buffer.flush()
