"""Pipes, closed streams and Ctrl-C, in real subprocesses (PYTHONUNBUFFERED unset, SIGINT at its default, every
wait bounded: see tests/processes.py)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..processes import GRADFLOW, child, open_fifo_for_writing, run

BIG = ["eval", "sum(x*2)", "--x", "[" + ",".join(["1.5"] * 5000) + "]", "--json"]  # ~200 KB of JSON


def start(args, **kw):
    return child(GRADFLOW + args, **kw)


def test_children_run_this_trees_gradflow_with_sigint_at_its_default():
    """What every test here relies on, whatever the parent had: the package beside the tests (the one pytest
    imported), and a SIGINT that raises KeyboardInterrupt even when pytest itself runs with it ignored."""
    import gradflow

    code = "import gradflow, signal; print(gradflow.__file__); print(signal.getsignal(signal.SIGINT).__name__)"
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup or some CI runners
    try:
        res = run([sys.executable, "-c", code], text=True, timeout=60)
    finally:
        signal.signal(signal.SIGINT, ignored)
    assert res.returncode == 0, res.stderr
    where, handler = res.stdout.split()
    assert Path(where).resolve() == Path(gradflow.__file__).resolve()
    assert handler == "default_int_handler"


@pytest.mark.slow
def test_json_into_head_c_10_exits_quietly():
    with start(BIG) as proc:
        assert proc.stdout.read(10) == b'{"schema":'
        proc.stdout.close()  # like `head -c 10`: the reader goes away mid-document
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 0
    assert err == b""


def test_ops_into_a_closed_pipe_exits_quietly():
    with start(["ops"]) as proc:
        proc.stdout.close()  # closed before gradflow writes its first line
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 0
    assert err == b""


def test_ops_head_1_through_the_shell():
    res = run(["bash", "-c", f"{sys.executable} -m gradflow ops | head -1; exit ${{PIPESTATUS[0]}}"], timeout=60)
    assert res.returncode == 0 and res.stderr == b"" and res.stdout.count(b"\n") == 1


@pytest.mark.parametrize("args,redirect,code,message", [
    pytest.param("eval x*2 --x 1", ">&-", 0, b"", marks=pytest.mark.slow),  # closed stdout: no table, no traceback
    ("eval - --x 1", "<&-", 2, b"stdin is closed"),  # closed stdin with '-'
    ("batch -", "<&-", 2, b"stdin is closed"),  # the same stand-in serves every command
])
def test_closed_streams(args, redirect, code, message):
    cmd = f"{sys.executable} -m gradflow {args} {redirect}"
    res = run(["bash", "-c", cmd], timeout=60)
    assert res.returncode == code
    assert message in res.stderr and b"Traceback" not in res.stderr


def _blocked_reading_stdin(pid: int) -> bool:
    """Some thread of the process sits in a pipe's read(): the main thread (eval) or batch's reader thread (its
    main thread meanwhile waits on the workers). Looking at the main thread only, the batch test never saw its
    read and sent Ctrl-C only after the 60 s wait below had run out."""
    try:
        return any("pipe_read" in (task / "wchan").read_text() for task in Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # it, or one of its threads, has just exited
        return False


def interrupt_while_reading(proc):
    """Ctrl-C once the process sits in read() on stdin: exit 130, no traceback."""
    deadline = time.monotonic() + 60
    while not _blocked_reading_stdin(proc.pid):
        if time.monotonic() > deadline:
            pytest.fail("the process was not seen reading its stdin within 60 s", pytrace=False)
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux /proc to see the read")
def test_ctrl_c_while_reading_stdin_exits_130_without_traceback():
    with start(["eval", "-", "--x", "1"], stdin=subprocess.PIPE, timeout=90) as proc:
        interrupt_while_reading(proc)


def test_binary_stdin_is_a_clean_error():
    res = run(GRADFLOW + ["eval", "-", "--x", "1"], input=b"x\xff\xfe*2", timeout=60)
    assert res.returncode == 2 and b"Traceback" not in res.stderr
    assert b"error:" in res.stderr


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux /proc to see the read")
def test_ctrl_c_during_batch_keeps_finished_records():
    with start(["batch", "-"], stdin=subprocess.PIPE, timeout=90) as proc:
        proc.stdin.write(b'{"expr": "x*x", "vars": {"x": 3}}\n"2*y"\n')
        proc.stdin.flush()
        first = proc.stdout.readline()  # written and flushed before the next line is even read
        assert json.loads(first)["grads"] == {"x": 6.0}  # d(x²)/dx at 3
        interrupt_while_reading(proc)


def test_error_whose_reader_is_gone_keeps_its_exit_code():
    with start(["eval", "x*", "--x", "1"]) as proc:  # a syntax error: exit 2
        proc.stderr.close()  # nobody reads the message (like `2>&1 | head -c 5`)
        proc.stdout.close()
        assert proc.wait(timeout=60) == 2


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_batch_reads_a_fifo_once_and_streams_it(tmp_path):
    """`gradflow batch <(producer)` / a FIFO: counting its lines first would consume it (0 records came out)."""
    fifo = tmp_path / "jobs"
    os.mkfifo(fifo)
    with start(["batch", str(fifo), "--x", "3"]) as proc:
        with open_fifo_for_writing(fifo) as fh:  # not open(): it would wait for ever for a reader that died
            fh.write('"x*x"\n')
            fh.flush()
            first = json.loads(proc.stdout.readline())  # streamed: out before the FIFO is even closed
            assert (first["line"], first["grads"]) == (1, {"x": 6.0})  # d(x²)/dx at 3
            fh.write('"2*x"\n')
        rest = proc.stdout.read().decode().splitlines()
        assert proc.wait(timeout=60) == 0
    assert [json.loads(r)["grads"] for r in rest] == [{"x": 2.0}]


@pytest.mark.slow
def test_ctrl_c_during_a_file_batch_writes_whole_records_only(tmp_path):
    """From a file, records are written in blocks; on Ctrl-C the ones still buffered are flushed, and no line
    is cut in half."""
    jobs = tmp_path / "jobs.jsonl"
    slow = {"expr": "sum(tanh(x@x))", "vars": {"x": "randn(300,300)"}}
    jobs.write_text("\n".join(json.dumps({**slow, "id": i}) for i in range(3000)) + "\n")
    # --summary: records of a few hundred bytes (in full, one record would be megabytes, bigger than a block)
    with start(["batch", str(jobs), "--summary"], timeout=90) as proc:  # 3000 slow records: minutes if SIGINT is lost
        first = proc.stdout.readline()  # a block (~8 KB: a few records) has been written
        proc.send_signal(signal.SIGINT)
        out, err = proc.stdout.read(), proc.stderr.read()  # not communicate(): it skips what readline buffered
        assert proc.wait(timeout=60) == 130 and b"Traceback" not in err
    records = [json.loads(line) for line in (first + out).decode().splitlines()]  # each one whole
    assert [r["id"] for r in records] == list(range(len(records))) and len(records) >= 2



@pytest.mark.slow
def test_ctrl_c_while_a_script_runs_exits_130_not_as_its_failure(tmp_path):
    """A real Ctrl-C during `gradflow script` (SIGINT to the whole process group, as a terminal sends it; the
    script runs in a child gradflow watches) stops gradflow with 130, where a KeyboardInterrupt the script raises
    itself is the script's failure (exit 5: tests/script/test_script.py)."""
    path = tmp_path / "waits.py"
    path.write_text("import sys, torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n"
                    "print('ready', flush=True)\nsys.stdin.readline()\n")
    with start(["script", str(path)], stdin=subprocess.PIPE, timeout=90, start_new_session=True) as proc:
        while (line := proc.stderr.readline()) and line.strip() != b"ready":  # the script's print goes to stderr
            pass
        assert line.strip() == b"ready"
        os.killpg(proc.pid, signal.SIGINT)
        # stdin stays open until gradflow has exited: the parent passes the SIGINT on to the script's process,
        # and a stdin closed at once could end the script's readline() first (exit 0 under a loaded machine)
        proc.wait(timeout=60)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err
