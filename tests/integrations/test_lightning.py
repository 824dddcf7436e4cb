"""gradflow.integrations.lightning.GradflowCallback on a real lightning.Trainer (CPU, a few steps, nothing written
outside tmp_path): every verdict equals plain torch's `p.grad is None` (plain_lightning.py, no gradflow)."""
import logging

import pytest

pytest.importorskip("lightning")

import lightning as L  # noqa: E402

from gradflow.integrations.lightning import GradflowCallback  # noqa: E402
from gradflow.report.fail_on import GateError  # noqa: E402
from tests.integrations.plain_lightning import Regression, loader, truth  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:.*LeafSpec")]


def fit(case, tmp_path, steps=2, **kw):
    cb = GradflowCallback(**kw)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=[cb])
    module = Regression(case)
    trainer.fit(module, loader())
    return cb, trainer, module


def verdicts(found) -> dict:
    return {p.name: p.grad is None for p in found.params}


@pytest.mark.parametrize("case", ["fine", "frozen", "unused", "lora"])
def test_first_step_verdicts_equal_plain_torch(case, tmp_path):
    if case == "lora":
        pytest.importorskip("peft")
    cb, _, module = fit(case, tmp_path)
    found = cb.findings[0]
    assert found.first and found.step == 1
    assert verdicts(found) == truth(case)
    assert [n for n, _ in module.named_parameters()] == [p.name for p in found.params]  # FQNs, in order


def test_reasons(tmp_path):
    cb, _, _ = fit("unused", tmp_path)
    why = {p.name: (p.status, p.why) for p in cb.findings[0].missing}
    assert set(why) == {"net.aux.weight", "net.aux.bias"}
    status, reason = why["net.aux.weight"]
    assert status == "unused" and "nothing computed from it reaches the loss" in reason
    assert "tests/integrations/plain_models.py:" in reason  # the user's line: `self.aux(h.detach())`
    cb, _, _ = fit("frozen", tmp_path)
    assert [(p.name, p.status) for p in cb.findings[0].frozen] == [("net.body.bias", "frozen")]
    assert not cb.findings[0].missing


def test_lora_fresh_zero_is_not_a_failure(tmp_path):
    pytest.importorskip("peft")
    cb, _, _ = fit("lora", tmp_path, fail_on="default")  # lora_A's first gradient is exactly zero: expected
    lora_a = [p for p in cb.findings[0].params if "lora_A" in p.name]
    assert lora_a and all(p.status == "live" and "lora_B" in p.reason for p in lora_a)
    assert cb.findings[0].failures == []


def test_fail_on_raises_before_the_optimizer_steps(tmp_path):
    module = Regression("unused")
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    cb = GradflowCallback(fail_on="unused")
    trainer = L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                        callbacks=[cb])
    with pytest.raises(GateError) as err:
        trainer.fit(module, loader())
    assert "step 1: fail_on=unused: 2 parameters failed" in err.value.message
    assert "allow=['net.aux.*']" in err.value.hint
    assert all((p == before[n]).all() for n, p in module.named_parameters())  # no optimizer step was taken
    GradflowCallback(fail_on="unused", allow=["net.aux.*"])  # allowed: the same run passes
    cb, _, _ = fit("unused", tmp_path, fail_on="unused", allow=["net.aux.*"])
    assert cb.findings[0].failures == []


def test_a_change_at_a_later_step_is_reported_then_it_detaches(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="lightning.pytorch.callbacks.gradflow"):
        cb, trainer, _ = fit("first_only", tmp_path, steps=6, check_steps=3)
    assert [f.step for f in cb.findings] == [1, 2]
    assert not cb.findings[0].missing  # step 1 adds aux to the loss
    changed = cb.findings[1]
    assert {p.name: p.grad is None for p in changed.params} == \
        {n: none for n, none in truth("first_only", batch_idx=1).items() if "aux" in n}
    assert all(p.status == "unused" and "step 2" in p.reason for p in changed.params)
    assert cb not in trainer.callbacks and cb.check.steps == 4  # steps 1-4 checked, then out of the list
    messages = [r.getMessage() for r in caplog.records if r.name.endswith("gradflow")]
    assert messages[0].startswith("gradflow: step 1: every trainable parameter got a gradient")
    assert messages[1].startswith("gradflow: step 2: the set of parameters without gradient changed")
