"""Cost against program size: generated sums `x*1 + x*2 + ... + x*N` for N = 400, 1,600 and 6,400.

    python bench/program_size.py [--runs N] [--sizes 400,1600,6400]

Each size runs `gradflow eval PROGRAM --x 1 --json` and the same without `--json` (the table), alternately in
fresh processes (bench/run.py's `alternate`: every command once per round, so all sizes see the same machine
load), and prints median wall and CPU time, peak RSS (`ru_maxrss` of that child) and the largest/smallest
ratios. Targets (issue #12): the 6,400-term program in under 1.5x the time of the 400-term one, and under 400 MB.
The programs are longer than the default `length` and deeper than the default `depth` limit, so they run with
those raised. Each output is checked: the grad of sum x*k is sum k = N(N+1)/2 (float64, so it is exact).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from run import alternate, gradflow, machine, median  # noqa: E402

LIMITS = ["--limit", "length=1e6", "--limit", "depth=1e5", "--limit", "nodes=1e6"]


def program(n: int) -> str:
    return " + ".join(f"x*{k}" for k in range(1, n + 1))


def check(n: int, out: str, as_json: bool) -> None:
    want = n * (n + 1) // 2
    if as_json:
        doc = json.loads(out)
        assert doc["grads"]["x"] == want and doc["output"]["value"] == want, (n, doc["grads"], doc["output"])
        longest = max(len(node["name"]) for node in doc["nodes"])
        assert longest <= 60, f"a {longest}-character name"
    else:
        assert f"x.grad = {want:g}" in out, out[-300:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per command (median)")
    ap.add_argument("--sizes", default="400,1600,6400", help="terms per program, smallest first")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(machine())
    cmds = {}
    for n in sizes:
        base = ["eval", program(n), "--x", "1", "--dtype", "float64", *LIMITS]
        cmds[(n, True)] = gradflow(*base, "--json")
        cmds[(n, False)] = gradflow(*base)
    got = alternate(cmds, args.runs)
    for (n, as_json), rows in got.items():
        assert all(r[3] == 0 for r in rows), f"{n} terms, json={as_json}: exit {rows[0][3]}"
        check(n, rows[0][2], as_json)
    for as_json in (True, False):
        print(f"gradflow eval --x 1 --dtype float64 {'--json' if as_json else '(the table)'}")
        for n in sizes:
            rows = got[(n, as_json)]
            print(f"  {n:6,} terms ({len(program(n)):7,} characters): wall {median(rows):6.2f}s  "
                  f"cpu {median(rows, 4):6.2f}s  peak RSS {median(rows, 1) / 1024:6.0f} MB")
        big, small = got[(sizes[-1], as_json)], got[(sizes[0], as_json)]
        wall, cpu = median(big) / median(small), median(big, 4) / median(small, 4)
        rss = median(big, 1) / 1024
        print(f"  {sizes[-1]:,}/{sizes[0]:,}: wall {wall:.2f}x  cpu {cpu:.2f}x  (target < 1.5x: "
              f"{'ok' if wall < 1.5 else 'MISSED'});  peak RSS {rss:.0f} MB (target < 400 MB: "
              f"{'ok' if rss < 400 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
