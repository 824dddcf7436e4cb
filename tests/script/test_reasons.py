"""`gradflow script` gives the reasons `inspect` gives, from the same engine (report/reasons.py), with the user's
line: freeze lines, cuts by detach/.data, no_grad entered by `with` or a decorator, `.item()` / `torch.tensor(...)`,
integer outputs, why a leaf got nothing (an inline `fake.detach()`); and a backward whose output does not require
grad names the line that cut every path and the fix, before torch's message.

Oracles: the lines come from the scripts' own text (a marker comment on each line a reason must name); what torch
did comes from the real tensors (requires_grad, .grad after the script's own backward) and from plain torch
(plain_grads.py, which does not import gradflow, raises where the script's backward raised).
"""
import json
import re
from pathlib import Path

import pytest

from gradflow.script.run import run_script

from .plain_grads import grads_per_backward

HERE = Path(__file__).parent
FAILING = sorted((HERE / "failing").glob("*.py"))


def marked(path: Path, tag: str) -> dict[str, int]:
    """name -> line number, for each line ending `# TAG: NAME NAME...` in the script."""
    out = {}
    for number, text in enumerate(path.read_text().splitlines(), 1):
        found = re.search(rf"# {tag}: (.+)$", text)
        for name in found.group(1).split() if found else ():
            out[name] = number
    return out


def cut_here(path: Path) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines(), 1) if t.endswith("# cut here"))


def calls_of(path: Path) -> list:
    calls: list = []
    run_script(path, [], calls.append)
    return calls


def test_every_reason_of_inspect_is_in_the_table_with_its_line():
    path = HERE / "scripts" / "reasons_table.py"
    [call] = calls_of(path)
    rows = {n.name: n for n in call.named}
    frozen, cut = marked(path, "frozen"), marked(path, "cut")
    assert set(frozen) == {"model.weight", "head.bias"}
    for name, line in frozen.items():
        n = rows[name]
        assert not n.tensor.requires_grad and n.status == "off"
        assert n.reason.startswith("frozen: ") and n.reason.endswith(f"reasons_table.py:{line}"), n.reason
    assert "requires_grad_(False)" in rows["model.weight"].reason
    assert "`.requires_grad = False`" in rows["head.bias"].reason
    for name, line in cut.items():
        n = rows[name]
        assert f"reasons_table.py:{line}" in n.reason, (name, n.reason)
    for name in ("smooth", "norm", "idx", "s", "d", "unused"):
        assert rows[name].status == "cut" and not rows[name].tensor.requires_grad
    assert "@torch.no_grad()" in rows["smooth"].reason and "torch.no_grad()" in rows["norm"].reason
    assert "`argmax` has no gradient" in rows["idx"].reason and "`.item()`" in rows["s"].reason
    assert "`.data`" in rows["d"].reason and "`detach()`" in rows["unused"].reason
    spare = rows["spare"]  # requires grad, but reaches the loss only through a detach: torch gave it nothing
    assert spare.status == "none" and spare.tensor.grad is None and "`detach()`" in spare.reason
    assert rows["x"].status == "off" and rows["x"].reason is None  # made with requires_grad=False: no cut to name


def test_an_inline_fake_detach_is_why_the_generator_gets_nothing_from_the_discriminators_loss():
    path = HERE / "scripts" / "gan_step.py"
    seen: list = []
    run_script(path, [], lambda call: seen.append({n.name: (n.status, n.reason, n.tensor.grad is None)
                                                   for n in call.named if n.tensor.is_leaf}))
    line = marked(path, "cut")["G.weight"]
    for name in ("G.weight", "G.bias"):
        status, reason, no_grad = seen[0][name]
        assert status == "none" and no_grad  # torch: loss_d.backward() left G's .grad None
        assert reason.startswith("cut by `detach()` at ") and reason.endswith(f"gan_step.py:{line}"), reason
        assert seen[1][name][0] == "live" and not seen[1][name][2]  # loss_g reaches G


@pytest.mark.filterwarnings("ignore:To copy construct from a tensor")  # rewrap.py's own mistake, which torch warns of
@pytest.mark.parametrize("path", FAILING, ids=[p.name for p in FAILING])
def test_a_backward_with_nothing_to_differentiate_names_the_cut_line_and_the_fix(cli, path, monkeypatch):
    monkeypatch.chdir(HERE)
    with pytest.raises(RuntimeError, match="does not require grad"):  # plain torch fails there too
        grads_per_backward(str(path))
    line = cut_here(path)
    res = cli("script", f"failing/{path.name}")
    assert res.exit_code == 3, res.output
    message = " ".join(res.stderr.split())
    named, torch_said = message.find(f"failing/{path.name}:{line}"), message.find(
        "torch said: element 0 of tensors does not require grad")
    assert 0 <= named < torch_said, message
    assert "Traceback" not in res.output
    fix = message[message.index("hint: "):]
    assert re.search(FIXES[path.stem], fix), fix


FIXES = {  # the fix each kind of cut calls for, as the hint must say it
    "argmax_choice": r"argmax", "closure_under_decorator": r"torch\.enable_grad\(\)", "data_read": r"\.data",
    "frozen_model": r"requires_grad_\(True\)", "item_then_tensor": r"\.item\(\)", "numpy_round_trip": r"detach\(\)",
    "rewrap": r"torch\.tensor\(t\)",
}


def test_the_json_record_of_the_failed_backward_carries_why_and_fix(cli, monkeypatch):
    monkeypatch.chdir(HERE)
    res = cli("script", "failing/item_then_tensor.py", "--json")
    assert res.exit_code == 3
    records = [json.loads(line) for line in res.stdout.splitlines()]
    failed = records[0]["error"]
    line = cut_here(HERE / "failing" / "item_then_tensor.py")
    assert failed["kind"] == "backward_failed" and f"item_then_tensor.py:{line}" in failed["why"]
    assert ".item()" in failed["fix"]
    loss = next(t for t in records[0]["tensors"] if t["name"] == "loss")
    assert loss["status"] == "cut" and [c["kind"] for c in loss["cuts"]] == ["item"]
    assert records[-1]["call"] is None and records[-1]["error"]["kind"] == "no_gradient"


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")  # torch's own warning of the trap
def test_a_reentrant_checkpoint_whose_inputs_need_no_grad_is_named_with_its_line():
    path = HERE / "scripts" / "checkpoint_inputs.py"
    [call] = calls_of(path)
    rows = {n.name: n for n in call.named}
    for name, line in marked(path, "cut").items():
        reason = rows[name].reason
        assert "reentrant checkpoint" in reason and reason.endswith(f"checkpoint_inputs.py:{line}"), reason
    assert rows["inner.weight"].status == "none" and rows["inner.weight"].tensor.grad is None  # torch: nothing
    assert rows["head.weight"].status == "live" and rows["head.weight"].tensor.grad is not None
