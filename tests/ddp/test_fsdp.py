"""`gradflow ddp` on models the user sharded with FSDP2 (`fully_shard`), on real 2-rank gloo groups on 127.0.0.1.

Checked against plain FSDP (tests/ddp/plain_fsdp.py, no gradflow): per rank, the parameters with no gradient in
the rank's own backward (every unit unsharded, gradient sync off), and what one real FSDP step does (which
ranks complete it, which parameters keep grad None)."""
import json
import time

import pytest

from ..processes import PYTHON, ROOT, run
from .test_ranks import gradflow_ddp

pytestmark = pytest.mark.slow

# example: (divergent parameters, the ranks that get their gradient, the branch), hand-read from the examples
CASES = {
    "fsdp_aux_head": (["aux_head.weight", "aux_head.bias"], [0], "examples/fsdp_aux_head.py:19"),
    "fsdp_hard_examples": (["refine.weight", "refine.bias"], [0], "examples/fsdp_hard_examples.py:22"),
    "fsdp_frozen_encoder": ([], None, None),
}


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("plain_fsdp")
    truth = run([*PYTHON, "tests/ddp/plain_fsdp.py", str(out), *(f"examples/{e}.py:main" for e in CASES)],
                cwd=ROOT, text=True, timeout=600)
    assert truth.returncode == 0, truth.stderr[-3000:]

    def read(path):
        return json.loads(path.read_text()) if path.exists() else {"ok": False}  # aborted or stopped: no file
    return {e: {how: [read(out / e / f"{how}{r}.json") for r in (0, 1)] for how in ("local", "real")}
            for e in CASES}


@pytest.fixture(scope="module")
def docs():
    runs: dict[str, tuple] = {}

    def get(example: str):
        if example not in runs:
            start = time.monotonic()
            res = gradflow_ddp(f"examples/{example}.py:main", "--json", "--timeout", "5", timeout=300)
            runs[example] = (res, time.monotonic() - start)
        return runs[example]
    return get


@pytest.mark.parametrize("example", list(CASES))
def test_verdicts_and_real_step_match_plain_fsdp(example, plain, docs):
    params, on, branch = CASES[example]
    res, _ = docs(example)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["ddp"]["fsdp"]
    for r in (0, 1):
        assert sorted(p["name"] for p in doc["ranks"][r]["no_gradient"]) == plain[example]["local"][r]["none"], r
        step, truth = doc["fsdp"]["step"][r], plain[example]["real"][r]
        assert step["ok"] == truth["ok"], (r, step, truth)
        if truth["ok"]:
            assert sorted(step["grad_none"]) == truth["none"]
    assert [n for g in doc["divergent"] for n in g["params"]] == params
    if params:
        g = doc["divergent"][0]
        assert g["gradient_on"] == on and g["branch"]["line"] == branch
        assert "fully_shard" not in json.dumps(g)  # FQNs, never a shard index or a DTensor
        assert not any(s["ok"] for s in doc["fsdp"]["step"])  # plain FSDP: no rank completes the step


def test_a_unit_skipped_on_one_rank_is_named_and_reported_within_the_timeout(docs):
    res, took = docs("fsdp_aux_head")
    doc = json.loads(res.stdout)
    assert took < 120
    said = doc["fsdp"]["step"]
    assert {s["outcome"] for s in said} <= {"aborted", "timed out", "peer lost", "hung"}
    assert any("`aux_head`" in (s["stage"] or "") for s in said)  # the rank stopped in that unit's forward
    assert "all-gathers `aux_head` in the forward and rank 1 never does" in doc["fsdp"]["would"][0][1]
    assert doc["ranks"][1]["units_run"] == ["", "body"] and "aux_head" in doc["ranks"][0]["units_run"]


def test_mixed_unit_and_silent_unused(docs):
    doc = json.loads(docs("fsdp_frozen_encoder")[0].stdout)
    root = next(u for u in doc["ddp"]["units"] if u["unit"] == "")
    assert root["frozen"] == ["encoder.weight"]
    assert sorted(root["params"]) == ["encoder.bias", "encoder.weight", "old_head.bias", "old_head.weight"]
    rows = dict(doc["fsdp"]["would"])
    assert "FSDP2 accepts it (torch 2.13)" in rows["the root module (mixed)"]
    assert "runs silently" in rows["old_head.* (unused)"]
    assert doc["fix"][0].startswith("freeze or delete old_head.*")


def test_the_fix_it_names_makes_the_real_step_complete(tmp_path):
    """The fix for a parameter divergent inside one unit, applied: both ranks complete FSDP's own step."""
    src = (ROOT / "examples/fsdp_hard_examples.py").read_text()
    fixed = tmp_path / "fixed.py"
    fixed.write_text(src.replace("    fully_shard(model)  #", "    fully_shard(model)\n"
                                 "    model.set_reduce_scatter_unused_params(True)  #"))
    res = gradflow_ddp(f"{fixed}:main", "--json", "--timeout", "5", timeout=300)
    doc = json.loads(res.stdout)
    assert [s["ok"] for s in doc["fsdp"]["step"]] == [True, True]
    assert [s["grad_none"] for s in doc["fsdp"]["step"]] == [[], []]  # rank 1 gets the reduced (zero) gradient


COUNTING = '''
import os
from pathlib import Path

import torch
from torch.distributed.fsdp import fully_shard

LOG = Path(__file__).with_suffix(".calls")


def main(rank, world_size):
    with LOG.open("a") as f:
        f.write(f"main {rank} {os.getpid()}\\n")
    print(f"built on rank {rank}")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    fully_shard(model[0])
    fully_shard(model)

    def step(model):
        with LOG.open("a") as f:
            f.write(f"step {rank} {os.getpid()}\\n")
        return model(torch.ones(2, 4)).sum()
    return model, step
'''


def test_function_and_step_run_twice_per_rank_in_two_processes(tmp_path):
    """As docs/fsdp.md says: once in the rank for the verdicts, once in its child for FSDP's real step (a fresh
    process: what FUNCTION prints there is not shown)."""
    path = tmp_path / "counting.py"
    path.write_text(COUNTING)
    res = gradflow_ddp(f"{path}:main", "--timeout", "20", timeout=300)
    assert res.returncode == 0, res.stderr
    calls = [line.split() for line in (tmp_path / "counting.calls").read_text().splitlines()]
    for rank in ("0", "1"):
        mains = [pid for what, r, pid in calls if what == "main" and r == rank]
        steps = [pid for what, r, pid in calls if what == "step" and r == rank]
        assert len(mains) == 2 and len(set(mains)) == 2  # two processes
        assert sorted(steps) == sorted(mains)  # step once in each
    assert res.stderr.count("built on rank 0") == 1 and res.stderr.count("built on rank 1") == 1
