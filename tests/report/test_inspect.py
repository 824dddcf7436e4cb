"""gradflow.trace / gradflow inspect on small real nn.Modules, each with a known answer.

Source lines are found by marker comments in this file (`# <name>`), so the tests
check the exact file:line the report names. Gradients are checked against numpy
finite differences in float64 or hand-derived values.
"""
import json
import shlex
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import gradflow
from gradflow.errors import NoGradientError

from ..processes import GRADFLOW, PYTHON, ROOT
from ..processes import run as run_process

HERE = Path(__file__)


def line_of(marker: str) -> str:
    """`test_inspect.py:N` for the line carrying `# <marker>`."""
    for n, text in enumerate(HERE.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# <{marker}>"):
            return f"test_inspect.py:{n}"
    raise AssertionError(marker)


def run(model, x, **kw):
    with gradflow.trace() as t:
        loss = model(x).sum()
    return t.explain(loss, params=model, **kw)


class Two(nn.Module):
    def __init__(self, mode="plain"):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(3, 3), nn.Linear(3, 2), nn.Linear(3, 2)
        self.mode = mode

    def forward(self, x):
        h = self.a(x)
        if self.mode == "detach":
            h = h.detach()  # <detach>
        if self.mode == "no_grad":
            with torch.no_grad():
                h = torch.tanh(h)  # <no_grad>
        if self.mode == "inference":
            with torch.inference_mode():
                h = h * 2  # <inference_cut>
            return self.b(h.clone()) + 0
        out = self.b(h)
        if self.mode == "unused_branch":
            self.c(x)  # <unused_branch>
        return out


X = torch.tensor([[1.0, -2.0, 0.5], [0.3, 0.2, -1.0]])


def test_plain_model_every_param_live_and_grads_match_autograd_backward():
    m = Two()
    r = run(m, X)
    assert [p.name for p in r.params] == ["a.weight", "a.bias", "b.weight", "b.bias", "c.weight", "c.bias"]
    # the hand-derived answer: d sum(b(a(x)))/d b.bias = number of rows (2) per output
    assert r.param("b.bias").grad.tolist() == [2.0, 2.0]
    assert r.param("a.weight").status == "live"
    assert r.param("c.weight").status == "unused" and r.param("c.weight").reason == "not used in the forward"
    assert m.a.weight.grad is None  # explain leaves .grad alone


def test_frozen_layer_names_the_line_that_froze_it():
    m = Two()
    m.b.bias.requires_grad_(False)  # frozen before the trace: no line known
    with gradflow.trace() as t:
        m.a.weight.requires_grad = False  # <freeze>
        assert not m.a.weight.requires_grad  # reading the flag is not a change
        loss = m(X).sum()
    r = t.explain(loss, params=m)
    w = r.param("a.weight")
    assert (w.status, w.requires_grad, w.grad) == ("frozen", False, None)
    assert w.reason.endswith(line_of("freeze")) and "requires_grad = False" in w.reason
    assert r.param("b.bias").reason == "frozen: requires_grad is False"
    assert r.param("a.bias").status == "live"


@pytest.mark.parametrize("mode,kind", [("detach", "detach"), ("no_grad", "no_grad")])
def test_cut_in_the_middle_of_forward_names_op_and_line(mode, kind):
    r = run(Two(mode), X)
    for name in ("a.weight", "a.bias"):
        p = r.param(name)
        assert p.status == "cut" and p.grad is None
        assert [(c.kind, c.line.endswith(line_of(mode))) for c in p.cuts] == [(kind, True)]
        assert line_of(mode) in p.reason
    assert r.param("b.weight").status == "live"


def test_inference_mode_cut_names_the_line():
    r = run(Two("inference"), X)
    p = r.param("a.weight")
    assert p.status == "cut" and p.cuts[0].kind == "inference_mode"
    assert p.cuts[0].op == "mul" and p.cuts[0].line.endswith(line_of("inference_cut"))


def test_unused_branch_says_result_never_reaches_loss():
    r = run(Two("unused_branch"), X)
    p = r.param("c.weight")
    assert p.status == "unused" and line_of("unused_branch") in p.reason and "unused branch" in p.reason


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.dec = nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False)
        self.dec.weight = self.enc.weight  # tied

    def forward(self, x):
        h = torch.tanh(self.enc(x))  # <use1>
        return self.dec(h) ** 2  # <use2>


