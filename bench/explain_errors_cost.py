"""The cost of gradflow.explain_errors() when nothing fails: a training step (zero_grad, forward, backward,
Adam step) plain and inside the context manager, on a tiny GPT-2 (transformers, from a config) and a 200-layer
MLP, side by side.

    PYTHONPATH=. python bench/explain_errors_cost.py [--pairs 21] [--steps 5] [--threads 1]

Each model is timed in back-to-back pairs (plain, then explained, alternately first), in CPU time of this thread;
the figure held against the target (<= 1.2x) is the median over the pairs of explained / plain, so a shared
machine's slow and fast minutes cancel out. Not a test: timings depend on the machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import gradflow

sys.path.insert(0, str(Path(__file__).resolve().parent))


def mlp(depth: int = 200, width: int = 64):
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
    x, y = torch.randn(32, width), torch.randint(0, 10, (32,))
    return model, lambda: torch.nn.functional.cross_entropy(model(x), y)


def gpt2():
    from tiny_gpt2 import build

    model, ids = build()
    return model, lambda: model(input_ids=ids, labels=ids).loss


def steps(model, loss_of, opt, n: int, explained: bool) -> float:
    """CPU seconds of this thread per step."""
    start = time.thread_time()
    if explained:
        with gradflow.explain_errors():
            for _ in range(n):
                _step(loss_of, opt)
    else:
        for _ in range(n):
            _step(loss_of, opt)
    return (time.thread_time() - start) / n


def _step(loss_of, opt):
    opt.zero_grad()
    loss_of().backward()
    opt.step()


def paired(name: str, made, pairs: int, n: int) -> float:
    model, loss_of = made
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps(model, loss_of, opt, 2, False), steps(model, loss_of, opt, 2, True)  # warm up both
    ratios, plain, explained = [], [], []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        got = {e: steps(model, loss_of, opt, n, e) for e in order}
        plain.append(got[False])
        explained.append(got[True])
        ratios.append(got[True] / got[False])
    ratio = statistics.median(ratios)
    print(f"{name:<34} plain {statistics.median(plain) * 1e3:7.2f} ms/step   explain_errors "
          f"{statistics.median(explained) * 1e3:7.2f} ms/step   ratio {ratio:.3f} (median of {pairs} pairs; "
          f"quartiles {statistics.quantiles(ratios, n=4)[0]:.3f}-{statistics.quantiles(ratios, n=4)[2]:.3f})")
    return ratio


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=21)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    paired("tiny GPT-2 (2 layers, width 32)", gpt2(), a.pairs, a.steps)
    paired("MLP, 200 x (Linear 64 + ReLU)", mlp(), a.pairs, a.steps)


if __name__ == "__main__":
    main()
