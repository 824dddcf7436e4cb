"""The README documents every op and shows the tool's real output."""
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradflow.cli.app import app
from gradflow.language.ops import OPS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"\n## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else None]


def test_every_op_in_readme_language_section():
    lang = section("The language")
    missing = [name for name in OPS if not re.search(rf"\b{name}\b", lang)]
    assert missing == []


def test_every_op_in_ops_listing():
    res = CliRunner().invoke(app, ["ops"], env={"COLUMNS": "200"})
    names = [line.split("│")[1].strip() for line in res.stdout.splitlines() if line.startswith("│")]
    assert [n for n in names if n] == list(OPS)


def examples():
    """The core sections' code blocks that start with `$ gradflow ...`: command and verbatim output.
    (Other sections may elide output with `...`.)"""
    text = section("The classic example") + section("The language")
    for block in re.findall(r"```\n(\$ gradflow .*?)\n```", text, flags=re.S):
        command, _, output = block.partition("\n")
        yield pytest.param(command[2:], output, id=command[2:60])


@pytest.mark.parametrize("command,output", list(examples()))
def test_readme_examples_are_real_output(command, output):
    args = shlex.split(command)[1:]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "100"})
    got = (res.stdout + res.stderr).rstrip("\n")
    strip = lambda text: [line.rstrip() for line in text.splitlines()]  # noqa: E731
    assert strip(got) == strip(output)


def test_readme_has_the_four_blog_cases():
    cases = [c for c, _ in ((p.values[0], p.values[1]) for p in examples()) if "--y2 7" in c]
    assert len(cases) == 4
    outs = " ".join(p.values[1] for p in examples())
    for grad in ("x.grad = 50", "x.grad = 70", "x.grad = -20", "x.grad = None"):
        assert grad in outs
