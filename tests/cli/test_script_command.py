"""`gradflow script FILE.py`: the classic 2018 script run unchanged, JSON Lines, the offered programs, exit codes.

Oracles: the hand-derived 50 / 70 / -20 of the classic example, and torch's own numbers as the script prints
them (its prints go to stderr).
"""
import json
import shlex
import textwrap

import pytest
from typer.testing import CliRunner

from gradflow.cli.app import app

from ..processes import GRADFLOW, ROOT, run

CLASSIC = ROOT / "examples" / "classic_2018.py"


def script(tmp_path, source: str):
    path = tmp_path / "user_script.py"
    path.write_text(textwrap.dedent(source))
    return str(path)


def test_the_classic_2018_script_runs_unchanged_three_tables(cli):
    text = CLASSIC.read_text()
    for written_in_2018 in ("from torch.autograd import Variable", "Variable(torch.Tensor([1]), requires_grad=True)",
                            "xvar.grad.data.zero_()", "print(\"out1 requires grad:\", out1.requires_grad"):
        assert written_in_2018 in text
    assert text.count("L.backward()") == 3
    res = cli("script", str(CLASSIC))
    assert res.exit_code == 0, res.output
    out = res.stdout
    titles = [ln for ln in out.splitlines() if ln.startswith("backward ")]
    assert [t.split(" at ")[0] for t in titles] == ["backward 1", "backward 2", "backward 3"]
    assert [t.rsplit(":", 2)[1:] for t in titles] == [["17", " L.backward()"], ["27", " L.backward()"],
                                                      ["37", " L.backward()"]]
    grads = [ln for ln in out.splitlines() if ln.startswith("xvar.grad = ")]
    assert grads == ["xvar.grad = [50]", "xvar.grad = [70]", "xvar.grad = [-20]"]  # by hand: 50, 70, -20
    # torch's own numbers, printed by the script itself, went to stderr, not into the tables
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("xvar.grad:")] == \
        ["xvar.grad: tensor([50.])", "xvar.grad: tensor([70.])", "xvar.grad: tensor([-20.])"]
    assert "requires grad" not in out and "tensor(" not in out
    assert out.count("as a gradflow program: gradflow eval ") == 3
    assert "✂ out1: cut by `detach()` at" in out and "✂ out2: cut by `detach()` at" in out


def test_json_lines_one_record_per_backward_and_each_program_gives_the_same_grads(cli):
    res = cli("script", str(CLASSIC), "--json")
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in res.stdout.splitlines()]  # every line is JSON: the prints are not
    assert [r["call"] for r in records] == [1, 2, 3]
    assert [r["grads"] for r in records] == [{"xvar": [50.0]}, {"xvar": [70.0]}, {"xvar": [-20.0]}]
    assert [r["outputs"] for r in records] == [["L"]] * 3
    assert [t["name"] for t in records[1]["tensors"]] == ["xvar", "y1", "y2", "out1", "out2", "L"]
    assert records[1]["tensors"][3]["status"] == "cut" and records[1]["tensors"][3]["cut"]["kind"] == "detach"
    for r in records:
        ran = CliRunner().invoke(app, [*r["eval"]["argv"], "--json"])
        assert ran.exit_code == 0, ran.output
        assert json.loads(ran.stdout)["grads"] == r["grads"]
        assert r["eval"]["command"] == "gradflow " + shlex.join(r["eval"]["argv"])


def test_offered_command_lines_read_back_by_a_shell_as_the_arguments_that_ran(cli):
    """What a user pastes into bash is the argv the test above ran through gradflow eval."""
    for line in cli("script", str(CLASSIC), "--json").stdout.splitlines():
        record = json.loads(line)
        shell = "printf '%s\\0' " + record["eval"]["command"].removeprefix("gradflow ")
        res = run(["bash", "-c", shell], text=True)
        assert res.returncode == 0 and res.stdout.split("\0")[:-1] == record["eval"]["argv"]


@pytest.mark.slow
def test_a_reader_that_goes_away_stops_the_script_quietly():
    cmd = f"{shlex.join(GRADFLOW)} script {shlex.quote(str(CLASSIC))} | head -1"
    res = run(["bash", "-o", "pipefail", "-c", cmd], text=True, cwd=ROOT)
    assert res.returncode == 0 and res.stdout.startswith("backward 1 at ")
    assert "Error" not in res.stderr and "Exception" not in res.stderr


def test_a_variable_named_like_an_eval_option_goes_through_var(cli, tmp_path):
    path = script(tmp_path, """
        import torch
        wrt = torch.tensor(2.0, requires_grad=True)
        json = torch.tensor(3.0)
        (wrt * json).backward()
    """)
    record = json.loads(cli("script", path, "--json").stdout)
    assert record["eval"]["argv"][1:] == ["wrt*json", "--var", "wrt=2", "--var", "json=3", "--wrt", "wrt"]
    ran = CliRunner().invoke(app, [*record["eval"]["argv"], "--json"])
    assert json.loads(ran.stdout)["grads"] == {"wrt": 3.0} == record["grads"]


