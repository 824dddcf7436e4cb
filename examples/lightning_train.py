"""A Lightning run with gradflow's callback: an auxiliary head fed a detached copy, its output never added.

    python examples/lightning_train.py            # reports, then trains
    python examples/lightning_train.py --fail     # fail_on="default": stops before the first optimizer step
"""
import logging
import sys
import tempfile
import warnings

import lightning as L
import torch

from gradflow.integrations.lightning import GradflowCallback
from gradflow.report.fail_on import GateError

logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)  # (Lightning's start-up lines)
warnings.filterwarnings("ignore", ".*LeafSpec")  # (lightning 2.6 under torch 2.13)


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 1)
        self.aux = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        h = torch.relu(self.body(x))
        aux = self.aux(h.detach())  # meant as an auxiliary loss; never added below
        self.log("aux_mean", aux.mean(), logger=False)
        return torch.nn.functional.mse_loss(self.head(h), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main(fail: bool) -> None:
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    with tempfile.TemporaryDirectory() as out:
        trainer = L.Trainer(max_steps=5, accelerator="cpu", logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=out,
                            callbacks=[GradflowCallback(fail_on="default" if fail else ())])
        try:
            trainer.fit(Regression(), torch.utils.data.DataLoader(data, batch_size=4))
        except GateError as err:  # raised before the first optimizer step
            sys.exit(f"stopped: {err}")
        print(f"trained {trainer.global_step} steps")


if __name__ == "__main__":
    main("--fail" in sys.argv[1:])
