"""`gradflow ddp` on real 2-rank gloo groups on 127.0.0.1 (free ports at run time, every child under a deadline).

The per-rank verdicts are checked against plain torch (tests/ddp/plain_ddp.py, no gradflow): on each rank, the
parameters with `p.grad is None` after a DDP step under no_sync() (the rank's own backward), and after a real DDP
step with find_unused_parameters=True (None there on every rank = unused on every rank)."""
import json
import os
import signal
import subprocess
import time

import pytest

from ..processes import GRADFLOW, PYTHON, ROOT, child, ended, run

pytestmark = pytest.mark.slow
EXPECTED = "Expected to have finished reduction in the prior iteration"

# example: (divergent parameters, the ranks that get their gradient, the branch), hand-read from the examples
CASES = {
    "ddp_aux_loss": (["aux_head.weight", "aux_head.bias"], [0], "examples/ddp_aux_loss.py:30"),
    "ddp_empty_batch": (["refine.weight", "refine.bias"], [0], "examples/ddp_empty_batch.py:19"),
    "ddp_unused_head": ([], None, None),
    "ddp_detached": ([], None, None),
    "ddp_find_unused": ([], None, None),
}


def gradflow_ddp(*args, timeout=120, **kw):
    return run([*GRADFLOW, "ddp", *args], cwd=ROOT, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> dict[str, list[dict]]:
    """Plain torch's answer for every example, per rank: one run of tests/ddp/plain_ddp.py for all of them."""
    out = tmp_path_factory.mktemp("plain_ddp")
    truth = run([*PYTHON, "tests/ddp/plain_ddp.py", str(out), *(f"examples/{e}.py:main" for e in CASES)],
                cwd=ROOT, text=True)
    assert truth.returncode == 0, truth.stderr
    return {e: [json.loads((out / e / f"rank{r}.json").read_text()) for r in (0, 1)] for e in CASES}


@pytest.fixture(scope="module")
def ddp_json():
    """`gradflow ddp examples/EXAMPLE.py:main --json --fail-on divergent` for an example, run once for all the
    tests that read it (the gate: exit 6 where a parameter is divergent, else 0)."""
    runs: dict[str, subprocess.CompletedProcess] = {}

    def get(example: str) -> subprocess.CompletedProcess:
        if example not in runs:
            runs[example] = gradflow_ddp(f"examples/{example}.py:main", "--json", "--fail-on", "divergent")
        return runs[example]

    return get


@pytest.mark.parametrize("example", list(CASES))
def test_verdicts_match_plain_ddp(example, plain, ddp_json):
    params, on, branch = CASES[example]
    res = ddp_json(example)
    assert res.returncode == (6 if params else 0), res.stderr
    doc = json.loads(res.stdout)
    for r in (0, 1):
        real = plain[example][r]
        assert sorted(p["name"] for p in doc["ranks"][r]["no_gradient"]) == real["local"], r
        assert sorted(p["name"] for p in doc["unused"]) == real["find_unused"], r
    assert [n for g in doc["divergent"] for n in g["params"]] == params
    if params:
        g = doc["divergent"][0]
        assert g["gradient_on"] == on and g["branch"]["line"] == branch
        assert doc["found"] == ["divergent"]
    assert [(f["name"], f["class"]) for f in doc["gate"]["failures"]] == [(n, "divergent") for n in params]


def test_torch_own_error_is_shown_and_named(ddp_json):
    res = ddp_json("ddp_aux_loss")
    assert res.returncode == 6, res.stderr  # its gate: aux_head.* divergent
    said = {r["rank"]: r for r in json.loads(res.stdout)["torch"]["ranks"]}
    assert said[1]["stage"] == "iteration 2, forward" and EXPECTED in said[1]["message"]
    assert said[1]["unused"] == ["aux_head.weight", "aux_head.bias"]  # torch's indices, named
    assert said[0]["blocked"] and said[0]["stage"] == "iteration 1, backward"


def test_table_and_gate(tmp_path):
    res = gradflow_ddp("examples/ddp_unused_head.py:main", "--fail-on", "unused,divergent", env={"COLUMNS": "100"})
    assert res.returncode == 6, res.stderr
    assert "old_head.*" in res.stdout and "freeze or delete old_head.*" in res.stdout
    assert "error: --fail-on unused,divergent: 2 parameters failed (unused: 2)" in res.stderr
    # and `--fail-on divergent` passes it (exit 0): test_verdicts_match_plain_ddp[ddp_unused_head] runs that


def test_the_gate_per_rank_with_allow_against_plain_ddp(plain):
    """inspect's classes and `divergent` on a real 2-rank run: the parameters that fail, and on which rank, are
    those plain torch leaves with grad None on some ranks only (aux_head.*: rank 1); --allow lets one pass."""
    target = "examples/ddp_aux_loss.py:main"
    res = gradflow_ddp(target, "--fail-on", "all", "--allow", "aux_head.bias", "--json", env={"COLUMNS": "200"})
    assert res.returncode == 6, res.stderr
    local = [set(plain["ddp_aux_loss"][r]["local"]) for r in (0, 1)]
    divergent = sorted((local[0] | local[1]) - (local[0] & local[1]))
    assert divergent == ["aux_head.bias", "aux_head.weight"]  # the example's ground truth, as plain torch says
    gate = json.loads(res.stdout)["gate"]
    assert gate["fail_on"][-1] == "divergent" and gate["allow"] == ["aux_head.bias"]
    assert [(f["name"], f["class"], f["ranks"]) for f in gate["failures"]] == \
        [(n, "divergent", [r for r in (0, 1) if n in local[r]]) for n in divergent if n != "aux_head.bias"]
    assert gate["failures"][0]["line"] == "examples/ddp_aux_loss.py:30" and not gate["passed"]
    assert "error: --fail-on cut,partly-cut,unused," in res.stderr and "(divergent: 1)" in res.stderr
    assert "aux_head.weight  divergent  gets a gradient on rank 0 and none on rank 1" in res.stderr
    assert "aux_head.bias" not in res.stderr


HANG = """
import os, signal, sys, time
import torch

class StrFails(Exception):
    def __str__(self):
        raise RuntimeError("its __str__ fails")

def main(rank, world_size):
    open(os.path.join(os.path.dirname(__file__), f"pid{rank}"), "w").write(str(os.getpid()))
    model = torch.nn.Linear(2, 1)
    if "{how}" == "orphan":  # a child that ignores SIGTERM and would sleep for 5 minutes
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(300)
            os._exit(0)
        open(os.path.join(os.path.dirname(__file__), f"orphan{rank}"), "w").write(str(pid))
    if rank == 1 and "{how}" != "orphan":
        print("ready", flush=True)
        if "{how}" == "strfail":
            raise StrFails()
        if "{how}" == "die":
            os.kill(os.getpid(), 9)
        if "{how}" == "fail":
            raise ValueError("no data on rank 1")
        time.sleep(600)
    return model, lambda m: m(torch.ones(1, 2)).sum()
"""


def _script(tmp_path, how):
    path = tmp_path / "ranks.py"
    path.write_text(HANG.replace("{how}", how))
    return str(path) + ":main"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_hanging_rank_is_reported_and_stopped_within_the_timeout(tmp_path):
    start = time.monotonic()
    res = gradflow_ddp(_script(tmp_path, "hang"), "--timeout", "4", timeout=90)
    assert res.returncode == 7, res.stderr
    assert "rank 1 hung while running main() (no answer within 4 s); rank 1 was stopped" in res.stderr
    assert time.monotonic() - start < 60
    assert _gone(int((tmp_path / "pid1").read_text()))


def test_a_dying_rank_is_reported(tmp_path):
    res = gradflow_ddp(_script(tmp_path, "die"), "--timeout", "20", timeout=90)
    assert res.returncode == 7, res.stderr
    assert "rank 1 killed by SIGKILL while running main()" in res.stderr
    if (tmp_path / "pid0").exists():  # rank 0 got as far as main() before it was stopped
        assert _gone(int((tmp_path / "pid0").read_text()))


def test_user_code_failing_on_one_rank_exits_5(tmp_path):
    res = gradflow_ddp(_script(tmp_path, "fail"), "--timeout", "20", timeout=90)
    assert res.returncode == 5, res.stderr
    assert "rank 1: main() raised ValueError: no data on rank 1" in res.stderr
    assert "Traceback" not in res.stderr.split("Traceback (your code")[0]


def test_an_exception_whose_str_raises_is_the_users_failure_on_every_rank(tmp_path):
    res = gradflow_ddp(_script(tmp_path, "strfail"), "--timeout", "20", timeout=90)
    assert res.returncode == 5, res.stderr
    assert "rank 1: main() raised StrFails: <its message cannot be shown: str() raised RuntimeError>" in res.stderr
    assert "internal error" not in res.stderr


def test_nothing_a_rank_forked_outlives_the_command(tmp_path):
    res = gradflow_ddp(_script(tmp_path, "orphan"), "--timeout", "20", timeout=90)
    assert res.returncode == 0, res.stderr
    for r in (0, 1):
        assert ended(int((tmp_path / f"orphan{r}").read_text()))


def test_ctrl_c_stops_every_rank(tmp_path):
    with child([*GRADFLOW, "ddp", _script(tmp_path, "hang"), "--timeout", "60"], cwd=ROOT, timeout=90) as proc:
        for line in proc.stderr:
            if b"[rank 1] ready" in line:
                break
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"pid{r}").exists() for r in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.05)  # both ranks in main(): rank 0 may start later than rank 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    for r in (0, 1):
        assert _gone(int((tmp_path / f"pid{r}").read_text()))


