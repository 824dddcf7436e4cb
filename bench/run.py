"""gradflow vs plain torch, measured in the same run: prints ratios (medians), not pass/fail tests.

    python bench/run.py [--runs N] [--only a,b,c,d,e]

Each pair runs alternately (gradflow, torch, gradflow, torch, ...) in fresh processes; every number is a
median. Stdlib + torch only. Targets (from issue #4): (a) cold eval <= 1.10x, (b) --help / syntax error
<= 1.5x of `import typer, rich` with torch not imported, (c) batch <= 2.0x, (d) 4M elements: time <= 1.3x
and peak memory <= 1.5x; from issue #12: (e) 10,000 all-distinct programs: `batch --jobs 2` >= 1.7x as fast as
`--jobs 1`, and `--jobs 1 --brief` (records that answer what the loop answers) <= 1.5x of the eval loop.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
BLOG = "(x*y1 - detach(x*y2))^2"
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
ENV.pop("PYTHONUNBUFFERED", None)
# As installed, every module has its bytecode cached; without this a dev shell's PYTHONDONTWRITEBYTECODE=1
# recompiles gradflow's sources (~0.09 s) on every start while torch, typer and rich load from .pyc files.
ENV.pop("PYTHONDONTWRITEBYTECODE", None)

TORCH_BLOG = """
import torch
x = torch.tensor(1.0, requires_grad=True); y1 = torch.tensor(2.0); y2 = torch.tensor(7.0)
a = x * y1; b = (x * y2).detach(); d = a - b; L = d ** 2
for t in (a, d, L): t.retain_grad()
L.backward()
for name, t in [("x", x), ("x*y1", a), ("x*y2", b), ("d", d), ("L", L)]:
    print(f"{name:8} {t.item():10g} {t.requires_grad!s:6} {t.is_leaf!s:6} {type(t.grad_fn).__name__:12} {t.grad}")
print("x.grad =", x.grad.item())
"""

TORCH_BATCH = """
import json, sys, torch
def lift(f):
    return lambda t: f(torch.as_tensor(t, dtype=torch.float32))
F = {name: lift(getattr(torch, name)) for name in ("detach", "sum", "mean", "tanh", "sigmoid", "exp", "sin", "cos")}
for line in open(sys.argv[1]):
    rec = json.loads(line)
    env = {k: torch.tensor(v, dtype=torch.float32) for k, v in rec["vars"].items()}
    env["x"].requires_grad_(True)
    L = eval(rec["expr"].replace("^", "**"), {"__builtins__": {}, **F}, env)
    L.backward()
    print(json.dumps({"id": rec["id"], "output": L.item(), "grads": {"x": env["x"].grad.tolist()}}), flush=True)
"""

BIG_SETUP = """
import json, os, sys, time, torch
x = torch.randn(4_000_000, generator=torch.Generator().manual_seed(0))
with open("/proc/self/statm") as fh:  # resident set now (KiB), after imports and x
    base = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
"""
BIG_GRADFLOW = BIG_SETUP + """
from gradflow.engine.explain import explain
import gradflow.engine.evaluate  # its one-time imports (~40 ms) count in the whole-process line, not in the work timed here
t0 = time.perf_counter()
r = explain("sum(tanh(x)*x + sigmoid(x))", x=x, measure_edges=sys.argv[1] == "measure")
work = time.perf_counter() - t0
print(json.dumps({"work": work, "base_kb": base, "L": r.output.value.item(), "g0": r.grads["x"][0].item()}))
"""
BIG_TORCH = BIG_SETUP + """
t0 = time.perf_counter()
x = x.clone().requires_grad_(True)
t = torch.tanh(x); m = t * x; s = torch.sigmoid(x); a = m + s; L = a.sum()
for v in (t, m, s, a, L): v.retain_grad()
L.backward()
work = time.perf_counter() - t0
print(json.dumps({"work": work, "base_kb": base, "L": L.item(), "g0": x.grad[0].item()}))
"""


_SUBREAPER: list[bool] = []


def subreaper() -> bool:
    """Become the reaper of our orphans (Linux): the CPU time of `batch --jobs N`'s fork server and workers
    (grandchildren, orphaned when the command exits) then counts in run()'s CPU seconds."""
    if not _SUBREAPER:
        try:
            import ctypes

            _SUBREAPER.append(ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0)  # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            _SUBREAPER.append(False)
    return _SUBREAPER[0]


