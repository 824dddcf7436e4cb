"""Every --help ends with examples that run and the exit codes the command can return; options name their
values (NAME=VALUE, [float32|float64]), never a type like <list[str]>; the limits it quotes are the real ones."""
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradflow import limits
from gradflow.cli.app import app
from gradflow.errors import ExitCode
from gradflow.values.jsonable import JSON_FULL_MAX

from ..processes import run

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ["eval", "ops", "graph", "inspect", "script", "batch", "whatif", "compare", "ddp"]
HELPS = [[], *([c] for c in COMMANDS)]  # [] is `gradflow --help`

# What each command can return (checked against the code: guarded(), exit_code, run_safely).
EXIT_CODES = {
    "gradflow": {0, 1, 2, 3, 4, 5, 6, 7, 130},
    "eval": {0, 1, 2, 3, 130},
    "ops": {0, 1, 2, 130},
    "graph": {0, 1, 2, 130},
    "inspect": {0, 1, 2, 3, 4, 5, 6, 130},
    "script": {0, 1, 2, 3, 5, 130},
    "batch": {0, 1, 2, 4, 130},
    "whatif": {0, 1, 2, 130},
    "compare": {0, 1, 2, 4, 130},
    "ddp": {0, 1, 2, 3, 5, 6, 7, 130},
}


def help_text(command: list[str]) -> str:
    res = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    return res.stdout


def part(text: str, title: str) -> list[str]:
    """The lines under "Examples:" or "Exit codes:", up to the next blank line."""
    lines = [line.strip() for line in text.splitlines()]
    start = lines.index(title) + 1
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


def name(command: list[str]) -> str:
    return command[0] if command else "gradflow"


def examples():
    for command in HELPS:
        for example in part(help_text(command), "Examples:"):
            slow = [pytest.mark.slow] if name(command) == "ddp" else []  # real ranks: seconds each
            yield pytest.param(name(command), example, id=example[:70], marks=slow)


@pytest.mark.parametrize("command", HELPS, ids=name)
def test_help_ends_with_examples_then_exit_codes(command):
    text = help_text(command)
    lines = [line.strip() for line in text.splitlines()]
    assert lines.index("Examples:") < lines.index("Exit codes:")
    codes = part(text, "Exit codes:")
    assert lines[-len(codes):] == codes  # nothing after the exit codes
    assert {int(line.split()[0]) for line in codes} == EXIT_CODES[name(command)]
    assert {int(line.split()[0]) for line in codes} <= {int(c) for c in ExitCode}


@pytest.mark.parametrize("command", HELPS, ids=name)
def test_no_type_metavars(command):
    text = help_text(command)
    assert "list[" not in text and "<" not in text


def _expected_code(example: str) -> int:
    found = re.search(r"#\s*exit (\d+)", example)
    return int(found.group(1)) if found else 0


def _run(example: str):
    """Run an example in-process; what it pipes in (`echo ... | gradflow ...`) is made by the shell."""
    feed, pipe, command = re.split(r"\s#\s", example)[0].rpartition("| gradflow ")
    stdin = subprocess.run(feed, shell=True, capture_output=True, text=True, check=True).stdout if pipe else None
    args = shlex.split("gradflow " + command if pipe else command)
    assert args[0] == "gradflow"
    return CliRunner().invoke(app, args[1:], input=stdin)


@pytest.mark.parametrize("command, example", list(examples()))
def test_examples_run(command, example, tmp_path, monkeypatch):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")  # inspect's examples; files written land here
    monkeypatch.chdir(tmp_path)
    expected = _expected_code(example)
    assert expected in EXIT_CODES[command]
    res = _run(example)
    assert res.exit_code == expected, res.output
    assert "internal error" not in res.stderr and "Traceback" not in res.output


@pytest.mark.parametrize("command, option, values", [
    *[([c], "--dtype", ("float32", "float64", "float16", "bfloat16")) for c in ("eval", "graph", "batch", "whatif", "compare")],
    *[([c], "--device", ("cpu", "cuda", "mps")) for c in ("eval", "graph", "batch", "whatif", "compare")],
    (["graph"], "--format", ("tree", "dot", "mermaid", "svg", "png")),
    (["eval"], "--graph", ("tree", "dot", "mermaid")),
    (["inspect"], "--graph", ("tree", "dot", "mermaid", "svg", "png")),
    (["eval"], "--order", ("1", "2")),
])
def test_fixed_values_are_listed(command, option, values):
    assert f"{option} [{'|'.join(values)}]" in help_text(command)


def test_listed_values_are_the_accepted_ones():
    from gradflow.cli.options import DEVICES, DTYPES
    from gradflow.errors import EvalError
    from gradflow.values.tensors import DTYPES as TORCH_DTYPES
    from gradflow.values.tensors import resolve_device

    assert DTYPES == tuple(TORCH_DTYPES)
    for device in DEVICES:
        try:
            resolve_device(device)
        except EvalError as err:
            assert "not available" in err.message  # known, just not on this machine
    with pytest.raises(EvalError, match="unknown device"):
        resolve_device("tpu")


@pytest.mark.parametrize("args, message", [
    (["eval", "x", "--x", "1", "--dtype", "int32"], "unknown dtype 'int32'"),
    (["eval", "x", "--x", "1", "--device", "tpu"], "unknown device 'tpu'"),
    (["eval", "x", "--x", "1", "--graph", "svg"], "eval --graph takes tree, dot or mermaid, not 'svg'"),
    (["graph", "x", "--x", "1", "--format", "gif"], "unknown --format 'gif'"),
    (["inspect", "examples/frozen_encoder.py:main", "--graph", "gif"], "unknown --graph format 'gif'"),
])
def test_bad_fixed_values_keep_the_package_errors(cli, args, message):
    res = cli(*args)
    assert res.exit_code == 2 and message in res.stderr


def test_limit_help_quotes_the_limits_in_force():
    text = " ".join(help_text(["eval"]).split())
    quoted = {key: int(n.replace(",", "")) for key, n in re.findall(r"\b(\w+) \(([\d,]+)", text)
              if key in limits.NAMES}
    assert quoted == limits.DEFAULT._asdict()
    assert quoted["elements"] == limits.MAX_ELEMENTS == 50_000_000
    assert quoted["total"] == limits.MAX_TOTAL_ELEMENTS == 200_000_000
    assert f"tensors over {JSON_FULL_MAX:,} elements" in text


def test_var_and_limit_show_their_form():
    text = help_text(["eval"])
    assert "--var NAME=VALUE" in text and "--limit NAME=N" in text


def test_every_help_is_torch_and_rich_free():
    code = f"""
import sys
from gradflow.cli.app import app
for command in {HELPS!r}:
    try:
        app([*command, "--help"], prog_name="gradflow")
    except SystemExit as done:
        assert done.code == 0, command
    assert "torch" not in sys.modules and "rich.console" not in sys.modules, command
print("torch-free")
"""
    res = run([sys.executable, "-c", code], text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("torch-free")
