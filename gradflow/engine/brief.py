"""The answer only (`explain(..., brief=True)`, `--brief`): the output, the chosen leaves' grads and the warnings,
without a NodeResult per node, the status analysis or the flows.

It reads the very run the full evaluation makes (forward.py's `Run`, with its per-use views: the same ops, values,
warnings, errors, element budget and, to the last bit, the same grads, since torch sums a node's gradients in
the same order) after the same backward; only what the answer does not need is left out: each tensor's
numbers are not read, only tested for nan/inf. Whenever the answer needs more than that, `answer` returns None
and the full evaluation goes on from the same run (its record, less the nodes and edges): a leaf with no gradient
(`why` reads the edges), a no-gradient output or a failed backward, a nan or inf anywhere (the warning says where
it first appeared), requires_grad flags or retain_grad() (their warnings and reasons), and float16/bfloat16 (the
float64 twin). So a brief record is always exactly the full record without "nodes", "edges" and "contributions".
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradflow.analysis.explanation import Explanation, NodeResult
from gradflow.engine.forward import Run
from gradflow.engine.nonfinite import HALF_NAMES, all_finite
from gradflow.engine.results import node_result

if TYPE_CHECKING:
    import torch

    from gradflow.errors import GradflowError


def answer(run: Run, out: torch.Tensor, error: GradflowError | None, values: dict, wrt: list[str], dtype: str,
           device: str) -> Explanation | None:
    """The brief Explanation of a run after its backward, or None where only the full evaluation can say it."""
    graph = run.g
    if error is not None or dtype in HALF_NAMES or len(graph.steps) != len(graph.nodes):  # flags, retain_grad()
        return None
    grads = {name: run.grads.get(graph.inputs[name]) for name in wrt}
    if any(g is None for g in grads.values()) or not all_finite(run.t.values(), run.grads.values(), run.flows.values()):
        return None
    return Explanation(graph.source, list(wrt), dtype, device, [], _output(run, out), grads, graph, dict(values),
                       [], warnings=run.warnings, brief=True)


def _output(run: Run, t: torch.Tensor) -> NodeResult:
    """The output's NodeResult, as results.node_results makes it, "live" as the analysis would say (the brief
    answer is given only for an output that requires grad)."""
    return node_result(run.g.nodes[run.g.output], t, run.grads, "live")
