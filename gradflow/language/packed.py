"""A compiled Graph as plain tuples, and back: how `batch --jobs N` hands a program compiled in the command to
the worker process that evaluates it (studies/batch_pool.py).

pickle can send a Graph as it is only slowly (its inputs are a read-only mappingproxy, which pickle refuses,
and rebuilding each frozen Node, Span and step through pickle's generic path costs ~75 us for a small program,
about what compiling it costs). As rows of plain values it pickles in C, and `unpack` rebuilds the nodes the
way the lowering builds them (graph._node: straight into each instance's dict): ~20 us in all.
`unpack(pack(g)) == g` for every graph (tests/language/test_packed.py).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any

from gradflow.errors import Span
from gradflow.language.graph import FlagStep, Graph, Node, RetainStep

_FIELDS = ("id", "op", "args", "text", "span", "names", "value", "region", "modes", "params", "inner", "block",
           "abbreviated")
_new = object.__new__
_span = tuple.__new__


def pack(graph: Graph) -> tuple:
    """The graph as tuples of str, int, float, bool and None (what pickle writes and reads fastest)."""
    rows = []
    for n in graph.nodes:
        d = vars(n)
        row = [d[f] for f in _FIELDS]
        row[4] = tuple(n.span)
        if n.inner is not None:
            row[10] = tuple(n.inner)
        rows.append(tuple(row))
    if len(graph.steps) == len(graph.nodes):
        steps: Any = None  # no flag steps: the steps are the nodes, in order
    else:
        steps = tuple(s.id if isinstance(s, Node) else
                      (isinstance(s, FlagStep), s.node, getattr(s, "value", None), tuple(s.span), s.text)
                      for s in graph.steps)
    return graph.source, tuple(rows), steps, tuple(graph.inputs.items()), graph.output


def unpack(data: tuple) -> Graph:
    """The Graph that `pack` made `data` of, equal to it in every field."""
    source, rows, packed_steps, inputs, output = data
    nodes = []
    for row in rows:
        node = _new(Node)
        d = vars(node)
        d.update(zip(_FIELDS, row))
        d["span"] = _span(Span, row[4])
        if row[10] is not None:
            d["inner"] = _span(Span, row[10])
        nodes.append(node)
    all_nodes = tuple(nodes)
    if packed_steps is None:
        steps: tuple = all_nodes
    else:
        steps = tuple(all_nodes[s] if isinstance(s, int) else
                      FlagStep(s[1], s[2], Span(*s[3]), s[4]) if s[0] else RetainStep(s[1], Span(*s[3]), s[4])
                      for s in packed_steps)
    return Graph(source, all_nodes, steps, MappingProxyType(dict(inputs)), output)
