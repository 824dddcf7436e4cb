"""Result objects returned by the library, and their strict-JSON form.

The engine fills these; renderers and the CLI only read them. Tensors are kept
as torch tensors (no copies into Python lists) until a renderer asks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gradflow.display import Drawn
from gradflow.errors import GradflowError
from gradflow.values.jsonable import (
    UNCONVERTED,
    dumps,
    one_document,
    plain_json,
    to_jsonable,
)

if TYPE_CHECKING:
    from gradflow.language.graph import Graph

Tensor = Any  # a torch.Tensor: the analysis never imports torch, not even for its types (the import contract)

SCHEMA_VERSION = 1
Status = Literal["live", "cut", "unused", "unreached", "off"]  # what the table's marker says (docs/eval.md)


@dataclass(slots=True)
class NodeResult:
    id: int
    name: str  # display label: the assigned name, or the expression text
    expr: str  # the expression text as written; over NAME_WIDTH characters abbreviated (language/graph.py)
    op: str
    value: Tensor
    requires_grad: bool
    is_leaf: bool
    grad_fn: str | None
    grad: Tensor | None = None
    status: Status = "off"
    cut_by: str | None = None  # label of the detach / no_grad / inference_mode that cut it
    args: tuple[int, ...] = ()
    span: tuple[int, int] | None = None  # where the expression is in the source: source[start:end] is it in full
    abbreviated: bool = False  # `expr` (and so perhaps `name`) is shortened: %ID stands for node ID
    # The engine's numbers, read once (values/jsonable.py `plain`): the value's shape, and the value and grad as
    # Python numbers when they are small (UNCONVERTED otherwise). The JSON, the nan/inf scan and the table use
    # them instead of asking torch again for every number.
    dims: tuple[int, ...] | None = field(default=None, repr=False, compare=False)
    value_py: Any = field(default=UNCONVERTED, repr=False, compare=False)
    grad_py: Any = field(default=UNCONVERTED, repr=False, compare=False)

    @property
    def shape(self) -> list[int]:
        return list(self.value.shape) if self.dims is None else list(self.dims)

    def to_dict(self, full: bool = True) -> dict:
        value, grad = self.value_py, self.grad_py
        count = 0 if self.dims is None else math.prod(self.dims)
        return {"id": self.id, "name": self.name, "expr": self.expr,
                "span": None if self.span is None else list(self.span), "op": self.op,
                "value": to_jsonable(self.value, full=full) if value is UNCONVERTED else plain_json(value, count),
                "shape": self.shape, "requires_grad": self.requires_grad, "is_leaf": self.is_leaf,
                "grad_fn": self.grad_fn,
                "grad": to_jsonable(self.grad, full=full) if grad is UNCONVERTED else plain_json(grad, count),
                "status": self.status, "cut_by": self.cut_by, "args": list(self.args)}


@dataclass(slots=True)
class EdgeResult:
    """One use of a node: `src`'s value flows into `dst` as argument `pos`."""

    src: int
    dst: int
    pos: int
    flow: Tensor | None = None  # gradient carried back along this edge, None if nothing
    cut: bool = False  # src required grad but dst cut the path (detach / no_grad region)
    flow_py: Any = field(default=UNCONVERTED, repr=False, compare=False)  # `flow` as Python numbers, if small

    def to_dict(self, nodes: list[NodeResult], full: bool = True) -> dict:
        src = nodes[self.src]
        if self.flow_py is not UNCONVERTED and src.dims is not None:
            shown = plain_json(self.flow_py, math.prod(src.dims))
        else:
            shown = to_jsonable(self.flow, full=full)
        return {"from": src.name, "to": nodes[self.dst].name, "from_id": self.src,
                "to_id": self.dst, "pos": self.pos, "flow": shown, "cut": self.cut}


@dataclass
class Warning:
    kind: str
    node: str | None
    message: str
    node_id: int | None = None  # the node to mark in the table (not part of the JSON form)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "node": self.node, "message": self.message}


