"""The parse cache is bounded by the estimated bytes of the graphs it keeps, not by their number."""
import gc
import tracemalloc

import pytest

from gradflow.language import compile as compiling
from gradflow.language.compile import compile_program, graph_bytes
from gradflow.limits import PARSE_CACHE_BYTES, Limits


def _program(i: int, groups: int = 2) -> str:
    """~1 KB, distinct for each i: a long sum in groups of 50 terms (within the depth limit)."""
    return "x*(" + "+".join("(" + "+".join(f"{i}.{k:04d}" for k in range(g * 50, g * 50 + 50)) + ")"
                            for g in range(groups)) + ")"


@pytest.fixture
def small_cache(monkeypatch):
    cache = compiling._Cache(400_000)
    monkeypatch.setattr(compiling, "_CACHE", cache)
    return cache


def test_the_default_budget_is_64_mb():
    assert PARSE_CACHE_BYTES == 64 * 2**20 and compile_program.cache_info().budget == PARSE_CACHE_BYTES


def test_distinct_programs_never_hold_more_than_the_budget(small_cache):
    sizes = []
    for i in range(20):
        sizes.append(graph_bytes(compile_program(_program(i))))
        assert small_cache.info().bytes <= small_cache.budget
    assert sum(sizes) > 3 * small_cache.budget  # far more was compiled than is kept
    assert 0 < small_cache.info().entries < 20


def test_the_least_recently_used_go_first_and_repeats_still_hit(small_cache):
    first = _program(0)
    compile_program(first)
    for i in range(1, 20):
        compile_program(first)  # used again and again: never the oldest
        compile_program(_program(i))
    hits = small_cache.info().hits
    assert compile_program(first) is compile_program(first)  # the same Graph object: no re-parse
    assert small_cache.info().hits == hits + 2
    compile_program(_program(1))  # long since evicted: parsed again
    assert small_cache.info().misses == 21


def test_a_graph_larger_than_the_whole_budget_is_not_kept(monkeypatch):
    cache = compiling._Cache(1000)
    monkeypatch.setattr(compiling, "_CACHE", cache)
    compile_program(_program(1))
    assert cache.info().entries == 0 and cache.info().bytes == 0


@pytest.mark.parametrize("source", [_program(3, groups=17),  # ~9 KB, ~1,800 nodes: the batch that took GBs
                                    "+".join(["x"] * 400),  # a chain: each node's text is the whole prefix
                                    ";".join(f"a{i} = sin(x*{i})" for i in range(300)) + "; a1"])
def test_the_estimate_is_close_to_the_memory_measured(source):
    limits = Limits(depth=5000)
    compile_program("x+1", limits)  # lark and the node classes loaded outside the measurement,
    compile_program("x+2", limits)  # and the fast parser's tables (parser.py), built by the next parse
    gc.collect()
    tracemalloc.start()
    try:
        graph = compiling._compile(source, limits)
        gc.collect()
        measured = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 0.7 < graph_bytes(graph) / measured < 1.6, (graph_bytes(graph), measured)
