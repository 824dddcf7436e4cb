"""`gradflow script` on whole training loops against `python FILE.py`, side by side in the same run (CPU).

    PYTHONPATH=. python bench/script_loop.py [--pairs 3] [--long 10000] [--long-pairs 1] [--gpt2-steps 100]
Three loops, each written to a temporary file and run as a fresh process, plainly and under `gradflow script`
(stdout to /dev/null), in alternating pairs; medians over the pairs of the wall-time ratio, the CPU-time ratio
(user+sys: it moves less on a shared machine) and the peak-RSS difference (os.wait4's ru_maxrss):
- a small MLP (32-64-1, SGD with momentum), 1,000 steps: target <= 1.5x wall, peak RSS within 50 MB;
- the same for --long steps (10,000): the peak RSS must stay where the 1,000-step one is (nothing kept per step);
- a tiny transformers GPT-2 (bench/tiny_gpt2.py's config) with AdamW, --gpt2-steps steps: target <= 1.5x.
Both sides run with OMP_NUM_THREADS=1: tiny ops on a shared machine only wait on a second thread.
Not a test: timings depend on the machine.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MLP = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
X, Y = torch.randn(64, 32), torch.randn(64, 1)
for step in range({steps}):
    opt.zero_grad()
    loss = ((model(X) - Y) ** 2).mean()
    loss.backward()
    opt.step()
print("final loss", loss.item())
"""

GPT2 = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0)
model = GPT2LMHeadModel(config)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range({steps}):
    ids = torch.randint(0, 100, (4, 32))
    loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final loss", loss.item())
"""


def measure(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, user+sys CPU s, peak RSS MB) of one fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def pair_up(path: Path, pairs: int) -> dict:
    plain = [sys.executable, str(path)]
    traced = [sys.executable, "-m", "gradflow", "script", str(path)]
    rows = []
    for k in range(pairs):  # alternate which one goes first: a load that drifts hits both alike
        a, b = (plain, traced) if k % 2 == 0 else (traced, plain)
        first, second = measure(a), measure(b)
        rows.append((first, second) if a is plain else (second, first))
    med = statistics.median
    return {"plain_wall": med(p[0] for p, _ in rows), "wall": med(t[0] / p[0] for p, t in rows),
            "cpu": med(t[1] / p[1] for p, t in rows), "plain_rss": med(p[2] for p, _ in rows),
            "rss": med(t[2] for _, t in rows), "extra_rss": med(t[2] - p[2] for p, t in rows)}


def show(title: str, r: dict, target: float | None) -> None:
    verdict = "" if target is None else f"   target <= {target}x wall: {'ok' if r['wall'] <= target else 'MISSED'}"
    print(f"{title}\n  plain {r['plain_wall']:.2f} s; gradflow script {r['wall']:.2f}x wall, {r['cpu']:.2f}x CPU; "
          f"peak RSS {r['rss']:.0f} MB (+{r['extra_rss']:.0f} MB over plain){verdict}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--long", type=int, default=10_000)
    ap.add_argument("--long-pairs", type=int, default=1)
    ap.add_argument("--gpt2-steps", type=int, default=100)
    opts = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    print(f"load {os.getloadavg()[0]:.1f}; medians of {opts.pairs} alternating pairs")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [("MLP, 1,000 steps", MLP.format(steps=1000), 1.5, opts.pairs),
                (f"MLP, {opts.long:,} steps (memory)", MLP.format(steps=opts.long), None, opts.long_pairs),
                (f"tiny GPT-2 + AdamW, {opts.gpt2_steps} steps", GPT2.format(steps=opts.gpt2_steps), 1.5, opts.pairs)]
        for i, (title, source, target, pairs) in enumerate(runs):
            path = Path(tmp) / f"loop{i}.py"
            path.write_text(source)
            show(title, pair_up(path, pairs), target)


if __name__ == "__main__":
    main()