def run(cmd: list[str]) -> tuple[float, int, str, int, float]:
    """Wall seconds, peak RSS (KiB, this child only), stdout, exit code and CPU seconds of one fresh process
    (and, once subreaper() is on, of every process it started)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV)
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    while _SUBREAPER and _SUBREAPER[0]:  # its orphans (they end once it has)
        try:
            _, _, more = os.wait4(-1, 0)
        except ChildProcessError:
            break
        cpu += more.ru_utime + more.ru_stime
    return wall, usage.ru_maxrss, out, code, cpu


def alternate(cmds: dict[str, list[str]], runs: int) -> dict[str, list[tuple[float, int, str]]]:
    """Every command once per round, rounds repeated: both sides see the same machine load.
    One untimed round first: bytecode written, files in the OS cache, lark tables cached."""
    for cmd in cmds.values():
        run(cmd)
    got: dict[str, list] = {k: [] for k in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            got[name].append(run(cmd))
    return got


def median(rows, i=0) -> float:
    return statistics.median(r[i] for r in rows)


def line(label: str, g: float, t: float, target: float | None, unit: str = "s", cpu: tuple | None = None):
    """One result line; `cpu` (gradflow, torch CPU seconds) is printed too: less sensitive to a busy machine.
    A line without a target is for reference only."""
    ratio = g / t
    verdict = "for reference, no target" if target is None else \
        f"target <= {target}x: {'ok' if ratio <= target else 'MISSED'}"
    extra = f"  [cpu {cpu[0]:.2f}s vs {cpu[1]:.2f}s = {cpu[0] / cpu[1]:.2f}x]" if cpu else ""
    print(f"  {label:40} gradflow {g:8.3f}{unit}  torch {t:8.3f}{unit}  ratio {ratio:5.2f}x  "
          f"({verdict}){extra}")
    return ratio


def pair(label: str, got: dict, g: str, t: str, target: float | None) -> float:
    """Wall-time line for two commands of `alternate`, with their CPU times alongside."""
    return line(label, median(got[g]), median(got[t]), target, cpu=(median(got[g], 4), median(got[t], 4)))


def gradflow(*args: str) -> list[str]:
    return [PY, "-m", "gradflow", *args]


def bench_cold(runs: int) -> list[float]:
    print("(a) cold `gradflow eval` of the blog example vs a hand-written torch script")
    # gradflow ends with gc.freeze() (see streams.run_safely): the interpreter's shutdown collections then skip
    # torch's objects. "t+freeze" is the same script with that one line too: gradflow's own overhead, like for like.
    got = alternate({"g": gradflow("eval", BLOG, "--x", "1", "--y1", "2", "--y2", "7"),
                     "t": [PY, "-c", TORCH_BLOG], "f": [PY, "-c", TORCH_BLOG + "import gc; gc.freeze()\n"]}, runs)
    assert all(r[3] == 0 for rows in got.values() for r in rows), "a command failed"
    return [pair("eval, wall", got, "g", "t", 1.10),
            pair("eval vs the script + gc.freeze(), wall", got, "g", "f", None)]


def torch_imported(args: list[str]) -> bool:
    """-X importtime lists every module the command imports (on stderr)."""
    res = subprocess.run([PY, "-X", "importtime", "-m", "gradflow", *args], capture_output=True, text=True, env=ENV)
    return any(ln.rsplit("|", 1)[-1].strip() == "torch" for ln in res.stderr.splitlines())


def bench_startup(runs: int) -> list[float]:
    print("(b) `gradflow --help` and a syntax error vs `python -c \"import typer, rich\"`")
    syntax = ["eval", "(x*y1 - detach(x*y2)^2", "--x", "1", "--y1", "2", "--y2", "7"]
    for args in (["--help"], syntax):
        assert not torch_imported(args), f"gradflow {args[0]} imported torch"
    print("  torch imported by --help / the syntax error: no (checked with -X importtime)")
    got = alternate({"h": gradflow("--help"), "s": gradflow(*syntax), "t": [PY, "-c", "import typer, rich"]}, runs)
    assert {r[3] for r in got["s"]} == {2}, "the syntax error should exit 2"
    return [pair("--help, wall", got, "h", "t", 1.5), pair("syntax error, wall", got, "s", "t", 1.5)]


def _tree(rng: random.Random, depth: int) -> str:
    """A random program over x and y using only syntax that Python's eval also reads (after ^ -> **)."""
    r = rng.random()
    if depth == 0 or r < 0.25:
        return rng.choice(["x", "y", "x", str(rng.choice([0.5, 2, 3, 1.5]))])
    if r < 0.6:
        return f"({_tree(rng, depth - 1)} {rng.choice('+-*')} {_tree(rng, depth - 1)})"
    if r < 0.88:
        return f"{rng.choice(['tanh', 'sigmoid', 'sin', 'cos', 'exp'])}({_tree(rng, depth - 1)})"
    if r < 0.95:
        return f"({_tree(rng, depth - 1)})^2"
    return f"detach({_tree(rng, depth - 1)})"


