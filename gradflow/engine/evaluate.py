"""The one evaluator: Graph -> torch -> backward -> Explanation.

Every view of a program builds its torch graph through forward.py, so grad_fn names, constants and errors are the
same everywhere: the table (`evaluate`, here), the picture, the numeric check and second derivatives
(`forward.forward`). `evaluate` measures every edge (forward.py's `Run` with `measure`), runs one backward and
reads the results (results.py), then the analysis explains them (analysis/status.py).
"""
from __future__ import annotations

import torch

from gradflow.analysis.explanation import EdgeResult, Explanation, NodeResult, Warning
from gradflow.analysis.status import annotate
from gradflow.engine.brief import answer
from gradflow.engine.forward import Run, forward, leaf_maker, make_leaves
from gradflow.engine.nonfinite import find_nonfinite
from gradflow.engine.results import backward, check_output, node_results
from gradflow.errors import EvalError
from gradflow.language.graph import Graph
from gradflow.limits import Limits, current, using
from gradflow.values.tensors import resolve_device, resolve_dtype


def evaluate(graph: Graph, values: dict, wrt: list[str], dtype: str = "float32", device: str = "cpu",
             measure_edges: bool = True, limits: Limits | None = None, brief: bool = False) -> Explanation:
    """Evaluate, run backward and explain. Raises GradflowError for invalid programs;
    a program whose output cannot be differentiated returns with `.error` set.
    `brief`: the answer only (engine/brief.py): no nodes, no edges."""
    torch_dtype, torch_device = resolve_dtype(dtype), resolve_device(device)
    warnings: list[Warning] = []
    run = Run(graph, leaf_maker(values, wrt, torch_dtype, torch_device, warnings), torch_dtype, torch_device,
              measure_edges=measure_edges)
    run.warnings = warnings
    with using(limits or current()):
        run.run()
        if any(n.op == "detach" and n.params for n in graph.nodes):  # a detach_(): asked of torch once
            _saved_then_detached(graph, values, wrt, torch_dtype, torch_device)
    out = check_output(run)
    error = backward(out, run)
    if brief and (done := answer(run, out, error, values, wrt, dtype, device)) is not None:
        return done
    nodes = node_results(run)
    run.warnings += find_nonfinite(nodes, run.edges, error is None, values)
    if dtype in ("float16", "bfloat16"):
        run.warnings += _against_float64(graph, nodes, run.edges, wrt, dtype, device, measure_edges, limits)
    grads = {name: nodes[graph.inputs[name]].grad for name in wrt}
    result = Explanation(graph.source, list(wrt), dtype, device, nodes, nodes[graph.output], grads, graph,
                         dict(values), run.edges, warnings=run.warnings, error=error)
    annotate(result, graph, run.flags)
    if brief:  # an answer that needs more than the run's grads: the full one, less its nodes and edges
        result.nodes, result.edges, result.brief = [], [], True
    return result


def _saved_then_detached(graph: Graph, values: dict, wrt: list[str], dtype: torch.dtype,
                         device: torch.device) -> None:
    """`a.detach_()` after an op saved a for backward: torch refuses that backward. The measured run models
    detach_() as a detached copy that later uses read, so torch itself is asked, once, on the graph exactly as
    written: every detach_() done for real on its operand's tensor, then a backward."""
    tensors = forward(graph, make_leaves(graph, values, wrt, dtype, device), dtype, device)
    for node in graph.nodes:
        if node.op == "detach" and node.params:
            tensors[node.args[0]].detach_()
    out = tensors[graph.output]
    if not out.requires_grad or out.numel() != 1:
        return  # the measured run's own checks say what is wrong
    try:  # L.backward() runs every node it can reach from L, even one behind a tensor detached in place since
        out.backward()  # (autograd.grad would stop at the tensors asked for); these leaves are this run's own
    except RuntimeError as err:
        if "detached in-place" not in str(err):
            return  # another failure: the measured run meets it and reports it
        node = next(n for n in graph.nodes if n.op == "detach" and n.params)
        raise EvalError("detached_in_place", f"'{node.text}' detaches a tensor in place that an earlier operation "
                        f"saved for backward, which torch refuses. torch says: {str(err).splitlines()[0]}",
                        hint=f"use the out-of-place detach: {node.text.replace('.detach_()', '.detach()')} as a new "
                        "name, and keep the old name for the uses before it", span=node.span,
                        source=graph.source) from None


def _against_float64(graph: Graph, nodes: list[NodeResult], edges: list[EdgeResult], wrt: list[str], dtype: str,
                     device: str, measure_edges: bool, limits: Limits | None) -> list[Warning]:
    """Half precision: the same program from the same (widened) inputs in float64; where values and gradients
    underflowed to 0 (engine/halfprec.py)."""
    from gradflow.engine.halfprec import compare

    widened = {name: nodes[i].value.detach().to(torch.float64) for name, i in graph.inputs.items()}
    ref = evaluate(graph, widened, wrt, "float64", device, measure_edges, limits)
    return compare(nodes, edges, ref.nodes, ref.edges, {w: graph.inputs[w] for w in wrt}, dtype)
