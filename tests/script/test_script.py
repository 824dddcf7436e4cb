"""gradflow script's recorder and program writer: each backward() of a real script, its names, its grads, and the
`gradflow eval` program offered for it.

The oracle for every grad is torch itself, read by the script (`.grad` after its own backward), or numbers
derived by hand; each offered program is run through `gradflow eval` and must give the same grads.
"""
import json
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from gradflow.cli.app import app
from gradflow.errors import GradflowError, NoGradientError
from gradflow.script.backward_table import footer
from gradflow.script.program_writer import NoProgram, Program
from gradflow.script.run import run_script

from .generated import generated_script

SCRIPTS = Path(__file__).parent / "scripts"


def run(tmp_path, source: str, args=()):
    """Run a script in this process; every BackwardCall with its leaves' grads read right after the call."""
    path = tmp_path / "user_script.py"
    path.write_text(textwrap.dedent(source))
    calls: list = []
    run_script(path, list(args), _collector(calls))
    return calls


def _collector(calls: list):
    def seen(call):
        grads = {n.name: n.tensor.grad.clone() for n in call.named if n.tensor.is_leaf and n.tensor.grad is not None}
        call.printed = str(footer(call))  # as the command prints it, at the call: the script goes on after
        calls.append((call, grads))
    return seen


def run_file(name: str):
    """run() on a script of tests/script/scripts/, where it is (test_programs.py replays every one of them)."""
    calls: list = []
    run_script(SCRIPTS / name, [], _collector(calls))
    return calls