def _live_x(expr: str) -> bool:
    """Does x occur outside every detach(...)?"""
    out, depth, i = [], 0, 0
    while i < len(expr):
        if expr.startswith("detach(", i) and depth == 0:
            depth, i = 1, i + 7
            continue
        ch = expr[i]
        if depth:
            depth += (ch == "(") - (ch == ")")
        else:
            out.append(ch)
        i += 1
    return "x" in "".join(out).replace("exp", "")


def batch_lines(n: int = 10_000, programs: int = 200, seed: int = 0) -> list[str]:
    """`programs` distinct programs (half of them reduced vectors), `n` lines of fresh values over them."""
    rng = random.Random(seed)
    progs: dict[str, bool] = {}
    while len(progs) < programs:
        body = _tree(rng, rng.randint(2, 5))
        if not _live_x(body):
            body = f"({body}) * x"
        vector = len(progs) % 2 == 1
        progs[f"{rng.choice(['sum', 'mean'])}({body})" if vector else body] = vector
    progs = list(progs.items())
    lines = []
    for i in range(n):
        expr, vector = progs[rng.randrange(programs)]
        size = rng.randint(2, 8)
        draw = (lambda: [round(rng.uniform(-2, 2), 3) for _ in range(size)]) if vector else \
            (lambda: round(rng.uniform(-2, 2), 3))
        names = ["x"] + (["y"] if "y" in expr else [])
        lines.append(json.dumps({"id": i, "expr": expr, "vars": {k: draw() for k in names}}))
    return lines


def bench_batch(runs: int) -> list[float]:
    print("(c) `gradflow batch` of 10,000 lines (200 distinct programs, scalar and vector values) vs an eval loop")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        fh.write("\n".join(batch_lines()) + "\n")
    try:
        got = alternate({"g": gradflow("batch", fh.name), "t": [PY, "-c", TORCH_BATCH, fh.name]}, runs)
    finally:
        os.unlink(fh.name)
    g0, t0 = got["g"][0], got["t"][0]
    assert g0[3] == 0 and t0[3] == 0, "a batch failed"
    recs = [(json.loads(a)["grads"]["x"], json.loads(b)["grads"]["x"])
            for a, b in zip(g0[2].splitlines(), t0[2].splitlines())]
    assert len(recs) == 10_000 and all(_close(a, b) for a, b in recs), "gradflow and torch disagree"
    return [pair("batch, wall", got, "g", "t", 2.0)]


def distinct_lines(n: int = 10_000, seed: int = 0) -> list[str]:
    """`n` lines, each with its own program (no program text is repeated), half of them reduced vectors."""
    rng = random.Random(seed)
    seen: set[str] = set()
    lines = []
    while len(lines) < n:
        body = _tree(rng, rng.randint(2, 5))
        if not _live_x(body):
            body = f"({body}) * x"
        vector = len(lines) % 2 == 1
        expr = f"{rng.choice(['sum', 'mean'])}({body})" if vector else body
        if expr in seen:
            continue
        seen.add(expr)
        size = rng.randint(2, 8)
        draw = (lambda size=size: [round(rng.uniform(-2, 2), 3) for _ in range(size)]) if vector else \
            (lambda: round(rng.uniform(-2, 2), 3))
        names = ["x"] + (["y"] if "y" in expr else [])
        lines.append(json.dumps({"id": len(lines), "expr": expr, "vars": {k: draw() for k in names}}))
    return lines


