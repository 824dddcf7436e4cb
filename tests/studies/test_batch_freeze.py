"""The batch command keeps what lives as long as the batch (torch, the cached graphs) out of the collector's reach
(studies/batch_freeze.py), without keeping a record's garbage alive."""
from __future__ import annotations

import gc
import json
import weakref

import pytest

from gradflow.language.compile import compile_uncached
from gradflow.studies.batch_freeze import Freezer
from tests.processes import PYTHON, run

PROGRAMS = ["(x*y1 - detach(x*y2))^2", "sum(tanh(x)*x + sigmoid(x)) + x[0] + torch.pow(x, 2).mean(dim=0)",
            "a = x*2; b = a.detach(); (a + b)^2", "x.requires_grad = False; x*y",
            "with torch.no_grad():\n    a = x*3\nsum(a*x)", "torch.where(x > 0, x, -x).sum()"]


@pytest.fixture
def collector():
    """The test's own freezes are undone after it (what was frozen before stays frozen)."""
    was, before = gc.isenabled(), gc.get_freeze_count()
    gc.enable()
    yield before
    if gc.get_freeze_count() != before:
        gc.unfreeze()
    if not was:
        gc.disable()


@pytest.mark.parametrize("source", PROGRAMS)
def test_a_graph_holds_no_reference_cycle(source):
    """A frozen graph the cache drops is freed by reference counting alone, as every graph must be."""
    was = gc.isenabled()
    gc.disable()
    try:
        graph = compile_uncached(source)
        refs = [weakref.ref(graph)] + [weakref.ref(n) for n in graph.nodes]
        del graph
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        if was:
            gc.enable()


def test_freezes_after_the_first_record_and_every_n(collector):
    freezer = Freezer(every=3)
    held, counts = [], []
    for _ in range(7):
        held.append([[] for _ in range(50)])  # long-lived: frozen by the next freeze
        freezer.record_done()
        counts.append(gc.get_freeze_count())
    grew = [b - a for a, b in zip([collector, *counts], counts)]
    assert [g >= 50 for g in grew] == [True, False, True, False, False, True, False]  # records 1, 3 and 6


def test_a_records_reference_cycles_are_freed_not_frozen(collector):
    class Cycle:
        pass

    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    del a, b
    Freezer().record_done()  # the first record: a freeze, after a young collection
    assert ref() is None


_WATCH = """
import gc, sys
after = []
def count(phase, info):
    if phase == "stop" and info["generation"] == 2 and gc.get_freeze_count() > 100_000:  # after torch's freeze
        after.append(info)
gc.callbacks.append(count)
import atexit
atexit.register(lambda: print("full", len(after), file=sys.stderr))
sys.argv = ["gradflow", "batch", sys.argv[1], "--jobs", "1", "--brief"]
from gradflow.cli.app import run
run()
"""


@pytest.mark.slow
def test_the_command_runs_no_full_collection_over_its_cached_graphs(tmp_path):
    """3,000 distinct programs, each cached: without the freezes, the oldest generation grows by a quarter
    again and again and each full collection walks every graph kept (1 here, 4 for 10,000 lines)."""
    lines = [json.dumps({"expr": f"x*{i} + tanh(x*{i + 1})^2", "vars": {"x": 0.5}}) for i in range(3000)]
    path = tmp_path / "lines.jsonl"
    path.write_text("\n".join(lines) + "\n")
    res = run(PYTHON + ["-c", _WATCH, str(path)], text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("\n") == 3000
    assert int(res.stderr.split("full")[-1]) == 0
