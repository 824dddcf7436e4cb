"""The ground truth for gradflow ddp on FSDP2 models: plain torch, no gradflow. For each FILE.py:FUNCTION, two
runs on 2 real gloo ranks (127.0.0.1, a free port, a 5 s group timeout), each in fresh processes:

- "local": every fully_shard unit unsharded (FSDPModule.unshard), gradient sync off, one forward and backward:
  the parameters (by FQN) whose unsharded `.grad` is None, per rank (each rank's own backward, nothing reduced);
- "real": one plain FSDP step (forward, backward with its reduce-scatters): per rank, whether it completed and
  which parameters keep `grad is None`; a rank gloo aborted or that was stopped writes nothing ("ok": false).

    python tests/ddp/plain_fsdp.py OUT_DIR FILE.py:FUNCTION...   (writes OUT_DIR/FILE/{local,real}{0,1}.json)

Not collected by pytest (no test_ prefix); run through tests/processes.py.
"""
import datetime
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
from plain_ddp import load  # its sibling (this script's folder is first on sys.path): plain torch too
from torch.distributed.fsdp import FSDPModule


def local(model, step):
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in units:
        m.unshard()
        m.set_requires_gradient_sync(False, recurse=False)
        m.set_reshard_after_forward(False, recurse=False)
        m.set_reshard_after_backward(False, recurse=False)
    step(model).backward()
    return {"none": sorted(n for n, p in model.named_parameters() if p.requires_grad and p.grad is None)}


def real(model, step):
    try:
        step(model).backward()
    except RuntimeError as err:  # a collective timed out, the peer went away
        return {"ok": False, "error": str(err).splitlines()[0]}
    return {"ok": True, "none": sorted(n for n, p in model.named_parameters() if p.requires_grad and p.grad is None)}


def worker(rank, world, port, file, target, how):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=5))
    model, step = load(target)(rank, world)
    result = (local if how == "local" else real)(model, step)
    # Written whole or not at all: spawn stops this rank when the other aborts, and a rank stopped between
    # opening its file and writing it left an empty one (the test read it as JSON and errored)
    with open(f"{file}{rank}.json.part", "w") as fh:
        json.dump(result, fh)
    os.replace(f"{file}{rank}.json.part", f"{file}{rank}.json")
    os._exit(0)  # no teardown: a group left mid-collective may abort the process in it


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    out = sys.argv[1]
    for target in sys.argv[2:]:
        folder = os.path.join(out, os.path.basename(target.rpartition(":")[0]).removesuffix(".py"))
        os.makedirs(folder, exist_ok=True)
        for how in ("local", "real"):
            try:
                torch.multiprocessing.spawn(worker, args=(2, free_port(), os.path.join(folder, how), target, how),
                                            nprocs=2)
            except Exception as err:  # a rank gloo aborted (SIGABRT): the other was stopped by spawn
                print(f"{target} {how}: {type(err).__name__}: {err}", file=sys.stderr)
