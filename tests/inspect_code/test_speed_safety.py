"""What the tracer's speed work must not change: Python's garbage collector is left as it was found, and cyclic
garbage made inside a long traced block is still collected."""
import gc
import weakref

import pytest
import torch

import gradflow


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_state_is_restored_after_trace_and_explain(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        w = torch.nn.Parameter(torch.ones(3))
        with gradflow.trace() as t:
            loss = (w * 2).sum()
        assert gc.isenabled() is enabled
        t.explain(loss, params={"w": w})
        assert gc.isenabled() is enabled
        with pytest.raises(ValueError), gradflow.trace():
            raise ValueError("user code failed")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_cyclic_garbage_in_a_long_block_is_collected(monkeypatch):
    from gradflow.inspect import tracer

    monkeypatch.setattr(tracer, "_GC_EVERY", 64)

    class Cycle:
        pass

    gc.enable()
    refs = []
    x = torch.ones(2, requires_grad=True)
    with gradflow.trace():
        for _ in range(10):
            c = Cycle()
            c.me = c  # only the cyclic collector frees it
            refs.append(weakref.ref(c))
            del c
        for _ in range(200):
            x = x * 1.0
        assert all(r() is None for r in refs)  # collected inside the block, not only after it


def test_batched_grad_norms_are_torch_norms_exactly():
    """Norms taken in one torch call per dtype are bit for bit the per-tensor ones, and keep the float64 rescue of
    float32 under- and overflow (hand-derived: |(1e-30,)*4| = 2e-30, |(1e30,)*4| = 2e30)."""
    import math

    from gradflow.inspect.report import grad_norms

    torch.manual_seed(0)
    gs = [torch.randn(s) * 10.0 ** k for s, k in [((64, 64), -3), ((64,), 2), ((3,), 0), ((7, 5), 5)] * 5]
    gs += [torch.randn(8, 8).t(), torch.randn(4).double(), torch.randn(4, dtype=torch.bfloat16)]
    got = grad_norms(gs + [torch.full((4,), 1e-30), torch.full((4,), 1e30), torch.zeros(3),
                           torch.tensor([float("nan"), 1.0])])
    assert got[:len(gs)] == [float(torch.linalg.vector_norm(g)) for g in gs]
    assert math.isclose(got[-4], 2e-30, rel_tol=1e-6) and math.isclose(got[-3], 2e30, rel_tol=1e-6)
    assert got[-2] == 0.0 and math.isnan(got[-1])
