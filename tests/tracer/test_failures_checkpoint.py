"""Class 6: a reentrant checkpoint none of whose inputs requires grad (the LoRA + gradient checkpointing trap).

Oracles: torch's own warning and error in plain runs, the source line that calls the checkpoint (read from the
script's text), and the fix itself: the same script with the fix applied, run in plain torch, gives the adapter
its gradient.
"""
from __future__ import annotations

import json
import re
import runpy
import textwrap
import traceback
import warnings

import pytest

import gradflow

from ..processes import ROOT

PLAIN = """
    import torch
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    frozen = torch.nn.Linear(4, 4).requires_grad_(False)
    adapter = torch.nn.Linear(4, 4)
    feats = torch.randn(2, 4)
    FIX
    out = checkpoint(lambda h: frozen(h) + adapter(h), feats, use_reentrant=REENTRANT)
    out.sum().backward()
"""

LORA = """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0,
                        eos_token_id=1)
    model = GPT2LMHeadModel(config)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    model = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["c_attn"], lora_dropout=0.0))
    model.get_input_embeddings()._forward_hooks.clear()  # as before peft and transformers added the hook
    FIX
    model.train()
    ids = torch.randint(0, 64, (2, 8))
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    lora = [p.grad for n, p in model.named_parameters() if "lora_A" in n]
"""


def _write(tmp_path, name, text, **subs):
    text = textwrap.dedent(text).lstrip()
    for k, v in subs.items():
        text = text.replace(k, v)
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def _line_of(path, needle) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_plain_checkpoint_names_the_call_and_the_fix(explained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, "plain", PLAIN, REENTRANT="True", FIX="")
    with warnings.catch_warnings(record=True) as said, pytest.raises(RuntimeError) as plain:
        warnings.simplefilter("always")
        runpy.run_path(str(path))
    assert any("None of the inputs have requires_grad=True" in str(w.message) for w in said)  # torch's warning
    with warnings.catch_warnings(), pytest.raises(RuntimeError) as info:
        warnings.simplefilter("ignore")
        explained(runpy.run_path, str(path))
    assert str(info.value).startswith(str(plain.value))  # torch's own error, the explanation after it
    f = info.value.gradflow
    assert f.kind == "checkpoint_no_grad"
    assert f.call["line"] == f"plain.py:{_line_of(path, 'checkpoint(lambda')}"
    assert "use_reentrant=False" in f.fix and "`feats.requires_grad_()` before the call" in f.fix
    for n, fix in enumerate((dict(REENTRANT="False", FIX=""), dict(REENTRANT="True", FIX="feats.requires_grad_()"))):
        adapter = runpy.run_path(str(_write(tmp_path, f"fixed{n}", PLAIN, **fix)))["adapter"]  # either fix, plain torch
        assert adapter.weight.grad is not None


def test_script_names_the_line_that_failed_and_the_input_to_fix(cli, monkeypatch):
    """examples/fail_checkpoint.py under `gradflow script`: the line torch raised at (a plain run's traceback), and
    a fix that names the checkpoint's real input: put where it says, it gives the adapter its gradient."""
    monkeypatch.chdir(ROOT)
    example = ROOT / "examples" / "fail_checkpoint.py"
    with pytest.raises(RuntimeError) as plain:
        runpy.run_path(str(example))
    raised = [f.lineno for f in traceback.extract_tb(plain.value.__traceback__) if f.filename == str(example)][-1]
    res = cli("script", "examples/fail_checkpoint.py", "--json")
    assert res.exit_code == 3
    error = json.loads(res.stdout.strip().splitlines()[-1])["error"]
    assert error["message"].endswith(f"(at examples/fail_checkpoint.py:{raised})")
    fix = error["backward_failure"]["fix"]
    call = re.search(r"`(\w+\.requires_grad_\(\))` before the call", fix).group(1)
    lines = example.read_text().splitlines()
    at = _line_of(example, "out = checkpoint(") - 1
    ns = {"__name__": "fixed"}
    exec(compile("\n".join([*lines[:at], call, *lines[at:]]), str(example), "exec"), ns)  # the fix, plain torch
    assert ns["adapter"].weight.grad is not None


@pytest.mark.slow
def test_lora_with_reentrant_checkpointing_in_script(cli, tmp_path, monkeypatch):
    pytest.importorskip("peft")
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, "lora", LORA, FIX="")
    with warnings.catch_warnings(), pytest.raises(RuntimeError, match="does not require grad"):
        warnings.simplefilter("ignore")
        runpy.run_path(str(path))  # plain torch fails too
    fixed = _write(tmp_path, "lora_fixed", LORA, FIX="model.enable_input_require_grads()")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grads = runpy.run_path(str(fixed))["lora"]
    assert grads and all(g is not None for g in grads)  # the fix gradflow names works
    res = cli("script", "lora.py", "--json")
    assert res.exit_code == 3
    f = json.loads(res.stdout.strip().splitlines()[-1])["error"]["backward_failure"]
    assert f["kind"] == "checkpoint_no_grad"
    assert f["call"]["line"] == f"lora.py:{_line_of(path, 'out = model(')}"
    assert f["call"]["library_line"].startswith("transformers/")
    assert "model.enable_input_require_grads()" in f["fix"] and "use_reentrant" in f["fix"]


@pytest.mark.slow
def test_lora_with_reentrant_checkpointing_in_inspect(cli, tmp_path):
    pytest.importorskip("peft")
    body = textwrap.indent(textwrap.dedent(LORA).replace("FIX", "").split("out.loss.backward()")[0], "    ")
    path = tmp_path / "lora_fn.py"
    path.write_text("def main():\n" + body + "    return out.loss, model\n")
    res = cli("inspect", f"{path}:main")
    assert res.exit_code == 3
    rows = [line for line in res.stdout.splitlines() if line.lstrip().startswith(("✂", "●", "○"))]
    adapters = [r for r in rows if "lora_A" in r or "lora_B" in r]  # a reason folded onto its next line is no row
    assert len(adapters) == 4 and all(r.lstrip().startswith("✂") for r in adapters)
    assert "detach/no_grad/inference_mode" not in res.stdout
    assert "cut by a reentrant checkpoint" in res.stdout
    assert "model.enable_input_require_grads()" in res.stderr.split("hint:")[1]


def test_plain_checkpoint_cut_in_inspect_names_call_and_fix(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # each reason on its row, however long tmp_path is (xdist's are longer)
    path = tmp_path / "part.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch.utils.checkpoint import checkpoint


        def main():
            frozen = torch.nn.Linear(4, 4).requires_grad_(False)
            adapter, head = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
            h = checkpoint(lambda x: frozen(x) + adapter(x), torch.randn(2, 4), use_reentrant=True)
            return head(h).sum(), torch.nn.ModuleDict({"adapter": adapter, "head": head})
    """))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = cli("inspect", f"{path}:main", "--expand")
    assert res.exit_code == 0
    line = _line_of(path, "h = checkpoint(")
    for row in [r for r in res.stdout.splitlines() if "adapter." in r]:
        assert f"torch.utils.checkpoint called at {path}:{line}" in row and "use_reentrant=False" in row
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss, modules = runpy.run_path(str(path))["main"]()
    loss.backward()  # plain torch: the head gets a gradient, the adapter none
    assert modules["head"].weight.grad is not None and modules["adapter"].weight.grad is None