@dataclass(repr=False)  # repr(): the table as text (display.Shown)
class Explanation(Drawn):
    """Everything gradflow learned from one evaluation and backward pass."""

    source: str
    wrt: list[str]
    dtype: str
    device: str
    nodes: list[NodeResult]
    output: NodeResult
    grads: dict[str, Tensor | None]  # chosen leaf -> its grad
    graph: Graph = field(repr=False)  # the compiled program: later views (picture, check, Hessian) never re-parse
    inputs: dict[str, Any] = field(repr=False)  # the values it ran on (constructors and files as tensors)
    edges: list[EdgeResult] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)  # chosen leaf with no grad -> reason
    warnings: list[Warning] = field(default_factory=list)
    error: GradflowError | None = None
    brief: bool = False  # the answer only (explain(brief=True)): no `nodes`, no `edges` (both empty), no flows

    def node(self, name: str) -> NodeResult:
        """The node with this label (a variable, an assigned name or expression text)."""
        for n in self.nodes:
            if n.name == name or n.expr == name:
                return n
        raise KeyError(name)

    def full_expr(self, node_id: int) -> str:
        """Node `node_id`'s expression exactly as written: its `expr` may be abbreviated (`%17 + x*6400`)."""
        n = self.nodes[node_id]
        return n.expr if n.span is None else self.source[n.span[0]:n.span[1]]

    def grad(self, leaf: str) -> float | list | None:
        """A chosen leaf's gradient as a number or nested list (None if it got none)."""
        return to_jsonable(self.grads[leaf], strict=False)

    @property
    def flows(self) -> dict:
        """Per chosen leaf, its gradient split by use: {leaf: [Contribution]} (see flows.py)."""
        from gradflow.analysis.flows import contributions

        return contributions(self)

    @one_document
    def to_dict(self, full: bool = True) -> dict:
        """Strict-JSON-ready dict, every tensor in full (`full=False`: those over JSON_FULL_MAX elements as
        summary objects); LimitError over the `json` limit (values/jsonable.py)."""
        out = {"schema": SCHEMA_VERSION, "source": self.source,
               "output": {"name": self.output.name, "value": to_jsonable(self.output.value),
                          "requires_grad": self.output.requires_grad},
               "grads": {k: to_jsonable(v, full=full) for k, v in self.grads.items()}, "why": dict(self.why)}
        if not self.brief:  # a brief document has the same keys, less these three
            out.update(nodes=[n.to_dict(full) for n in self.nodes],
                       edges=[e.to_dict(self.nodes, full) for e in self.edges],
                       contributions={k: [c.to_dict(full) for c in v] for k, v in self.flows.items()})
        return {**out, "warnings": [w.to_dict() for w in self.warnings], "wrt": list(self.wrt), "dtype": self.dtype,
                "device": self.device, "error": None if self.error is None else self.error.to_dict()}

    def to_json(self, full: bool = True, **kw) -> str:
        return dumps(self.to_dict(full), **kw)


BRIEF_LEAVES_OUT = ("nodes", "edges", "contributions")  # the keys of a full document that a brief one has not


def brief_document(doc: dict) -> dict:
    """A document (a record) less the keys a brief one leaves out."""
    return {k: v for k, v in doc.items() if k not in BRIEF_LEAVES_OUT}


def error_document(error: GradflowError, source: str | None = None, wrt: list[str] | None = None,
                   dtype: str | None = None, device: str | None = None, brief: bool = False) -> dict:
    """What `--json` prints when nothing could be evaluated: the keys of `Explanation.to_dict()`, with what is
    known of the request (the program text even when it does not parse; `wrt`: see `engine.prepare.asked_leaves`).
    `brief`: the keys of a brief document (no "nodes", "edges", "contributions")."""
    doc = {"schema": SCHEMA_VERSION, "source": source, "output": None, "grads": {}, "why": {}, "nodes": [],
           "edges": [], "contributions": {}, "warnings": [], "wrt": wrt, "dtype": dtype, "device": device,
           "error": error.to_dict()}
    return brief_document(doc) if brief else doc
