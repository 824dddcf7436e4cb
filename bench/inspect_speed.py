"""How long `gradflow.trace` + `explain` take on a ~5M-parameter transformer block (CPU).

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


def main():
    torch.manual_seed(0)
    model = TinyLM()
    tokens = torch.randint(0, 4000, (8, 65))
    n = sum(p.numel() for p in model.parameters())

    def plain():
        model.zero_grad(set_to_none=True)
        lm_loss(model, tokens).backward()

    def traced():
        with gradflow.trace() as t:
            loss = lm_loss(model, tokens)
        return t.explain(loss, params=model)

    plain(), traced()  # warm up
    t_plain, t_traced = best_of([plain, traced])
    report = traced()
    print(f"model: {n / 1e6:.2f}M parameters, {len(report.params)} tensors; batch 8x64 tokens; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"plain forward+backward : {t_plain:.3f} s")
    print(f"trace + explain        : {t_traced:.3f} s  ({t_traced / t_plain:.2f}x)")
    print(f"statuses: {report.to_dict()['counts']}")


if __name__ == "__main__":
    main()