@pytest.mark.slow
def test_the_real_command_routes_every_gradflow_option_name_through_var(tmp_path):
    """A real run builds only the script command: the names come from every command all the same (`--seed` is
    eval's option, `--jobs` batch's: eval refuses either as a variable's --NAME)."""
    path = script(tmp_path, """
        import torch
        seed = torch.tensor(2.0, requires_grad=True)
        jobs = torch.tensor(3.0)
        (seed * jobs).backward()
    """)
    res = run(GRADFLOW + ["script", path, "--json"], text=True)
    argv = json.loads(res.stdout)["eval"]["argv"]
    assert argv[1:] == ["seed*jobs", "--var", "seed=2", "--var", "jobs=3", "--wrt", "seed"], res.stderr
    ran = run([*GRADFLOW, *argv, "--json"], text=True)
    assert json.loads(ran.stdout)["grads"] == {"seed": 3.0}, ran.stderr  # d(seed*jobs)/dseed = jobs


@pytest.mark.parametrize("source, code, message", [
    ("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 3).sum().backward()\nraise ValueError('bad')\n",
     5, "user_script.py raised ValueError: bad (at "),
    ("import torch\nprint('training')\n", 3, "user_script.py ran to its end without calling backward()"),
    ("import torch\nx = torch.ones(2, requires_grad=True)\nx.detach().sum().backward()\n", 3,
     "does not require grad"),
    ("import sys, torch\nx = torch.ones(1, requires_grad=True)\nx.sum().backward()\nsys.exit(5)\n", 5,
     "called sys.exit(5)"),
    ("import torch\nx = (\n", 5, "user_script.py:2: SyntaxError: '(' was never closed"),
])
def test_exit_codes_and_messages(cli, tmp_path, source, code, message):
    res = cli("script", script(tmp_path, source))
    assert res.exit_code == code, res.output
    assert message in res.stderr and "Traceback" not in res.output
    if "(x * 3)" in source:  # the table made before the error stays printed
        assert "x.grad = [3, 3]" in res.stdout and ":4)" in res.stderr


def test_json_failure_ends_with_an_error_record(cli, tmp_path):
    res = cli("script", script(tmp_path, "import torch\nprint('training')\n"), "--json")
    assert res.exit_code == 3
    last = json.loads(res.stdout.splitlines()[-1])
    assert last["call"] is None and last["error"]["kind"] == "no_backward"
    assert "training" in res.stderr and "training" not in res.stdout


def test_missing_file_and_sys_exit_zero(cli, tmp_path):
    res = cli("script", str(tmp_path / "nope.py"))
    assert res.exit_code == 2 and "no such file" in res.stderr
    ok = script(tmp_path, "import sys, torch\nx = torch.ones(1, requires_grad=True)\nx.sum().backward()\nsys.exit()\n")
    assert cli("script", ok).exit_code == 0


def test_arguments_reach_the_script(cli, tmp_path):
    path = script(tmp_path, """
        import sys, torch
        x = torch.tensor(float(sys.argv[1]), requires_grad=True)
        (x * x).backward()
        print(sys.argv[1:])
    """)
    res = cli("script", path, "--json", "--", "4", "--epochs")
    assert json.loads(res.stdout)["grads"] == {"x": 8.0} and "['4', '--epochs']" in res.stderr


def test_a_bug_in_gradflow_is_not_blamed_on_the_script(cli, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("oops")

    monkeypatch.setattr("gradflow.script.recorder.build_program", broken)
    path = script(tmp_path, "import torch\nx = torch.ones(2, requires_grad=True)\ntry:\n    x.sum().backward()\n"
                            "except Exception:\n    pass\n")
    res = cli("script", path)
    assert res.exit_code == 1 and "internal error: KeyError" in res.stderr and "user_script" not in res.stderr


NOISY = '''
import os, sys, torch
os.write(1, b"os.write(1) at start\\n")
sys.__stdout__.write("sys.__stdout__\\n")
sys.__stdout__.flush()
x = torch.ones(2, requires_grad=True)
child = os.fork()  # both processes run on to backward(): only the one gradflow started may report
(x * 3).sum().backward()
if child:
    os.waitpid(child, 0)
'''


@pytest.mark.slow
def test_json_lines_stay_pure_whatever_the_script_writes_to_fd_1_or_forks(tmp_path):
    res = run(GRADFLOW + ["script", script(tmp_path, NOISY), "--json"], text=True, timeout=90)
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]  # every line a record: nothing else
    assert [(r["call"], r["grads"]) for r in records] == [(1, {"x": [3, 3]})]
    assert "os.write(1) at start\n" in res.stderr and "sys.__stdout__\n" in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("source, message", [
    ("import os\nos._exit(0)\n", "your code ended the process with exit status 0 (os._exit(0) or C's exit())"),
    ("import ctypes\nctypes.string_at(0)\n", "the process running your code was killed by SIGSEGV"),
])
def test_a_script_that_ends_the_process_is_reported(tmp_path, source, message):
    res = run(GRADFLOW + ["script", script(tmp_path, source), "--json"], text=True, timeout=90)
    assert res.returncode == 5, res.stderr
    assert json.loads(res.stdout)["error"]["message"].startswith(message)
    assert f"error: {message}" in res.stderr


def test_an_exception_whose_str_raises_is_the_scripts_failure(cli, tmp_path):
    res = cli("script", script(tmp_path, '''
        class StrFails(Exception):
            def __str__(self):
                raise RuntimeError("its __str__ fails")
        raise StrFails()
        '''))
    assert res.exit_code == 5, res.output
    assert "raised StrFails: <its message cannot be shown: str() raised RuntimeError>" in res.stderr
