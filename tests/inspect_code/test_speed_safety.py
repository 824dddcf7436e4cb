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
