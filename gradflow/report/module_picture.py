"""A traced forward as a picture grouped by module: dot (Graphviz) or mermaid text.

One box per module (at the chosen depth) holding its parameters' statuses, one
red node per cut (detach / no_grad / inference_mode) on a path to the loss, one
node per op run outside any module, and the loss. Edges follow the data.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gradflow.display import dot_string, mermaid_text
from gradflow.report.inspect_report import InspectReport
from gradflow.report.param_table import module_of, summary
from gradflow.report.reasons import spelled

if TYPE_CHECKING:  # the tracer imports this module: types only, no cycle
    from gradflow.tracer.trace import OpRecord

STATUS_FILL = {"cut": "#f8c8c8", "unused": "#fff2b3", "unreached": "#fff2b3", "zero": "#fff2b3",
         "frozen": "#e0e0e0", "live": "#c8ecc8", "untraced": "#e8d0f0"}
_DOT_STYLE = {"cutop": ', shape=octagon, fillcolor="#ff9a9a"', "loss": ', shape=ellipse, fillcolor="#d0e0ff"',
              "op": ""}
FROZEN_LINE, FROZEN_TEXT = "#9e9e9e", "#616161"  # a frozen parameter's box: grey border and text, as eval's no-grad
WORST = ("cut", "untraced", "unreached", "unused", "zero", "live", "frozen")


@dataclass
class Picture:
    labels: dict[str, str] = field(default_factory=dict)  # node key -> label
    kinds: dict[str, str] = field(default_factory=dict)  # node key -> status/cut/op/loss
    edges: dict[tuple[str, str], bool] = field(default_factory=dict)  # (src, dst) -> from a cut
    param_keys: dict[int, str] = field(default_factory=dict)  # parameter serial -> its module's node
    keep: set[int] = field(default_factory=set)  # indices of the ops drawn
    op_keys: dict[int, str] = field(default_factory=dict)  # op index -> the node it is drawn in
    current: dict[str, str] = field(default_factory=dict)  # module key -> its node now (see _node_for)
    wrapper: str = ""  # peft's wrappers around the model (`base_model.model`), left out of the names (unwrapped)
    wrapped: str = ""  # ... and the class of the model they wrap, the name of that model's own ops


def _module_key(report: InspectReport, pic: Picture, rec: OpRecord, depth: int) -> str:
    name = report.module_names.get(rec.module) if rec.module is not None else None
    if _shown_cut(rec):
        return f"cut{rec.index}"
    if name is None:
        return f"op{rec.index}"
    if pic.wrapper and name == pic.wrapper:
        return f"m:{pic.wrapped}"
    short = ".".join(unwrapped(name, pic.wrapper).split(".")[:depth])
    return f"m:{short}"


def wrapper_of(report: InspectReport) -> tuple[str, str]:
    """The names of peft's wrappers around the model (PeftModel -> LoraModel -> the model: `base_model.model`),
    each a module of peft's that holds one module and nothing else: the picture counts its depth from the model
    they wrap, so that a LoRA model is drawn as the model it is, not as one box."""
    modules = report.graph.modules if report.graph is not None else {}
    module = next((m for i, m in modules.items() if "." not in report.module_names.get(i, ".")
                   and _peft(m)), None)
    prefix = ""
    while module is not None and _peft(module) and len(children := list(module.named_children())) == 1 \
            and not list(module.parameters(recurse=False)):
        prefix, module = f"{prefix}.{children[0][0]}".lstrip("."), children[0][1]
    return prefix, type(module).__name__ if prefix else ""


def _peft(module) -> bool:
    return type(module).__module__.startswith("peft.")


def unwrapped(name: str, wrapper: str) -> str:
    """`base_model.model.model.layers.0` -> `model.layers.0` under peft's wrapper `base_model.model`."""
    return name[len(wrapper) + 1:] if wrapper and name.startswith(wrapper + ".") else name


def module_key(pic: Picture, param_name: str, depth: int) -> str:
    """The key of the box a parameter is counted in (before a split by status)."""
    name = unwrapped(param_name, pic.wrapper)
    return f"m:{module_of(name, depth) or name}"


