"""`gradflow batch --jobs N` (worker processes) and `--first-line N` (shards), in real processes.

The oracle for order and isolation is the one-process run (`--jobs 1`) and hand-derived values: a line
"A*x + B" at x = v has output A*v + B and gradient A.
"""
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradflow.cli.app import app

from ..processes import GRADFLOW, PYTHON, child, open_fifo_for_writing, run

SLOW = {"expr": "sum(tanh(x@x@x@x))", "vars": {"x": "randn(400,400)"}}  # ~0.05-0.4 s; in full, ~48 MB of JSON
VERY_SLOW = {"expr": "sum(tanh(x@x@x@x@x@x@x@x))", "vars": {"x": "randn(1000,1000)"}}  # ~1-5 s, ~150 MB


def linear(i: int) -> tuple[dict, float, float]:
    """A cheap line with its hand-derived (output, grad)."""
    a, b, v = i % 7 + 1, i % 5, (i % 11) - 5
    return {"id": i, "expr": f"{a}*x + {b}", "vars": {"x": v}}, float(a * v + b), float(a)


def generated(seed: int, n: int) -> bytes:
    """A batch with every kind of line: distinct programs (no text repeated), ids or none, blank lines, bad
    JSON, an unknown field, a syntax error, a value over the elements limit, a line not UTF-8, a line over the
    line limit, a no-gradient answer, plain strings."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.04:
            out.append(b"")
        elif kind < 0.07:
            out.append(b'{"expr": "x*2", "vars": {"x": 1}')  # cut short
        elif kind < 0.09:
            out.append(json.dumps({"id": i, "expr": "x", "colour": "red"}).encode())
        elif kind < 0.11:
            out.append(json.dumps({"id": f"s{i}", "expr": f"(x*{i} +", "vars": {"x": 1}}).encode())
        elif kind < 0.13:
            out.append(json.dumps({"id": i, "expr": "sum(w)", "vars": {"w": "ones(40,40)"}}).encode())  # > 1000
        elif kind < 0.14:
            out.append(b'"x\xff' + str(i).encode() + b'"')
        elif kind < 0.15:
            out.append(json.dumps({"id": i, "expr": "x+" + "1+" * 2000 + "1"}).encode())  # > 3000 bytes
        elif kind < 0.17:
            out.append(json.dumps({"expr": f"detach(x)*{i}", "vars": {"x": 2}}).encode())
        elif kind < 0.3:
            out.append(json.dumps(f"x*{i}").encode())
        else:
            rec, _, _ = linear(i)
            if rng.random() < 0.3:
                rec["expr"] = f"sum(tanh(w*{i}) * x)"
                rec["vars"]["w"] = [round(rng.uniform(-1, 1), 3) for _ in range(rng.randint(2, 6))]
            out.append(json.dumps(rec).encode())
    return b"\n".join(out) + b"\n"


LIMITS = ["--limit", "elements=1000", "--limit", "line=3000"]


def batch(args, data: bytes | None = None, **kw):
    return run(GRADFLOW + ["batch", *args], input=data, **kw)


# ---- one process and two give the same bytes ------------------------------------------------------------------

@pytest.mark.slow
def test_jobs_2_is_byte_identical_to_jobs_1_on_a_generated_batch(tmp_path):
    data = generated(7, 400)
    (tmp_path / "jobs.jsonl").write_bytes(data)
    one = batch([str(tmp_path / "jobs.jsonl"), "--jobs", "1", "--x", "3", *LIMITS])
    two = batch([str(tmp_path / "jobs.jsonl"), "--jobs", "2", "--x", "3", *LIMITS])
    piped = batch(["-", "--jobs", "2", "--x", "3", *LIMITS], data)  # stdin: the streaming path
    assert one.returncode == two.returncode == piped.returncode == 4
    assert two.stdout == one.stdout and piped.stdout == one.stdout
    assert two.stderr == one.stderr == piped.stderr
    records = [json.loads(line) for line in one.stdout.splitlines()]
    nonblank = [k + 1 for k, line in enumerate(data.split(b"\n")[:-1]) if line.strip()]
    assert [r["line"] for r in records] == nonblank  # one record per non-blank line, in order
    kinds = {r["error"]["kind"] for r in records if r["error"]}
    assert {"bad_json", "bad_record", "syntax", "limit_elements", "bad_text", "limit_line"} <= kinds
    linear_ones = [r for r in records if r["error"] is None and "*x + " in (r["source"] or "")]
    assert len(linear_ones) > 100
    for r in linear_ones:
        _, value, grad = linear(r["id"])
        assert (r["output"]["value"], r["grads"]["x"]) == (value, grad)
    no_grad = [r for r in records if (r["source"] or "").startswith("detach(x)*")]
    assert no_grad and all(r["error"]["kind"] == "no_gradient" for r in no_grad)


@pytest.mark.slow
def test_order_is_kept_when_early_records_are_slow_and_later_ones_fast(tmp_path):
    """The first 16 lines take ~0.1-0.4 s each, the next 984 a millisecond: the second worker finishes its fast
    chunks long before the first one ends; their records still come after the slow ones. --summary: in full, a
    slow line's record is ~48 MB of JSON (every 400x400 value), which made this test take minutes."""
    lines = [{**SLOW, "id": i} for i in range(16)] + [linear(i)[0] for i in range(16, 1000)]
    (tmp_path / "jobs.jsonl").write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    res = batch([str(tmp_path / "jobs.jsonl"), "--jobs", "2", "--summary"])
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["id"] for r in records] == list(range(1000))  # more chunks than are read ahead: the window moves
    assert [r["line"] for r in records] == list(range(1, 1001))
    for r in records[16:]:
        _, value, grad = linear(r["id"])
        assert (r["output"]["value"], r["grads"]["x"]) == (value, grad)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_jobs_2_answers_a_line_before_the_next_one_is_written(tmp_path):
    """Streaming: a record goes out as soon as it (and every one before it) is made, not when input ends."""
    fifo = tmp_path / "jobs"
    os.mkfifo(fifo)
    with child(GRADFLOW + ["batch", str(fifo), "--jobs", "2", "--x", "3"]) as proc:
        with open_fifo_for_writing(fifo) as fh:
            for k in range(1, 4):
                fh.write(f'"x*{k}"\n')
                fh.flush()
                rec = json.loads(proc.stdout.readline())
                assert (rec["line"], rec["output"]["value"], rec["grads"]) == (k, 3.0 * k, {"x": float(k)})
        assert proc.stdout.read() == b"" and proc.wait(timeout=60) == 0


