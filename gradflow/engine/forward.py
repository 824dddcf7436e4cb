"""The forward step: a Graph's torch tensors, one node at a time (`Run`), and `forward()` for every view.

- `Run` with `measure` (the table's run, engine/evaluate.py): each use of a node that requires grad is routed
  through its own identity view, so the gradient carried by every edge can be measured exactly, and every
  tensor whose grad the table shows is watched (engine/results.py runs the backward and reads them).
- `forward` builds torch's graph exactly as the program writes it (no views), with two switches the
  numeric check needs: cuts=False (detach / no_grad / inference_mode act as identity and requires_grad
  flags are ignored: the derivative with the cuts removed) and `frozen` (node id -> a fixed value: a cut
  held at its forward value).

What an op means (plain, cut, region) comes from the op table (language/ops.py).
"""
from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING, Any

import torch

from gradflow.analysis.explanation import EdgeResult, Warning
from gradflow.engine.budget import account, account_flow, precheck
from gradflow.engine.torch_errors import torch_error
from gradflow.errors import EvalError
from gradflow.language.graph import FlagStep, Graph, Node, RetainStep
from gradflow.language.ops import CUT_OPS, OPS, REGION_OPS
from gradflow.limits import current
from gradflow.values.coerce import conversion_note, rounding_note
from gradflow.values.tensors import TORCH_ERRORS, scalar, to_tensor

if TYPE_CHECKING:
    from collections.abc import Callable

# The op table's roles as sets: asked several times per node, a set look-up instead of a call (language/ops.py).
REGIONS, _CUTS = frozenset(REGION_OPS), frozenset(CUT_OPS)
_grad_enabled = torch.is_grad_enabled  # asked per operation
# How each region op of the table enters torch (a test checks every region row has one).
REGION_CONTEXTS: dict[str, Callable[[], Any]] = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}


def _context(modes: tuple[str, ...]):
    """Every enclosing region's torch context, outermost first (no_grad inside inference_mode stays in it)."""
    if not modes:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    for mode in modes:
        stack.enter_context(REGION_CONTEXTS[mode]())
    return stack


def _single_use(graph: Graph) -> list[bool]:
    """Per node: used exactly once (and no flag, no region wrapper), so that one edge carries
    exactly the node's own grad and needs no alias of its own."""
    uses = [0] * len(graph.nodes)
    for n in graph.nodes:
        for a in n.args:
            uses[a] += 1
    flagged = {st.node for st in graph.steps if isinstance(st, FlagStep)}
    return [u == 1 and n.op not in REGIONS and n.id not in flagged for n, u in zip(graph.nodes, uses)]


