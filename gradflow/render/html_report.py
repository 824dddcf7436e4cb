"""`--html FILE.html`: one self-contained page per run (eval, inspect, script): the graph, the table, the cuts.

The page needs no network: its CSS and its small script are inline in templates/report.html.j2 (a jinja2
template, autoescaped), the graph is Graphviz's own SVG (a layout nobody should rewrite) or, without `dot`,
the nodes laid out in rows by their distance from the inputs. Every node and parameter carries its details
(value, requires_grad, grad_fn, grad, the reason, the line) in one JSON block that the script shows on click.
The table is the terminal's own, exported by rich (render/views.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gradflow.analysis.explanation import Explanation
from gradflow.display import visible
from gradflow.render import graphviz, views
from gradflow.report.inspect_report import InspectReport
from gradflow.script.recorder import BackwardCall
from gradflow.values.text import DASH, format_number, format_tensor

Fields = list[tuple[str, str]]


@dataclass
class Section:
    """One graph with its table: an evaluation, a model's report, one backward() of a script."""

    title: str
    table: str  # the terminal's table as HTML
    svg: str | None = None  # Graphviz's picture; None: `rows` are drawn instead
    rows: list[list[str]] = field(default_factory=list)  # node keys by rank (the picture without Graphviz)
    details: dict[str, dict] = field(default_factory=dict)  # node key -> {"label", "fields": [[name, text]]}
    items: list[str] = field(default_factory=list)  # keys listed beside the graph (parameters, tensors)
    cuts: list[str] = field(default_factory=list)


def _detail(label: str, fields: Fields, edges: list[str] | None = None) -> dict:
    return {"label": visible(label), "fields": [[k, visible(v)] for k, v in fields], "edges": edges or []}


def _svg(dot_text: str) -> str | None:
    if not graphviz.available():
        return None
    svg = graphviz.graphviz(dot_text, "svg", asked="--html").decode()
    return svg[svg.find("<svg"):]


def _ranks(keys: list[str], edges: list[tuple[str, str]]) -> list[list[str]]:
    """Keys in rows by their longest distance from a node with no input (the layout without Graphviz)."""
    into: dict[str, list[str]] = {k: [] for k in keys}
    for a, b in edges:
        if a in into and b in into:
            into[b].append(a)
    rank: dict[str, int] = {}
    for k in keys:  # program order: every input comes first
        rank[k] = 1 + max((rank.get(a, 0) for a in into[k]), default=-1)
    rows: list[list[str]] = [[] for _ in range(max(rank.values(), default=-1) + 1)]
    for k in keys:
        rows[rank[k]].append(k)
    return rows


# ---- eval and script: an expression's graph ---------------------------------------------------------------

def explanation_section(result: Explanation, title: str, table: str | None = None) -> Section:
    from gradflow.studies.torch_graph import picture

    pic = picture(result)
    section = Section(title, table if table is not None else views.html(result))
    section.svg = _svg(views.dot(result))
    edges = [(e.src, e.dst) for e in pic.edges]
    section.rows = _ranks([n.key for n in pic.nodes], edges)
    for n in result.nodes:
        key = f"n{n.id}"
        fields: Fields = [("op", n.op), ("value", format_tensor(n.value)), ("shape", str(n.shape)),
                          ("requires_grad", str(n.requires_grad)), ("is_leaf", str(n.is_leaf)),
                          ("grad_fn", n.grad_fn or DASH), ("grad", format_tensor(n.grad)), ("status", n.status)]
        if n.cut_by:
            fields.append(("cut by", n.cut_by))
        if n.span is not None:
            fields.append(("source", result.full_expr(n.id)))
        into = [f"{'✂ ' if e.kind == 'cut' else ''}{_name(pic, e.src)} → {_name(pic, e.dst)}"
                + (f"  flow {e.flow}" if e.flow else "") for e in pic.edges if key in (e.src, e.dst)]
        section.details[key] = _detail(n.name, fields, into)
    section.items = [f"n{n.id}" for n in result.nodes if n.op == "var"]
    section.cuts = [f"✂ {result.nodes[e.src].name} → {result.nodes[e.dst].name}" for e in result.edges if e.cut]
    return section


def _name(pic, key: str) -> str:
    return next((n.label for n in pic.nodes if n.key == key), key)