# ---- a worker that dies, Ctrl-C -------------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def workers_of(pid: int, want: int = 1, timeout: float = 60) -> list[int]:
    """The worker processes of a `gradflow batch`: the children of its fork server (its only grandchildren)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = _children()
        found = [w for c in kids.get(pid, []) for w in kids.get(c, [])]
        if len(found) >= want:
            return found
        time.sleep(0.05)
    pytest.fail(f"no {want} worker processes under {pid} after {timeout} s", pytrace=False)


def state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return -1
    return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks


def started(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def first_worker_busy(pid: int, timeout: float = 60) -> int:
    """The first worker started (it gets line 1), once it has spent 0.2 s of CPU: it is inside that record
    (a worker's start-up costs a few ms: the fork server did the rest)."""
    deadline = time.monotonic() + timeout
    first = min(workers_of(pid), key=started)
    while time.monotonic() < deadline:
        if cpu_ticks(first) >= 0.2 * os.sysconf("SC_CLK_TCK"):
            return first
        time.sleep(0.01)
    pytest.fail(f"the first worker of {pid} did not run for {timeout} s", pytrace=False)


def gone(pid: int) -> bool:
    return state(pid) in ("Z", "X")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_a_worker_killed_mid_record_gives_that_record_an_error_and_the_batch_goes_on(tmp_path):
    """Line 1 takes a second or more; it always goes to the first worker started, which is killed once it has
    spent CPU on it. Its record is a `crashed` error; every other line still gets its own, right, record."""
    lines = [VERY_SLOW] + [linear(i)[0] for i in range(1, 31)]
    (tmp_path / "jobs.jsonl").write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    with child(GRADFLOW + ["batch", str(tmp_path / "jobs.jsonl"), "--jobs", "2"], timeout=110) as proc:
        victim = first_worker_busy(proc.pid)
        os.kill(victim, signal.SIGKILL)
        out, err = proc.stdout.read(), proc.stderr.read()
        assert proc.wait(timeout=60) == 4, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["line"] for r in records] == list(range(1, 32))  # every line once, in order
    crashed = records[0]
    assert (crashed["id"], crashed["source"], crashed["error"]["kind"]) == (1, VERY_SLOW["expr"], "crashed")
    assert crashed["error"]["message"] == ("the worker process evaluating line 1 was killed by signal SIGKILL "
                                           "before its record was made")
    assert b"1 of 31 lines failed" in err and b"Traceback" not in err
    for r in records[1:]:
        _, value, grad = linear(r["id"])
        assert (r["error"], r["output"]["value"], r["grads"]["x"]) == (None, value, grad)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_ctrl_c_stops_every_worker_and_leaves_whole_records(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group: the command, its fork server and its workers."""
    (tmp_path / "jobs.jsonl").write_text("".join(json.dumps({**SLOW, "id": i}) + "\n" for i in range(400)))
    with child(GRADFLOW + ["batch", str(tmp_path / "jobs.jsonl"), "--jobs", "2"], timeout=110,
               start_new_session=True) as proc:
        first = proc.stdout.readline()
        workers = workers_of(proc.pid, want=2)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.stdout.read(), proc.stderr.read()
        assert proc.wait(timeout=60) == 130 and b"Traceback" not in err, err
    records = [json.loads(line) for line in (first + out).splitlines()]  # each one whole
    assert [r["id"] for r in records] == list(range(len(records))) and 1 <= len(records) < 400
    deadline = time.monotonic() + 10
    while not all(gone(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(w) for w in workers)


def fork_server_of(pid: int, timeout: float = 60) -> int:
    """The fork server of a `gradflow batch --jobs N`: its child running multiprocessing.forkserver."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for kid in _children().get(pid, []):
            try:
                if b"forkserver" in Path(f"/proc/{kid}/cmdline").read_bytes():
                    return kid
            except OSError:
                continue
        time.sleep(0.01)
    pytest.fail(f"no fork server under {pid} after {timeout} s", pytrace=False)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the fork server through /proc")
def test_ctrl_c_while_the_fork_server_still_imports_torch_is_quiet(tmp_path):
    """In the first second the command compiles ahead while its fork server imports torch; a terminal's Ctrl-C
    reaches both. Before, the fork server died in its import with a KeyboardInterrupt traceback on stderr."""
    (tmp_path / "jobs.jsonl").write_text("".join(json.dumps(linear(i)[0]) + "\n" for i in range(5000)))
    with child(GRADFLOW + ["batch", str(tmp_path / "jobs.jsonl"), "--jobs", "2"], timeout=110,
               start_new_session=True) as proc:
        server = fork_server_of(proc.pid)
        deadline = time.monotonic() + 60
        while b"libtorch" not in Path(f"/proc/{server}/maps").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)  # its import of torch has begun (its shared libraries are loaded)
        assert not _children().get(server)  # no worker yet: it is still preloading (torch takes ~1 s)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.stdout.read(), proc.stderr.read()
        assert proc.wait(timeout=60) == 130
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err, err
    records = [json.loads(line) for line in out.splitlines()]  # whole ones, if any
    assert [r["id"] for r in records] == list(range(len(records)))
    deadline = time.monotonic() + 30
    while not gone(server) and time.monotonic() < deadline:  # it ends once its preload is done
        time.sleep(0.05)
    assert gone(server)