class Run:
    """One forward pass: tensors by node id, edges (with aliases when measuring), flags set, warnings.

    `leaf(node)` makes an input's tensor. `measure`: route uses through views that measure each edge's
    flow and retain every grad (the table); without it torch's graph is exactly the program's.
    """

    def __init__(self, graph: Graph, leaf: Callable[[Node], torch.Tensor], dtype, device, *, measure: bool = True,
                 measure_edges: bool = True, cuts: bool = True, frozen: dict[int, torch.Tensor] | None = None):
        self.g, self.leaf, self.dtype, self.device = graph, leaf, dtype, device
        self.measure, self.measure_edges = measure, measure and measure_edges
        self.cuts, self.frozen = cuts, frozen or {}
        self.single = _single_use(graph)
        self.same_as_src: set[int] = set()  # edges whose flow is their source's grad (no alias needed)
        self.t: dict[int, torch.Tensor] = {}
        self.uses: list[tuple] = []  # each use of a node: its EdgeResult's fields (`edges` makes them on demand)
        self._edges: list[EdgeResult] = []
        self.aliases: dict[int, torch.Tensor] = {}  # edge index -> identity view
        # measuring: the tensors whose grads the table shows, and whose each is: a node id, or ~i for edge i's view
        self.watched: list[torch.Tensor] = []
        self.keys: list[int] = []
        self.turned_off = False  # a flag set requires_grad = false on some leaf (it may have been watched)
        self.grads: dict[int, torch.Tensor | None] = {}  # node id -> its grad, once backward ran (results.py)
        self.flows: dict[int, torch.Tensor | None] = {}  # edge index -> its view's grad, likewise
        self.flags: list[FlagStep] = []
        self.warnings: list[Warning] = []
        self.said: list = []  # every warning of the run, recorded by run()
        self.claimed: set[int] = set()
        self.total = 0  # elements over all values so far (limits.total)

    @property
    def edges(self) -> list[EdgeResult]:
        """Every use so far as an EdgeResult (src, dst, pos, and `cut`), made when first asked for: the brief
        answer (engine/brief.py) never asks."""
        made, uses = self._edges, self.uses
        if len(made) < len(uses):
            made.extend(EdgeResult(*use) for use in uses[len(made):])
        return made

    def inputs(self, node: Node) -> list[torch.Tensor]:
        # A region wrapper runs no operation, so even inside a region it cuts nothing.
        identity = node.op in REGIONS
        tracked = identity or not self.cuts or (not node.modes and node.op not in _CUTS and _grad_enabled())
        measuring = tracked and not identity and self.measure
        tensors, uses, nid, single = self.t, self.uses, node.id, self.single
        out = []
        for pos, a in enumerate(node.args):
            src = tensors[a]
            if src.requires_grad:
                if measuring:
                    if single[a]:
                        self.same_as_src.add(len(uses))
                    elif self.measure_edges or self.g.nodes[a].op in REGIONS:
                        self.total = account_flow(self.total, node, self.g.nodes[a], src.numel(), self.g.source)
                        src = self.alias(src)
                elif not tracked:
                    uses.append((a, nid, pos, None, True))  # cut
                    out.append(src)
                    continue
            uses.append((a, nid, pos))
            out.append(src)
        return out

    def alias(self, src: torch.Tensor) -> torch.Tensor:
        """This use's own tensor: its grad is exactly this edge's flow."""
        view = src.view_as(src)
        self.aliases[len(self.uses)] = view
        self.watched.append(view)
        self.keys.append(~len(self.uses))
        return view

    def compute(self, node: Node) -> torch.Tensor:
        op = node.op
        if op == "var":
            return self.leaf(node)
        # The regions to enter. Constants too: every value of a program is a tensor, so a number made under
        # inference_mode is an inference tensor, as torch.tensor(2.0) is in a `with torch.inference_mode():` block.
        modes = node.modes if self.cuts else ()
        if op == "const":
            with _context(modes):
                return scalar(node.value, self.dtype, self.device)
        args: list[Any] = self.inputs(node)
        if op == "pow":
            exponent = self.g.nodes[node.args[-1]]
            if exponent.op == "const":  # x^2 as torch code writes it: PowBackward0
                args[1] = exponent.value
        if op in REGIONS:
            if self.cuts:
                self.check_identity(node)
            return args[0]
        if not self.cuts and op in _CUTS:
            return args[0]
        if len(args) > 1:  # one operand: the result is no bigger than it (budget.precheck)
            precheck(node, args, self.g.source)
        said = self.said
        before = len(said)
        fn = OPS[op].fn
        try:
            if modes:
                with _context(modes):
                    out = fn(*args, **dict(node.params))
            else:  # most ops: no context to enter, and no context manager's cost on every op
                out = fn(*args, **dict(node.params))
        except TORCH_ERRORS as err:
            raise torch_error(node, args, err, self.g.source) from None
        if len(said) > before:  # torch's own warnings (mse_loss broadcasting a target, ...): reported, not printed
            for w in said[before:]:
                self.warnings.append(Warning("torch_warning", node.text, f"torch warns at '{node.text}': "
                                             f"{str(w.message).splitlines()[0]}", node.id))
            self.claimed.update(range(before, len(said)))
        return out

    def check_identity(self, node: Node):
        arg = self.g.nodes[node.args[0]]
        if arg.region != node.id:
            self.warnings.append(Warning(
                "identity_cut", node.text,
                f"{node.text} returns {arg.label} itself: no operation runs inside {node.op}(), "
                f"so nothing is cut and gradient still flows. Use detach({arg.label}) to cut it."))

    def set_flag(self, step: FlagStep):
        t = self.t[step.node]
        label = self.g.nodes[step.node].label
        try:
            t.requires_grad_(step.value)
        except RuntimeError as err:
            cut = f"{label}.detach()" if "requires_grad_(" in step.text else f"detach({label})"
            raise EvalError(
                "requires_grad_non_leaf",
                f"cannot set requires_grad on '{label}': it is computed "
                f"({self.g.nodes[step.node].text}), not a leaf. torch says: {err}",
                hint=f"to stop gradient flowing through it, use {cut}; "
                     "requires_grad can only be set on input variables",
                span=step.span, source=self.g.source) from None
        self.flags.append(step)
        if step.value and self.measure:  # a leaf that requires grad from here on: the node whose tensor it is
            owner = self.g.nodes[step.node]  # (a region wrapper's tensor is its argument's; no other op shares one)
            while owner.op in REGIONS:
                owner = self.g.nodes[owner.args[0]]
            self.watched.append(t)
            self.keys.append(owner.id)
        self.turned_off = self.turned_off or not step.value

    def retain(self, step: RetainStep):
        """Every grad is shown anyway; torch refuses retain_grad() on a tensor that does not require grad."""
        if not self.t[step.node].requires_grad:
            label = self.g.nodes[step.node].label
            raise EvalError("retain_grad", f"cannot retain the grad of '{label}': it does not require grad. "
                            "torch says: can't retain_grad on Tensor that has requires_grad=False",
                            hint=f"nothing flows back into {label}; its row in the table says why",
                            span=step.span, source=self.g.source)

    def run(self) -> dict[int, torch.Tensor]:
        """Every step in order. Warnings are recorded once for the whole run (not a catch_warnings() per op);
        an op's are reported as its node's, any other (making a leaf) is passed on as it would be."""
        self.claimed = set()  # indexes in self.said of the ops' own warnings
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            self.said = said
            try:
                self._steps()
            finally:
                others = [w for i, w in enumerate(said) if i not in self.claimed]
        for w in others:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        return self.t

    def _steps(self) -> None:
        tensors, frozen, measure, limits = self.t, self.frozen, self.measure, current()
        for step in self.g.steps:
            if isinstance(step, FlagStep):
                if self.cuts:
                    self.set_flag(step)
                continue
            if isinstance(step, RetainStep):
                if self.cuts:
                    self.retain(step)
                continue
            nid = step.id
            t = tensors[nid] = frozen[nid] if nid in frozen else self.compute(step)
            held = False  # the value's grad will be held too: the grads evaluate() collects
            if t.requires_grad:
                if measure and step.op not in REGIONS:
                    self.watched.append(t)
                    self.keys.append(nid)
                held = measure or t.is_leaf
            self.total = account(self.total, step, t, self.g.source, limits, grad=held)


