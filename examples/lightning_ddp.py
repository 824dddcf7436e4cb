"""Lightning DDP under torchrun, with gradflow's callback: the auxiliary loss is added on rank 0 only.

    torchrun --nproc-per-node 2 examples/lightning_ddp.py

With `strategy="ddp"` (find_unused_parameters=False) DDP would raise at the 2nd step, or hang; the run here uses
`ddp_find_unused_parameters_true`, so it trains, and on rank 1 `aux` gets the other ranks' gradient only. Every
rank checks its own first step; rank 0 prints the report once, with what differs between the ranks.
"""
import logging
import tempfile
import warnings

import lightning as L
import torch

from gradflow.integrations.lightning import GradflowCallback

for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric"):  # (Lightning's start-up lines)
    logging.getLogger(name).setLevel(logging.WARNING)
warnings.filterwarnings("ignore", ".*LeafSpec")  # (lightning 2.6 under torch 2.13)


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 1)
        self.aux = torch.nn.Linear(8, 1)  # an auxiliary target that only rank 0's data has

    def training_step(self, batch, batch_idx):
        x, y = batch
        h = torch.relu(self.body(x))
        loss = torch.nn.functional.mse_loss(self.head(h), y)
        if self.global_rank == 0:
            loss = loss + 0.1 * self.aux(h).pow(2).mean()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    with tempfile.TemporaryDirectory() as out:
        trainer = L.Trainer(max_steps=5, accelerator="cpu", devices=2, strategy="ddp_find_unused_parameters_true",
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=out, callbacks=[GradflowCallback()])
        trainer.fit(Regression(), torch.utils.data.DataLoader(data, batch_size=4))
        if trainer.is_global_zero:
            print(f"trained {trainer.global_step} steps on {trainer.world_size} ranks")


if __name__ == "__main__":
    main()
