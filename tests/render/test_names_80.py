"""Hugging Face and peft names at 80 columns: never broken mid-word (the front left out, the last parts kept),
rows folded by --depth never of different status under one name, --health and script's table within COLUMNS.

The truth for names and statuses is plain torch (tests/render/plain_peft.py: `named_parameters()` and a plain
backward), never gradflow's own output."""
import textwrap

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import gradflow
from gradflow.cli.app import app
from gradflow.display import fit_name
from gradflow.report.param_table import STATUS, rows

from ..processes import ROOT

PEFT = f"{ROOT}/tests/render/plain_peft.py:main"
LONG = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"
MARKS = {mark: status for status, (mark, _, _) in STATUS.items()}


def test_fit_name_keeps_whole_last_parts():
    assert fit_name(LONG, 80) == LONG
    assert fit_name(LONG, 48) == "…layers.0.self_attn.q_proj.lora_A.default.weight"  # 1 + 47 characters
    assert fit_name(LONG, 47) == "…0.self_attn.q_proj.lora_A.default.weight"  # "layers." no longer fits
    assert fit_name("encoder." + "x" * 30, 10) == "…" + "x" * 9  # only a part longer than the room is cut


def _names_match(shown: str, real: str) -> bool:
    """`shown` is `real`, or `…` and whole last parts of it."""
    return shown == real or shown.startswith("…") and real.endswith("." + shown[1:])


def _run(*args, columns=80):
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})
    assert res.exit_code == 0, res.output
    return res.stdout.splitlines()


def _rows(lines: list[str]) -> list[tuple[str, str, int]]:
    """(status, name, how many tensors) of each row of inspect's table."""
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) > 3 and line.startswith(" ") and not line.startswith("  ") and parts[0] in MARKS:
            out.append((MARKS[parts[0]], parts[1], int(parts[2]) if parts[3] == "tensors" else 1))
    return out


@pytest.fixture(scope="module")
def truth():
    pytest.importorskip("peft")
    from .plain_peft import truth

    return truth()


@pytest.mark.slow
def test_expanded_peft_table_at_80_columns_names_every_parameter_whole(truth):
    lines = _run("inspect", PEFT, "--expand")
    assert max(map(len, lines)) <= 80
    shown = _rows(lines)
    assert len(shown) == len(truth)
    for (status, name, _), (real, want) in zip(shown, truth.items()):
        assert _names_match(name, real), (name, real)
        assert status == want, real
    assert any(name == "…layers.0.self_attn.q_proj.lora_A.default.weight" or
               name.endswith("self_attn.q_proj.lora_A.default.weight") for _, name, _ in shown)
    assert all(n == 1 for _, _, n in shown)


@pytest.mark.slow
def test_folded_rows_hold_parameters_of_one_status(truth):
    """Default --depth 2 folds `base_model.model` whole in peft's naming; where statuses differ below it, the fold
    goes deeper: each folded row's tensors (the next n of named_parameters) share its status."""
    shown = _rows(_run("inspect", PEFT))
    real = list(truth.items())
    at = 0
    for status, name, n in shown:
        group = real[at:at + n]
        at += n
        for param, want in group:
            assert want == status, (name, param)
            if name.endswith(".*"):  # the module's path, or its last parts: the tensor is inside it
                module = name[:-2].lstrip("…")
                assert param.startswith(module + ".") or f".{module}." in param, (name, param)
            else:
                assert n == 1 and _names_match(name, param), (name, param)
    assert at == len(real)
    assert any(name.endswith(".*") for _, name, _ in shown)  # something was folded


@pytest.mark.slow
def test_health_honours_columns_and_keeps_whole_last_parts(truth):
    lines = _run("inspect", PEFT, "--health")
    assert max(map(len, lines)) <= 80
    modules = {name.rsplit(".", 1)[0] for name in truth}
    layers = _layers(lines)
    assert len(layers) >= 10
    for name in layers:
        assert any(_names_match(name, m) for m in modules), name
    wide = _run("inspect", PEFT, "--health", columns=200)
    assert set(_layers(wide)) <= modules and len(_layers(wide)) == len(layers)


def _layers(lines: list[str]) -> list[str]:
    """The layer names of a --health chart: the first word of its lines up to the axis, but notes (indented)."""
    axis = next(i for i, line in enumerate(lines) if line.strip().startswith("1e"))
    return [line.split()[0] for line in lines[1:axis] if not line.startswith(" ")]


SCRIPT = """
import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8, bos_token_id=0, eos_token_id=1)
model = get_peft_model(GPT2LMHeadModel(config), LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"],
                                                           lora_dropout=0.0, fan_in_fan_out=True))
ids = torch.tensor([[3, 5, 7, 9]])
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
"""


@pytest.mark.slow
def test_script_table_at_80_columns_keeps_names_whole(tmp_path):
    pytest.importorskip("peft")
    path = tmp_path / "lora_step.py"
    path.write_text(textwrap.dedent(SCRIPT))
    lines = _run("script", str(path))
    program = ("as a gradflow program:", "no gradflow program")  # one line on purpose: a command to copy, a grep
    assert max(len(line) for line in lines if not line.startswith(program)) <= 80
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # the same script, plain: the names
    real = {f"model.{name}" for name, _ in namespace["model"].named_parameters()}
    shown = [line.split()[1] for line in lines if line[:2] in ("○ ", "● ", "◌ ", "✂ ")]
    lora = [name for name in shown if "lora_" in name]
    assert lora and all(any(_names_match(name, r) for r in real) for name in lora), lora


class Mixed(nn.Module):
    """enc.0's bias frozen: enc and enc.0 hold parameters of two statuses; enc.1 and head do not."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.enc = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
        self.head = nn.Linear(3, 1)
        self.enc[0].bias.requires_grad_(False)

    def forward(self, x):
        return self.head(self.enc(x))


@pytest.mark.parametrize("depth", [1, 2])
def test_a_fold_of_two_statuses_goes_deeper(depth):
    model = Mixed()
    with gradflow.trace() as t:
        loss = model(torch.ones(2, 3)).sum()
    report = t.explain(loss, params=model)
    shown = [(row.label, {p.status for p in row.params}) for row in rows(report, depth)]
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}  # plain torch's truth
    assert frozen == {"enc.0.bias"}
    assert [label for label, _ in shown] == ["enc.0.weight", "enc.0.bias", "enc.1.*", "head.*"]
    assert all(len(statuses) == 1 for _, statuses in shown)
    assert dict(shown)["enc.0.bias"] == {"frozen"}
