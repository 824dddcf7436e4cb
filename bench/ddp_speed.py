"""`gradflow ddp` against the same 2-rank plain DDP step, launch included, measured in the same run.

    PYTHONPATH=. python bench/ddp_speed.py [RUNS]

plain: two `python -c` ranks started the way gradflow starts them (env://, gloo on 127.0.0.1, a free port,
OMP_NUM_THREADS=1), each importing torch, building bench/ddp_model.py's model (5.2M parameters), wrapping it in
DDP and running one forward+backward. gradflow: `python -m gradflow ddp bench/ddp_model.py:main --nproc 2 --json`
(its trace, autograd's answer, torch's own two DDP iterations, two gathers). Runs are interleaved, best of RUNS.
"""
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAIN = """
import os, sys, datetime
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
sys.path.insert(0, "bench")
from ddp_model import main
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
model, step = main(dist.get_rank(), dist.get_world_size())
step(DDP(model)).backward()
dist.destroy_process_group()
if sys.argv[1:] == ["fast-exit"]:  # skip the interpreter's teardown, as gradflow's ranks do (os._exit)
    os._exit(0)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plain(*args: str) -> None:
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", PLAIN, *args], cwd=ROOT, env={
        **os.environ, "RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1"}) for r in range(2)]
    assert all(p.wait(timeout=300) == 0 for p in procs)


def gradflow() -> None:
    res = subprocess.run([sys.executable, "-m", "gradflow", "ddp", "bench/ddp_model.py:main", "--nproc", "2",
                          "--json"], cwd=ROOT, capture_output=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr.decode()[-2000:]


def main(runs: int) -> None:
    times: dict = {"plain": [], "plain, os._exit": [], "gradflow": []}
    runners = (("plain", plain), ("plain, os._exit", lambda: plain("fast-exit")), ("gradflow", gradflow))
    for _ in range(runs):
        for name, fn in runners:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    best = {k: min(v) for k, v in times.items()}
    print(f"2-rank DDP step, 5.2M parameters, launch included (best of {runs}):")
    for name, ts in times.items():
        print(f"  {name:<17} {best[name]:6.2f} s   (all: {', '.join(f'{t:.2f}' for t in ts)})")
    base = min(best["plain"], best["plain, os._exit"])
    print(f"  ratio             {best['gradflow'] / base:.2f}x against the faster plain run (target: at most 1.5x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