def leaf_maker(values: dict, wrt: list[str], dtype: torch.dtype, device: torch.device,
               warnings: list[Warning] | None = None) -> Callable[[Node], torch.Tensor]:
    """Makes each input's fresh leaf from its value; the chosen ones (`wrt`) require grad.
    Conversions worth knowing about (rounding, integer input, ...) become warnings."""
    def leaf(node: Node) -> torch.Tensor:
        value = values[node.names[0]]
        t = to_tensor(node.label, value, dtype, device)
        plain = type(value) in (int, float, list)  # a Python value has no dtype or device of its own to convert
        note = None if warnings is None else ((None if plain else conversion_note(node.label, value, t))
                                              or rounding_note(node.label, value, t))
        if note and warnings is not None:
            warnings.append(Warning("value_converted", node.label, note, node.id))
        return t.requires_grad_(node.names[0] in wrt)
    return leaf


def make_leaves(graph: Graph, values: dict, wrt: list[str], dtype: torch.dtype = torch.float64,
                device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Fresh leaf tensors for every input (by name); the chosen ones require grad."""
    leaf = leaf_maker(values, wrt, dtype, torch.device(device))
    return {name: leaf(graph.nodes[i]) for name, i in graph.inputs.items()}


def forward(graph: Graph, leaves: dict[str, torch.Tensor], dtype: torch.dtype, device: torch.device | str = "cpu",
            *, cuts: bool = True, frozen: dict[int, torch.Tensor] | None = None) -> dict[int, torch.Tensor]:
    """Every node's tensor, torch's graph exactly as the program writes it (no measuring views).
    `leaves` maps each input name to its prepared tensor; see the module docstring for `cuts` and `frozen`."""
    run = Run(graph, lambda node: leaves[node.names[0]], dtype, torch.device(device), measure=False, cuts=cuts,
              frozen=frozen)
    return run.run()