def _np_loss(w1, w2, x):
    return float(((np.tanh(x @ w1.T) @ w2.T) ** 2).sum())


def _fd(f, w, eps=1e-6):
    g = np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[idx] = eps
        g[idx] = (f(w + d) - f(w - d)) / (2 * eps)
    return g


def test_tied_weights_flow_from_each_use_matches_finite_differences():
    torch.manual_seed(1)
    m = Tied().double()
    x = X.double()
    r = run(m, x)
    p = r.param("enc.weight")
    assert p.aliases == ["dec.weight"] and len(r.params) == 1
    assert [u.line.endswith(line_of(k)) for u, k in zip(p.routes, ["use1", "use2"])] == [True, True]
    w, xn = m.enc.weight.detach().numpy(), x.numpy()
    fd1 = _fd(lambda v: _np_loss(v, w, xn), w)  # only the first use moves
    fd2 = _fd(lambda v: _np_loss(w, v, xn), w)
    np.testing.assert_allclose(p.routes[0].flow.numpy(), fd1, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(p.routes[1].flow.numpy(), fd2, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(p.grad.numpy(), fd1 + fd2, rtol=1e-6, atol=1e-8)
    assert sum(u.share for u in p.routes) == pytest.approx(1.0, abs=1e-12)


class HalfDetached(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 2, bias=False)

    def forward(self, x):
        h = self.a(x)
        return h * h.detach()  # <half>


def test_partly_cut_parameter_is_live_but_names_the_cut():
    m = HalfDetached().double()
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    r = run(m, x)
    p = r.param("a.weight")
    assert p.status == "live" and p.problem and [c.kind for c in p.cuts] == ["detach"]
    assert p.why.startswith("partly cut: cut by `detach()` at") and p.why.endswith(line_of("half") + " (in HalfDetached)")
    # only the undetached factor carries gradient: d/dW sum(h * const) = const_i * x_j with const = h
    h = (m.a.weight.detach() @ x.T).flatten()
    torch.testing.assert_close(p.grad, torch.outer(h, x.flatten()), rtol=0, atol=1e-12)


class Squash(torch.autograd.Function):
    """x * w * w with its own backward: its forward runs with grad off, which is no cut."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w * w, (g * x * 2 * w).sum(0)


def test_custom_autograd_function_is_not_mistaken_for_a_cut():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gradflow.trace() as t:
        loss = Squash.apply(torch.ones(3, 2), w).sum()
    p = t.explain(loss, params={"w": w}).param("w")
    assert (p.status, p.cuts, p.why) == ("live", [], None)
    assert p.grad.tolist() == [6.0, 12.0]  # d/dw sum over 3 rows of w^2 = 3 * 2w


class Zeroed(nn.Module):
    def __init__(self):
        super().__init__()
        self.z, self.n = nn.Linear(3, 1), nn.Linear(3, 1)

    def forward(self, x):
        return self.z(x) * 0 + x.sum(1, keepdim=True)


def test_frozen_batchnorm_in_training_mode_is_still_changing():
    m = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Linear(3, 1))
    m[1].requires_grad_(False)
    before = m[1].running_mean.clone()
    r = run(m, X)
    assert not torch.equal(before, m[1].running_mean)  # the "frozen" layer did change
    assert [w.split(" is frozen")[0] for w in r.warnings] == ["1"] and ".eval()" in r.warnings[0]
    m[1].eval()
    assert run(m, X).warnings == []


def test_zero_gradient_is_told_apart_from_none():
    r = run(Zeroed(), X)
    z, n = r.param("z.weight"), r.param("n.weight")
    assert z.status == "zero" and z.grad is not None and z.grad_norm == 0.0 and z.grad.tolist() == [[0, 0, 0]]
    assert n.status == "unused" and n.grad is None and n.grad_norm is None
    d = {p["name"]: p for p in json.loads(r.to_json())["params"]}
    assert (d["z.weight"]["grad_is_none"], d["z.weight"]["grad_norm"]) == (False, 0.0)
    assert (d["n.weight"]["grad_is_none"], d["n.weight"]["grad_norm"]) == (True, None)


class InferenceReuse(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone, self.head = nn.Linear(3, 3), nn.Linear(3, 1)

    def forward(self, x):
        with torch.inference_mode():
            feats = self.backbone(x)  # <inference_made>
        return self.head(feats)  # <inference_used>


def test_inference_tensor_reused_in_training_explains_torch_error():
    with pytest.raises(RuntimeError, match="Inference tensors") as info:
        with gradflow.trace() as t:
            InferenceReuse()(X).sum()
    f = t.failure
    assert f.op == "linear" and f.line.endswith(line_of("inference_used"))
    assert f.origin_op == "linear" and f.origin_line.endswith(line_of("inference_made"))
    assert any(line_of("inference_made") in n for n in info.value.__notes__)


def test_loss_without_grad_sets_no_gradient_error_with_reasons():
    m = Two("detach")
    m.b.requires_grad_(False)
    r = run(m, X)
    assert isinstance(r.error, NoGradientError) and r.error.exit_code == 3
    assert "a.weight, a.bias: cut by `detach()`" in r.error.message and "b.weight, b.bias: frozen" in r.error.message


def test_routes_leave_out_earlier_forwards_and_stray_leaves_are_named():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gradflow.trace() as t:
        # an earlier forward, not part of the loss:
        (w * 5).sum()  # <earlier>
        loss = (w * w).sum() + (3 * w).sum()
    r = t.explain(loss)
    p = r.params[0]  # a leaf outside any module is named by its first use
    assert len(r.params) == 1 and p.name.startswith("tensor@") and p.name.endswith(line_of("earlier"))
    assert [u.op for u in p.routes] == ["mul", "mul"]
    assert p.grad.tolist() == [2 * 1.0 + 3, 2 * 2.0 + 3]  # d/dw (w.w + 3 sum w) = 2w + 3
    assert [u.flow.tolist() for u in p.routes] == [[2.0, 4.0], [3.0, 3.0]]


def test_setitem_into_a_buffer_keeps_the_data_flow():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with gradflow.trace() as t:
        buf = torch.zeros(2, 2)
        buf[0] = (w * 3).detach()  # <setitem_cut>
        buf[1] = w * 4
        loss = buf.sum()
    p = t.explain(loss, params={"w": w}).param("w")
    assert p.grad.tolist() == [4.0, 4.0] and [c.kind for c in p.cuts] == ["detach"]
    assert p.cuts[0].line.endswith(line_of("setitem_cut"))


def test_trace_does_not_change_results_and_dict_params():
    m = Two("unused_branch")
    ref = m(X)
    with gradflow.trace() as t:
        out = m(X)
        loss = out.sum()
    assert torch.equal(ref, out)
    r = t.explain(loss, params={"w": m.a.weight})
    assert [p.name for p in r.params] == ["w"] and r.param("w").status == "live"


def test_non_scalar_or_untraced_loss_is_a_clear_error():
    with gradflow.trace() as t:
        out = Two()(X)
    with pytest.raises(gradflow.GradflowError, match="scalar"):
        t.explain(out)
    with pytest.raises(gradflow.GradflowError, match="not computed inside this trace"):
        t.explain(Two()(X).sum())


def test_transformer_block_tied_embedding_routes_add_up():
    sys.path.insert(0, str(ROOT / "examples"))
    from transformer_block import TinyLM, lm_loss

    torch.manual_seed(0)
    model = TinyLM(vocab=50, d=16, heads=2, ff=32).double()
    tokens = torch.tensor([[1, 5, 7, 5, 9], [2, 2, 3, 1, 7]])
    with gradflow.trace() as t:
        loss = lm_loss(model, tokens)
    r = t.explain(loss, params=model)
    assert {p.status for p in r.params} == {"live"}
    emb = r.param("embed.weight")
    assert emb.aliases == ["head.weight"] and [u.module for u in emb.routes] == ["embed", "head"]
    torch.testing.assert_close(emb.routes[0].flow + emb.routes[1].flow, emb.grad, rtol=1e-12, atol=1e-12)
    # the embedding lookup sends gradient only to the rows of the tokens it read (inputs: all but the last)
    rows = emb.routes[0].flow.abs().sum(1).nonzero().flatten().tolist()
    assert rows == sorted(set(tokens[:, :-1].flatten().tolist()))
    assert sum(u.share for u in emb.routes) == pytest.approx(1.0, abs=1e-12)


# ---- the command --------------------------------------------------------------------------
USER_FILE = '''
import torch
from torch import nn

def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))

def good():
    m = build()
    print("epoch 1")  # goes to stderr: stdout stays valid JSON
    return m(torch.ones(2, 3)).mean(), m

def loss_only():
    return build()(torch.ones(2, 3)).mean()

def detached():
    m = build()
    return m(torch.ones(2, 3)).detach().mean(), m

def vector():
    return build()(torch.ones(2, 3))

def broken():
    raise ValueError("bad batch size")

def reuse():
    m = build()
    with torch.inference_mode():
        h = torch.relu(m[0](torch.ones(2, 3)))
    return m[2](h).mean(), m
'''


@pytest.fixture
def user_file(tmp_path):
    f = tmp_path / "user_model.py"
    f.write_text(textwrap.dedent(USER_FILE))
    return f


def test_cli_table_json_graph(cli, user_file):
    r = cli("inspect", f"{user_file}:good")
    assert r.exit_code == 0 and "0.*" in r.stdout and "gets gradient" in r.stdout
    r = cli("inspect", f"{user_file}:good", "--json")
    d = json.loads(r.stdout)
    assert "epoch 1" in r.stderr
    assert [p["status"] for p in d["params"]] == ["live"] * 4
    assert cli("inspect", f"{user_file}:good", "--graph", "dot").stdout.startswith("digraph")
    assert cli("inspect", f"{user_file}:good", "--graph", "mermaid").stdout.startswith("flowchart LR")
    assert "every parameter gets" in cli("inspect", f"{user_file}:good", "--only-problems").stdout
    d2 = json.loads(cli("inspect", f"{user_file}:loss_only", "--json").stdout)  # modules found by the trace
    assert [p["name"] for p in d2["params"]] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert d2["loss"] == d["loss"]


def test_cli_pictures_show_the_cut_with_its_line(cli, user_file):
    n = next(i for i, text in enumerate(user_file.read_text().splitlines(), 1) if ".detach()" in text)
    mermaid = cli("inspect", f"{user_file}:detached", "--graph", "mermaid").stdout
    assert f'{{{{"✂ detach()<br/>{user_file}:{n}"}}}}' in mermaid and "-.->" in mermaid
    dot = cli("inspect", f"{user_file}:detached", "--graph", "dot").stdout
    assert 'shape=octagon' in dot and "style=dashed" in dot and dot.rstrip().endswith("}")
    tree = cli("inspect", f"{user_file}:good", "--graph", "tree").stdout
    assert "├── 0" in tree and "● weight" in tree


def test_cli_svg_through_graphviz_and_output_needs_a_picture(cli, user_file, tmp_path):
    r = cli("inspect", f"{user_file}:good", "-o", str(tmp_path / "x"))
    assert r.exit_code == 2 and "--output writes a picture" in r.stderr
    if shutil.which("dot") is None:
        pytest.skip("Graphviz not installed")
    assert cli("inspect", f"{user_file}:good", "--graph", "svg", "-o", str(tmp_path / "g.svg")).exit_code == 0
    assert "<svg" in (tmp_path / "g.svg").read_text()


def test_explain_after_backward_is_a_clear_error():
    m = Two()
    with gradflow.trace() as t:
        loss = m(X).sum()
    loss.backward()
    with pytest.raises(gradflow.GradflowError, match="already used by a backward"):
        t.explain(loss, params=m)


def test_cli_loss_without_grad_exits_3_with_reasons(cli, user_file):
    r = cli("inspect", f"{user_file}:detached")
    assert r.exit_code == 3 and "0.weight, 0.bias, 2.weight (+1 more): cut by `detach()` at" in " ".join(r.stderr.split())


@pytest.mark.parametrize("target,code,text", [
    ("nope.py:main", 2, "no such file"),
    ("{f}:missing", 2, "has no function 'missing'"),
    ("{f}:broken", 5, "broken() raised ValueError: bad batch size (at {f}:25)"),
    ("{f}:vector", 2, "must be a scalar"),
    ("{f}:reuse", 2, "created under torch.inference_mode()"),
    ("{f}", 2, "expected FILE.py:FUNCTION"),
])
def test_cli_errors(cli, user_file, target, code, text):
    r = cli("inspect", target.format(f=user_file))
    assert r.exit_code == code and text.format(f=user_file) in " ".join(r.stderr.split())
    assert "Traceback (most recent call last)" not in r.stderr


def test_cli_inspect_help_does_not_import_torch():
    code = "import sys, gradflow.cli.app; assert 'torch' not in sys.modules"
    res = run_process(PYTHON + ["-c", code], text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


def test_example_file_gives_the_documented_answer(cli):
    example = ROOT / "examples" / "frozen_encoder.py"
    d = json.loads(cli("inspect", f"{example}:main", "--json").stdout)
    status = {p["name"]: p["status"] for p in d["params"]}
    assert status == {"encoder.layer1.weight": "frozen", "encoder.layer1.bias": "frozen",
                      "encoder.norm.weight": "frozen", "encoder.norm.bias": "frozen",
                      "encoder.layer2.weight": "frozen", "encoder.layer2.bias": "frozen",
                      "adapter.weight": "cut", "adapter.bias": "cut", "head.weight": "live",
                      "head.bias": "live", "aux_head.weight": "unused", "aux_head.bias": "unused"}
    assert [w.split(" is frozen")[0] for w in d["warnings"]] == ["encoder.norm"]


@pytest.mark.slow
def test_cli_picture_into_a_closed_pipe_ends_quietly():
    example = ROOT / "examples" / "frozen_encoder.py"
    cmd = f"{shlex.join(GRADFLOW)} inspect {shlex.quote(f'{example}:main')} --graph dot | head -1"
    r = run_process(["bash", "-o", "pipefail", "-c", cmd], text=True, cwd=ROOT)
    assert (r.returncode, r.stdout, r.stderr) == (0, "digraph gradflow {\n", "")


def test_table_folds_by_module_depth_and_filters_problems(cli):
    from gradflow.report.param_table import rows

    example = ROOT / "examples" / "frozen_encoder.py"
    sys.path.insert(0, str(example.parent))
    from frozen_encoder import main

    with gradflow.trace() as t:
        loss, model = main()
    r = t.explain(loss, params=model)
    assert [row.label for row in rows(r, depth=1)] == ["encoder.*", "adapter.*", "head.*", "aux_head.*"]
    assert len(rows(r, expand=True)) == len(r.params) == 12
    assert [row.label for row in rows(r, only_problems=True)] == [
        "encoder.layer1.*", "encoder.norm.*", "encoder.layer2.*", "adapter.*", "aux_head.*"]
    out = cli("inspect", f"{example}:main", "--only-problems").stdout
    assert "adapter.*" in out and "head.*" not in out.replace("aux_head.*", "")


def test_sparse_embedding_gradient():
    e = nn.Embedding(10, 3, sparse=True)
    with gradflow.trace() as t:
        loss = e(torch.tensor([1, 2, 2])).sum()
    p = t.explain(loss, params=e).param("weight")
    # row 1 read once, row 2 twice: |grad|^2 = 3 * 1^2 + 3 * 2^2 = 15
    assert p.status == "live" and p.grad_norm == pytest.approx(15 ** 0.5) and p.routes[0].share == 1.0


def test_docs_inspect_example_is_real_output(monkeypatch):
    from typer.testing import CliRunner

    from gradflow.cli.app import app

    root = ROOT
    page = (root / "docs" / "inspect.md").read_text()
    section = page[page.index("\n## An example"):]
    block = section.split("```\n$ gradflow inspect examples/frozen_encoder.py:main\n")[1].split("```")[0]
    monkeypatch.chdir(root)
    res = CliRunner().invoke(app, ["inspect", "examples/frozen_encoder.py:main"], env={"COLUMNS": "100"})
    strip = lambda text: [line.rstrip() for line in text.splitlines()]  # noqa: E731
    assert strip(res.stdout + res.stderr) == strip(block)
