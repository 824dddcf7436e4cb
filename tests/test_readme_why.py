"""The README's whatif / compare examples are real output: rerun them and compare."""
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradflow.cli.app import app

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```\n\$ gradflow ((?:whatif|compare) [^\n]*)\n(.*?)```", re.S)


def _examples():
    return [(cmd, out) for cmd, out in BLOCK.findall(README.read_text()) if "\n…\n" not in "\n" + out]


@pytest.mark.parametrize("cmd,expected", _examples())
def test_readme_example(cmd, expected):
    res = CliRunner().invoke(app, shlex.split(cmd), env={"COLUMNS": "100"})
    got = [line.rstrip() for line in res.stdout.splitlines()]
    while got and not got[-1]:
        got.pop()
    assert got == expected.rstrip("\n").split("\n")


def test_examples_found():
    assert len(_examples()) >= 4
