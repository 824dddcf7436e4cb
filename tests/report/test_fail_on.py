"""The CI gate (`inspect --fail-on`, report/fail_on.py), `--arg` for FUNCTION, and optimizer coverage.

Ground truth comes from plain torch: the same model built again with the same seed, `loss.backward()`, then
`p.grad is None`, `p.grad == 0`, `isfinite`, and the optimizer's own `param_groups`.
"""
import json
import textwrap

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import gradflow
from gradflow.cli.app import app
from gradflow.errors import ExitCode
from gradflow.report.fail_on import CLASSES, failures, parse_classes
from gradflow.report.inspect_report import ParamReport

from ..processes import ROOT


class Mixed(nn.Module):
    """One parameter per class: live, detached (cut), partly cut, unused, frozen, zero, nonfinite."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.live = nn.Linear(3, 3)
        self.cut = nn.Linear(3, 3)
        self.partly = nn.Linear(3, 3)
        self.unused = nn.Linear(3, 3)
        self.frozen = nn.Linear(3, 3).requires_grad_(False)
        self.zero = nn.Parameter(torch.ones(3))
        self.nonfinite = nn.Parameter(torch.zeros(3))

    def forward(self, x):
        h = self.live(x) + self.cut(x).detach() + self.frozen(x)  # <cut>
        p = self.partly(x)
        h = h + p + p.detach()
        return (h + 0 * self.zero + torch.sqrt(self.nonfinite)).sum()


def traced(model, x, optimizer=None):
    with gradflow.trace() as t:
        loss = model(x)
    return t.explain(loss, params=model, optimizer=optimizer)


def plain_truth(model, x) -> dict[str, set[str]]:
    """Class -> parameter names, from a plain backward (what torch says; no gradflow)."""
    model(x).backward()
    out: dict[str, set[str]] = {k: set() for k in ("frozen", "none", "zero", "nonfinite")}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            out["frozen"].add(name)
        elif p.grad is None:
            out["none"].add(name)
        elif not torch.isfinite(p.grad).all():
            out["nonfinite"].add(name)
        elif (p.grad == 0).all():
            out["zero"].add(name)
    return out


X = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))


def names(found, kind=None):
    return {f.name for f in found if kind is None or f.kind == kind}


def test_each_class_matches_plain_torch():
    truth = plain_truth(Mixed(), X)
    found = failures(traced(Mixed(), X), "all")
    assert names(found, "frozen") == truth["frozen"] == {"frozen.weight", "frozen.bias"}
    assert names(found, "zero") == truth["zero"] == {"zero"}
    assert names(found, "nonfinite") == truth["nonfinite"] == {"nonfinite"}
    # grad None and requires grad: a cut or an unused parameter, told apart
    assert names(found, "cut") | names(found, "unused") == truth["none"]
    assert names(found, "unused") == {"unused.weight", "unused.bias"}
    # partly cut: torch gives it a gradient, but one of its two uses is detached
    assert {"partly.weight", "partly.bias"} == names(found, "partly-cut")
    assert not {"partly.weight", "partly.bias"} & set().union(*truth.values())  # live for torch
    assert names(found, "untrained") == names(found, "orphan") == set()  # no optimizer given


def test_only_the_classes_asked_for_and_not_the_allowed():
    report = traced(Mixed(), X)
    found = failures(report, ["zero", "frozen"], allow=["frozen.*"])
    assert [(f.name, f.kind) for f in found] == [("zero", "zero")]
    assert failures(report, "cut,unused", allow=["cut.*", "unused.*"]) == []
    assert failures(report, "frozen", allow=["*"]) == []


def test_a_failure_names_the_line_of_the_cut():
    found = failures(traced(Mixed(), X), "cut")
    line = next(n for n, t in enumerate(open(__file__).read().splitlines(), 1) if t.endswith("# <cut>"))
    cut = next(f for f in found if f.name == "cut.weight")
    assert cut.line.endswith(f"test_fail_on.py:{line}") and "detach()" in cut.reason


def test_nonfinite_is_checked_elementwise_when_the_norm_overflows():
    p = ParamReport("w", [2], 2, True, "live", grad=torch.tensor([3e38, 3e38]), grad_norm=float("inf"))
    from gradflow.report.fail_on import classes_of

    assert "nonfinite" not in classes_of(p)  # finite elements, an overflowing norm
    p.grad = torch.tensor([1.0, float("nan")])
    assert "nonfinite" in classes_of(p)


@pytest.mark.parametrize("text, expected", [
    ("cut", ("cut",)), ("cut, unused,cut", ("cut", "unused")), (["zero", "frozen,cut"], ("zero", "frozen", "cut")),
    ("default", ("cut", "unused", "unreached", "zero", "nonfinite")), ("all", tuple(CLASSES)),
])
def test_parse_classes(text, expected):
    assert parse_classes(text) == expected


@pytest.mark.parametrize("text", ["cuts", "", "cut,,bogus"])
def test_parse_classes_refuses_unknown(text):
    with pytest.raises(gradflow.GradflowError, match="--fail-on"):
        parse_classes(text)


# ---- optimizer coverage -----------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c, self.old = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 1), nn.Linear(3, 1)
        self.frozen = nn.Linear(3, 3).requires_grad_(False)

    def forward(self, x):
        return self.c(self.b(self.a(x)) + self.frozen(x)).sum()


def optimizer_for(model):
    return torch.optim.SGD([{"params": [*model.a.parameters(), model.b.weight]},
                            {"params": [*model.old.parameters(), *model.frozen.parameters(), model.c.weight],
                             "lr": 0.5}], lr=0.1)


def test_optimizer_coverage_matches_torch():
    model = Net()
    opt = optimizer_for(model)
    report = traced(model, X, opt)
    # the truth: which tensors torch's optimizer holds, and which get .grad in a plain backward
    plain = Net()
    plain(X).backward()
    held = {id(t) for g in opt.param_groups for t in g["params"]}
    names_of = dict(zip(map(id, model.parameters()), (n for n, _ in model.named_parameters())))
    grads = {n: p.grad for n, p in plain.named_parameters()}
    in_opt = {names_of[i] for i in held}
    untrained = {n for n, g in grads.items() if g is not None and n not in in_opt}
    orphan = {n for n, p in plain.named_parameters() if p.requires_grad and grads[n] is None and n in in_opt}
    assert untrained == {"b.bias", "c.bias"} and orphan == {"old.weight", "old.bias"}
    found = failures(report, "untrained,orphan")
    assert names(found, "untrained") == untrained and names(found, "orphan") == orphan
    assert report.optimizer == {"groups": 2, "params": 8, "untrained": sorted(untrained, key=list(grads).index),
                                "orphan": ["old.weight", "old.bias"], "foreign": 0}
    assert report.param("c.weight").optimizer_group == 1 and report.param("c.bias").optimizer_group is None
    assert "no optimizer param group" in report.param("b.bias").why
    assert "param group 1" in report.param("old.bias").why
    assert report.param("b.bias").problem and not report.param("a.bias").problem
    doc = report.to_dict()
    assert doc["params"][0]["optimizer_group"] == 0 and doc["optimizer"]["orphan"] == ["old.weight", "old.bias"]


def test_an_optimizer_of_another_model_is_named():
    model = Net()
    opt = torch.optim.SGD(Net().parameters(), lr=0.1)  # built for a copy
    report = traced(model, X, opt)
    assert report.optimizer["foreign"] == 10
    assert "holds 10 tensors that are not among the parameters reported" in report.warnings[-1]
    assert names(failures(report, "untrained")) == {f"{m}.{k}" for m in "abc" for k in ("weight", "bias")}


def test_no_optimizer_no_optimizer_keys():
    doc = traced(Net(), X).to_dict()
    assert "optimizer" not in doc and "gate" not in doc and "optimizer_group" not in doc["params"][0]


def test_not_an_optimizer():
    with pytest.raises(gradflow.GradflowError, match="must be a torch.optim.Optimizer"):
        traced(Net(), X, optimizer=[1, 2])


# ---- the command ------------------------------------------------------------------------------
USER = '''
import torch
from torch import nn

def build():
    torch.manual_seed(0)
    m = nn.ModuleDict({"enc": nn.Linear(3, 3), "head": nn.Linear(3, 1), "aux": nn.Linear(3, 1)})
    return m

def main():
    m = build()
    return m["head"](m["enc"](torch.ones(2, 3)).detach()).sum(), m  # <detach>

def fine():
    m = build()
    return m["head"](m["enc"](torch.ones(2, 3))).sum(), m["head"]

def step(batch_size, lr=0.1, *, mode="sgd", tag=None):
    m = build()
    groups = [*m["enc"].parameters(), *m["aux"].parameters()]
    opt = torch.optim.SGD(groups, lr=lr)
    assert isinstance(batch_size, int) and isinstance(lr, float)
    print(repr(mode), repr(tag))
    return {"loss": m["head"](m["enc"](torch.ones(batch_size, 3))).sum(), "model": m, "optimizer": opt}

def as_tuple(n=2):
    m = build()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    return m["head"](m["enc"](torch.ones(n, 3))).sum(), m, opt

def bad_dict():
    return {"loss": torch.ones(()), "optimiser": None}
'''


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    (tmp_path / "user.py").write_text(textwrap.dedent(USER))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cli(*args):
    return CliRunner().invoke(app, ["inspect", *args], env={"COLUMNS": "100"})


def test_gate_fails_with_a_summary_after_the_report(user_file):
    res = cli("user.py:main", "--fail-on", "cut,unused")
    assert res.exit_code == ExitCode.GATE == 6
    assert res.stdout.startswith("loss = ") and "enc.*" in res.stdout  # the report still prints
    err = res.stderr.splitlines()
    assert err[0] == "error: --fail-on cut,unused: 4 parameters failed (cut: 2, unused: 2)"
    line = next(n for n, t in enumerate(textwrap.dedent(USER).splitlines(), 1) if t.endswith("# <detach>"))
    assert err[1].split() == ["enc.weight", "cut", "cut", "by", "`detach()`", "at", f"user.py:{line}"]
    assert err[3].split() == ["aux.weight", "unused", "not", "used", "in", "the", "forward"]
    assert err[-1].startswith("hint: fix them, or allow the intended ones: --allow 'aux.*'")


def test_gate_passes_when_allowed_and_warns_of_a_pattern_that_matches_nothing(user_file):
    res = cli("user.py:main", "--fail-on", "cut,unused", "--allow", "enc.*", "--allow", "aux.*", "--allow", "ecn.*")
    assert res.exit_code == 0, res.stderr
    assert res.stderr == "warning: --allow 'ecn.*' matches no parameter\n"


def test_gate_in_json(user_file):
    res = cli("user.py:main", "--fail-on", "unused,frozen", "--json")
    assert res.exit_code == 6
    gate = json.loads(res.stdout)["gate"]
    assert gate["fail_on"] == ["unused", "frozen"] and gate["passed"] is False
    assert [(f["name"], f["class"]) for f in gate["failures"]] == [("aux.weight", "unused"), ("aux.bias", "unused")]
    res = cli("user.py:fine", "--fail-on", "all", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["gate"]["failures"] == []


@pytest.mark.parametrize("args, message", [
    (["--allow", "x"], "--allow names parameters the --fail-on gate lets pass: give --fail-on too"),
    (["--fail-on", "cuts"], "--fail-on: unknown class 'cuts'"),
    (["--arg", "n"], "--arg expects NAME=VALUE, got 'n'"),
    (["--arg", "n=1", "--arg", "n=2"], "--arg n is given twice"),
    (["--arg", "batchsize=4"], "step() has no parameter 'batchsize'"),
    (["--arg", "lr=1.0"], "step() needs a value for 'batch_size'"),
])
def test_usage_errors_exit_2(user_file, args, message):
    res = cli("user.py:step", *args)
    assert res.exit_code == 2 and res.stderr.splitlines()[0] == f"error: {message}"
    assert "Traceback" not in res.output


def test_a_wrong_arg_names_the_parameters(user_file):
    res = cli("user.py:step", "--arg", "batchsize=4")
    assert res.stderr.splitlines()[1] == "hint: its parameters: batch_size, lr=0.1, *, mode='sgd', tag=None"


def test_args_are_literals_else_strings_and_the_dict_result_gives_the_optimizer(user_file):
    res = cli("user.py:step", "--arg", "batch_size=4", "--arg", "lr=0.5", "--arg", "mode=adam",
              "--arg", "tag=[1, 'a']", "--json")
    assert res.exit_code == 0, res.stderr
    assert "'adam' [1, 'a']" in res.stderr  # what the user's code printed goes to stderr
    doc = json.loads(res.stdout)
    assert doc["loss"] == pytest.approx(_plain_step_loss(4))
    # the truth: torch's param_groups hold enc and aux; enc and head get gradient
    assert doc["optimizer"]["untrained"] == ["head.weight", "head.bias"]
    assert doc["optimizer"]["orphan"] == ["aux.weight", "aux.bias"]


def _plain_step_loss(n):
    torch.manual_seed(0)
    m = nn.ModuleDict({"enc": nn.Linear(3, 3), "head": nn.Linear(3, 1), "aux": nn.Linear(3, 1)})
    with torch.no_grad():
        return float(m["head"](m["enc"](torch.ones(n, 3))).sum())


def test_a_three_tuple_gives_the_optimizer(user_file):
    res = cli("user.py:as_tuple", "--arg", "n=3", "--fail-on", "untrained,orphan")
    assert res.exit_code == 6
    assert "optimizer: 2 orphan" in res.stdout.splitlines()[0]
    assert [line.split()[:2] for line in res.stderr.splitlines()[1:3]] == [["aux.weight", "orphan"],
                                                                         ["aux.bias", "orphan"]]


def test_an_unknown_key_in_the_returned_dict(user_file):
    res = cli("user.py:bad_dict")
    assert res.exit_code == 2 and "unknown key 'optimiser'" in res.stderr


def test_docs_train_step_example(monkeypatch):
    """The docs' example really has the two optimizer mistakes its comments describe (torch's param_groups)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_step", ROOT / "examples" / "train_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    loss, model, opt = mod.step(batch_size=4, lr=0.1)
    loss.backward()
    held = {id(t) for g in opt.param_groups for t in g["params"]}
    assert {n for n, p in model.named_parameters() if p.grad is not None and id(p) not in held} == \
        {"norm.weight", "norm.bias"}
    assert {n for n, p in model.named_parameters() if p.grad is None and id(p) in held} == \
        {"old_head.weight", "old_head.bias"}


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--fail-on", "cuts"], ["--arg", "n"], ["--allow", "x.*"]])
def test_option_errors_load_no_torch(args):
    from ..processes import GRADFLOW, run

    res = run([GRADFLOW[0], "-X", "importtime", *GRADFLOW[1:], "inspect", "examples/frozen_encoder.py:main", *args],
              text=True, cwd=ROOT)
    mods = {ln.rsplit("|", 1)[-1].strip() for ln in res.stderr.splitlines() if ln.startswith("import time:")}
    assert res.returncode == 2 and "torch" not in mods and "rich.console" not in mods


def test_the_gate_wins_over_untraced(monkeypatch):
    """Exit 4 (some parameters untraced) becomes 6 when the gate matched; both messages print."""
    monkeypatch.chdir(ROOT)
    plain = cli("examples/misbehaving.py:closure")
    assert plain.exit_code == 4
    res = cli("examples/misbehaving.py:closure", "--fail-on", "untraced")
    assert res.exit_code == 6
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors[0].startswith("error: 2 parameters could not be traced")
    assert errors[1] == "error: --fail-on untraced: 2 parameters failed (untraced: 2)"
    assert cli("examples/misbehaving.py:closure", "--fail-on", "cut").exit_code == 4


def test_the_json_document_gates_as_the_report():
    """A ddp rank sends its report as JSON: the gate reads it the same (nonfinite from the "inf"/"nan" norm)."""
    net = Net()
    for report in (traced(Mixed(), X), traced(net, X, optimizer_for(net))):
        doc = json.loads(report.to_json())
        assert failures(doc, "all") == failures(report, "all") != []
        assert failures(doc, "all", allow=["*.weight"]) == failures(report, "all", allow=["*.weight"])
