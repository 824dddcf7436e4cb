"""A LightningModule over plain_models.Net, and its ground truth in plain Lightning + torch: no gradflow here.
Not collected by pytest (no test_ prefix)."""
import lightning as L
import torch

from tests.integrations.plain_models import Net, grad_is_none, lora_net, loss_of, xy


class Regression(L.LightningModule):
    """"frozen", "unused", "lora" (peft LoRA on body and head), "fine", or "first_only" (aux is added to the loss
    on the first batch only: from the second step on it gets no gradient)."""

    def __init__(self, case: str):
        super().__init__()
        self.case = case
        self.net = lora_net() if case == "lora" else Net(case)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = loss_of(self.net, x, y)
        if self.case == "first_only" and batch_idx == 0:
            loss = loss + self.net.aux(torch.relu(self.net.body(x))).mean()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.1)


def loader(batch_size: int = 4):
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*xy()), batch_size=batch_size)


def truth(case: str, batch_idx: int = 0) -> dict:
    """name -> p.grad is None after one plain training_step + backward on batch `batch_idx`."""
    module = Regression(case)
    batch = list(loader())[batch_idx]
    return grad_is_none(module, module.training_step(batch, batch_idx))
