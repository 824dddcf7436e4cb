"""Program text -> checked, lowered Graph, once per distinct text and limits (batch and sweeps reuse it).

The compiled graphs are kept in a cache bounded by their estimated size in bytes (PARSE_CACHE_BYTES, 64 MB),
not by their number: a graph of an 8 KB program can take a megabyte (~400 bytes per node, and every node
keeps its own text of up to NAME_WIDTH characters, language/graph.py), so a count of 1,024 could hold
gigabytes. The least recently used graphs go first; a graph larger than the whole budget is not kept.

Torch-free: a syntax error or a limit is found before torch is imported.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, NamedTuple

from gradflow.language.parser import parse
from gradflow.language.prechecks import check_graph, check_source, check_tree
from gradflow.limits import PARSE_CACHE_BYTES, Limits, current

if TYPE_CHECKING:  # the node classes load on first use: a syntax error needs none of them
    from gradflow.language.graph import Graph

# Measured with tracemalloc: a Node with its Span, args and names tuples, and a str, besides their characters.
NODE_BYTES = 400
STR_BYTES = 50
GRAPH_BYTES = 2000  # the Graph itself, its inputs mapping and tuples


def graph_bytes(graph: Graph) -> int:
    """An estimate of the memory a compiled graph holds: its nodes, their texts and the source."""
    top = "\0" if graph.source.isascii() else max(graph.source)  # isascii: no walk over the text
    width = 1 if top < "\u0100" else 2 if top < "\U00010000" else 4  # bytes per character, as CPython stores them
    flags = [s for s in graph.steps if not hasattr(s, "op")] if len(graph.steps) != len(graph.nodes) else []
    # (the steps are the nodes, and the flags between them)
    texts = sum([len(n.text) for n in graph.nodes]) + sum([len(s.text) for s in flags])
    return ((NODE_BYTES + STR_BYTES) * (len(graph.nodes) + len(flags)) + 8 * len(graph.steps)
            + width * (texts + len(graph.source)) + STR_BYTES + GRAPH_BYTES)


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    entries: int
    bytes: int  # the estimated size of the graphs kept
    budget: int  # at most this many bytes are kept


class _Cache:
    """Least recently used first out, bounded by the graphs' estimated bytes."""

    def __init__(self, budget: int):
        self.budget = budget
        self.entries: OrderedDict[tuple[str, Limits], tuple[Graph, int]] = OrderedDict()
        self.bytes = self.hits = self.misses = 0
        self.lock = threading.Lock()

    def get(self, key: tuple[str, Limits]) -> Graph | None:
        with self.lock:
            found = self.entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
            self.entries.move_to_end(key)
            return found[0]

    def put(self, key: tuple[str, Limits], graph: Graph) -> None:
        size = graph_bytes(graph) + (0 if key[0] is graph.source else len(key[0]))
        with self.lock:
            if size > self.budget or key in self.entries:
                return
            self.entries[key] = (graph, size)
            self.bytes += size
            while self.bytes > self.budget:
                _, (_, dropped) = self.entries.popitem(last=False)
                self.bytes -= dropped

    def info(self) -> CacheInfo:
        return CacheInfo(self.hits, self.misses, len(self.entries), self.bytes, self.budget)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.bytes = self.hits = self.misses = 0


_CACHE = _Cache(PARSE_CACHE_BYTES)


def compile_program(source: str, limits: Limits | None = None) -> Graph:
    """Parse and lower once per distinct text (batch and sweeps reuse it), within `limits`
    (default: the limits in force, see `limits.using`)."""
    key = (source, current() if limits is None else limits)
    graph = _CACHE.get(key)
    if graph is None:
        graph = _compile(*key)
        _CACHE.put(key, graph)
    return graph


def _compile(source: str, limits: Limits) -> Graph:
    check_source(source, limits)
    program = parse(source)  # first: a syntax error never loads syntax.py
    check_tree(program, limits)
    from gradflow.language.graph import lower  # once a program has parsed: a syntax error never loads it

    graph = lower(program)
    check_graph(graph, limits)
    return graph


compile_program.cache_info = _CACHE.info  # type: ignore[attr-defined]
compile_program.cache_clear = _CACHE.clear  # type: ignore[attr-defined]
