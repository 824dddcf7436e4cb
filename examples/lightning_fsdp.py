"""Lightning with FSDP2 under torchrun, on CPU: `fully_shard` in `configure_model` (ModelParallelStrategy), and
gradflow's callback. The embedding is frozen inside a trainable unit; a head for a second task is never called.

    torchrun --nproc-per-node 2 examples/lightning_fsdp.py

The parameters are DTensor shards; the callback explains the step with the unsharded ones each unit's forward
used, so the report names them by FQN, with their full shapes. (Lightning's `strategy="fsdp"`, FSDP1, needs a GPU.)
"""
import logging
import tempfile
import warnings

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.fsdp import fully_shard

from gradflow.integrations.lightning import GradflowCallback

for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric"):  # (Lightning's start-up lines)
    logging.getLogger(name).setLevel(logging.WARNING)
warnings.filterwarnings("ignore", ".*LeafSpec")  # (lightning 2.6 under torch 2.13)


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 16)
        self.embed.weight.requires_grad_(False)  # pretrained, kept as it is
        self.encoder = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
        self.tags = torch.nn.Linear(16, 5)
        self.sentiment = torch.nn.Linear(16, 2)  # the second task, not wired in yet

    def forward(self, ids):
        return self.tags(self.encoder(self.embed(ids)))


class Task(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = Tagger()

    def configure_model(self):
        mesh = self.device_mesh["data_parallel"]
        fully_shard(self.model.encoder, mesh=mesh)
        fully_shard(self.model, mesh=mesh)  # the root unit: embed (frozen) with tags and sentiment

    def training_step(self, batch, batch_idx):
        ids, tags = batch
        return torch.nn.functional.cross_entropy(self.model(ids), tags)

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1)


def main() -> None:
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randint(0, 32, (64,), generator=g),  # a token id, its tag
                                          torch.randint(0, 5, (64,), generator=g))
    with tempfile.TemporaryDirectory() as out:
        trainer = L.Trainer(max_steps=5, accelerator="cpu", devices=2, strategy=ModelParallelStrategy(),
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=out, callbacks=[GradflowCallback()])
        trainer.fit(Task(), torch.utils.data.DataLoader(data, batch_size=8))
        if trainer.is_global_zero:
            print(f"trained {trainer.global_step} steps on {trainer.world_size} ranks")


if __name__ == "__main__":
    main()
