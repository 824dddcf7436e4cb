"""Programs compiled by `batch --jobs N`'s command for its workers (studies/batch_ahead.py): a worker that gets
them makes exactly the records it makes without them, for good lines and bad, and finds them in its compile
cache instead of parsing. Oracle: the records of run_batch with nothing compiled ahead, and hand-derived
values (d(a*x + b)/dx = a)."""
import json
import os
import sys
import threading
import time

import pytest

from gradflow.language.compile import compile_program
from gradflow.limits import as_limits
from gradflow.studies.batch import run_batch
from gradflow.studies.batch_ahead import compile_ahead, learn

LINES = [
    "\ufeff" + json.dumps({"id": "a", "expr": "3*x + 1", "vars": {"x": 2}}),  # a byte-order mark on line 1
    json.dumps("x*y"),
    "",
    json.dumps({"id": 4, "expr": "(x*", "vars": {"x": 1}}),  # a syntax error
    '{"expr": "x*2", "vars": {"x": 1}',  # not JSON
    json.dumps({"id": 6, "expr": "x*y", "colour": "red"}),  # an unknown field: its program compiles
    json.dumps({"id": 7, "expr": "sum(w)", "vars": {"w": "ones(40,40)"}}),  # over the elements limit
    json.dumps({"expr": "detach(x)*5", "vars": {"x": 2}}),  # no gradient: an answer
    json.dumps({"id": 9, "expr": "x*y", "vars": {"x": 2, "y": 5}}),  # a program already compiled above
    json.dumps({"id": 10, "expr": 42}),  # no program
    json.dumps({"id": 11, "expr": "x*" + "+".join(["1"] * 600)}),  # over the length limit
]
OPTIONS = {"values": {"x": "3", "y": "4"}, "limits": as_limits({"elements": 1000, "length": 1000})}


def records(lines, first=1, **options):
    return [json.dumps(r) for r in run_batch(lines, first_line=first, **{**OPTIONS, **options})]


@pytest.fixture
def fresh_cache():
    compile_program.cache_clear()
    yield
    compile_program.cache_clear()


def test_what_the_command_compiles_and_what_it_leaves_to_the_worker():
    packed, size = compile_ahead(LINES, 1, False, OPTIONS["limits"])
    assert [p is not None for p in packed] == [True, True, False, False, False, True, True, True, True, False,
                                               False]
    assert [p[0] for p in packed if p is not None] == ["3*x + 1", "x*y", "x*y", "sum(w)", "detach(x)*5", "x*y"]
    assert packed[1] is packed[5] is packed[8]  # a repeated program is compiled (and sent) once
    assert size > 0


def test_records_are_the_same_with_programs_compiled_ahead_or_not(fresh_cache):
    plain = records(LINES)
    parsed = compile_program.cache_info().misses
    compile_program.cache_clear()
    packed, _ = compile_ahead(LINES, 1, False, OPTIONS["limits"])
    learn(packed, OPTIONS["limits"])
    before = compile_program.cache_info()
    ahead = records(LINES)
    after = compile_program.cache_info()
    assert ahead == plain
    assert after.misses - before.misses == parsed - 4  # the 4 programs that compile are not parsed again
    got = [json.loads(r) for r in ahead]
    assert (got[0]["id"], got[0]["output"]["value"], got[0]["grads"]["x"]) == ("a", 7.0, 3.0)
    assert (got[1]["output"]["value"], got[1]["grads"]["x"]) == (12.0, 4.0)  # the defaults x=3, y=4
    assert [(r["line"], r["error"]["kind"]) for r in got if r["error"]] == [
        (4, "syntax"), (5, "bad_json"), (6, "bad_record"), (7, "limit_elements"), (8, "no_gradient"),
        (10, "bad_record"), (11, "limit_length")]
    assert (got[2]["source"], got[4]["source"]) == ("(x*", "x*y")  # as written, also where the record failed


def test_a_learned_program_is_found_not_parsed(fresh_cache):
    limits = OPTIONS["limits"]
    packed, _ = compile_ahead([json.dumps("sin(x)*x")], 1, False, limits)
    learn(packed, limits)
    graph = compile_program("sin(x)*x", limits)
    assert compile_program.cache_info()[:2] == (1, 0)  # a hit, no miss
    assert [n.text for n in graph.nodes] == ["x", "sin(x)", "sin(x)*x"]
    assert compile_program("sin(x)*x", as_limits({"elements": 999})) is not graph  # other limits: compiled again


def test_compiling_stops_when_told_and_leaves_the_rest_to_the_worker():
    asked = []

    def stop():
        asked.append(True)
        return len(asked) > 2

    packed, _ = compile_ahead([json.dumps(f"x*{k}") for k in range(5)], 1, False, OPTIONS["limits"], stop)
    assert [p and p[0] for p in packed] == ["x*0", "x*1", None, None, None]


