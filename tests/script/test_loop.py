"""`gradflow script` on real training loops: which backward() calls get a line, which a full report, the status
changes and their steps, the summary.

Oracles: each script is first run plainly (runpy, the file imports torch only) and keeps its own truth in a
`truth` dict: the loss of every step, which parameters had a .grad after each backward(), the grads of one step.
The folding rule (the first 10 calls, then 20, 30, ..., 100, 200, ...) is the documented one, written here
by hand.
"""
import json
import re
import runpy
import textwrap

import pytest
import torch

from gradflow.script.loop import LoopWatch, Trend, shows_line
from gradflow.script.recorder import BackwardCall, Named

from .plain_training import watch_training

PLAIN_LOOP = """
import torch
torch.manual_seed(0)
w1 = torch.randn(3, 4, requires_grad=True)
w2 = torch.randn(4, 1, requires_grad=True)
X, Y = torch.randn(8, 3), torch.randn(8, 1)  # small enough to be written into the eval program
truth = {{"loss": [], "grads": {{}}}}
for step in range({steps}):
    h = torch.relu(X @ w1)
    loss = ((h @ w2 - Y) ** 2).mean()
    loss.backward()
    truth["loss"].append(loss.item())
    if step + 1 == 5:
        truth["grads"] = {{"w1": w1.grad.tolist(), "w2": w2.grad.tolist()}}
    with torch.no_grad():
        w1 -= 0.01 * w1.grad
        w2 -= 0.01 * w2.grad
        w1.grad.zero_()
        w2.grad.zero_()
"""

FREEZE = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
truth = {"with_grad": []}
for step in range(30):
    if step == 8:
        model[0].requires_grad_(False)  # freeze the first layer
    if step == 20:
        model[0].requires_grad_(True)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    truth["with_grad"].append(sorted(n for n, p in model.named_parameters(prefix="model") if p.grad is not None))
    opt.step()
"""

GAN = """
import torch
from torch import nn
torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))
netD = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
optD = torch.optim.Adam(netD.parameters(), lr=1e-3, betas=(0.5, 0.999))
optG = torch.optim.Adam(netG.parameters(), lr=1e-3, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
truth = {"d_grad_cleared": [], "g_moved_by_d": []}
for it in range(25):
    real, noise = torch.randn(8, 6), torch.randn(8, 4)
    netD.zero_grad()
    truth["d_grad_cleared"].append(all(p.grad is None for p in netD.parameters()))
    fake = netG(noise)
    errD = bce(netD(real), torch.ones(8, 1)) + bce(netD(fake.detach()), torch.zeros(8, 1))
    g_before = [None if p.grad is None else p.grad.clone() for p in netG.parameters()]
    errD.backward()
    truth["g_moved_by_d"].append(any((a is None) != (p.grad is None) or a is not None and not torch.equal(a, p.grad)
                                     for a, p in zip(g_before, netG.parameters())))
    optD.step()
    netG.zero_grad()
    errG = bce(netD(fake), torch.ones(8, 1))
    errG.backward()
    optG.step()
"""

NO_GRAD_EVAL = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
truth = {"eval": [], "loss": []}

@torch.no_grad()
def evaluate():
    out = model(torch.randn(32, 4))
    return out.argmax(1).float().mean().item()

for step in range(40):
    x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    truth["loss"].append(loss.item())
    if step % 5 == 4:
        truth["eval"].append(evaluate())
"""


FREEZE_IN_A_HELPER = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)

def freeze(layer):
    for p in layer.parameters():
        p.requires_grad = False

for step in range(12):
    if step == 4:
        freeze(model[0])
    loss = ((model(torch.randn(16, 4)) - 1) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def write(tmp_path, source: str, name: str = "train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def truth_of(path) -> dict:
    """The script run plainly: its own record of what torch did."""
    return runpy.run_path(str(path), run_name="__main__")["truth"]


def line_of(path, code: str) -> int:
    """The number of the script's one line that holds `code`."""
    found = [k for k, line in enumerate(path.read_text().splitlines(), 1) if code in line]
    assert len(found) == 1, found
    return found[0]


def step_lines(text: str) -> dict[int, str]:
    """The per-call lines: `   12  loss 0.4231  grad 2/2  max ...`, by call number."""
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"^ +(\d+)  \S+ \S+  grad \d+/\d+.*$", text, re.M)}


def full_reports(text: str) -> list[int]:
    return [int(k) for k in re.findall(r"^backward (\d+) at ", text, re.M)]


def json_changes(cli, path) -> tuple[set, set]:
    """Every (call, change) `script --json --brief` gives: from the step records, and from the summary's list."""
    *steps, last = [json.loads(line) for line in cli("script", str(path), "--json", "--brief").stdout.splitlines()]
    return ({(r["call"], c) for r in steps for c in r["changes"]},
            {(c["call"], c["change"]) for c in last["summary"]["changes"]})


