"""Long graphs: tracing and freeing 50,000-200,000 chained ops must not overflow the C stack.

torch frees an autograd node that Python has touched (grad_fn, next_functions, a hook) from inside the previous
node's destructor, so a long chain of touched nodes ends in SIGSEGV when its last tensor goes away
(gradflow/tracer/teardown.py). Each case runs in a real process: a crash there is an exit code, not a dead
test run. The oracle is the hand-derived gradient of a chain of products with w = 1.
"""
import json
import math
import textwrap

import pytest

from ..processes import GRADFLOW, PYTHON, ROOT, run

CHAIN = '''
import os
import torch

def main():
    plain, uses = int(os.environ["PLAIN"]), int(os.environ["USES"])
    w = torch.ones(3, requires_grad=True)
    x = w * 1.0
    for _ in range(plain):  # ops that do not use a parameter
        x = x * 1.0
    for _ in range(uses):  # an RNN-like loop: the parameter is used at every step
        x = x * w
    return x.sum(), {"w": w}
'''


def _inspect_chain(tmp_path, plain: int, uses: int, timeout: float) -> dict:
    f = tmp_path / "chain.py"
    f.write_text(CHAIN)
    res = run(GRADFLOW + ["inspect", f"{f}:main", "--json"], env={"PLAIN": str(plain), "USES": str(uses)},
              text=True, timeout=timeout)
    assert res.returncode == 0, f"exit {res.returncode}: {res.stderr[-2000:]}"
    return json.loads(res.stdout)


@pytest.mark.slow
def test_50000_chained_ops_report_and_exit_cleanly(tmp_path):
    d = _inspect_chain(tmp_path, plain=50_000, uses=0, timeout=120)
    (p,) = d["params"]
    # loss = sum(w * 1.0^50001): d loss / d w = 1 for each of the 3 elements
    assert (d["loss"], p["status"], p["grad_norm"]) == (3.0, "live", pytest.approx(math.sqrt(3), rel=1e-6))
    assert len(p["routes"]) == 1


@pytest.mark.slow
def test_200000_ops_with_a_parameter_used_at_50000_steps(tmp_path):
    d = _inspect_chain(tmp_path, plain=150_000, uses=50_000, timeout=240)
    (p,) = d["params"]
    # loss = sum(w^50001) at w = 1: d loss / d w = 50001 for each element, one route per use
    assert p["status"] == "live" and p["grad_norm"] == pytest.approx(50_001 * math.sqrt(3), rel=1e-6)
    assert len(p["routes"]) == 50_001 and sum(r["share"] for r in p["routes"]) == pytest.approx(1.0)


LIBRARY = '''
import threading
import torch
import gradflow
from gradflow.tracer.teardown import free_graph

N = 8_000  # a chain this long overflows the 256 KiB stack below when freed recursively

def traced(uses_w):
    w = torch.ones(3, requires_grad=True)
    with gradflow.trace() as t:
        x = w * 1.0
        for _ in range(N):
            x = x * w if uses_w else x * 1.0
        loss = x.sum()
    report = t.explain(loss, params={"w": w})
    assert report.params[0].grad.tolist() == [N + 1.0 if uses_w else 1.0] * 3
    return loss, report

def dropped():  # traced, never explained, then dropped: the nodes it kept are let go latest first
    w = torch.ones(3, requires_grad=True)
    with gradflow.trace() as t:
        x = w * 1.0
        for _ in range(N):
            x = x * w
        loss = x.sum()
    assert len(t.ops) == N + 2
    del x, loss
    del t

def work():
    dropped()
    loss, report = traced(uses_w=False)  # the tracer leaves plain ops' nodes alone: torch frees them itself
    del loss, report
    loss, report = traced(uses_w=True)  # every node hooked: the graph is freed from the loss backwards
    holder, report.loss = [loss], None
    del loss
    free_graph(holder)
    print("freed", flush=True)

threading.stack_size(256 * 1024)
worker = threading.Thread(target=work)
worker.start()
worker.join()
'''


@pytest.mark.slow
def test_library_trace_and_free_graph_never_recurse_deeply(tmp_path):
    """Explained (then freed by free_graph), and never explained (the trace dropped), on a 256 KiB stack."""
    res = run(PYTHON + ["-c", textwrap.dedent(LIBRARY)], text=True, cwd=ROOT)
    assert (res.returncode, res.stdout) == (0, "freed\n"), res.stderr[-2000:]


def test_graph_nodes_come_after_all_their_parents():
    import torch

    from gradflow.tracer.teardown import graph_nodes

    a = torch.ones(2, requires_grad=True)
    b = a * 2
    c = b * b + b.sin()  # b's node has three parents
    order = graph_nodes([c.sum().grad_fn])
    position = {n: i for i, n in enumerate(order)}
    for n in order:
        for child, _ in n.next_functions:
            if child is not None:
                assert position[n] < position[child]
    assert {type(n).__name__ for n in order} >= {"SumBackward0", "AddBackward0", "MulBackward0",
                                                 "SinBackward0", "AccumulateGrad"}
