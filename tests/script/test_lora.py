"""`gradflow script` on peft LoRA fine-tuning of a tiny LLaMA (examples/lora_finetune.py), against plain torch.

The oracle is plain_training.py (it does not import gradflow): the same script run by itself, with which named
parameters each backward() gave a gradient, which were frozen and by which line (its line tracer sees
requires_grad change after that line ran), and what each AdamW step() really changed (copies compared before and
after). The script evaluates under no_grad and generates between steps, and its embedding has a padding row (a
view made under no_grad, then written): gradflow must run all of it as python does.
"""
import json
import re
from pathlib import Path

import pytest
import torch

from .plain_training import watch_training
from .test_loop import full_reports, step_lines

pytest.importorskip("peft")
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")]

EXAMPLE = Path(__file__).parents[2] / "examples" / "lora_finetune.py"
LORA = re.compile(r"\.lora_[AB]\.default\.weight$")


@pytest.fixture(scope="module")
def plain():
    """The example's plain runs, by its arguments."""
    return {args: watch_training(EXAMPLE, list(args)) for args in
            [(), ("--optimizer-first",), ("--checkpointing",), ("--checkpointing", "--fix")]}


def line_no(where: str) -> int:
    """`examples/lora_finetune.py:47` -> 47 (gradflow writes the path relative to where it runs)."""
    path, line = where.rsplit(":", 1)
    assert Path(path).name == EXAMPLE.name, where
    return int(line)


def records(res) -> list[dict]:
    return [json.loads(line) for line in res.stdout.splitlines()]


def test_each_lora_parameter_gets_gradient_and_each_frozen_base_weight_names_get_peft_model(plain, cli):
    truth = plain[()]
    assert truth.error is None and len(truth.backwards) == 6
    res = cli("script", str(EXAMPLE), "--json")
    assert res.exit_code == 0, res.output
    calls = records(res)
    assert len(calls) == len(truth.backwards)
    for call, want in zip(calls, truth.backwards):
        assert line_no(call["line"]) == want.line
        assert call["outputs"] == ["loss"] and call["tensors"][-1]["name"] == "loss"
        assert call["tensors"][-1]["value"] == pytest.approx(want.loss, rel=1e-6)
        status = {t["name"]: t for t in call["tensors"] if t["name"] in want.requires_grad}
        assert set(status) == set(want.requires_grad)
        for name, rg in want.requires_grad.items():
            row = status[name]
            if name in want.got:
                assert LORA.search(name) and row["status"] == "live", name
                assert torch.allclose(torch.tensor(call["grads"][name]), want.grads[name], rtol=1e-5, atol=1e-7)
            elif not rg:  # plain torch: frozen by the script, at the line its tracer saw
                assert row["status"] == "off", name
                frozen = truth.set_at(name, False)
                if frozen is None:
                    assert name == "ids" and row["reason"] is None
                    continue
                assert "get_peft_model(" in EXAMPLE.read_text().splitlines()[frozen - 1]
                found = re.fullmatch(r"frozen: `\.requires_grad = False` at (\S+)", row["reason"])
                assert found and line_no(found.group(1)) == frozen, row["reason"]
        assert {n for n in want.got} == {n for n in want.requires_grad if LORA.search(n)}  # 8 adapters, all live


