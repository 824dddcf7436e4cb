"""How much `gradflow script` costs over running the script plainly (CPU).

    PYTHONPATH=. python bench/script_speed.py
Runs a small training loop script (a 2-layer MLP, N steps, each ending in loss.backward()) three ways, in this
process, best of 3 interleaved runs: plainly (runpy), under the recorder with a callback that does nothing
(the trace, the names, the program, the hooks), and with every table rendered to a string as the command
prints it. One torch thread. Not a test: timings depend on the machine.
"""
import io
import runpy
import sys
import tempfile
from pathlib import Path

import torch
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inspect_speed import best_of  # noqa: E402  (one interleaved best-of timer for both benchmarks)

from gradflow.script.backward_table import backward_view
from gradflow.script.run import run_script

SCRIPT = """
import torch
torch.manual_seed(0)
w1 = torch.randn(8, 16, requires_grad=True)
w2 = torch.randn(16, 1, requires_grad=True)
X, Y = torch.randn(64, 8), torch.randn(64, 1)
for step in range({steps}):
    h = torch.relu(X @ w1)
    loss = ((h @ w2 - Y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w1 -= 0.01 * w1.grad
        w2 -= 0.01 * w2.grad
        w1.grad.zero_()
        w2.grad.zero_()
"""


def main(steps: int = 200):
    torch.set_num_threads(1)  # tiny ops: 2 OpenMP threads on a shared 2-core machine only add noise
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.py"
        path.write_text(SCRIPT.format(steps=steps))
        out = Console(file=io.StringIO(), width=100)
        plain = lambda: runpy.run_path(str(path), run_name="__main__")  # noqa: E731
        traced = lambda: run_script(path, [], lambda call: None)  # noqa: E731
        shown = lambda: run_script(path, [], lambda call: out.print(backward_view(call, 100)))  # noqa: E731
        plain(), traced()  # warm up
        t_plain, t_traced, t_shown = best_of([plain, traced, shown], runs=3)
    print(f"torch {torch.__version__}, {steps} training steps (2-layer MLP, 64x8 batch), best of 3 interleaved runs:")
    print(f"  plain script           : {t_plain:.3f} s")
    print(f"  recorded (no output)   : {t_traced:.3f} s  ({t_traced / t_plain:.1f}x)")
    print(f"  recorded, tables shown : {t_shown:.3f} s  ({t_shown / t_plain:.1f}x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
