"""The gradient along each use of a parameter, for the tracer (tracer/trace.py).

In the forward the tracer keeps, for each op that uses a leaf, the autograd nodes of its results and the sequence
number of the first node the op made (the search stops at older nodes: its inputs'). At explain, `arm` searches
them for the node consuming each leaf used more than once and hooks it (one hook per node, however many leaves it
consumes: LayerNorm's weight and bias); a leaf's only use sends it its whole gradient, with no search and no
hook. The hooks listen only while explain runs backward.
"""
from __future__ import annotations

from functools import partial

from gradflow.tracer.records import Use

_CONSUMER_SEARCH_LIMIT = 256  # autograd nodes visited per op when looking for parameter uses


def hook(ear: list, node, pairs: list) -> None:
    """Add what flows along each (input index, Use) of the autograd node to its Use, while `ear` listens."""
    if len(pairs) == 1:
        node.register_hook(partial(_heard, ear, *pairs[0]))
    else:
        node.register_hook(partial(_heard_all, ear, tuple(pairs)))


def _heard(ear: list, i: int, use: Use, grad_inputs, grad_outputs) -> None:
    if ear[0]:
        use.add(grad_inputs[i])


def _heard_all(ear: list, pairs: tuple, grad_inputs, grad_outputs) -> None:
    if ear[0]:
        for i, use in pairs:
            use.add(grad_inputs[i])


def by_node(nodes: list, uses: dict, stop) -> dict:
    """{autograd node: [(input index, Use)]} for the edges from an op's new nodes into the leaves it used."""
    found: dict = {}
    for node, i, var in _consumers(nodes, set(uses), set() if stop is None else stop):
        found.setdefault(node, []).append((i, uses[var]))
    return found


def _consumers(nodes: list, leaf_ids: set[int], stop):
    """(autograd node, input index, id(leaf)) for every edge from this op's new nodes (the autograd nodes of its
    results) into a leaf. `stop`: the sequence number of the op's first node (older nodes are not the op's, so
    the search never walks into what computed its inputs), or the set of its inputs' nodes."""
    found: list = []
    seen: set = set()
    todo = list(nodes)
    older = stop.__gt__ if isinstance(stop, int) else stop.__contains__
    while todo and len(seen) < _CONSUMER_SEARCH_LIMIT:
        node = todo.pop()
        if node in seen or (older(node._sequence_nr()) if isinstance(stop, int) else older(node)):
            continue
        seen.add(node)
        for i, (nxt, _) in enumerate(node.next_functions):
            if nxt is None or (not isinstance(stop, int) and nxt in stop):
                continue
            if type(nxt).__name__ == "AccumulateGrad":  # a leaf's: `variable` is the leaf (no AttributeError
                var = nxt.variable  # raised and caught for every other node, as getattr(node, "variable") does)
                if id(var) in leaf_ids:
                    found.append((node, i, id(var)))
            else:
                todo.append(nxt)
    return found