def eval_grads(program: Program) -> dict:
    res = CliRunner().invoke(app, [*program.argv(), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["grads"]


def assert_reproduces(call, grads: dict):
    """The offered program, run by gradflow eval, gives what this backward added to each leaf's .grad."""
    assert isinstance(call.program, Program), call.program
    got = eval_grads(call.program)
    for n in call.named:
        if n.tensor.is_leaf and n.tensor.requires_grad and n.name in got:
            want = n.grad if n.grad is not None else torch.zeros_like(n.tensor)
            assert torch.allclose(torch.tensor(got[n.name], dtype=want.dtype), want, rtol=1e-5, atol=1e-6), \
                (n.name, got[n.name], want)
    assert set(call.program.wrt) <= set(got)
    return got


def test_classic_three_cases_hand_derived_and_each_program_reproduces():
    calls = run_file("classic_zeroed.py")
    # L = (x*y1 - x*y2)^2 at 1, 2, 7: 2(-5)(2-7) = 50; out1 cut: 2(-5)(-7) = 70; out2 cut: 2(-5)(2) = -20
    assert [g["xvar"].tolist() for _, g in calls] == [[50.0], [70.0], [-20.0]]
    sources = [c.program.source for c, _ in calls]
    assert sources == ["out1 = xvar*y1; out2 = xvar*y2; L = (out1 - out2)^2",
                       "out1 = detach(xvar*y1); out2 = xvar*y2; L = (out1 - out2)^2",
                       "out1 = xvar*y1; out2 = detach(xvar*y2); L = (out1 - out2)^2"]
    assert [eval_grads(c.program)["xvar"] for c, _ in calls] == [[50.0], [70.0], [-20.0]]
    first = calls[0][0]
    assert [n.name for n in first.named] == ["xvar", "y1", "y2", "out1", "out2", "L"]
    assert [n.status for n in calls[1][0].named] == ["live", "off", "off", "cut", "live", "live"]
    assert calls[1][0].named[3].cut.describe().startswith("cut by `detach()` at ")
    assert calls[1][0].retain_graph and not first.retain_graph
    assert first.code == "L.backward()" and calls[2][0].code == "torch.autograd.backward(L)"


def test_grad_accumulates_without_zero_and_the_call_says_what_it_added():
    calls = run_file("classic_accumulating.py")
    assert [g["xvar"].tolist() for _, g in calls] == [[50.0], [120.0], [100.0]]  # 50, 50+70, 120-20
    second = calls[1][0].named[0]
    assert second.grad_before.tolist() == [50.0] and second.grad.tolist() == [70.0] and second.accumulated
    assert not calls[0][0].named[0].accumulated
    assert_reproduces(calls[1][0], calls[1][1])  # the program gives what this call added: 70
    assert "xvar.grad = [120]  (= [50] already there + [70] from this backward)" in calls[1][0].printed
    assert "xvar.grad = [50]\n" in calls[0][0].printed + "\n" and "already" not in calls[0][0].printed


def test_intermediate_grads_are_the_gradient_that_reached_them():
    calls = run_file("classic_zeroed.py")
    named = {n.name: n for n in calls[0][0].named}
    # dL/dout1 = 2(out1 - out2) = -10, dL/dout2 = 10, dL/dL = 1; their own .grad stays None
    assert (named["out1"].grad.item(), named["out2"].grad.item(), named["L"].grad.item()) == (-10.0, 10.0, 1.0)
    assert named["y1"].grad is None and named["y1"].status == "off"


def test_every_spelled_op_reproduces_torch_grads():
    """no_grad, exp, sum, mean, pow both ways, rsub, div, max(a, b), relu, neg, sigmoid, tanh, abs, min, @,
    a 0-d constant, several outputs, a gradient argument: eval gives what torch gave."""
    calls = run_file("spelled_ops.py")
    assert len(calls) == 4
    for call, grads in calls[:3]:
        assert_reproduces(call, grads)
    assert "`double`" in calls[3][0].program.reason  # a dtype change: no spelling
    assert "no_grad(" in calls[0][0].program.source
    assert calls[1][0].program.source.endswith("q + q2*3")
    assert calls[2][0].program.source.startswith("v = x*2; sum(v*")


def test_float64_and_old_style_sgd_through_data():
    """`w.data -= lr * w.grad.data` changes w without autograd knowing: each program gets that step's w."""
    calls = run_file("sgd_through_data.py")
    assert [c.program.dtype for c, _ in calls] == ["float64"] * 3
    values = [dict(c.program.values)["w"] for c, _ in calls]
    assert len(set(values)) == 3  # three different w
    for call, grads in calls:
        assert_reproduces(call, grads)
    # first step by hand: s = 0.5*2 - 1*3 - 1 = -3, dL/dw = 2s*x = [-12, -18]
    assert calls[0][1]["w"].tolist() == [-12.0, -18.0]


def test_names_from_function_locals_aliases_modules_and_lists():
    calls = run_file("names_and_modules.py")
    call, _ = calls[0]
    names = {n.name: n for n in call.named}
    assert {"batch", "loss", "model.weight", "model.bias", "params[0]"} <= set(names)
    assert names["loss"].aliases == ["also"] and names["batch"].aliases == ["inp"]
    assert names["model.bias"].grad.tolist() == [3.0]  # three rows, each adds 1
    assert "linear(batch, model_weight, model_bias)" in call.program.source  # nn.Linear, written as F.linear
    assert_reproduces(call, calls[0][1])


@pytest.mark.parametrize("line, op", [
    ("(x[[0]] * 2).sum().backward()", "__getitem__"),  # a list as the index: not in the language
    ("x.cumsum(0).sum().backward()", "cumsum"),  # not in the op table
    ("(x * x).max(0)[0].backward()", "max"),
])
def test_ops_without_a_spelling_say_so(tmp_path, line, op):
    calls = run(tmp_path, f"import torch\nx = torch.tensor([1.0, 2.0], requires_grad=True)\n{line}\n")
    program = calls[0][0].program
    assert isinstance(program, NoProgram) and f"`{op}`" in program.reason and "no spelling" in program.reason


def test_custom_function_is_not_written_as_its_no_grad_forward():
    calls = run_file("custom_function.py")
    call, grads = calls[0]
    assert grads["x"].item() == 5.0
    assert isinstance(call.program, NoProgram)


def test_precedence_and_constants_are_written_so_eval_reads_them_back():
    calls = run_file("precedence.py")
    call, grads = calls[0]
    assert call.program.source == ("r = (a - (b - a*3))*(a + b)/(a*(b + 2)) - (-a^2)^2 + a^(-1) - 2^(b*a) + -b*0.1; "
                                   "sum(r)")
    assert_reproduces(call, grads)


def test_values_too_big_to_write_give_no_program(tmp_path):
    calls = run(tmp_path, "import torch\nw = torch.ones(100, requires_grad=True)\n(w * 2).sum().backward()\n")
    assert isinstance(calls[0][0].program, NoProgram) and "more than 64 elements" in calls[0][0].program.reason


def test_script_errors_are_the_scripts_and_gradflow_bugs_are_not(tmp_path, monkeypatch):
    with pytest.raises(GradflowError, match=r"raised ValueError: bad batch \(at .*user_script.py:3\)"):
        run(tmp_path, "import torch\nx = 1\nraise ValueError('bad batch')\n")
    with pytest.raises(NoGradientError, match="without calling backward"):
        run(tmp_path, "import torch\nx = torch.ones(2)\n")
    with pytest.raises(NoGradientError, match="does not require grad"):
        run(tmp_path, "import torch\nx = torch.ones(2, requires_grad=True)\nx.detach().sum().backward()\n")

    def broken(*args, **kwargs):
        raise KeyError("gradflow's own bug")

    monkeypatch.setattr("gradflow.script.recorder.build_program", broken)
    with pytest.raises(KeyError, match="gradflow's own bug"):  # not a GradflowError naming the script
        run(tmp_path, """
            import torch
            x = torch.ones(2, requires_grad=True)
            try:
                x.sum().backward()
            except Exception:
                pass
        """)


def test_runs_as_main_with_its_arguments_and_restores_the_process(tmp_path):
    import sys

    before = (list(sys.argv), list(sys.path), sys.modules["__main__"])
    (tmp_path / "helper_beside_it.py").write_text("def square(t):\n    return t * t\n")
    calls = run(tmp_path, """
        import sys, torch
        from helper_beside_it import square  # its folder is first on sys.path, as with python FILE.py
        if __name__ == "__main__":
            x = torch.tensor(float(sys.argv[1]), requires_grad=True)
            square(x).backward()
            sys.exit(0)
    """, args=["3"])
    assert calls[0][1]["x"].item() == 6.0
    sys.modules.pop("helper_beside_it", None)
    assert (sys.argv, sys.path, sys.modules["__main__"]) == before


def test_lazy_sparse_and_meta_tensors_in_scope_are_left_out():
    calls = run_file("odd_tensors.py")
    call, grads = calls[0]
    assert [n.name for n in call.named] == ["x"] and grads["x"].tolist() == [2.0, 2.0]
    assert_reproduces(call, grads)


def test_a_narrow_console_gets_one_block_per_tensor(tmp_path):
    import io

    from rich.console import Console

    from gradflow.script.backward_table import backward_view

    calls = run(tmp_path, """
        import torch
        weight = torch.linspace(-1, 1, 40, requires_grad=True)
        loss = (weight * 3).sum()
        loss.backward()
    """)
    wide, narrow = (Console(file=io.StringIO(), width=w, color_system=None) for w in (120, 60))
    for console in (wide, narrow):
        console.print(backward_view(calls[0][0], console.width))
    assert " tensor " in wide.file.getvalue()
    text = narrow.file.getvalue()
    assert " tensor " not in text and "● weight  requires_grad True" in text and "grad shape (40,)" in text
    assert all(len(line) <= 60 for line in text.splitlines())


def test_generated_scripts_each_program_gives_torch_grads(tmp_path):
    """30 random expressions (operators with Python's precedence, methods, reversed operands, detach), one
    backward each: the program written for each one, run by gradflow eval, gives the grads torch gave."""
    calls = run(tmp_path, generated_script())
    assert len(calls) == 30
    for call, grads in calls:
        assert_reproduces(call, grads)


def test_a_keyboard_interrupt_the_script_raises_is_its_failure(tmp_path, monkeypatch):
    """Not a Ctrl-C (that one exits 130: tests/cli/test_streams.py): exit 5, with the script's line."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "stops.py"
    path.write_text("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n"
                    "raise KeyboardInterrupt\n")
    res = CliRunner().invoke(app, ["script", "stops.py"])
    assert res.exit_code == 5, res.output
    assert "error: stops.py raised KeyboardInterrupt (at stops.py:4)" in res.stderr
