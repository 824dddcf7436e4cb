"""The autograd graph of one backward() of a script (`gradflow script --autograd`), drawn by report/op_graph.py.

report/op_graph.py draws torch's graph of a loss from a GraphSource and the trace that recorded the forward;
inspect's report is one source, `BackwardOps` is the script's, taken when its backward() ran (the trace goes on
recording the script afterwards):
- the loss: the tensor backward() ran from (its first, when several);
- the leaves: the parameters of the modules the script called, named through the variable the script keeps
  each model in (`model.fc1.weight`, as the backward's table names them; a tied weight once, with its other
  name), then the other leaf tensors the script named (`xvar`). Each has this backward's status: live (torch's
  graph reaches it), frozen (a parameter, or a tensor the script set requires_grad=False on), cut (behind a
  detach, no_grad, .item() ... on a path to the loss), unused. A tensor that never required grad (data, a
  target) is no leaf of the graph, as torchviz draws none;
- the modules, named as the parameters are;
- the flow graph of the ops recorded so far, for the cuts on the paths to the loss and their lines (the same
  ops the table's reasons are read from: script/named_reasons.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from gradflow.report.naming import name_modules
from gradflow.report.op_graph import OpGraph, autograd_graph, torch_graph
from gradflow.report.reasons import FlowGraph, was_frozen

BackwardCall = Any  # script/recorder.py's, which imports this module
ScriptTrace = Any


@dataclass
class ScriptLeaf:
    """A leaf of a backward's graph, with its name(s) and this backward's status (report/op_graph.Leaf)."""

    serial: int | None
    name: str
    tensor: Any = field(repr=False)
    frozen: bool = False  # requires_grad=False on a parameter, or set so by the script
    aliases: list[str] = field(default_factory=list)
    status: str = "live"  # set by BackwardOps.params


class BackwardOps:
    """A script's backward() as report/op_graph.py's GraphSource; made when the backward ran, read when drawn."""

    def __init__(self, trace: ScriptTrace, call: BackwardCall):
        self.trace, self.call = trace, call
        self.loss = call.roots[0] if call.roots else None
        self.module_names, self._leaves = _named(trace, call)
        loss_serial = trace.known(self.loss) if self.loss is not None else None
        live = {leaf.serial for leaf in self._leaves if not leaf.frozen and leaf.serial is not None}
        self.graph = FlowGraph(trace, loss_serial, live)  # the ops as they are now (its own index, when asked)

    @cached_property
    def params(self) -> list[ScriptLeaf]:
        """The leaves, each with its status in this backward."""
        root = getattr(self.loss, "grad_fn", None)
        reached = {id(n.variable) for n in torch_graph(root)[0] if hasattr(n, "variable")} if root else set()
        flow = self.graph
        behind_cuts, feeds = (flow.cuts_by_leaf(), flow.to_loss) if flow.loss is not None else ({}, set())
        for leaf in self._leaves:  # (a frozen parameter of a model this loss does not use is not drawn)
            leaf.status = ("frozen" if leaf.serial in feeds else "unused") if leaf.frozen else \
                "live" if id(leaf.tensor) in reached else "cut" if leaf.serial in behind_cuts else "unused"
        return self._leaves

    def draw(self, depth: int | None = None, fold: bool = True) -> OpGraph:
        self.params  # noqa: B018 - the statuses, before the graph reads them
        call = self.call
        what = next((n for n in call.root_names if n), "the loss")
        title = f"autograd graph of {what}: backward {call.index}" + (f" at {call.line}" if call.line else "")
        return autograd_graph(self, self.trace, depth, fold, title=title)


def _named(trace: ScriptTrace, call: BackwardCall) -> tuple[dict[int, str], list[ScriptLeaf]]:
    """The modules' names and the leaves: the called modules' parameters first, then the script's named leaves."""
    roots = list(trace.state.roots)
    names = {id(n.tensor): [n.name, *n.aliases] for n in call.named}
    params, module_names = name_modules(roots, [_base(root, names, len(roots)) for root in roots])
    leaves: dict[int, ScriptLeaf] = {}
    for name, (t, *aliases) in params.items():
        leaves.setdefault(id(t), _leaf(trace, t, name, aliases))
    for n in call.named:
        t = n.tensor
        if id(t) not in leaves and t.is_leaf and (t.requires_grad or was_frozen(trace, n.serial)):
            leaves[id(t)] = _leaf(trace, t, n.name, [])
    return module_names, list(leaves.values())


def _leaf(trace: ScriptTrace, t, name: str, aliases: list[str]) -> ScriptLeaf:
    serial = trace.known(t)
    frozen = not t.requires_grad
    return ScriptLeaf(serial, name, t, frozen, list(aliases))


def _base(root: torch.nn.Module, names: dict[int, list[str]], roots: int) -> str:
    """The variable the script keeps `root` in (`model`, read off a parameter's name in the table:
    `model.fc1.weight`); else its class's name when several modules were called, '' when one was."""
    for path, p in root.named_parameters():
        for name in names.get(id(p), ()):
            if name.endswith("." + path):
                return name[:-len(path) - 1]
    return type(root).__name__ if roots > 1 else ""


def graph_of(call: BackwardCall, depth: int | None = None, fold: bool = True) -> OpGraph:
    """The call's autograd graph (BackwardCall.autograd_graph)."""
    from gradflow.errors import ValueInputError

    source = call.autograd_ops
    if source is None:
        raise ValueInputError("no_graph", f"backward {call.index} has no autograd graph: its ops were not recorded "
                              "with autograd on", hint="run the script with --autograd (run_script(..., "
                              "autograd=True)); in a loop, --steps K:K records backward K")
    return source.draw(depth, fold)
