"""A Hugging Face Trainer run with gradflow's callback: a value head added to GPT-2 and never called.

    python examples/hf_trainer.py            # reports, then trains
    python examples/hf_trainer.py --fail     # fail_on="default": stops before the first optimizer step
    torchrun --nproc-per-node 2 examples/hf_trainer.py    # DDP over gloo: every rank checks, rank 0 prints

A tiny GPT-2 built from a config (nothing is downloaded), 64 rows of token ids in memory, CPU.
"""
import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.trainer_callback import PrinterCallback

from gradflow.integrations.huggingface import GradflowCallback
from gradflow.report.fail_on import GateError


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def model():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0,
                        eos_token_id=1,
                        loss_type="ForCausalLM")
    gpt2 = GPT2LMHeadModel(config)
    gpt2.value_head = torch.nn.Linear(32, 1)  # meant for a reward loss that was never wired in
    gpt2.transformer.wpe.weight.requires_grad_(False)  # positions kept as they are
    return gpt2


def main(fail: bool) -> None:
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=5, per_device_train_batch_size=4, use_cpu=True,
                                 report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True)
        trainer = Trainer(model(), args, train_dataset=Tokens(),
                          callbacks=[GradflowCallback(fail_on="default" if fail else ())])
        trainer.remove_callback(PrinterCallback)  # (its metrics line carries timings)
        try:
            trainer.train()
        except GateError as err:  # raised before the first optimizer step
            sys.exit(f"stopped: {err}")
        if trainer.is_world_process_zero():
            print(f"trained {trainer.state.global_step} steps")
    if torch.distributed.is_initialized():  # under torchrun: the ranks leave gloo together, then tear it down
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main("--fail" in sys.argv[1:])
