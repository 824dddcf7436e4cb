"""`GradflowCallback` for Lightning's `Trainer`: which trainable parameters got no gradient in the first optimizer
step, and why, in Lightning's own log; `fail_on=` stops the run before the first optimizer step.

    from gradflow.integrations.lightning import GradflowCallback
    trainer = lightning.Trainer(max_steps=100, callbacks=[GradflowCallback(fail_on="default")])

The report goes to the logger `lightning.pytorch.callbacks.gradflow`, under the `lightning.pytorch` logger that
Lightning sets up (INFO, to stderr, unless the root logger has handlers): a warning when some parameter got no
gradient, info when all did; on global rank zero only (under torchrun every rank checks, the ranks compare their
own backwards, one prints). After `check_steps` cheap checks the callback takes itself out of
`trainer.callbacks`: later steps never call it.
"""
from __future__ import annotations

import logging

try:
    from lightning.pytorch import Callback
    from lightning.pytorch.utilities.rank_zero import rank_zero_only
except ImportError as err:  # pragma: no cover - the suite skips without lightning
    raise ImportError("gradflow.integrations.lightning needs lightning: pip install 'gradflow[lightning]'") from err

from gradflow.integrations.step_check import Checked, Finding, describe

log = logging.getLogger("lightning.pytorch.callbacks.gradflow")


@rank_zero_only
def _say(found: Finding) -> None:
    (log.warning if found.missing or found.failures or found.divergent else log.info)(describe(found))


class GradflowCallback(Checked, Callback):
    """Report (and with `fail_on`, stop on) parameters that get no gradient in the Trainer's first steps.

    fail_on: classes as for `gradflow inspect --fail-on` ("default", "cut,unused", ["frozen"], ...): raise
        GateError before the optimizer steps when a parameter falls in one. Empty (the default): report only.
    allow: glob patterns on parameter names that never fail (e.g. ["head.*"]); names are the LightningModule's
        own `named_parameters()`.
    check_steps: later steps checked cheaply for a change in which parameters get no gradient.
    `findings`: what each reported step showed (Finding objects: `.missing`, `.frozen`, `.to_dict()`).
    """

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.check.begin(pl_module)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        found = self.check.end(pl_module, trainer.global_step + 1)
        if found is not None:
            _say(found)
            self.check.gate(found)
        if self.check.done:
            self.detach(trainer)

    def on_train_end(self, trainer, pl_module):
        self.check.stop()

    def on_exception(self, trainer, pl_module, exception):
        self.check.stop()

    def detach(self, trainer) -> None:
        """Leave `trainer.callbacks` (a new list: the one Lightning is iterating over is left as it is)."""
        self.check.stop()
        trainer.callbacks = [c for c in trainer.callbacks if c is not self]