def test_the_same_command_runs_under_torchrun():
    torchrun = [*PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    res = run([*torchrun, "-m", "gradflow", "ddp", "examples/ddp_aux_loss.py:main", "--json"], cwd=ROOT, text=True)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)  # printed by rank 0 only: one document
    assert doc["world_size"] == 2 and doc["divergent"][0]["params"] == ["aux_head.weight", "aux_head.bias"]


def test_a_group_nobody_serves_is_a_distributed_error_not_a_bug():
    """A rank started by another launcher (RANK set) whose group never forms: exit 7 with the address, not exit 1."""
    from gradflow.ddp.launch import free_port

    port = free_port()
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    res = gradflow_ddp("examples/ddp_aux_loss.py:main", "--timeout", "2", env=env, timeout=90)
    assert res.returncode == 7, res.stderr[-2000:]
    assert f"error: rank 1 could not join the process group at 127.0.0.1:{port} within 2 s" in res.stderr


def test_a_function_with_default_rank_learns_its_rank(tmp_path):
    """`def main(rank=0, world_size=1)` (written to run alone too) is called with each rank's own rank: the
    aux-loss example's rank-dependent branch is found divergent, as with `def main(rank, world_size)`."""
    source = (ROOT / "examples/ddp_aux_loss.py").read_text().replace("def main(rank, world_size):",
                                                                      "def main(rank=0, world_size=1):")
    script = tmp_path / "aux_defaults.py"
    script.write_text(source)
    res = gradflow_ddp(f"{script}:main", "--json", "--fail-on", "divergent", timeout=120)
    assert res.returncode == 6, res.stderr  # divergent, as plain DDP says (test_verdicts_match_plain_ddp)
    assert "aux_head.weight" in res.stdout and "no divergence" not in res.stdout