def folded(n: int) -> list[int]:
    """The calls that get a line of their own when nothing changes, by the rule written in docs/script.md."""
    out = list(range(2, 11))
    tens = 10
    while tens <= n:
        out += [k * tens for k in range(2, 11) if k * tens <= n]
        tens *= 10
    return sorted(set(out))


def test_a_plain_loop_is_one_full_report_then_folded_lines_then_a_summary(tmp_path, cli):
    path = write(tmp_path, PLAIN_LOOP.format(steps=200))
    truth = truth_of(path)
    res = cli("script", str(path))
    assert res.exit_code == 0, res.output
    assert full_reports(res.stdout) == [1]
    lines = step_lines(res.stdout)
    assert sorted(lines) == folded(200) == [*range(2, 11), *range(20, 101, 10), 200]
    for k, line in lines.items():  # each line's loss is the script's own at that step
        assert f"loss {truth['loss'][k - 1]:.4g} " in line
        assert "grad 2/2" in line
    assert "summary: 200 backward() calls, 1 shown in full, 19 as lines" in res.stdout
    assert "changes: none" in res.stdout
    trend = re.search(r"^  w1 +([▁▂▃▄▅▆▇█]+)  ", res.stdout, re.M)
    assert trend is not None and 1 <= len(trend.group(1)) <= 24
    assert len(res.stdout.splitlines()) < 80  # not 200 tables


def test_every_and_steps_choose_the_lines_and_the_full_reports(tmp_path, cli):
    path = write(tmp_path, PLAIN_LOOP.format(steps=60))
    truth = truth_of(path)
    res = cli("script", str(path), "--every", "25", "--steps", "5:6")
    assert res.exit_code == 0, res.output
    assert full_reports(res.stdout) == [1, 5, 6]
    assert sorted(step_lines(res.stdout)) == [25, 50]
    # step 5 was recorded: its program, run by gradflow eval, gives the grads the script's own backward gave
    program = re.search(r"^as a gradflow program: (gradflow eval .*)$", res.stdout.split("backward 5 at")[1], re.M)
    assert program is not None
    import shlex
    got = json.loads(cli(*shlex.split(program.group(1))[1:], "--json").stdout)["grads"]
    for name in ("w1", "w2"):
        assert torch.allclose(torch.tensor(got[name]), torch.tensor(truth["grads"][name]), rtol=1e-4, atol=1e-6)


def test_full_shows_every_call_as_before(tmp_path, cli):
    res = cli("script", str(write(tmp_path, PLAIN_LOOP.format(steps=12))), "--full")
    assert full_reports(res.stdout) == list(range(1, 13))
    assert step_lines(res.stdout) == {}


@pytest.mark.parametrize("args, said", [(["--steps", "9:3"], "--steps 9:3"), (["--steps", "x"], "--steps x"),
                                        (["--brief"], "--brief shapes the JSON records")])
def test_bad_loop_options_are_input_errors(tmp_path, cli, args, said):
    res = cli("script", str(write(tmp_path, PLAIN_LOOP.format(steps=2))), *args)
    assert res.exit_code == 2
    assert said in res.stderr and "hint:" in res.stderr and "Traceback" not in res.stderr


def test_a_freeze_schedule_reports_its_changes_at_the_steps_the_script_made_them(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)  # gradflow names train.py:N, as short as the text around it is written here
    path = write(tmp_path, FREEZE)
    truth = truth_of(path)["with_grad"]
    # from plain torch: the calls at which a parameter started or stopped having a .grad after backward()
    want = {(k + 1, name) for k in range(1, len(truth)) for name in set(truth[k]) ^ set(truth[k - 1])}
    assert {c for c, _ in want} == {9, 21}
    res = cli("script", str(path), "--json", "--brief")
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in res.stdout.splitlines()]
    steps, summary = records[:-1], records[-1]["summary"]
    assert [r["call"] for r in steps] == list(range(1, 31))
    got = {(r["call"], c.split(":")[0]) for r in steps for c in r["changes"]}
    assert got == want
    assert {(c["call"], c["change"].split(":")[0]) for c in summary["changes"]} == want
    assert [r["got_grad"] for r in steps] == [len(t) for t in truth]
    text = cli("script", str(path)).stdout
    assert full_reports(text) == [1, 9, 21]
    # the freeze ran in step 8, whose ops are not recorded: the change still names its line, read from the script
    freeze = f"train.py:{line_of(path, 'model[0].requires_grad_(False)')}"
    flat = " ".join(text.split())  # (a change longer than the console is wrapped between words)
    assert f"changed at backward 9: model.0.weight: gradient reached it → requires_grad=False (frozen: " \
           f"requires_grad_(False) at {freeze}) model.0.bias:" in flat
    assert f"backward 9: model.0.bias: gradient reached it → requires_grad=False (frozen: requires_grad_(False) " \
           f"at {freeze})" in flat  # the summary's list too
    assert all(f"at {freeze})" in c for r in steps for c in r["changes"] if "→ requires_grad=False" in c)


