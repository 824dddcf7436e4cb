"""The gradient along each use of a parameter, for the tracer (tracer/trace.py).

In the forward the tracer keeps, for each op that uses a leaf, the autograd nodes of its results and the sequence
number of the first node the op made (the search stops at older nodes: its inputs'). At explain, `arm` searches
them for the node consuming each leaf used more than once and hooks it (one hook per node, however many leaves it
consumes: LayerNorm's weight and bias); a leaf's only use sends it its whole gradient, with no search and no
hook. The hooks listen only while explain runs backward.
"""
from __future__ import annotations

from collections import Counter
from functools import partial
from typing import TYPE_CHECKING

from gradflow.tracer.records import Use

if TYPE_CHECKING:  # the tracer imports this module: types only, no cycle
    from gradflow.tracer.trace import Trace


_CONSUMER_SEARCH_LIMIT = 256  # autograd nodes visited per op when looking for parameter uses


def hook(t: Trace, node, pairs: list):
    if len(pairs) == 1:
        node.register_hook(partial(_heard, t._ear, *pairs[0]))
    else:
        node.register_hook(partial(_heard_all, t._ear, tuple(pairs)))


def arm(t: Trace) -> None:
    """Hook the autograd nodes found in the forward, before explain's backward: those of leaves used more
    than once (a leaf's only use sends it its whole gradient: `whole`, no hook, no Python call in backward).
    Everything is hooked when part of the computation came from outside the trace, where a leaf may have
    other uses. The nodes are then let go latest first, each freed alone (docs/limits.md, long graphs)."""
    pending = list(t._found)
    t._found.clear()
    st = t.state
    serials = st.use_columns()[0]
    everything = bool(st.outside)
    if not everything and len(set(serials)) == len(serials):  # each leaf used once (the common model): no
        for use in st.made:  # search, and the uses still in columns stay numbers (TraceState.whole_below)
            use.whole = True
        st.whole_below = len(st.use_serials)
        pending.clear()  # (latest first too: list.clear drops its items from the last)
        return
    counts = Counter(serials)
    all_uses = st.uses
    by_op: dict[int, list[Use]] = {}
    for use in all_uses:
        if use.whole and counts[use.serial] > 1:  # a trace entered again: an earlier only use is one no longer
            use.whole = False
        by_op.setdefault(use.op, []).append(use)
    refs = t._refs
    flat = iter(pending)  # (t._found is flat: nodes, stop, op index, nodes, ...)
    for nodes, stop, index in zip(flat, flat, flat):
        op_uses = by_op.get(index, ())
        if not everything:
            for use in op_uses:
                if counts[use.serial] != 1:
                    break
            else:
                for use in op_uses:  # its only use: no search for the node that consumes it, no hook
                    use.whole = True
                continue
        uses = {id(leaf): use for use in op_uses if (leaf := refs[use.serial]()) is not None}  # (the leaf the op
        for node, pairs in by_node(nodes if type(nodes) is list else [nodes], uses, stop).items():  # was given)
            if not everything:
                for _, use in pairs:
                    use.whole = counts[use.serial] == 1
                pairs = [(i, use) for i, use in pairs if not use.whole]
            if pairs:
                hook(t, node, pairs)
    pending.clear()


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