@pytest.mark.slow
def test_ctrl_c_while_stdin_is_still_open_ends_at_once_and_quietly():
    """The reader thread is blocked on a pipe nobody closes: the command must not wait for it at exit, nor die
    on stdin's lock in the interpreter's shutdown ("Fatal Python error: could not acquire lock")."""
    with child(GRADFLOW + ["batch", "--jobs", "2", "--x", "2"], stdin=subprocess.PIPE, timeout=110,
               start_new_session=True) as proc:
        proc.stdin.write(b'"x*2"\n')
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 130  # stdin still open
        err = proc.stderr.read()
    assert first["grads"] == {"x": 2.0} and err == b""


# ---- shards: --first-line, then merged by `line` ---------------------------------------------------------------

MERGE = """awk -F'"line": ' '{split($2, n, ","); print n[1] "\\t" $0}' "$@" | sort -n -s -k1,1 | cut -f2-"""


@pytest.mark.slow
def test_shards_run_separately_and_merged_by_line_are_identical_to_one_run(tmp_path):
    data = generated(11, 300)
    (tmp_path / "all.jsonl").write_bytes(data)
    whole = batch([str(tmp_path / "all.jsonl"), "--x", "3", *LIMITS])
    assert whole.returncode == 4
    assert run(["split", "-l", "70", "-d", "all.jsonl", "shard."], cwd=tmp_path).returncode == 0
    shards = sorted(tmp_path.glob("shard.*"))
    assert len(shards) == 5
    first = 1
    for shard in reversed(shards):  # any order, anywhere: each shard only needs its first line's number
        first = 1 + 70 * int(shard.suffix[1:])
        res = batch([str(shard), "--first-line", str(first), "--x", "3", *LIMITS, "--jobs", "1"])
        assert res.returncode in (0, 4), res.stderr
        (tmp_path / f"out.{shard.suffix[1:]}").write_bytes(res.stdout)
    outs = sorted(tmp_path.glob("out.*"), reverse=True)  # merged from any order
    merged = run(["bash", "-c", MERGE, "merge", *map(str, outs)])
    assert merged.returncode == 0 and merged.stdout == whole.stdout
    assert b"".join(p.read_bytes() for p in sorted(tmp_path.glob("out.*"))) == whole.stdout  # or cat, in order