def backward_section(call: BackwardCall) -> Section:
    """One backward() of a script: its table, and the graph of the program that computes the same grads."""
    from gradflow.script.program_writer import Program

    title = f"backward {call.index}" + (f" at {call.line}" if call.line else "") + f": {call.code}"
    table = views.html(call)
    if isinstance(call.program, Program):
        section = explanation_section(call.program.explain(), title, table)
    else:
        section = Section(title, table, cuts=[f"(no graph: {call.program.reason})"])
    for t in call.named:
        line = t.cut.line if t.cut is not None else None
        section.details.setdefault(f"t:{t.name}", _detail(t.name, [
            ("value", format_tensor(t.tensor.detach())), ("requires_grad", str(t.tensor.requires_grad)),
            ("is_leaf", str(t.tensor.is_leaf)), ("grad_fn", _fn(t.tensor)), ("grad", format_tensor(t.grad)),
            ("status", t.status), *([("cut", str(t.cut.kind)), ("line", str(line))] if t.cut else [])]))
    section.items = [f"t:{t.name}" for t in call.named]
    section.cuts += [f"✂ {t.name}: {t.cut.describe()}" for t in call.named if t.cut]
    return section


def _fn(t) -> str:
    return type(t.grad_fn).__name__ if t.grad_fn is not None else DASH


# ---- inspect: a model's modules -----------------------------------------------------------------------------

def inspect_section(report: InspectReport, title: str, depth: int = 2) -> Section:
    from gradflow.report.module_picture import build_picture, dot_ids, module_key, to_dot

    pic = build_picture(report, depth)
    ids = dot_ids(pic)
    section = Section(title, views.html(report), svg=_svg(to_dot(report, depth)))
    section.rows = _ranks([ids[k] for k in pic.labels], [(ids[a], ids[b]) for a, b in pic.edges])
    for key, label in pic.labels.items():
        members = [p for p in report.params if module_key(pic, p.name, depth) == key]
        fields: Fields = [(p.name, f"{p.status}" + (f": {p.why}" if p.why else "")) for p in members]
        section.details[ids[key]] = _detail(label, fields or [("kind", pic.kinds[key])])
    for p in report.params:
        section.details[f"p:{p.name}"] = _detail(p.name, _param_fields(p))
    section.items = [f"p:{p.name}" for p in report.params]
    section.cuts = [f"✂ {p.name}: {p.why}" for p in report.params if p.cuts or p.status == "cut"]
    return section


def autograd_section(graph, title: str) -> Section:
    """`inspect --autograd --html`: torch's graph of ops (report/op_graph.py), each node's details on click."""
    from gradflow.render.op_graph import label, to_dot

    section = Section(f"{title}: the autograd graph torch recorded", views.html(graph), svg=_svg(to_dot(graph)))
    section.rows = _ranks(list(graph.nodes), list(graph.edges))
    for key, node in graph.nodes.items():
        fields: Fields = [("grad_fn", node.fn or DASH), ("module", graph.shown_name(node) or DASH),
                          ("line", node.line or DASH), ("variable", node.variable or DASH),
                          ("status", node.status or DASH)]
        section.details[key] = _detail(label(graph, node), fields)
    section.cuts = [label(graph, n).replace("\n", " ") for n in graph.nodes.values() if n.kind == "cut"]
    return section


def _param_fields(p) -> Fields:
    routes = "; ".join(f"{r.op} at {r.line or DASH}" + (f" ({r.module})" if r.module else "") for r in p.routes)
    return [("shape", str(p.shape)), ("requires_grad", str(p.requires_grad)), ("status", p.status),
            ("grad", DASH if p.grad is None else f"norm {format_number(p.grad_norm)}"),
            ("grad_fn", "AccumulateGrad" if p.requires_grad else DASH), ("reason", p.why or DASH),
            ("line", "; ".join(str(c.line) for c in p.cuts) or DASH), ("routes", routes or DASH)]


# ---- the page ------------------------------------------------------------------------------------------------

def page(title: str, sections: list[Section]) -> str:
    """The whole HTML page (jinja2: templates/report.html.j2, autoescaped; the SVG and rich's table are HTML
    already, made by Graphviz and rich from escaped text)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("gradflow.render", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]))
    data = {str(i): {"details": s.details} for i, s in enumerate(sections)}
    return env.get_template("report.html.j2").render(title=visible(title), sections=sections, data=data)