def bench_jobs(runs: int) -> list[float]:
    cores = len(os.sched_getaffinity(0))
    print(f"(e) `gradflow batch --jobs N` over 10,000 all-distinct programs ({cores} usable cores) vs an eval loop")
    lines = distinct_lines()
    assert len(set(json.loads(ln)["expr"] for ln in lines)) == len(lines), "a program is repeated"
    counted = subreaper()
    load = os.getloadavg()[0]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        fh.write("\n".join(lines) + "\n")
    try:
        got = alternate({"1": gradflow("batch", fh.name, "--jobs", "1"), "2": gradflow("batch", fh.name, "--jobs", "2"),
                         "b": gradflow("batch", fh.name, "--jobs", "1", "--brief"),
                         "t": [PY, "-c", TORCH_BATCH, fh.name]}, runs)
    finally:
        os.unlink(fh.name)
    one, two, brief, ref = got["1"][0], got["2"][0], got["b"][0], got["t"][0]
    assert one[3] == two[3] == brief[3] == ref[3] == 0, "a batch failed"
    assert one[2] == two[2], "--jobs 2 and --jobs 1 differ"
    fulls, briefs = [json.loads(a) for a in one[2].splitlines()], [json.loads(b) for b in brief[2].splitlines()]
    assert briefs == [{k: v for k, v in d.items() if k not in ("nodes", "edges", "contributions")} for d in fulls], \
        "a --brief record is not the full record less nodes, edges and contributions"
    recs = [(a["grads"]["x"], json.loads(b)["grads"]["x"]) for a, b in zip(briefs, ref[2].splitlines())]
    assert len(recs) == 10_000 and all(_close(a, b) for a, b in recs), "gradflow and torch disagree"
    w1, w2, wt = median(got["1"]), median(got["2"]), median(got["t"])
    speedup = w1 / w2
    print(f"  {'--jobs 1 / --jobs 2, wall':40} --jobs 1 {w1:8.3f}s  --jobs 2 {w2:8.3f}s  speed-up {speedup:5.2f}x  "
          f"(target >= 1.7x: {'ok' if speedup >= 1.7 else 'MISSED'})")
    if counted:  # the pool's own cost: all its processes' CPU against one process's
        c1, c2 = median(got["1"], 4), median(got["2"], 4)
        print(f"  {'CPU of all processes':40} --jobs 1 {c1:8.3f}s  --jobs 2 {c2:8.3f}s  ratio {c2 / c1:5.2f}x")
    print(f"  load average (1 min) before / after: {load:.2f} / {os.getloadavg()[0]:.2f} on {cores} cores: with "
          "other sessions busy, Linux's autogroup scheduling gives this session one share, whatever its processes")
    return [speedup, pair("--jobs 1 --brief vs the eval loop, wall", got, "b", "t", 1.5),
            pair("--jobs 1, full records, vs the loop", got, "1", "t", None),
            line("--jobs 2 vs the eval loop, wall", w2, wt, None)]


def _close(a, b) -> bool:
    """Equal within float32 rounding; gradflow writes non-finite numbers as "nan", "inf", "-inf"."""
    a, b = (a, b) if isinstance(a, list) else ([a], [b])
    pairs = [(float(u), float(v)) for u, v in zip(a, b)]
    return all(u == v or (u != u and v != v) or abs(u - v) <= 1e-5 * max(1, abs(v)) for u, v in pairs)


def bench_big(runs: int) -> list[float]:
    print("(d) 4,000,000-element x through sum(tanh(x)*x + sigmoid(x)) vs torch with retain_grad")
    got = alternate({"g": [PY, "-c", BIG_GRADFLOW, "measure"], "t": [PY, "-c", BIG_TORCH],
                     "n": [PY, "-c", BIG_GRADFLOW, "nomeasure"]}, runs)
    res = {k: [json.loads(r[2]) for r in rows] for k, rows in got.items()}
    assert abs(res["g"][0]["L"] - res["t"][0]["L"]) <= 1e-4 * abs(res["t"][0]["L"]), "values differ"
    assert abs(res["g"][0]["g0"] - res["t"][0]["g0"]) <= 1e-5, "gradients differ"
    work = {k: statistics.median(d["work"] for d in v) for k, v in res.items()}
    extra = {k: statistics.median(r[1] - d["base_kb"] for r, d in zip(got[k], res[k])) / 1024 for k in got}
    peak = {k: median(got[k], 1) / 1024 for k in got}
    return [line("explain(): evaluate + backward, time", work["g"], work["t"], 1.3),
            pair("whole process, wall", got, "g", "t", 1.3),
            line("whole process, peak RSS", peak["g"], peak["t"], 1.5, "M"),
            line("peak RSS above RSS once x is made", extra["g"], extra["t"], 1.5, "M"),
            line("measure_edges=False: time", work["n"], work["t"], 1.3),
            line("measure_edges=False: peak RSS above x", extra["n"], extra["t"], 1.5, "M")]


def machine() -> str:
    import torch  # only to report its version

    return (f"{platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs "
            f"(torch threads {torch.get_num_threads()}), Python {platform.python_version()}, torch {torch.__version__}, "
            f"{platform.system()} {platform.release()}")


BENCHES = {"a": bench_cold, "b": bench_startup, "c": bench_batch, "d": bench_big, "e": bench_jobs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per side (median); batch uses max(3, runs // 2)")
    ap.add_argument("--only", default="abcde", help="which benchmarks, e.g. 'a,d'")
    opts = ap.parse_args()
    print("machine:", machine())
    ratios = []
    for key in [k for k in BENCHES if k in opts.only]:
        runs = {"c": max(3, opts.runs // 2), "e": max(1, opts.runs // 2)}.get(key, opts.runs)
        ratios += BENCHES[key](runs)
    print("ratios:", " ".join(f"{r:.2f}" for r in ratios))


if __name__ == "__main__":
    main()
