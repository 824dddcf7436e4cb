"""The cost of gradflow.explain_errors when nothing fails: a training step (zero_grad, forward, backward, Adam
step) plain, as a function under `@gradflow.explain_errors` (runs plain; records only a second run of a call that
failed), and inside `with gradflow.explain_errors():` (records as it runs), on a tiny GPT-2 (transformers, from a
config) and a 200-layer MLP, side by side.

    PYTHONPATH=. python bench/explain_errors_cost.py [--rounds 21] [--steps 5] [--threads 1]

Each model is timed in back-to-back rounds (plain, function form, with-form, in an order that turns each round),
in CPU time of this thread; the figures held against the target (<= 1.2x) are the medians over the rounds of
each form's time / plain, so a shared machine's slow and fast minutes cancel out. Not a test: timings depend on
the machine.
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


FORMS = ("plain", "function", "with")


def steps(loss_of, opt, n: int, form: str) -> float:
    """CPU seconds of this thread per step."""
    step = gradflow.explain_errors(_step) if form == "function" else _step
    start = time.thread_time()
    if form == "with":
        with gradflow.explain_errors():
            for _ in range(n):
                step(loss_of, opt)
    else:
        for _ in range(n):
            step(loss_of, opt)
    return (time.thread_time() - start) / n


def _step(loss_of, opt):
    opt.zero_grad()
    loss_of().backward()
    opt.step()


def rounds(name: str, made, count: int, n: int) -> None:
    model, loss_of = made
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for form in FORMS:
        steps(loss_of, opt, 2, form)  # warm up each
    took: dict[str, list[float]] = {form: [] for form in FORMS}
    for i in range(count):
        for form in FORMS[i % 3:] + FORMS[:i % 3]:
            took[form].append(steps(loss_of, opt, n, form))
    plain = statistics.median(took["plain"])
    print(f"{name}: plain {plain * 1e3:.2f} ms/step")
    for form, label in (("function", "@explain_errors (function)"), ("with", "with explain_errors()")):
        ratios = [t / p for t, p in zip(took[form], took["plain"])]
        q = statistics.quantiles(ratios, n=4)
        print(f"  {label:<28} {statistics.median(took[form]) * 1e3:7.2f} ms/step   ratio {statistics.median(ratios):.3f}"
              f" (median of {count} rounds; quartiles {q[0]:.3f}-{q[2]:.3f})")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rounds("tiny GPT-2 (2 layers, width 32)", gpt2(), a.rounds, a.steps)
    rounds("MLP, 200 x (Linear 64 + ReLU)", mlp(), a.rounds, a.steps)


if __name__ == "__main__":
    main()
