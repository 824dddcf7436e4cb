"""gradflow's callbacks on every rank of a torchrun job (gloo, CPU): what each rank's callback found, as JSON.

    python -m torch.distributed.run --nproc_per_node 2 ... tests/integrations/ranked_callbacks.py OUT KIND CASE...

KIND: "hf" (transformers' Trainer, DDP over gloo), "lightning-ddp" (strategy ddp_find_unused_parameters_true) or
"lightning-fsdp" (ModelParallelStrategy: FSDP2's fully_shard in configure_model). Each CASE trains 3 steps with a
fresh Trainer and writes OUT/KIND-CASE-rankR.json. The test compares them with plain_ranked.py (no gradflow).
Not collected by pytest (no test_ prefix).
"""
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the repository root
warnings.filterwarnings("ignore", ".*LeafSpec")


def hf(case: str, out: str):
    from transformers import Trainer, TrainingArguments

    from gradflow.integrations.huggingface import GradflowCallback
    from tests.integrations.plain_models import TokenData, gpt2

    cb = GradflowCallback()
    args = TrainingArguments(output_dir=out, max_steps=3, per_device_train_batch_size=4, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
                             dataloader_num_workers=0, ddp_backend="gloo")
    trainer = Trainer(gpt2(case), args, train_dataset=TokenData(), callbacks=[cb])
    trainer.remove_callback(__import__("transformers").trainer_callback.PrinterCallback)
    trainer.train()
    return cb, type(trainer.model_wrapped).__name__


def lightning(case: str, out: str, fsdp: bool):
    import lightning as L
    from lightning.pytorch.strategies import ModelParallelStrategy

    from gradflow.integrations.lightning import GradflowCallback
    from tests.integrations.plain_lightning import Regression, Sharded, loader

    cb = GradflowCallback()
    trainer = L.Trainer(max_steps=3, accelerator="cpu", devices=2, logger=False, enable_checkpointing=False,
                        strategy=ModelParallelStrategy() if fsdp else "ddp_find_unused_parameters_true",
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=out,
                        callbacks=[cb])
    trainer.fit((Sharded if fsdp else Regression)(case), loader())
    return cb, type(trainer.strategy).__name__


def main(out: Path, kind: str, cases: list[str]) -> None:
    rank = int(os.environ["RANK"])
    for case in cases:
        with tempfile.TemporaryDirectory() as tmp:
            cb, wrapped = hf(case, tmp) if kind == "hf" else lightning(case, tmp, kind == "lightning-fsdp")
        found = cb.findings[0]
        (out / f"{kind}-{case}-rank{rank}.json").write_text(json.dumps({
            "wrapped": wrapped, "rank": found.rank, "divergent": found.divergent,
            "grad_is_none": {p.name: p.grad is None for p in found.params},
            "params": [{"name": p.name, "status": p.status, "reason": p.why} for p in found.params]}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