def test_a_freeze_in_a_step_that_is_not_recorded_is_named_with_the_line_that_made_it(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, FREEZE_IN_A_HELPER)
    truth = watch_training(path)  # plain torch, with the line after which each flag changed
    frozen = {n: truth.set_at(n, False) for n in ("model.0.weight", "model.0.bias")}
    assert set(frozen.values()) == {line_of(path, "p.requires_grad = False")}
    changed = [k for k, b in enumerate(truth.backwards, 1) if not b.requires_grad["model.0.weight"]]
    assert changed[0] == 5  # the fifth backward() is the first without it
    said = {f"{name}: gradient reached it → requires_grad=False (frozen: `.requires_grad = False` at train.py:{line})"
            for name, line in frozen.items()}
    res = cli("script", str(path))
    assert res.exit_code == 0, res.output
    assert full_reports(res.stdout) == [1, changed[0]]
    flat = " ".join(res.stdout.split())  # (a change longer than the console is wrapped between words)
    for text in said:  # at the call, and in the summary
        assert "changed at backward 5:" in flat and flat.count(text) == 2, res.stdout
    in_steps, in_summary = json_changes(cli, path)
    assert in_steps == in_summary == {(changed[0], text) for text in said}


def test_an_unfreeze_is_named_with_the_line_that_made_it(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, FREEZE)
    truth = watch_training(path)  # plain torch, with the line after which each flag changed
    unfrozen = {n: truth.set_at(n, True) for n in ("model.0.weight", "model.0.bias")}
    assert set(unfrozen.values()) == {line_of(path, "model[0].requires_grad_(True)")}
    back = [k for k, b in enumerate(truth.backwards, 1) if k > 1 and b.requires_grad["model.0.weight"]
            and not truth.backwards[k - 2].requires_grad["model.0.weight"]]
    assert back == [21]
    said = {f"{name}: requires_grad=False → gradient reached it (unfrozen: requires_grad_(True) at train.py:{line})"
            for name, line in unfrozen.items()}
    in_steps, in_summary = json_changes(cli, path)
    assert {c for call, c in in_steps if call == back[0]} == {c for call, c in in_summary if call == back[0]} == said


def test_a_gan_is_two_loops_one_per_backward_line(tmp_path, cli):
    path = write(tmp_path, GAN)
    truth = truth_of(path)
    assert all(truth["d_grad_cleared"]) and not any(truth["g_moved_by_d"])  # fake was detached
    res = cli("script", str(path))
    assert res.exit_code == 0, res.output
    assert full_reports(res.stdout) == [1, 2]  # errD's first and errG's first
    assert "changes: none" in res.stdout
    assert re.search(r"train.py:\d+  errD.backward\(\)  ×25", res.stdout)
    assert re.search(r"train.py:\d+  errG.backward\(\)  ×25", res.stdout)
    assert "⚠" not in res.stdout  # netD.zero_grad() clears the grad errG added before optD uses it (truth above)
    lines = step_lines(res.stdout)
    assert sorted(lines) == [k for k in folded(50) if k > 2]
    assert all(("errD" in line) == (k % 2 == 1) for k, line in lines.items())


def test_no_grad_evaluation_between_steps_changes_nothing(tmp_path, cli):
    path = write(tmp_path, NO_GRAD_EVAL)
    truth = truth_of(path)
    res = cli("script", str(path), "--json", "--brief")
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["call"] for r in records[:-1]] == list(range(1, 41))
    assert [r["loss"] for r in records[:-1]] == pytest.approx(truth["loss"], rel=1e-6)
    assert all(r["changes"] == [] and r["got_grad"] == r["params"] == 4 for r in records[:-1])
    assert records[-1]["summary"]["findings"] == []


def test_folding_rule_and_memory_stay_small_over_ten_thousand_steps():
    assert [k for k in range(1, 10_001) if shows_line(k, None)] == [1, *folded(10_000)]
    assert len(folded(10_000)) == 9 + 9 * 3
    trend = Trend()
    for k in range(10_000):
        trend.add(1.0 + (k % 7) / 10)
    assert len(trend.buckets) <= 24 and sum(n for _, n in trend.buckets) == 10_000


