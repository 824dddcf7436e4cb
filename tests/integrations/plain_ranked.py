"""The ground truth for tests/integrations/test_torchrun.py: plain torch DDP and FSDP2 on 2 torchrun ranks (gloo,
CPU), no gradflow and no training framework. For each CASE, on each rank:

- "own": the trainable parameters whose `.grad` is None after this rank's own plain backward (an unwrapped copy
  of the model, nothing synchronised);
- "synced": `p.grad is None` after one real DDP step (find_unused_parameters=True, as the Trainers are set up)
  or one real FSDP2 step (fully_shard: body, aux, root), by FQN.

    python -m torch.distributed.run --nproc_per_node 2 ... tests/integrations/plain_ranked.py OUT KIND CASE...

KIND as in ranked_callbacks.py; writes OUT/plain-KIND-CASE-rankR.json. Not collected by pytest (no test_ prefix).
"""
import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository root
from tests.integrations.plain_models import gpt2, grad_is_none, hf_batch  # noqa: E402


class Step(torch.nn.Module):
    """A LightningModule's training_step as a forward, for DDP (as Lightning's own wrapper does)."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, batch):
        return self.module.training_step(batch, 0)


def own_none(model, loss) -> list[str]:
    """The trainable parameters this rank's own plain backward of `loss` leaves without a gradient."""
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    return sorted(n for n, none in grad_is_none(model, loss).items() if none and n in trainable)


def hf(case: str):
    alone = gpt2(case).train()
    own = own_none(alone, alone(**hf_batch()).loss)
    model = gpt2(case).train()
    ddp = DDP(model, find_unused_parameters=True)  # (kept: the backward needs its reducer)
    ddp(**hf_batch()).loss.backward()
    return own, {n: p.grad is None for n, p in model.named_parameters()}


def lightning(case: str, fsdp: bool):
    from tests.integrations.plain_lightning import Regression, loader, shard

    batch = next(iter(loader()))
    alone = Regression(case)
    own = own_none(alone, alone.training_step(batch, 0))
    module = Regression(case)
    if fsdp:
        shard(module.net)
        module.training_step(batch, 0).backward()
    else:
        ddp = DDP(Step(module), find_unused_parameters=True)
        ddp(batch).backward()
    return own, {n: p.grad is None for n, p in module.named_parameters()}


def main(out: Path, kind: str, cases: list[str]) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    for case in cases:
        own, synced = hf(case) if kind == "hf" else lightning(case, kind == "lightning-fsdp")
        (out / f"plain-{kind}-{case}-rank{dist.get_rank()}.json").write_text(json.dumps({
            "own": own, "synced": synced}))
    dist.barrier()  # both ranks done before gloo is torn down (a rank leaving first can abort the other's exit)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
    # Out without the interpreter's teardown: its answers are written. Even after the barrier and the group's
    # destruction, a rank here aborted in that teardown once ("terminate called without an active exception",
    # SIGABRT, lightning-ddp, a loaded machine): a crash of torch's threads at exit, not a wrong answer.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
