"""The models of tests/integrations and their ground truth, in plain torch: no gradflow here.

Each case builds the same model the callback test trains (same seed), runs one plain forward and backward on the
first batch, and says which parameters have `p.grad is None`: what the callback's verdicts must match.
Not collected by pytest (no test_ prefix).
"""
import torch

VOCAB, WIDTH = 64, 32


# ---- Hugging Face: a tiny GPT-2 from a config (nothing downloaded) ----------------------------------------------
def rank() -> int:
    """This process's rank (0 outside a process group)."""
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def gpt2(case: str):
    """"frozen": the position embedding frozen; "unused": a head added and never called; "lora": peft LoRA on
    c_attn (the base frozen, lora_A's first gradient exactly zero); "rank0_head": a value head added to the loss
    on rank 0 only; "fine": nothing wrong."""
    from transformers import GPT2Config, GPT2LMHeadModel

    class WithHead(GPT2LMHeadModel):
        def forward(self, input_ids=None, labels=None, **kw):
            out = super().forward(input_ids=input_ids, labels=labels, output_hidden_states=True, **kw)
            if rank() == 0:  # the value head's loss only where its labels exist
                out.loss = out.loss + self.value_head(out.hidden_states[-1]).pow(2).mean()
            return out

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=WIDTH, n_head=2, vocab_size=VOCAB, n_positions=16, bos_token_id=0,
                        eos_token_id=1)
    model = (WithHead if case == "rank0_head" else GPT2LMHeadModel)(config)
    if case == "rank0_head":
        model.value_head = torch.nn.Linear(WIDTH, 1)
    if case == "frozen":
        model.transformer.wpe.weight.requires_grad_(False)
    elif case == "unused":
        model.value_head = torch.nn.Linear(WIDTH, 1)  # registered, never called by GPT-2's forward
    elif case == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], lora_dropout=0.0,
                                                  fan_in_fan_out=True))  # GPT-2 uses Conv1D
    return model


class TokenData(torch.utils.data.Dataset):
    """64 rows of 8 token ids, the same every time (labels = the ids: a language-model loss)."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        ids = torch.randint(0, VOCAB, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def hf_batch(size: int = 4) -> dict:
    rows = [TokenData()[i] for i in range(size)]
    return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}


# ---- Lightning-style: a small regression net -------------------------------------------------------------------
class Net(torch.nn.Module):
    """body -> head; "frozen": body.bias frozen; "unused": aux computed from a detached copy and dropped;
    "first_only": aux, for the LightningModule to use (plain_lightning.py)."""

    def __init__(self, case: str):
        super().__init__()
        torch.manual_seed(0)
        self.case = case
        self.body = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 1)
        if case in ("unused", "first_only"):
            self.aux = torch.nn.Linear(8, 1)
        if case == "frozen":
            self.body.bias.requires_grad_(False)

    def forward(self, x):
        h = torch.relu(self.body(x))
        if self.case == "unused":
            self.aux(h.detach())  # a head whose output is left out of the loss
        return self.head(h)


def lora_net():
    from peft import LoraConfig, get_peft_model

    return get_peft_model(Net("fine"), LoraConfig(r=2, lora_alpha=4, target_modules=["body", "head"]))


def xy(size: int = 32):
    g = torch.Generator().manual_seed(1)
    return torch.randn(size, 4, generator=g), torch.randn(size, 1, generator=g)


def loss_of(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


# ---- the truth ----------------------------------------------------------------------------------------------------
def grad_is_none(model, loss) -> dict:
    """name -> `p.grad is None` after a plain backward of `loss` (grads cleared first)."""
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad is None for n, p in model.named_parameters()}


def hf_truth(case: str) -> dict:
    model = gpt2(case)
    model.train()
    return grad_is_none(model, model(**hf_batch()).loss)


def net_truth(model, batch_size: int = 4) -> dict:
    x, y = xy()
    return grad_is_none(model, loss_of(model, x[:batch_size], y[:batch_size]))
