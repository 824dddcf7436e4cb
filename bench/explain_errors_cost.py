"""The cost of gradflow.explain_errors() when nothing fails: a training step of a small MLP, plain and inside
the context manager, timed alternately (medians of many rounds), as a ratio.

    python bench/explain_errors_cost.py [--width 256] [--depth 3] [--batch 64] [--rounds 15]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import gradflow


def make(width: int, depth: int):
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Linear(784, width), torch.nn.ReLU()]
    for _ in range(depth - 1):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


def timed(model, opt, x, y, steps: int, explained: bool) -> float:
    start = time.perf_counter()
    if explained:
        with gradflow.explain_errors():
            for _ in range(steps):
                step(model, opt, x, y)
    else:
        for _ in range(steps):
            step(model, opt, x, y)
    return (time.perf_counter() - start) / steps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(1)
    model, opt = make(a.width, a.depth)
    x, y = torch.randn(a.batch, 784), torch.randint(0, 10, (a.batch,))
    timed(model, opt, x, y, 5, False), timed(model, opt, x, y, 5, True)  # warm up both
    plain, explained = [], []
    for _ in range(a.rounds):
        plain.append(timed(model, opt, x, y, a.steps, False))
        explained.append(timed(model, opt, x, y, a.steps, True))
    p_med, e_med = statistics.median(plain), statistics.median(explained)
    print(f"MLP 784-{a.width}x{a.depth}-10, batch {a.batch}, Adam: plain {p_med * 1e6:.0f} us/step, "
          f"explain_errors {e_med * 1e6:.0f} us/step, ratio {e_med / p_med:.3f}")


if __name__ == "__main__":
    main()