def test_first_line_numbers_lines_ids_and_messages_as_in_the_whole_file():
    data = b'"x*2"\n\n{"id": "a", "expr": "x"}\n"x\xff"\n'
    res = CliRunner().invoke(app, ["batch", "--first-line", "71", "--jobs", "1", "--x", "3"], input=data)
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["id"], r["line"]) for r in records] == [(71, 71), ("a", 73), (74, 74)]
    assert records[0]["grads"] == {"x": 2.0} and records[1]["grads"] == {"x": 1.0}
    assert records[2]["error"]["message"].startswith("line 74 is not UTF-8 text")
    assert res.exit_code == 4


@pytest.mark.parametrize("option", ["--jobs", "--first-line"])
def test_jobs_and_first_line_take_a_whole_number_from_1(option):
    res = CliRunner().invoke(app, ["batch", option, "0"], input=b'"x"\n')
    assert res.exit_code == 2 and option in res.stderr and "greater than or equal to 1" in res.stderr


def test_a_bom_is_skipped_on_line_1_only():
    """A shard starting at line 71 of a file cannot hold the file's byte-order mark: \\ufeff there is text."""
    one = CliRunner().invoke(app, ["batch", "--jobs", "1", "--x", "1"], input='\ufeff"x*2"\n'.encode())
    later = CliRunner().invoke(app, ["batch", "--jobs", "1", "--first-line", "71", "--x", "1"],
                               input='\ufeff"x*2"\n'.encode())
    assert json.loads(one.stdout)["error"] is None
    assert json.loads(later.stdout)["error"]["kind"] == "bad_json"


@pytest.mark.slow
def test_the_command_side_of_jobs_2_imports_no_torch():
    """torch is imported once per worker (in the fork server), never by the command that reads and writes."""
    code = ("import sys\nfrom gradflow.cli.app import app\n"
            "try:\n    app(['batch', '--jobs', '2', '--x', '2'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "sys.stdout.flush()\nprint('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n")
    res = run([*PYTHON, "-c", code], input=b'"x*2"\n')
    assert json.loads(res.stdout)["grads"] == {"x": 2.0}
    assert res.stderr.endswith(b"torch imported: False\n"), res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_workers_keep_the_scripting_rules(jobs):
    """With workers as in one process: "no gradient" is an answer (exit 0), a default no line uses is a warning
    with its did-you-mean (--strict: exit 2 once every record is out), a line's options come through."""
    data = b"x*y1\n2*detach(x)\nseed*x\n"
    res = batch(["--text", "--jobs", jobs, "--x", "1", "--y1", "2", "--yy1", "5", "--var", "seed=3"], data,
                text=False)
    res.stdout, res.stderr = res.stdout.decode(), res.stderr.decode()
    recs = [json.loads(line) for line in res.stdout.splitlines()]
    assert res.returncode == 0, res.stderr
    assert [r["grads"]["x"] for r in recs] == [2, None, 3]  # d(x*y1)/dx = y1 = 2; cut; d(seed*x)/dx = 3
    assert [r["error"] and r["error"]["kind"] for r in recs] == [None, "no_gradient", None]
    assert "warning: a value was given for 'yy1', which no line's program uses; did you mean 'y1'?" in res.stderr
    strict = batch(["--text", "--jobs", jobs, "--strict", "--x", "1", "--y1", "2", "--yy1", "5", "--var",
                    "seed=3"], data)
    assert strict.returncode == 2 and len(strict.stdout.splitlines()) == 3, strict.stderr


@pytest.mark.slow
def test_workers_never_rerun_the_callers_main_script():
    """A caller whose __main__ cannot be re-run (`python -` reads it from stdin: __file__ is '<stdin>') still gets
    its records: multiprocessing would re-run the main script in each worker (FileNotFoundError, exit 1)."""
    script = (b"from typer.testing import CliRunner\n"
              b"from gradflow.cli.app import app\n"
              b"res = CliRunner().invoke(app, ['batch', '-', '--text', '--jobs', '2', '--x', '3'], input=b'x*2\\nx^2\\n')\n"
              b"print(res.exit_code); print(res.stdout, end='')\n")
    res = run([*PYTHON, "-"], input=script)
    code, *records = res.stdout.decode().splitlines()
    assert code == "0", res.stderr.decode()[-2000:]
    assert [json.loads(r)["grads"]["x"] for r in records] == [2.0, 6.0]  # d(2x)/dx = 2; d(x^2)/dx = 2x = 6
