"""The gradient along each use of a parameter, for the tracer (tracer/trace.py).

In the forward the tracer keeps, for each op that uses a leaf, the autograd nodes of its results and the sequence
number of the first node the op made (the search stops at older nodes: its inputs'). At explain, `arm` searches
them for the node consuming each leaf used more than once and hooks it (one hook per node, however many leaves it
consumes: LayerNorm's weight and bias); a leaf's only use sends it its whole gradient, with no search and no
hook. The hooks listen only while explain runs backward (`Listening`).
"""
from __future__ import annotations

from collections import Counter
from functools import partial

from gradflow.tracer.records import TraceState, Use, grad_fn

_CONSUMER_SEARCH_LIMIT = 256  # autograd nodes visited per op when looking for parameter uses


class UseHooks:
    """One trace's per-use hooks: the nodes its forward kept, and whether the hooks listen."""

    def __init__(self) -> None:
        self._ear = [False]  # the hooks listen only while explain runs its backward
        self._found: list = []  # for arm(), flat, three entries for each op that used a leaf: the autograd node of
        #                         its result (a list of them for several results), stop, op index (no tuple kept
        #                         per op: one op in two uses a leaf, and what it keeps the collector walks); never
        #                         explained, let go with the trace

    def keep(self, outs: list, stop, index: int) -> None:
        """In the forward: op `index`'s nodes, for arm() at explain, when a report needs the flow."""
        found = grad_fn(outs[0]) if len(outs) == 1 else [g for g in map(grad_fn, outs) if g is not None] or None
        if found is not None:
            self._found += (found, stop, index)

    def hook(self, outs: list, uses: dict, stop) -> None:
        """Hook at once the nodes of an op's results that consume the leaves in `uses` ({id(leaf): Use})."""
        nodes = [g for g in map(grad_fn, outs) if g is not None]
        for node, pairs in by_node(nodes, uses, stop).items():
            hook(self._ear, node, pairs)

    def arm(self, st: TraceState, refs: list) -> None:
        """Hook the autograd nodes found in the forward, before explain's backward: those of leaves used more
        than once (a leaf's only use sends it its whole gradient: `whole`, no hook). Everything is hooked when
        part of the computation came from outside the trace, where a leaf may have other uses. `refs`: the
        trace's weak references, by serial."""
        pending, self._found = self._found, []
        serials = st.use_columns()[0]
        everything = bool(st.outside)
        if not everything and len(set(serials)) == len(serials):  # each leaf used once (the common model)
            for use in st.made:
                use.whole = True
            st.whole_below = len(st.use_serials)
            return
        counts = Counter(serials)
        by_op: dict[int, list[Use]] = {}
        for use in st.uses:
            if use.whole and counts[use.serial] > 1:  # a trace entered again: an earlier only use is one no longer
                use.whole = False
            by_op.setdefault(use.op, []).append(use)
        triples = iter(pending)
        for found, stop, index in zip(triples, triples, triples):
            nodes = found if type(found) is list else [found]
            self._arm_op(by_op.get(index, []), counts, everything, nodes, stop, refs)

    def _arm_op(self, op_uses: list[Use], counts: Counter, everything: bool, nodes: list, stop, refs: list) -> None:
        if not everything and all(counts[use.serial] == 1 for use in op_uses):
            for use in op_uses:  # its only use: no search for the node that consumes it, no hook
                use.whole = True
            return
        uses = {id(leaf): use for use in op_uses if (leaf := refs[use.serial]()) is not None}
        for node, pairs in by_node(nodes, uses, stop).items():
            if not everything:
                for _, use in pairs:
                    use.whole = counts[use.serial] == 1
                pairs = [(i, use) for i, use in pairs if not use.whole]
            if pairs:
                hook(self._ear, node, pairs)

    def listening(self) -> Listening:
        return Listening(self._ear)


class Listening:
    """While open, the per-use hooks record what flows back. (A plain context manager, not a generator's: explain
    opens one on every call.)"""

    __slots__ = ("ear",)

    def __init__(self, ear: list) -> None:
        self.ear = ear

    def __enter__(self) -> None:
        self.ear[0] = True

    def __exit__(self, *exc) -> None:
        self.ear[0] = False


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
