"""Long fuzz run: every input gets a result or a package error (exit 2/3), never a crash.

    python bench/fuzz.py --inputs 100000 --seed 1

Input i is generated from random.Random(seed, i) by tests/fuzz_support.gen_case
(grammar-shaped programs, one-character near misses, random and arbitrary-Unicode
text, pathological nesting/towers/broadcasts, values from 0 to inf/nan and bad
text, random --wrt and tiny limits), so any failure is reproducible from its
index alone. Every input goes through explain() + table + strict JSON, every
`--cli-every`-th also through `gradflow eval` in-process; the same property as
the Hypothesis tests in tests/system/test_fuzz.py. Prints the count, the outcome kinds,
the failures (and exits 1 if there are any). Every `--alias-every`-th input also runs a program of aliases,
in-place methods and regions (tests/aliasgen.py) and compares its gradients with the same program in plain torch. Every `--batch-every`-th input also feeds a generated batch
input (bytes: nested JSON, invalid UTF-8, \r, \r\n, byte-order marks, binary) to `gradflow batch -`: one
record per non-blank line, in order. `--user-code N` also runs `gradflow inspect` on N generated modules
(tests/fuzz_user_code.py: sys.exit, exceptions, writes to fd 1, threads left running, broken hooks) in real
processes: a documented exit code, no traceback, and with --json exactly one JSON document on stdout.
"""
from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import random
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from typer.testing import CliRunner  # noqa: E402

from tests.aliasgen import alias_case, run_torch  # noqa: E402
from tests.engine.test_aliases import gradflow_grads, same  # noqa: E402
from tests.fuzz_support import check_api, check_batch_bytes, check_cli, gen_batch_bytes, gen_case  # noqa: E402


def run_one(i: int, opts, runner, outcomes) -> None:
    case = gen_case(random.Random(f"{opts.seed}:{i}"))
    outcomes[check_api(case)] += 1
    if i % opts.alias_every == 0:  # aliases, in-place methods, regions: the same program in plain torch decides
        alias = alias_case(opts.seed * 1_000_003 + i)
        ours, theirs = gradflow_grads(alias), run_torch(alias)
        if not same(ours, theirs):
            raise AssertionError(f"alias program differs from plain torch: {alias.source!r}: {ours} vs {theirs}")
        outcomes["alias programs agree with torch"] += 1
    if i % opts.cli_every == 0:
        outcomes[f"cli exit {check_cli(case, runner)}"] += 1
    if i % opts.batch_every == 0:  # a whole batch input as bytes: nested JSON, broken UTF-8, mixed line ends
        data = gen_batch_bytes(random.Random(f"{opts.seed}:b:{i}"))
        jobs = 2 if i % (4 * opts.batch_every) == 0 else 1  # one in four through worker processes, as in the suite
        outcomes[f"batch bytes exit {check_batch_bytes(data, runner, jobs)}"] += 1


def run_range(job: tuple) -> tuple[collections.Counter, list[int]]:
    """Inputs [first, last) in one process: the outcome counts and the failing indices."""
    opts, first, last = job
    outcomes: collections.Counter[str] = collections.Counter()
    failures, runner, start = [], CliRunner(), time.monotonic()
    for i in range(first, last):
        try:
            run_one(i, opts, runner, outcomes)
        except Exception:  # noqa: BLE001 - a failure of the property: record and go on
            failures.append(i)
            print(f"FAILURE at input {i}: {gen_case(random.Random(f'{opts.seed}:{i}'))!r}\n"
                  f"{traceback.format_exc(limit=-3)}", file=sys.stderr, flush=True)
        if (i + 1 - first) % 5_000 == 0:
            print(f"  [{first}..) {i + 1 - first:,} inputs, {time.monotonic() - start:.0f} s", file=sys.stderr,
                  flush=True)
    return outcomes, failures


def run_user_code(opts) -> tuple[collections.Counter, list[int]]:
    """`gradflow inspect` on generated user code (tests/fuzz_user_code.py), in real processes."""
    import subprocess
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from tests.fuzz_user_code import check_user_code, gen_user_code
    from tests.processes import processes_left

    outcomes: collections.Counter[str] = collections.Counter()
    failures: list[int] = []

    def one(i: int, folder: str) -> None:
        rng = random.Random(f"{opts.seed}:u:{i}")
        path = os.path.join(folder, f"user_{i}.py")
        with open(path, "w") as fh:
            fh.write(gen_user_code(rng))
        as_json = rng.random() < 0.6
        mark = f"gradflow-fuzz-{os.getpid()}-{i}"
        try:
            res = subprocess.run([sys.executable, "-m", "gradflow", "inspect", f"{path}:main",
                                  *(["--json"] if as_json else [])], capture_output=True, text=True, timeout=120,
                                 env={**os.environ, "GRADFLOW_FUZZ_MARK": mark})
            outcomes[f"inspect exit {check_user_code(res.stdout, res.stderr, res.returncode, as_json)}"] += 1
            left = processes_left(mark)
            assert not left, f"still running after the command: {left}"
        except (AssertionError, subprocess.TimeoutExpired):
            failures.append(i)
            print(f"FAILURE at user code {i}:\n{open(path).read()}\n{traceback.format_exc(limit=-2)}",
                  file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as folder, ThreadPoolExecutor(opts.jobs) as pool:
        list(pool.map(lambda i: one(i, folder), range(opts.user_code)))
    return outcomes, failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first input index (to replay one: --start I --inputs 1)")
    ap.add_argument("--cli-every", type=int, default=10, help="also run every Nth input through the CLI")
    ap.add_argument("--alias-every", type=int, default=5,
                    help="also compare a generated alias/in-place/region program with plain torch every Nth")
    ap.add_argument("--batch-every", type=int, default=10, help="also run a generated batch input (bytes) every Nth")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (the inputs are split between them)")
    ap.add_argument("--user-code", type=int, default=0,
                    help="also run `gradflow inspect` on N generated modules that exit, raise, write to fd 1, ...")
    opts = ap.parse_args()
    start, end = time.monotonic(), opts.start + opts.inputs
    step = -(-opts.inputs // opts.jobs)
    jobs = [(opts, a, min(a + step, end)) for a in range(opts.start, end, step)]
    if opts.jobs > 1:
        with multiprocessing.Pool(opts.jobs) as pool:
            parts = pool.map(run_range, jobs)
    else:
        parts = [run_range(job) for job in jobs]
    if opts.user_code:
        parts.append(run_user_code(opts))
    outcomes = sum((p[0] for p in parts), collections.Counter())
    failures = [i for p in parts for i in p[1]]
    cli = sum(v for k, v in outcomes.items() if k.startswith("cli"))
    batch = sum(v for k, v in outcomes.items() if k.startswith("batch"))
    print(f"inputs: {opts.inputs:,} through explain() + table + JSON ({cli:,} also through the CLI, {batch:,} "
          f"batch inputs as bytes, {opts.user_code:,} generated user modules through inspect), seed {opts.seed}; "
          f"failures: {len(failures)} {failures[:20]}; {time.monotonic() - start:.0f} s")
    for kind, n in outcomes.most_common(20):
        print(f"  {kind:24} {n:,}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
