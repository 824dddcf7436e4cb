"""gradflow's callbacks in real torchrun jobs (2 ranks, gloo on 127.0.0.1, a free port): the Hugging Face Trainer
under DDP, Lightning under DDP and under FSDP2 (ModelParallelStrategy, fully_shard in configure_model). Every
rank's verdicts equal plain DDP's / plain FSDP's `p.grad is None` after a real step, the parameters that differ
between ranks equal what each rank's own plain backward leaves without a gradient (plain_ranked.py: no gradflow),
and the report is printed once per job, by rank 0.

The Hugging Face Trainer cannot run FSDP on CPU: accelerate 1.16 turns `fsdp=` into FSDP only for GPU-like
devices (its MULTI_CPU state stays DDP), so there is no such case here. Lightning's `strategy="fsdp"` (FSDP1)
requires a GPU; its ModelParallelStrategy (FSDP2) runs on CPU.
"""
import json
import socket
import sys
from pathlib import Path

import pytest

from tests.processes import run

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
JOBS = {"hf": ["unused", "rank0_head"], "lightning-ddp": ["unused", "rank0_aux"],
        "lightning-fsdp": ["unused", "frozen"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(script: str, out: Path, kind: str):
    args = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), str(HERE / script), str(out), kind, *JOBS[kind]]
    done = run(args, timeout=240, env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode() + done.stderr.decode()


@pytest.fixture(scope="module", params=list(JOBS))
def job(request, tmp_path_factory):
    pytest.importorskip("transformers" if request.param == "hf" else "lightning")  # its extra may be missing
    out = tmp_path_factory.mktemp(request.param)
    said = torchrun("ranked_callbacks.py", out, request.param)
    torchrun("plain_ranked.py", out, request.param)

    def read(case, rank, plain=False):
        return json.loads((out / f"{'plain-' if plain else ''}{request.param}-{case}-rank{rank}.json").read_text())
    return request.param, said, read


def test_every_rank_s_verdicts_equal_plain_ddp_or_fsdp(job):
    kind, _, read = job
    for case in JOBS[kind]:
        for rank in (0, 1):
            got, truth = read(case, rank), read(case, rank, plain=True)
            assert got["rank"] == rank
            assert got["grad_is_none"] == truth["synced"], (case, rank)
            assert got["wrapped"] == {"hf": "DistributedDataParallel", "lightning-ddp": "DDPStrategy",
                                      "lightning-fsdp": "ModelParallelStrategy"}[kind]


def test_what_differs_between_ranks_equals_each_rank_s_own_plain_backward(job):
    kind, _, read = job
    for case in JOBS[kind]:
        own = [set(read(case, rank, plain=True)["own"]) for rank in (0, 1)]
        expected = {n: [r for r in (0, 1) if n in own[r]] for n in sorted(own[0] | own[1]) if n not in own[0] & own[1]}
        for rank in (0, 1):
            assert read(case, rank)["divergent"] == expected, (case, rank)
    divergent_case = {"hf": "rank0_head", "lightning-ddp": "rank0_aux"}.get(kind)
    if divergent_case:  # the case is there to differ: rank 1's own backward leaves the head out
        assert read(divergent_case, 0)["divergent"] != {}
        reasons = {p["name"]: p["reason"] for p in read(divergent_case, 1)["params"]}
        name = next(iter(read(divergent_case, 1)["divergent"]))
        assert reasons[name].startswith("no gradient from this rank's own backward (")
        assert "the gradient sync's, from rank 0" in reasons[name]


def test_printed_once_by_rank_zero(job):
    kind, said, read = job
    assert said.count("gradflow: step 1:") == len(JOBS[kind])  # one report per case, not one per rank
    divergent_case = {"hf": "rank0_head", "lightning-ddp": "rank0_aux"}.get(kind)
    if divergent_case:
        assert said.count("differs between ranks") == 1
        assert "no gradient on rank 1" in said


def test_fsdp_reasons_are_the_unsharded_forward_s(job):
    kind, said, read = job
    if kind != "lightning-fsdp":
        pytest.skip("FSDP only")
    params = {p["name"]: p for p in read("unused", 1)["params"]}
    assert [n for n in params] == ["net.body.weight", "net.body.bias", "net.head.weight", "net.head.bias",
                                   "net.aux.weight", "net.aux.bias"]  # FQNs, never shard indices
    assert params["net.aux.weight"]["status"] == "unused"
    assert params["net.aux.weight"]["reason"].startswith("used by `linear` at tests/integrations/plain_models.py:")
    assert all(params[n]["status"] == "live" and params[n]["reason"] is None for n in list(params)[:4])
    frozen = {p["name"]: p["status"] for p in read("frozen", 0)["params"]}
    assert frozen["net.body.bias"] == "frozen"