def test_the_loop_reads_as_one_report_then_lines_and_adamw_has_nothing_to_say(plain, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # the line count below is the 80-column layout's, wherever the suite runs
    truth = plain[()]
    # plain torch: each AdamW step changed exactly the parameters that had a gradient, the adapters
    assert all(s.changed == s.had_grad == truth.backwards[0].got for s in truth.steps)
    res = cli("script", str(EXAMPLE))
    assert res.exit_code == 0, res.output
    assert full_reports(res.stdout) == [1]
    lines = step_lines(res.stdout)
    assert sorted(lines) == list(range(2, len(truth.backwards) + 1))
    for k, line in lines.items():
        assert f"loss {truth.backwards[k - 1].loss:.4g} " in line and "grad 8/8" in line
    summary = res.stdout[res.stdout.index("\nsummary: "):]
    assert f"  loss.backward()  ×{len(truth.backwards)}" in summary
    assert "changes: none" in summary
    assert "no finding: every parameter with gradient is held, and none moved without one" in summary
    assert "⚠" not in res.stdout
    # after the first report: a line per later step, then the summary (head, the backward line, changes, the
    # trend's head and a row per adapter, the optimizer and its verdict)
    # (at 80 columns a step's two peft names do not fit on its line: each gets a line of its own below it)
    after = res.stdout.splitlines()[res.stdout.splitlines().index(lines[2]):]
    assert len(after) == 3 * (len(truth.backwards) - 1) + 3 + (1 + len(truth.backwards[0].got)) + 2, after


def test_brief_json_is_a_small_record_per_step_then_the_summary(plain, cli):
    truth = plain[()]
    res = cli("script", str(EXAMPLE), "--json", "--brief")
    assert res.exit_code == 0, res.output
    *steps, last = records(res)
    assert [r["call"] for r in steps] == list(range(1, len(truth.backwards) + 1))
    for r, want in zip(steps, truth.backwards):
        assert r["loss"] == pytest.approx(want.loss, rel=1e-6)
        assert r["got_grad"] == r["params"] == len(want.got) == 8
        assert line_no(r["line"]) == want.line and r["changes"] == [] and r["findings"] == []
        norms = {n: float(want.grads[n].norm()) for n in want.got}
        assert r["largest"]["norm"] == pytest.approx(max(norms.values()), rel=1e-5)
        assert r["smallest"]["norm"] == pytest.approx(min(norms.values()), abs=1e-7)
    summary = last["summary"]
    assert summary["calls"] == len(truth.backwards) and summary["findings"] == []
    assert set(summary["trends"]) == truth.backwards[0].got
    assert [(o["optimizer"].split("(")[0], o["steps"]) for o in summary["optimizers"]] == [("AdamW", 6)]


def test_an_optimizer_made_before_get_peft_model_is_found_as_adamw_really_missed_the_adapters(plain, cli):
    truth = plain[("--optimizer-first",)]
    adapters = truth.backwards[0].got
    assert len(adapters) == 8 and all(not s.changed for s in truth.steps)  # AdamW changed nothing at all
    # plain torch: which adapters' .grad kept growing (an earlier step's gradient still in it, added to)
    growing = {n for n in adapters if any(not torch.equal(b.grads[n], a.grads[n]) and a.grads[n].any()
                                          for a, b in zip(truth.backwards, truth.backwards[1:]))}
    assert growing == {n for n in adapters if "lora_B" in n}  # lora_A's stay zero: lora_B never leaves zero
    res = cli("script", str(EXAMPLE), "--json", "--brief", "--", "--optimizer-first")
    assert res.exit_code == 0, res.output
    findings = records(res)[-1]["summary"]["findings"]
    assert {f["name"] for f in findings if f["kind"] == "unheld"} == adapters
    assert {f["name"] for f in findings if f["kind"] == "unheld_accumulates"} == growing
    assert {f["kind"] for f in findings} == {"unheld", "unheld_accumulates"}


def test_reentrant_checkpointing_with_lora_is_the_trap_and_enable_input_require_grads_the_fix(plain, cli):
    trapped = plain[("--checkpointing",)]
    assert isinstance(trapped.error, RuntimeError) and "does not require grad" in str(trapped.error)
    assert len(trapped.backwards) == 1 and not trapped.backwards[0].got
    res = cli("script", str(EXAMPLE), "--", "--checkpointing")
    assert res.exit_code == 3, res.output  # no gradient (docs/exit-codes.md)
    assert "a reentrant checkpoint whose inputs do not require grad" in res.stderr
    assert "model.enable_input_require_grads()" in res.stderr and "Traceback" not in res.stderr
    called = re.search(r"\(from (\S+)\)\s+loss = model\(input_ids=ids, labels=ids\)\.loss", res.stderr)
    assert called and "loss = model(" in EXAMPLE.read_text().splitlines()[line_no(called.group(1)) - 1]

    fixed = plain[("--checkpointing", "--fix")]
    assert fixed.error is None and all(len(b.got) == 8 for b in fixed.backwards)
    res = cli("script", str(EXAMPLE), "--json", "--brief", "--", "--checkpointing", "--fix")
    assert res.exit_code == 0, res.output
    *steps, _ = records(res)
    assert [r["got_grad"] for r in steps] == [len(b.got) for b in fixed.backwards]
    assert [r["loss"] for r in steps] == pytest.approx([b.loss for b in fixed.backwards], rel=1e-6)
