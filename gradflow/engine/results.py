"""The results of a measured run (forward.py's `Run` with `measure`): backward from the output into every
watched tensor, then a NodeResult per node and every edge's flow.

One `torch.autograd.grad` call collects every node's grad and every view's flow (cheaper than a retain_grad()
per tensor: no grad copies, no hooks to run).
"""
from __future__ import annotations

import math

import torch

from gradflow.analysis.explanation import EdgeResult, NodeResult, Status
from gradflow.engine.forward import REGIONS, Run
from gradflow.errors import EvalError, GradflowError, NoGradientError
from gradflow.language.ops import is_region
from gradflow.values.jsonable import PLAIN_MAX, UNCONVERTED, plain
from gradflow.values.tensors import TORCH_ERRORS


def check_output(run: Run) -> torch.Tensor:
    g = run.g
    out = run.t[g.output]
    if out.numel() != 1:
        node = g.nodes[g.output]
        raise EvalError("non_scalar", f"the output '{node.label}' has shape {tuple(out.shape)}; "
                        "backward needs a single number",
                        hint=f"wrap it in sum(...) or mean(...), e.g. sum({node.text})",
                        span=node.span, source=g.source)
    return out


def _watched(run: Run) -> tuple[list[torch.Tensor], list[int]]:
    """The tensors whose grads the table shows, and their keys (`Run.keys`): every node's that requires grad
    (a region wrapper's is its argument's) and every edge's view, as the forward met them; a flag may have
    turned a leaf's off since."""
    if not run.turned_off:
        return run.watched, run.keys
    kept = [i for i, t in enumerate(run.watched) if t.requires_grad]
    return [run.watched[i] for i in kept], [run.keys[i] for i in kept]


def backward(out: torch.Tensor, run: Run) -> GradflowError | None:
    """Backward from the output, every watched tensor's grad into `run.grads` and `run.flows`."""
    g = run.g
    if not out.requires_grad:
        return NoGradientError(
            "no_gradient", f"the output '{g.nodes[g.output].label}' does not require grad, so backward "
            "cannot run (torch: element 0 of tensors does not require grad and does not have a grad_fn)")
    watched, keys = _watched(run)
    try:
        got = torch.autograd.grad(out, watched, allow_unused=True)
    except TORCH_ERRORS as err:
        return EvalError("backward", f"backward failed: {(str(err).splitlines() or [type(err).__name__])[0]}")
    grads, flows = run.grads, run.flows
    for key, grad in zip(keys, got):
        if key >= 0:
            grads[key] = grad
        else:
            flows[~key] = grad
    return None


def node_results(run: Run) -> list[NodeResult]:
    """A NodeResult per node and every edge's flow, each tensor's numbers read once (values/jsonable.py `plain`)."""
    tensors, grads = run.t, run.grads
    nodes = [node_result(node, tensors[node.id], grads) for node in run.g.nodes]
    aliases, same = run.aliases, run.same_as_src
    for i, e in enumerate(run.edges):
        if i in aliases:
            e.flow = run.flows.get(i)
            e.flow_py = plain(e.flow)
        elif i in same:
            src = nodes[e.src]
            e.flow, e.flow_py = src.grad, src.grad_py
        else:
            e.flow_py = None
    # Region wrappers share their argument's tensor: their grad is the sum of their own out-flows,
    # and that is what flows into them. Outermost first, so nested wrappers see their consumer's flow.
    if not any(is_region(n.op) for n in nodes):
        return nodes  # no region wrapper (most programs): no index of the edges to build
    by_src: dict[int, list[EdgeResult]] = {}
    into: dict[int, EdgeResult] = {}  # a region wrapper's one in-edge
    for e in run.edges:
        by_src.setdefault(e.src, []).append(e)
        if is_region(nodes[e.dst].op):
            into[e.dst] = e
    for n in reversed(nodes):
        if is_region(n.op):
            n.grad = _sum([e.flow for e in by_src.get(n.id, [])])
            n.grad_py = plain(n.grad)
            e = into[n.id]
            if e.flow is None and not e.cut:
                e.flow, e.flow_py = n.grad, n.grad_py
    return nodes


def node_result(node, t: torch.Tensor, grads: dict, status: Status = "off") -> NodeResult:
    """A node's NodeResult from its tensor and the run's grads (a region wrapper's grad is set later, from its
    out-flows); `status` as the analysis will say it ("off" until then)."""
    needs = t.requires_grad
    fn = t.grad_fn if needs else None  # (a tensor that does not require grad has none)
    value = t.detach() if needs else t  # (one that does not is detached already)
    dims = () if t.dim() == 0 else tuple(t.shape)
    small = math.prod(dims) <= PLAIN_MAX
    grad = None if node.op in REGIONS else grads.get(node.id)
    return NodeResult(node.id, node.label, node.text, node.op, value, needs, fn is None,  # torch's is_leaf
                      None if fn is None else type(fn).__name__, grad, status, None, node.args,
                      (node.span.start, node.span.end), node.abbreviated, dims,
                      t.tolist() if small else UNCONVERTED,
                      UNCONVERTED if not small else None if grad is None else grad.tolist())


def _sum(flows):
    flows = [f for f in flows if f is not None]
    return None if not flows else sum(flows[1:], flows[0])
