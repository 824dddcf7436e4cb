"""`GradflowCallback` for the Hugging Face `Trainer`: which trainable parameters got no gradient in the first
optimizer step, and why, in transformers' own log; `fail_on=` stops the run before the first optimizer step.

    from gradflow.integrations.huggingface import GradflowCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[GradflowCallback(fail_on="default")])

The report goes to the logger `transformers.gradflow` (so `transformers.logging.set_verbosity_*`, the Trainer's
`log_level` and TRANSFORMERS_VERBOSITY apply): a warning when some parameter got none, info when all did; only
the main process logs (under torchrun every rank checks, the ranks compare their own backwards, one prints).
After `check_steps` cheap checks the callback's events become TrainerCallback's own empty ones: later steps
cost what any callback in the list costs.
"""
from __future__ import annotations

from types import MethodType

try:
    from transformers import TrainerCallback
    from transformers.utils import logging
except ImportError as err:  # pragma: no cover - the suite skips without transformers
    raise ImportError("gradflow.integrations.huggingface needs transformers: pip install 'gradflow[huggingface]'") \
        from err

from gradflow.integrations.step_check import Checked, describe

logger = logging.get_logger("transformers.gradflow")


class GradflowCallback(Checked, TrainerCallback):
    """Report (and with `fail_on`, stop on) parameters that get no gradient in the Trainer's first steps.

    fail_on: classes as for `gradflow inspect --fail-on` ("default", "cut,unused", ["frozen"], ...): raise
        GateError before the optimizer steps when a parameter falls in one. Empty (the default): report only.
    allow: glob patterns on parameter names that never fail (e.g. ["lm_head.*"]).
    check_steps: later steps checked cheaply for a change in which parameters get no gradient.
    `findings`: what each reported step showed (Finding objects: `.missing`, `.frozen`, `.to_dict()`).
    """

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        if model is not None:
            self.check.begin(model)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        found = self.check.end(model, state.global_step + 1) if model is not None else None
        if found is not None:
            if state.is_world_process_zero:
                (logger.warning if found.missing or found.failures or found.divergent else logger.info)(describe(found))
            self.check.gate(found)
        if self.check.done:
            self.detach()

    def on_train_end(self, args, state, control, **kwargs):
        self.check.stop()

    def detach(self) -> None:
        """From now on every event is TrainerCallback's empty one (the Trainer keeps calling each callback's)."""
        self.check.stop()
        self.on_step_begin = MethodType(TrainerCallback.on_step_begin, self)  # type: ignore[method-assign]
        self.on_pre_optimizer_step = MethodType(TrainerCallback.on_pre_optimizer_step, self)  # type: ignore[method-assign]
        self.on_train_end = MethodType(TrainerCallback.on_train_end, self)  # type: ignore[method-assign]
