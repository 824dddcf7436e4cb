"""Drawing torch's autograd graph of a 12-layer tiny GPT-2: gradflow's `--autograd` picture against torchviz's
`make_dot`, side by side in this process (CPU).

    PYTHONPATH=. python bench/graph_speed.py [--runs N] [--layers L]

Both draw the same loss's graph, walked from `loss.grad_fn` through `next_functions`, as DOT text:
`make_dot(loss, params).source` against `autograd_graph(report, trace)` + `to_dot` (names from the trace,
cuts and frozen parameters added, the 12 blocks folded into one). The forward and the trace are made once,
outside the timing. Target: gradflow within 2x of torchviz (the median of N back-to-back pairs, CPU time of this
thread). Then, once each, Graphviz's layout of both texts (`dot -Tsvg`): what a person waits for, and how many
nodes each picture has. torchviz and graphviz (the Python package) come from the `bench` extra; not a test.

`--script` times `gradflow script examples/gpt2_script.py --autograd` the same way: the script is run once under
`run_script(..., autograd=True)` (outside the timing), then each pair draws its backward's graph:
`make_dot(loss, params).source` against what `script --autograd` does at that backward (the script's leaves and
modules named, their statuses read, the flow graph taken, `autograd_graph` + `to_dot`).
"""
import argparse
import statistics
import subprocess
import time
from pathlib import Path

import torch
from torchviz import make_dot
from transformers import GPT2Config, GPT2LMHeadModel

from gradflow.render.op_graph import to_dot
from gradflow.report.build import trace
from gradflow.report.op_graph import autograd_graph


def model_and_loss(layers: int):
    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0,
                        eos_token_id=0)
    model = GPT2LMHeadModel(config)
    ids = torch.randint(0, 100, (4, 32))
    t = trace(autograd=True)
    with t:
        loss = model(input_ids=ids, labels=ids).loss
    return model, loss, t.explain(loss, params=model), t


def cpu(fn) -> tuple[float, str]:
    start = time.thread_time()
    text = fn()
    return time.thread_time() - start, text


def layout(text: str) -> float:
    start = time.perf_counter()
    subprocess.run(["dot", "-Tsvg"], input=text.encode(), capture_output=True, check=True)
    return time.perf_counter() - start


def script_pairs():
    """examples/gpt2_script.py's backward: (torchviz, gradflow script --autograd, the same unfolded)."""
    from gradflow.script.autograd import BackwardOps
    from gradflow.script.run import run_script

    calls = []
    run_script(Path(__file__).resolve().parents[1] / "examples" / "gpt2_script.py", [], calls.append, autograd=True)
    (call,) = calls
    trace = call.autograd_ops.trace
    params = {leaf.name: leaf.tensor for leaf in call.autograd_ops.params}
    return (lambda: make_dot(call.roots[0], params=params).source,
            lambda: to_dot(BackwardOps(trace, call).draw()),
            lambda: to_dot(BackwardOps(trace, call).draw(fold=False)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--script", action="store_true", help="time `gradflow script --autograd` (12 layers)")
    opts = ap.parse_args()
    if opts.script:
        theirs, ours, whole = script_pairs()
        opts.layers = 12
    else:
        model, loss, report, t = model_and_loss(opts.layers)
        params = dict(model.named_parameters())
        theirs = lambda: make_dot(loss, params=params).source
        ours = lambda: to_dot(autograd_graph(report, t))
        whole = lambda: to_dot(autograd_graph(report, t, fold=False))
    ratios, pairs = [], []
    for _ in range(opts.runs):
        (a, dot_theirs), (b, dot_ours), (c, dot_whole) = cpu(theirs), cpu(ours), cpu(whole)
        pairs.append((a, b, c))
        ratios.append(b / a)
    what = "gradflow script --autograd, " if opts.script else ""
    print(f"{what}tiny GPT-2, {opts.layers} layers, {opts.runs} pairs (CPU time of this thread, median):")
    for name, i, text in (("torchviz make_dot(...).source   ", 0, dot_theirs),
                          ("gradflow autograd_graph + to_dot", 1, dot_ours),
                          ("  the same, fold=False           ", 2, dot_whole)):
        print(f"  {name} {statistics.median(p[i] for p in pairs) * 1e3:8.1f} ms  {text.count('[label=')} nodes")
    print(f"  ratio gradflow / torchviz: {statistics.median(ratios):.2f}x (target <= 2x)")
    print(f"  Graphviz dot -Tsvg: torchviz's {layout(dot_theirs):.2f} s, gradflow's {layout(dot_ours):.2f} s "
          f"(fold=False: {layout(dot_whole):.2f} s)")


if __name__ == "__main__":
    main()