class _Slot:
    """What Ahead reads and writes of a batch_slots.Slot."""

    def __init__(self, first, lines):
        self.first, self.lines, self.ahead = first, lines, None


def test_a_thread_at_the_lowest_priority_compiles_the_slots_in_order_until_stopped(monkeypatch):
    """The command's compiling thread takes only CPU time nothing else of the batch wants (on a busy machine
    it took the fork server's, delaying the first worker): its own niceness, not the command's."""
    from gradflow.studies import batch_ahead

    def priority():
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    mine, theirs = priority(), []

    def spy(*args, **kw):
        theirs.append((threading.current_thread() is threading.main_thread(), priority()))
        return compile_ahead(*args, **kw)

    monkeypatch.setattr(batch_ahead, "compile_ahead", spy)
    ahead = batch_ahead.Ahead(False, OPTIONS["limits"])
    one, two = _Slot(1, [json.dumps("x*3"), json.dumps("(x*")]), _Slot(3, ["", json.dumps({"expr": "x*4"})])
    ahead.add(one)
    ahead.add(two)
    deadline = time.monotonic() + 30
    while two.ahead is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [p and p[0] for p in one.ahead] == ["x*3", None]  # a syntax error: its worker compiles it again
    assert [p and p[0] for p in two.ahead] == [None, "x*4"]
    assert ahead.bytes > 0
    assert [main for main, _ in theirs] == [False, False]
    if sys.platform.startswith("linux"):
        assert [nice for _, nice in theirs] == [max(mine, batch_ahead.AHEAD_NICE)] * 2
    assert priority() == mine
    ahead.stop()  # the first worker is ready: what comes later goes as it is
    three = _Slot(5, [json.dumps("x*5")])
    ahead.add(three)
    ahead.thread.join(30)
    assert not ahead.thread.is_alive() and three.ahead is None and len(theirs) == 2


def test_text_mode_and_a_shard_numbered_from_line_5(fresh_cache):
    lines = ["\ufeffx*y", "  2*x  ", "x^", ""]  # line 5 first: its byte-order mark is not skipped
    plain = records(lines, first=5, text=True)
    compile_program.cache_clear()
    packed, _ = compile_ahead(lines, 5, True, OPTIONS["limits"])
    assert [p is not None for p in packed] == [False, True, False, False]
    learn(packed, OPTIONS["limits"])
    assert records(lines, first=5, text=True) == plain
    got = [json.loads(r) for r in plain]
    assert [(r["line"], r["error"] and r["error"]["kind"]) for r in got] == [(5, "syntax"), (6, None), (7, "syntax")]
    assert got[1]["grads"]["x"] == 2.0


def test_a_packed_program_that_cannot_be_rebuilt_is_compiled_by_the_worker(fresh_cache):
    limits = OPTIONS["limits"]
    learn([("x*y", "not rows", None, (), 0)], limits)  # whatever arrives, the worker does not fail on it
    assert records([json.dumps("x*y")]) == records([json.dumps("x*y")])
    assert json.loads(records([json.dumps("x*y")])[0])["grads"]["x"] == 4.0


@pytest.mark.slow
def test_a_pool_sends_its_workers_the_programs_it_compiled_while_they_started(monkeypatch):
    """Real worker processes: the lines read before the first worker is ready are compiled by the command, and
    the records are the ones one process makes (good lines, and errors among them)."""
    from functools import partial

    from gradflow.studies import batch_ahead, batch_pool
    from gradflow.studies.batch_worker import forget_forkserver
    from gradflow.values.jsonable import dumps

    forget_forkserver()  # one left running by an earlier test in this process would start workers at once

    compiled: list[int] = []

    def spy(lines, first, text, limits, stop):
        got = compile_ahead(lines, first, text, limits)
        compiled.extend(number for number, p in enumerate(got[0], first) if p is not None)
        return got

    monkeypatch.setattr(batch_ahead, "compile_ahead", spy)
    monkeypatch.setattr(batch_ahead, "AHEAD_NICE", 0)  # compiled in time also on a busy machine
    lines = [json.dumps({"id": i, "expr": f"{i % 7 + 1}*x + {i}", "vars": {"x": i % 5}}) for i in range(300)]
    lines[10] = json.dumps({"id": 10, "expr": "(x*"})
    lines[20] = "not json"
    encode = partial(dumps)
    one = list(batch_pool.batch_lines_out(lines, 1, encode, **OPTIONS))
    two = list(batch_pool.batch_lines_out(lines, 2, encode, **OPTIONS))
    assert two == one
    assert set(range(1, 301)) - set(compiled) == {11, 21}  # the lines that do not compile
    got = [json.loads(text) for _, text, _, _ in two]
    assert [r["grads"]["x"] for r in got[:3]] == [1.0, 2.0, 3.0]
    assert (got[10]["error"]["kind"], got[20]["error"]["kind"]) == ("syntax", "bad_json")
