"""A LightningModule over plain_models.Net, and its ground truth in plain Lightning + torch: no gradflow here.
Not collected by pytest (no test_ prefix)."""
import lightning as L
import torch
from torch.distributed.fsdp import fully_shard

from tests.integrations.plain_models import Net, grad_is_none, lora_net, loss_of, rank, xy


class Regression(L.LightningModule):
    """"frozen", "unused", "lora" (peft LoRA on body and head), "fine", "first_only" (aux is added to the loss
    on the first batch only: from the second step on it gets no gradient) or "rank0_aux" (aux is added to the
    loss on rank 0 only)."""

    def __init__(self, case: str):
        super().__init__()
        self.case = case
        self.net = lora_net() if case == "lora" else Net("first_only" if case == "rank0_aux" else case)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = loss_of(self.net, x, y)
        if (self.case == "first_only" and batch_idx == 0) or (self.case == "rank0_aux" and rank() == 0):
            loss = loss + self.net.aux(torch.relu(self.net.body(x))).mean()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1)


def shard(net: torch.nn.Module, mesh=None) -> None:
    """FSDP2 units: body, aux (when there is one), then the root (head)."""
    fully_shard(net.body, mesh=mesh)
    if hasattr(net, "aux"):
        fully_shard(net.aux, mesh=mesh)
    fully_shard(net, mesh=mesh)


class Sharded(Regression):
    """Regression, sharded with fully_shard in configure_model (Lightning's ModelParallelStrategy)."""

    def configure_model(self):
        shard(self.net, self.device_mesh["data_parallel"])


def loader(batch_size: int = 4):
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*xy()), batch_size=batch_size)


def truth(case: str, batch_idx: int = 0) -> dict:
    """name -> p.grad is None after one plain training_step + backward on batch `batch_idx`."""
    module = Regression(case)
    batch = list(loader())[batch_idx]
    return grad_is_none(module, module.training_step(batch, batch_idx))
