"""What gradflow's training callbacks cost: a Trainer run with and without GradflowCallback, in alternating pairs,
medians over the rounds. The first step is traced and explained; the next `check_steps` (3) are checked cheaply;
then the callback detaches itself, so the later steps should cost what they cost without it.

    python bench/integrations_cost.py [--framework hf|lightning] [--steps 40] [--rounds 7]

Each step's time is the wall time between the ends of consecutive steps (the first: from the start of training),
so it covers every callback. Tiny models on CPU, one thread: the figures are per-step overheads, not throughput.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/integrations: the models of the tests
warnings.filterwarnings("ignore", ".*LeafSpec")


def hf_run(steps: int, with_callback: bool) -> list[float]:
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback
    from transformers.utils import logging

    from gradflow.integrations.huggingface import GradflowCallback
    from tests.integrations.plain_models import TokenData, gpt2

    logging.set_verbosity_error()
    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            ends.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            ends.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=4, use_cpu=True,
                                 report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True)
        callbacks = [GradflowCallback(), Clock()] if with_callback else [Clock()]
        trainer = Trainer(gpt2("unused"), args, train_dataset=TokenData(), callbacks=callbacks)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return [b - a for a, b in zip(ends, ends[1:])]


def lightning_run(steps: int, with_callback: bool) -> list[float]:
    import logging

    import lightning as L

    from gradflow.integrations.lightning import GradflowCallback
    from tests.integrations.plain_lightning import Regression, loader

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    ends: list[float] = []

    class Clock(L.Callback):
        def on_train_start(self, *a):
            ends.append(time.perf_counter())

        def on_train_batch_end(self, *a):
            ends.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=out,
                            callbacks=[GradflowCallback(), Clock()] if with_callback else [Clock()])
        trainer.fit(Regression("unused"), torch.utils.data.DataLoader(loader().dataset, batch_size=1))
    return [b - a for a, b in zip(ends, ends[1:])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", choices=["hf", "lightning"], default="hf")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(1)
    one = hf_run if a.framework == "hf" else lightning_run
    one(5, True)  # warm: imports, first-call caches
    runs: dict[bool, list[list[float]]] = {True: [], False: []}
    for _ in range(a.rounds):
        for with_callback in (False, True):  # alternating pairs: the machine's drift hits both alike
            runs[with_callback].append(one(a.steps, with_callback))
    first = {w: statistics.median(r[0] for r in runs[w]) for w in runs}
    later = {w: statistics.median(statistics.median(r[5:]) for r in runs[w]) for w in runs}
    ratio = statistics.median(statistics.median(w[5:]) / statistics.median(wo[5:])  # each pair's own ratio
                              for w, wo in zip(runs[True], runs[False]))
    print(f"{a.framework}: {a.rounds} rounds of {a.steps} steps, medians")
    print(f"  step 1 (traced):        {first[False] * 1e3:7.2f} ms without, {first[True] * 1e3:7.2f} ms with "
          f"(+{(first[True] - first[False]) * 1e3:.1f} ms)")
    print(f"  steps 6-{a.steps} (detached): {later[False] * 1e3:7.2f} ms without, {later[True] * 1e3:7.2f} ms with "
          f"(ratio of the pairs {ratio:.3f})")


if __name__ == "__main__":
    main()