def _shown_cut(rec: OpRecord) -> bool:
    """detach / no_grad / inference_mode get their own node; integer-output ops stay in their module."""
    return rec.cut is not None and rec.cut != "nondiff"


def _label(rec: OpRecord, key: str) -> str:
    if key.startswith("m:"):
        return key[2:]
    at = f"\n{rec.line}" if rec.line else ""
    if not _shown_cut(rec):
        return rec.name + at
    if rec.cut in ("detach", "item", "rewrap"):
        return f"✂ {spelled(rec.cut, rec.name)}" + at
    return f"✂ {rec.name} under {rec.cut}" + at


def build_picture(report: InspectReport, depth: int = 2) -> Picture:
    pic, graph = Picture(), report.graph
    pic.wrapper, pic.wrapped = wrapper_of(report)
    _module_nodes(report, pic, depth)
    if graph is None:  # backward never ran: the modules alone
        return pic
    keep = {r.index for r in graph.relevant_ops()} | report.use_ops
    after = _after_params(report)
    pic.keep = {i for i in keep if graph.ops[i].ins and (i in after or _shown_cut(graph.ops[i]))}
    ops = [graph.ops[i] for i in sorted(pic.keep)]
    for rec in ops:
        key = pic.op_keys[rec.index] = _node_for(report, pic, rec, depth)
        for s in rec.ins:
            _edge(report, pic, s, rec, key)
    if graph.loss is not None:
        pic.labels["loss"], pic.kinds["loss"] = "loss", "loss"
        last = _last_producer(report, pic, graph.loss, len(graph.ops))
        if last is not None:
            pic.edges[(pic.op_keys[last.index], "loss")] = _shown_cut(last)
    return pic


def _after_params(report: InspectReport) -> set[int]:
    """The ops that some parameter's values reach: the others (factories, a rotary embedding's set-up, work on
    the input data alone) carry no gradient to any parameter and are left out of the picture, as is set-up work
    done with the parameters before the model first ran that the loss does not use."""
    graph = report.graph
    assert graph is not None
    reached, ops = {p.serial for p in report.params if p.serial is not None}, set()
    first_call = next((r.index for r in graph.ops if r.module is not None), len(graph.ops))
    for rec in graph.ops:
        if rec.index < first_call and not any(o in graph.to_loss for o in rec.outs):
            continue  # set-up before the model first ran (peft's, building the model), none of it in the loss
        if not reached.isdisjoint(rec.ins):
            ops.add(rec.index)
            reached.update(rec.outs)
    return ops


def _node_for(report: InspectReport, pic: Picture, rec: OpRecord, depth: int) -> str:
    """The node op `rec` is drawn in: its module's, or, when data came back into the module from a node it fed
    (GPT-2's `transformer` -> `wte` -> `transformer`), a new node for the module's later ops (`transformer
    (continued)`), so the picture has no cycle and reads as the data's way forward."""
    base = _module_key(report, pic, rec, depth)
    key = pic.current.get(base, base)
    sources = {pic.op_keys[src.index] for s in rec.ins if (src := _last_producer(report, pic, s, rec.index))}
    if any(s != key and (s, key) not in pic.edges and _reaches(pic, key, s) for s in sources):
        key = pic.current[base] = f"{base}#{rec.index}"
        pic.labels[key], pic.kinds[key] = _label(rec, base) + "\n(continued)", "op"
    elif key not in pic.labels:
        pic.labels[key], pic.kinds[key] = (_label(rec, key), "cutop" if _shown_cut(rec) else "op")
    return key


