"""Peak RSS of `gradflow batch` over N distinct ~9 KB programs: the parse cache must stay bounded.

    python bench/parse_cache.py [N] [REPEATS]     (from the repository root; stdlib only)

Each program is a long sum of distinct constants, `x*((a+b+...)+(...)+...)` in groups of 50 terms (so the
chain stays within the depth limit): ~9 KB of text, ~1,800 nodes. The batch runs in a fresh process; its peak
RSS is read with getrusage(RUSAGE_CHILDREN) in a small wrapper process, so only gradflow's own process counts.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time


def program(i: int, size: int = 8700) -> str:
    groups, total, k = [], 0, 0
    while total < size:
        group = "(" + "+".join(f"{i:04d}.{k + j:04d}" for j in range(50)) + ")"
        groups.append(group)
        total += len(group) + 1
        k += 50
    return "x*(" + "+".join(groups) + ")"


WRAPPER = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)")


def main(n: int = 1100, repeats: int = 1) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        for _ in range(repeats):
            for i in range(n):
                fh.write(json.dumps({"id": i, "expr": program(i), "vars": {"x": 1}}) + "\n")
    try:
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", WRAPPER, sys.executable, "-m", "gradflow", "batch", fh.name],
                             capture_output=True, text=True, check=True)
        kib, code = out.stdout.split()
        print(f"{n} distinct programs x {repeats} ({len(program(0)):,} characters each): peak RSS "
              f"{int(kib) / 1024:,.0f} MB, exit {code}, {time.perf_counter() - start:.0f} s")
    finally:
        os.unlink(fh.name)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
