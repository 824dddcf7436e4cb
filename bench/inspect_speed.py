"""How long `gradflow.trace` + `explain` take: a ~5M-parameter transformer block, and many small ops (CPU).

    PYTHONPATH=. python bench/inspect_speed.py
Prints plain forward+backward time, traced forward + explain time, and their ratio
(best of 5 interleaved runs each). Not a test: timings depend on the machine.
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import gradflow  # noqa: E402
from transformer_block import TinyLM, lm_loss  # noqa: E402


def best_of(fns, runs=5) -> list[float]:
    """Best time of each function, runs interleaved so machine load hits both alike."""
    times = [[] for _ in fns]
    for _ in range(runs):
        for fn, ts in zip(fns, times):
            start = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - start)
    return [min(ts) for ts in times]


def compare(title: str, model, loss_fn) -> None:
    def plain():
        model.zero_grad(set_to_none=True)
        loss_fn().backward()

    def traced():
        with gradflow.trace() as t:
            loss = loss_fn()
        return t, t.explain(loss, params=model)

    plain(), traced()  # warm up
    t_plain, t_traced = best_of([plain, traced])
    trace, report = traced()
    n = sum(p.numel() for p in model.parameters())
    print(f"{title}: {n / 1e6:.2f}M parameters in {len(report.params)} tensors, {len(trace.ops)} ops recorded")
    print(f"  plain forward+backward : {t_plain:.3f} s")
    print(f"  trace + explain        : {t_traced:.3f} s  ({t_traced / t_plain:.2f}x)")


def main():
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; best of 5 interleaved runs")
    torch.manual_seed(0)
    lm, tokens = TinyLM(), torch.randint(0, 4000, (8, 65))
    compare("transformer block (examples/transformer_block.py), 8x64 tokens", lm, lambda: lm_loss(lm, tokens))
    deep = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64),
                                                     torch.nn.GELU()) for _ in range(200)])
    x = torch.randn(8, 64)
    compare("many small ops (200 x Linear+LayerNorm+GELU, width 64)", deep, lambda: deep(x).sum())


if __name__ == "__main__":
    main()