def _module_nodes(report: InspectReport, pic: Picture, depth: int):
    """A box per module's parameters; a module whose parameters differ in status gets a box per status (its
    ops' node, named by the module, takes the data flow), so a cut or frozen parameter never hides in a live
    box."""
    groups: dict[str, list] = {}
    for p in report.params:
        groups.setdefault(module_key(pic, p.name, depth)[2:], []).append(p)
    for module, params in groups.items():
        statuses = [s for s in WORST if any(p.status == s for p in params)] or [params[0].status]
        for status in statuses:
            same = [p for p in params if p.status == status] if len(statuses) > 1 else params
            key = f"m:{module}" if len(statuses) == 1 else f"m:{module} [{status}]"
            text, n = summary(same, ", "), len(same)
            pic.labels[key], pic.kinds[key] = f"{key[2:]}\n{n} param{'s' * (n != 1)}: {text}", status
            pic.param_keys.update({p.serial: key for p in same if p.serial is not None})


def _last_producer(report: InspectReport, pic: Picture, serial: int, before: int) -> OpRecord | None:
    """The last op shown in the picture that wrote this tensor before op `before`."""
    graph = report.graph
    assert graph is not None  # build_picture stops early without one
    found = [i for i in graph.producers.get(serial, ()) if i < before and i in pic.keep]
    return graph.ops[found[-1]] if found else None


def _reaches(pic: Picture, start: str, goal: str) -> bool:
    """Is there a path of edges from `start` to `goal`?"""
    out: dict[str, list[str]] = {}
    for a, b in pic.edges:
        out.setdefault(a, []).append(b)
    seen, stack = {start}, [start]
    while stack:
        for nxt in out.get(stack.pop(), ()):
            if nxt == goal:
                return True
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def _edge(report: InspectReport, pic: Picture, serial: int, rec: OpRecord, key: str):
    src = _last_producer(report, pic, serial, rec.index)
    if src is None:
        if report.graph is not None and serial in report.graph.leaves:
            name = pic.param_keys.get(serial)
            if name and name != key:
                pic.edges[(name, key)] = False
        return
    skey = pic.op_keys[src.index]
    if skey != key and skey in pic.labels:
        pic.edges[(skey, key)] = _shown_cut(src)


def dot_ids(pic: Picture) -> dict[str, str]:
    """Picture node key -> its DOT node name (the <title> of its group in Graphviz's SVG)."""
    return {k: f"n{i}" for i, k in enumerate(pic.labels)}


def to_dot(report: InspectReport, depth: int = 2) -> str:
    pic = build_picture(report, depth)
    ids = dot_ids(pic)
    lines = ["digraph gradflow {", "  rankdir=LR;",
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="Helvetica"];']
    for key, label in pic.labels.items():
        kind = pic.kinds[key]
        attrs = _DOT_STYLE[kind] if kind in _DOT_STYLE else f', fillcolor="{STATUS_FILL[kind]}"' + (
            f', color="{FROZEN_LINE}", fontcolor="{FROZEN_TEXT}"' if kind == "frozen" else "")
        lines.append(f'  {ids[key]} [label={dot_string(label)}{attrs}];')
    for (a, b), cut in pic.edges.items():
        style = ' [style=dashed, color="#cc0000"]' if cut else ""
        lines.append(f"  {ids[a]} -> {ids[b]}{style};")
    lines.append("}")
    return "\n".join(lines)


def to_mermaid(report: InspectReport, depth: int = 2) -> str:
    pic = build_picture(report, depth)
    ids = dot_ids(pic)
    lines = ["flowchart LR"]
    for key, label in pic.labels.items():
        text = mermaid_text(label)
        shape = ('{{"', '"}}') if pic.kinds[key] == "cutop" else (('(["', '"])') if pic.kinds[key] == "loss"
                                                               else ('["', '"]'))
        lines.append(f"  {ids[key]}{shape[0]}{text}{shape[1]}")
    for (a, b), cut in pic.edges.items():
        lines.append(f"  {ids[a]} {'-.->' if cut else '-->'} {ids[b]}")
    for kind, fill in {**STATUS_FILL, "cutop": "#ff9a9a"}.items():
        members = [ids[k] for k, v in pic.kinds.items() if v == kind]
        if members:
            grey = f",stroke:{FROZEN_LINE},color:{FROZEN_TEXT}" if kind == "frozen" else ",stroke:#555"
            lines.append(f"  classDef {kind} fill:{fill}{grey}")
            lines.append(f"  class {','.join(members)} {kind}")
    return "\n".join(lines)
