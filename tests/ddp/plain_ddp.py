"""The ground truth for tests/ddp: plain torch, no gradflow. Runs each FILE.py:FUNCTION, one after the other, on
2 real gloo ranks (one group for all of them: torch is imported and the group formed once) and writes, per rank,
which parameters have `p.grad is None` after
- "local": one DDP step under no_sync() (each rank's own backward, nothing all-reduced), and
- "find_unused": one real DDP step with find_unused_parameters=True (torch's own answer for every rank).

    python tests/ddp/plain_ddp.py OUT_DIR FILE.py:FUNCTION...    (writes OUT_DIR/FILE/rank0.json, rank1.json)

Every model and DDP wrapper is the example's own, made afresh for it: what one example leaves behind is only the
group, which every collective of the previous example has finished with (each rank runs the same steps).

Not collected by pytest (no test_ prefix); run through tests/processes.py.
"""
import datetime
import importlib.util
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def load(target):
    path, _, name = target.rpartition(":")
    spec = importlib.util.spec_from_file_location("user_code", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def none_after(rank, world, target, sync):
    model, step = load(target)(rank, world)
    inner = model.module if isinstance(model, DDP) else model
    if sync:
        ddp = DDP(inner, find_unused_parameters=True)
        step(ddp).backward()
    else:
        ddp = model if isinstance(model, DDP) else DDP(inner)
        with ddp.no_sync():
            step(ddp).backward()
    return sorted(n for n, p in inner.named_parameters() if p.requires_grad and p.grad is None)


def worker(rank, world, port, out, targets):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    for target in targets:
        result = {"local": none_after(rank, world, target, False),
                  "find_unused": none_after(rank, world, target, True)}
        folder = os.path.join(out, os.path.basename(target.rpartition(":")[0]).removesuffix(".py"))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as fh:
            json.dump(result, fh)
        dist.barrier()  # the next example starts on both ranks together
    # every rank done before any leaves: a rank destroying its gloo group while the other still talks to it
    # aborted the process ("terminate called without an active exception", SIGABRT) in one CI run
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    torch.multiprocessing.spawn(worker, args=(2, free, sys.argv[1], sys.argv[2:]), nprocs=2)
