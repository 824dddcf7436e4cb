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
    worker.slots.append(slot)
    pool.workers.append(worker)
    dead, pieces, waiting = pool._crashed(worker)
    assert dead is slot and waiting == [] and not worker.slots
    return pieces


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
    assert pool._crashed(worker) == (None, [], [])


def test_a_dead_workers_chunk_waiting_in_its_pipe_goes_to_another_as_it_is(pool):
    worker = _Worker(Dead(), Conn(), Current(3))
    running, waiting = _Slot(1, ["a", "b", "c"]), _Slot(4, ["d", "e"])
    worker.slots.extend([running, waiting])
    pool.workers.append(worker)
    dead, pieces, rest = pool._crashed(worker)
    assert dead is running and rest == [waiting] and (waiting.first, waiting.lines, waiting.out) == (4, ["d", "e"], [])
    assert [(p.first, p.lines, p.done) for p in pieces] == [(1, ["a", "b"], False), (3, [], True)]


class Sent:
    def __init__(self):
        self.messages = []

    def send_bytes(self, data):
        self.messages.append(data)


def test_a_busy_worker_gets_a_chunk_more_only_if_it_fits_in_its_pipe(pool):
    """The command must never block on a busy worker (it may be blocked sending its records): a chunk to a worker
    that has one already must fit in the pipe's buffer, or it waits for an idle worker."""
    from multiprocessing.reduction import ForkingPickler

    worker = _Worker(None, Sent(), Current(0))
    pool.room = 1000
    small, big, other = _Slot(1, ["x"]), _Slot(2, ["y" * 2000]), _Slot(3, ["z" * 2000])
    assert pool._give(worker, small)  # idle: always
    assert not pool._give(worker, big) and list(worker.slots) == [small]  # busy, and too big for the pipe
    assert pool._give(_Worker(None, Sent(), Current(0)), other)  # an idle worker takes any size
    worker.slots.clear()
    assert pool._give(worker, big)
    assert [ForkingPickler.loads(m) for m in worker.conn.messages] == [(1, ["x"], None), (2, ["y" * 2000], None)]


def test_the_fork_server_ends_without_tearing_down_what_it_imported():
    """batch_cold (the fork server's first preload) ends the process at exit without Python's finalization: its
    ~0.2 s teardown of torch's modules, once the command had gone, kept the command's stdout open that long (a
    reader of the batch's output waited for its end). A finalizer run at shutdown shows whether it was done."""
    from ..processes import PYTHON, run

    code = ("import os, gradflow.studies.batch_cold\n"
            "class Torn:\n"
            "    def __del__(self): os.write(2, b'torn down')\n"
            "kept = Torn()\n"
            "raise SystemExit  # as multiprocessing's fork server ends once the command has gone\n")
    done = run(PYTHON + ["-c", code])
    assert (done.returncode, done.stderr) == (0, b"")
