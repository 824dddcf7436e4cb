"""gradflow.integrations.huggingface.GradflowCallback on a real transformers.Trainer (a tiny GPT-2 from a config,
an in-memory dataset, CPU, a few steps, output in tmp_path, no reporting): every verdict equals plain torch's
`p.grad is None` after a plain backward (plain_models.py, no gradflow)."""
import logging

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
from transformers import Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from gradflow.integrations.huggingface import GradflowCallback  # noqa: E402
from gradflow.report.fail_on import GateError  # noqa: E402
from tests.integrations.plain_models import TokenData, gpt2, hf_truth  # noqa: E402

pytestmark = pytest.mark.slow


def trainer(model, tmp_path, cb, steps=2):
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=steps, per_device_train_batch_size=4,
                             report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                             disable_tqdm=True, dataloader_num_workers=0)
    return Trainer(model, args, train_dataset=TokenData(), callbacks=[cb])


def train(case, tmp_path, steps=2, **kw):
    cb = GradflowCallback(**kw)
    model = gpt2(case)
    trainer(model, tmp_path, cb, steps).train()
    return cb, model


@pytest.mark.parametrize("case", ["fine", "frozen", "unused", "lora"])
def test_first_step_verdicts_equal_plain_torch(case, tmp_path):
    if case == "lora":
        pytest.importorskip("peft")
    cb, model = train(case, tmp_path)
    found = cb.findings[0]
    assert found.first and found.step == 1
    assert {p.name: p.grad is None for p in found.params} == hf_truth(case)
    assert [n for n, _ in model.named_parameters()] == [p.name for p in found.params]  # FQNs, in order


def test_reasons_and_the_log(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="transformers.gradflow"):
        cb, _ = train("unused", tmp_path)
    assert [(p.name, p.status, p.why) for p in cb.findings[0].missing] == [
        ("value_head.weight", "unused", "not used in the forward"),
        ("value_head.bias", "unused", "not used in the forward")]
    said = [r for r in caplog.records if r.name == "transformers.gradflow"]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert said[0].getMessage().splitlines()[:2] == [
        "gradflow: step 1: 2 of 30 trainable parameter tensors got no gradient",
        "  ◌ value_head.*  2 tensors  not used in the forward"]
    cb, _ = train("frozen", tmp_path)
    assert [(p.name, p.why) for p in cb.findings[0].frozen] == [("transformer.wpe.weight",
                                                                  "frozen: requires_grad is False")]


def test_lora(tmp_path):
    pytest.importorskip("peft")
    cb, model = train("lora", tmp_path, fail_on="default")  # a fresh lora_A's zero gradient is no failure
    found = cb.findings[0]
    assert found.failures == [] and not found.missing
    assert {p.name for p in found.params if p.requires_grad} == \
        {n for n, p in model.named_parameters() if p.requires_grad}
    assert all(p.status == "live" for p in found.params if p.requires_grad)
    assert any("lora_B partner is still all zeros" in (p.reason or "") for p in found.params)


def test_fail_on_raises_before_the_optimizer_steps(tmp_path):
    model = gpt2("unused")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(GateError) as err:
        trainer(model, tmp_path, GradflowCallback(fail_on="default"), steps=3).train()
    assert err.value.message == "step 1: fail_on=cut,unused,unreached,zero,nonfinite: 2 parameters failed " \
                                "(unused: 2)"
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # the optimizer never stepped
    cb, _ = train("unused", tmp_path, fail_on="default", allow=["value_head.*"])
    assert cb.findings[0].failures == []


def test_it_detaches_after_the_checked_steps(tmp_path):
    cb, _ = train("fine", tmp_path, steps=5, check_steps=2)
    assert cb.check.steps == 3 and [f.step for f in cb.findings] == [1]
    for event in ("on_step_begin", "on_pre_optimizer_step", "on_train_end"):  # TrainerCallback's own, empty
        assert getattr(cb, event).__func__ is getattr(TrainerCallback, event)
