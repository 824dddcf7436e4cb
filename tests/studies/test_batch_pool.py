"""What a dead worker's chunk becomes (batch_pool._Pool._crashed, batch_slots.split), without processes: the
records that came stay, the lines it made but did not send run again, the line in flight gets a `crashed` record,
the rest run again. The real thing (a worker SIGKILLed mid-record) is tests/cli/test_batch_jobs.py."""
import json

import pytest

from gradflow.studies.batch_pool import _Pool
from gradflow.studies.batch_slots import Slot as _Slot
from gradflow.studies.batch_slots import Worker as _Worker


class Dead:
    exitcode = -9  # killed by SIGKILL

    def join(self, timeout=None):
        pass


class Conn:
    def close(self):
        pass


class Current:
    def __init__(self, value):
        self.value = value


def encode(rec: dict) -> str:
    return json.dumps({"id": rec["id"], "line": rec["line"], "error": rec["error"]})


@pytest.fixture
def pool():
    p = _Pool(2, encode, {"text": True})
    yield p
    p.close()


def died(pool, slot: _Slot, current: int) -> list[_Slot]:
    worker = _Worker(Dead(), Conn(), Current(current))
    worker.slot = slot
    pool.workers.append(worker)
    return pool._crashed(worker)


def test_records_that_came_stay_the_unsent_run_again_the_one_in_flight_is_crashed(pool):
    lines = [f"x*{n}" for n in range(10, 20)]  # lines 10..19
    slot = _Slot(10, lines)
    slot.out = [(10, "r10", None, "x*10"), (11, "r11", None, "x*11"), (12, "r12", None, "x*12")]  # sent before it died
    slot.given = 2  # two of them already written
    pieces = died(pool, slot, current=14)  # it had made 13, not sent it, and was on 14
    assert [(p.first, p.lines, p.done) for p in pieces] == [
        (10, lines[:3], True), (13, ["x*13"], False), (14, [], True), (15, lines[5:], False)]
    assert pieces[0] is slot and slot.given == 2 and len(slot.out) == 3  # nothing written twice
    number, text, kind, source = pieces[2].out[0]
    rec = json.loads(text)
    assert (number, kind, source, rec["id"], rec["line"], rec["error"]["kind"]) == (14, "crashed", "x*14", 14, 14,
                                                                                    "crashed")
    assert rec["error"]["message"] == "the worker process evaluating line 14 was killed by signal SIGKILL before " \
                                      "its record was made"
    assert pool.workers == []


def test_a_worker_that_died_between_records_has_its_rest_run_again(pool):
    slot = _Slot(1, ["x", "", "y"])
    slot.out = [(1, "r1", None, "x")]
    assert [(p.first, p.lines, p.done) for p in died(pool, slot, current=0)] == [
        (1, ["x"], True), (2, ["", "y"], False)]


def test_a_worker_that_died_on_its_first_line(pool):
    pieces = died(pool, _Slot(5, ["a", "b"]), current=5)
    assert [(p.first, p.lines, p.done) for p in pieces] == [(5, [], True), (6, ["b"], False)]
    assert json.loads(pieces[0].out[0][1])["error"]["kind"] == "crashed"


def test_an_idle_worker_that_died_leaves_nothing_to_do(pool):
    worker = _Worker(Dead(), Conn(), Current(0))
    pool.workers.append(worker)
    assert pool._crashed(worker) == []
