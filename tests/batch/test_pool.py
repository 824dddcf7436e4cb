"""What a dead worker's chunk becomes (pool.Pool._crashed, chunks.split), without processes: the
records that came stay, the lines it made but did not send run again, the line in flight gets a `crashed` record,
the rest run again. The real thing (a worker SIGKILLed mid-record) is tests/cli/test_batch_jobs.py."""
import json

import pytest

from gradflow.batch.chunks import Chunk, Worker
from gradflow.batch.pool import Pool


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
    p = Pool(2, encode, {"text": True})
    yield p
    p.close()


def died(pool, chunk: Chunk, current: int) -> list[Chunk]:
    worker = Worker(Dead(), Conn(), Current(current))
    worker.chunks.append(chunk)
    pool.workers.append(worker)
    dead, pieces, waiting = pool._crashed(worker)
    assert dead is chunk and waiting == [] and not worker.chunks
    return pieces


def test_records_that_came_stay_the_unsent_run_again_the_one_in_flight_is_crashed(pool):
    lines = [f"x*{n}" for n in range(10, 20)]  # lines 10..19
    chunk = Chunk(10, lines)
    chunk.out = [(10, "r10", None, "x*10"), (11, "r11", None, "x*11"), (12, "r12", None, "x*12")]  # sent before it died
    chunk.given = 2  # two of them already written
    pieces = died(pool, chunk, current=14)  # it had made 13, not sent it, and was on 14
    assert [(p.first, p.lines, p.done) for p in pieces] == [
        (10, lines[:3], True), (13, ["x*13"], False), (14, [], True), (15, lines[5:], False)]
    assert pieces[0] is chunk and chunk.given == 2 and len(chunk.out) == 3  # nothing written twice
    number, text, kind, source = pieces[2].out[0]
    rec = json.loads(text)
    assert (number, kind, source, rec["id"], rec["line"], rec["error"]["kind"]) == (14, "crashed", "x*14", 14, 14,
                                                                                    "crashed")
    assert rec["error"]["message"] == "the worker process evaluating line 14 was killed by signal SIGKILL before " \
                                      "its record was made"
    assert pool.workers == []


def test_a_worker_that_died_between_records_has_its_rest_run_again(pool):
    chunk = Chunk(1, ["x", "", "y"])
    chunk.out = [(1, "r1", None, "x")]
    assert [(p.first, p.lines, p.done) for p in died(pool, chunk, current=0)] == [
        (1, ["x"], True), (2, ["", "y"], False)]


def test_a_worker_that_died_on_its_first_line(pool):
    pieces = died(pool, Chunk(5, ["a", "b"]), current=5)
    assert [(p.first, p.lines, p.done) for p in pieces] == [(5, [], True), (6, ["b"], False)]
    assert json.loads(pieces[0].out[0][1])["error"]["kind"] == "crashed"


def test_an_idle_worker_that_died_leaves_nothing_to_do(pool):
    worker = Worker(Dead(), Conn(), Current(0))
    pool.workers.append(worker)
    assert pool._crashed(worker) == (None, [], [])


def test_a_dead_workers_chunk_waiting_in_its_pipe_goes_to_another_as_it_is(pool):
    worker = Worker(Dead(), Conn(), Current(3))
    running, waiting = Chunk(1, ["a", "b", "c"]), Chunk(4, ["d", "e"])
    worker.chunks.extend([running, waiting])
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

    worker = Worker(None, Sent(), Current(0))
    pool.room = 1000
    small, big, other = Chunk(1, ["x"]), Chunk(2, ["y" * 2000]), Chunk(3, ["z" * 2000])
    assert pool._give(worker, small)  # idle: always
    assert not pool._give(worker, big) and list(worker.chunks) == [small]  # busy, and too big for the pipe
    assert pool._give(Worker(None, Sent(), Current(0)), other)  # an idle worker takes any size
    worker.chunks.clear()
    assert pool._give(worker, big)
    assert [ForkingPickler.loads(m) for m in worker.conn.messages] == [(1, ["x"]), (2, ["y" * 2000])]



@pytest.mark.slow
@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/stat"), reason="finds the fork server through /proc")
def test_the_command_ends_its_fork_server_when_it_is_done():
    """Left alone, the fork server would end after the command by tearing down torch, holding the command's
    stdout meanwhile (a reader of the output waited for that). When the output has ended, nothing the command
    started is still running."""
    import subprocess
    import uuid

    from ..processes import GRADFLOW, child, processes_left

    marker = f"GRADFLOW_TEST_MARK={uuid.uuid4()}"
    key, value = marker.split("=")
    with child([*GRADFLOW, "batch", "-", "--text", "--jobs", "2", "--x", "3"], env={key: value},
               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        proc.stdin.write("x*2\nx^2\n")
        proc.stdin.close()
        assert proc.wait() == 0
        # as the command ends (a server that outlives it would still be here)
        left = [c for c in processes_left(marker) if "forkserver" in c]
        out = proc.stdout.read()
    assert [json.loads(line)["grads"]["x"] for line in out.splitlines()] == [2.0, 6.0]
    assert left == []


def _batch_in_this_process(queue) -> None:
    from typer.testing import CliRunner

    from gradflow.cli.app import app

    res = CliRunner().invoke(app, ["batch", "-", "--text", "--jobs", "2", "--x", "3"], input="x*2\nx^2\n")
    queue.put((res.exit_code, res.stdout, res.stderr))


@pytest.mark.slow
def test_a_daemonic_process_runs_its_batch_itself():
    """A library user's multiprocessing Pool worker is daemonic and may not start processes: its batch runs in
    it, where it was an internal error ("daemonic processes are not allowed to have children")."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_batch_in_this_process, args=(queue,), daemon=True)
    proc.start()
    code, stdout, stderr = queue.get(timeout=120)
    proc.join(30)
    assert code == 0, stderr
    assert [json.loads(line)["grads"]["x"] for line in stdout.splitlines()] == [2.0, 6.0]  # d(2x) = 2, d(x^2) = 2x
