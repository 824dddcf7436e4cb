"""How long `gradflow.trace` + `explain` take against plain torch on the same model, in the same run (CPU).

    PYTHONPATH=. python bench/inspect_speed.py [--runs N] [--threads T] [--no-gpt2]

In this process, N runs of each, in turn: a plain forward + backward (torch.autograd.grad) against a traced
forward + explain, on a ~5M-parameter transformer block (target <= 1.15x), many small ops (200 x
Linear+LayerNorm+GELU at width 64, target <= 1.7x), a tiny MLP and a tiny GPT-2 (both for reference). The ratio
held against the target is the median, over the N back-to-back pairs, of traced / plain in CPU time of this
thread: each pair runs in the same moment, so a shared machine's slow and fast minutes cancel out (the ratio of
the two best times, printed too, moved by +-0.05 from run to run here; the paired median by +-0.01). Then, in fresh
processes, alternately: `gradflow inspect bench/tiny_gpt2.py:main` against `python bench/tiny_gpt2.py`, which
builds the same tiny GPT-2 and runs one step (target <= 1.3x; transformers must be installed). Not a
test: timings depend on the machine.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
sys.path.insert(0, str(HERE))
from transformer_block import TinyLM, lm_loss  # noqa: E402

import gradflow  # noqa: E402


def interleaved(fns, runs=5) -> list[list[tuple[float, float]]]:
    """(wall, CPU time of this thread) of each call, the functions called in turn `runs` times, so machine load
    hits them alike."""
    times: list[list[tuple[float, float]]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, ts in zip(fns, times):
            wall, cpu = time.perf_counter(), time.thread_time()
            fn()
            ts.append((time.perf_counter() - wall, time.thread_time() - cpu))
    return times


def best_of(fns, runs=5) -> list[float]:
    """Best wall time of each function, its runs interleaved with the others' (bench/script_speed.py)."""
    return [min(wall for wall, _ in ts) for ts in interleaved(fns, runs)]


def verdict(ratio: float, target: float | None) -> str:
    return "for reference" if target is None else f"target <= {target}x: {'ok' if ratio <= target else 'MISSED'}"


def compare(title: str, model, loss_fn, target: float | None, runs: int) -> float:
    params = [p for p in model.parameters() if p.requires_grad]

    def plain():
        torch.autograd.grad(loss_fn(), params)  # what explain() runs too: .grad stays untouched

    def traced():
        with gradflow.trace() as t:
            loss = loss_fn()
        return t, t.explain(loss, params=model)

    plain(), traced()  # warm up
    plain_times, traced_times = interleaved([plain, traced], runs)
    best = [[min(t[k] for t in ts) for k in (0, 1)] for ts in (plain_times, traced_times)]  # [wall, CPU] each
    paired = [statistics.median(t[k] / p[k] for p, t in zip(plain_times, traced_times)) for k in (0, 1)]
    trace, report = traced()
    n = sum(p.numel() for p in model.parameters())
    print(f"{title}: {n / 1e6:.2f}M parameters in {len(report.params)} tensors, {len(trace.ops)} ops recorded")
    for name, (wall, cpu) in zip(("plain forward+backward", "trace + explain       "), best):
        print(f"  {name} : best {wall * 1e3:8.1f} ms wall  {cpu * 1e3:8.1f} ms CPU")
    print(f"  ratio, median of {runs} pairs: {paired[1]:.2f}x CPU, {paired[0]:.2f}x wall "
          f"({verdict(paired[1], target)}); best against best: {best[1][1] / best[0][1]:.2f}x CPU, "
          f"{best[1][0] / best[0][0]:.2f}x wall")
    return paired[1]


def whole_run(runs: int) -> list[float]:
    """`gradflow inspect` of a tiny GPT-2 against the plain script, fresh processes, alternately (bench/run.py)."""
    from run import PY, alternate, median
    from run import gradflow as command

    script = str(HERE / "tiny_gpt2.py")
    freeze = f"import runpy, gc; runpy.run_path({script!r}, run_name='__main__'); gc.freeze()"
    got = alternate({"g": command("inspect", f"{script}:main"), "t": [PY, script], "f": [PY, "-c", freeze]}, runs)
    assert all(r[3] == 0 for rows in got.values() for r in rows), "a command failed"
    g, t, f = (median(got[k]) for k in "gtf")
    gc, tc, fc = (median(got[k], 4) for k in "gtf")
    print(f"tiny GPT-2 (transformers, 2 layers, width 32), one step, {runs} fresh processes each, medians:")
    print(f"  python bench/tiny_gpt2.py                   : {t:6.2f} s wall  {tc:6.2f} s CPU")
    print(f"  the same + gc.freeze() as its last line     : {f:6.2f} s wall  {fc:6.2f} s CPU")
    print(f"  gradflow inspect bench/tiny_gpt2.py:main    : {g:6.2f} s wall  {gc:6.2f} s CPU  ratio {g / t:.2f}x wall, "
          f"{gc / tc:.2f}x CPU ({verdict(g / t, 1.3)}); against the script + gc.freeze(): {g / f:.2f}x wall, "
          f"{gc / fc:.2f}x CPU")
    return [g / t]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per side (pairs, in process; median, processes)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    ap.add_argument("--no-gpt2", action="store_true", help="leave out the whole-process GPT-2 run")
    opts = ap.parse_args()
    torch.set_num_threads(opts.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {opts.runs} runs of each, in turn")
    torch.manual_seed(0)
    lm, tokens = TinyLM(), torch.randint(0, 4000, (8, 65))
    ratios = [compare("transformer block (examples/transformer_block.py), 8x64 tokens", lm,
                      lambda: lm_loss(lm, tokens), 1.15, opts.runs)]
    deep = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64),
                                                     torch.nn.GELU()) for _ in range(200)])
    x = torch.randn(8, 64)
    ratios.append(compare("many small ops (200 x Linear+LayerNorm+GELU, width 64)", deep, lambda: deep(x).sum(),
                          1.7, opts.runs))
    mlp, xs = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)), torch.randn(8, 16)
    ratios.append(compare("a tiny MLP (16-32-1)", mlp, lambda: mlp(xs).sum(), None, opts.runs))
    if not opts.no_gpt2:
        from tiny_gpt2 import build
        gpt2, ids = build()
        ratios.append(compare("a tiny GPT-2 (bench/tiny_gpt2.py: 2 layers, width 32), in process", gpt2,
                              lambda: gpt2(input_ids=ids, labels=ids).loss, None, opts.runs))
        ratios += whole_run(opts.runs)
    print("ratios:", " ".join(f"{r:.2f}" for r in ratios))


if __name__ == "__main__":
    main()