def test_a_jump_against_the_running_level_is_an_event_a_slow_decay_is_not():
    t = Trend()
    events = [t.add(0.5 * 0.97 ** k) for k in range(200)]  # 0.5 down to 0.001: a hundredfold over 200 steps
    assert events == [None] * 200
    assert t.add(1e3) == "exploded"
    small = Trend()
    assert [small.add(v) for v in (1.0, 1.1, 0.9, 1.0, 0.0)] == [None, None, None, None, "vanished"]
    assert [Trend().add(v, few=True) for v in (1.0,)] == [None]
    few = Trend()
    assert [few.add(v, few=True) for v in (1.0, 1.0, 1.0, 1.0, 1e-6, 0.0)][-2:] == [None, "vanished"]


def _held(watch: LoopWatch) -> int:
    """Everything the watch holds, counted as container entries."""
    return (len(watch.sites) + sum(len(v) for v in watch.sites.values()) + len(watch.changes) + len(watch.lines)
            + sum(len(t.buckets) for t in watch.trends.values()))


def test_loop_watch_holds_as_much_after_ten_thousand_calls_as_after_a_thousand():
    w = torch.randn(3, requires_grad=True)
    loss = (w * w).sum()
    watch = LoopWatch()
    held = {}
    for k in range(1, 10_001):
        grad = torch.full((3,), 1.0 + (k % 5)) if k % 997 else torch.zeros(3)  # a vanishing gradient now and then
        named = [Named("w", w, grad=grad), Named("loss", loss, grad=torch.tensor(1.0))]
        step = watch.see(BackwardCall(k, "train.py:9", "loss.backward()", [loss], ["loss"], False, named, None))
        assert step.got == 1 and step.params == 1 and step.largest == ("w", pytest.approx(float(grad.norm())))
        if k in (1_000, 10_000):
            held[k] = _held(watch)
    assert held[10_000] <= held[1_000] + 40  # only the kept changes may grow, up to their cap
    assert [c.step for c in watch.changes] == [k for k in range(997, 10_001, 997)]


@pytest.mark.parametrize("width", [80, 60, 120])
def test_trend_rows_keep_peft_names_whole_and_apart_at_any_width(width):
    from io import StringIO

    from rich.console import Console

    from gradflow.script.loop_view import _trends

    names = [f"model.base_model.model.model.layers.{i}.self_attn.{p}_proj.lora_{ab}.default.weight"
             for i in (0, 1) for p in "qv" for ab in "AB"]
    watch = LoopWatch()
    for name in names:
        trend = watch.trends[name] = Trend()
        for v in (1.0, 0.5, 0.25):
            trend.add(v)
    out = StringIO()
    Console(file=out, width=width, color_system=None).print(*_trends(watch))
    lines = out.getvalue().splitlines()[1:]
    assert all(len(line) <= width for line in lines)
    shown = [line.split()[0] for line in lines if line.startswith("  ") and not line.startswith("      ")]
    assert len(shown) == len(names)
    for name, text in zip(names, shown):  # the last dotted parts, whole, and enough of them to tell layers apart
        assert text == name or text.startswith("…") and name.endswith("." + text[1:])
    assert len(set(shown)) == len(names)


@pytest.mark.parametrize("width", [60, 80, 300])
def test_a_step_line_with_peft_names_fits_the_console_without_breaking_a_name(width):
    from io import StringIO

    from rich.console import Console

    from gradflow.script.loop import Step
    from gradflow.script.loop_view import StepLine

    big = "model.base_model.model.model.layers.0.self_attn.v_proj.lora_B.default.weight"
    small = "model.base_model.model.model.layers.1.self_attn.q_proj.lora_A.default.weight"
    step = Step(7, "train.py:9", "loss.backward()", "loss", 4.116, 8, 8, (big, 0.153), (small, 4.39e-4))
    out = StringIO()
    Console(file=out, width=width, color_system=None).print(StepLine(step), soft_wrap=True)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= width for line in lines)
    assert lines[0].startswith("     7  loss 4.116  grad 8/8  max 1.53e-01 ")
    assert "min 4.39e-04" in lines[0]
    if width == 300:  # room for all of it: one line, the names whole
        assert lines == [f"     7  loss 4.116  grad 8/8  max 1.53e-01 {big}  min 4.39e-04 {small}"]
        return
    said = dict(line.split() for line in lines[1:])  # a line per name below: `max NAME`, `min NAME`
    assert set(said) == {"max", "min"}
    for name, text in ((big, said["max"]), (small, said["min"])):  # the last dotted parts, whole
        assert text == name or text.startswith("…") and name.endswith("." + text[1:])
    assert "layers.0" in said["max"] and "layers.1" in said["min"]  # the layers still told apart
