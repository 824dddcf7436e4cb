"""A `.grad` read on a non-leaf under `gradflow script` and `explain_errors()`: torch's own warning points at the
script's line that read it, as it does under plain python (the oracle: the same script run by `python -W always`),
and gradflow's finding comes at that line too, naming the op that made the tensor and its line."""
import re
import subprocess
import sys
import textwrap
import warnings

import pytest

import gradflow
from gradflow.script.run import run_script
from gradflow.tracer.failures import GradflowWarning

SCRIPT = """
import torch
x = torch.ones(2, requires_grad=True)
y = x * 2
y.sum().backward()
print(y.grad)
"""


def _plain_warning_line(path) -> int:
    said = subprocess.run([sys.executable, "-W", "always", str(path)], capture_output=True, text=True).stderr
    return int(re.search(rf"{re.escape(path.name)}:(\d+): UserWarning: The \.grad attribute", said).group(1))


def _warnings(run) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return caught


def _check(caught, path, line: int) -> None:
    theirs = [w for w in caught if "non-leaf Tensor" in str(w.message)]
    ours = [w for w in caught if w.category is GradflowWarning]
    assert [(w.filename.rpartition("/")[2], w.lineno) for w in theirs] == [(path.name, line)]
    assert [(w.filename.rpartition("/")[2], w.lineno) for w in ours] == [(path.name, line)]
    text = str(ours[0].message)
    made_at = 1 + textwrap.dedent(SCRIPT).lstrip("\n").splitlines().index("y = x * 2")
    assert "tensor:      y" in text and f"made by:     mul at {path.name}:{made_at}" in text
    assert "y.retain_grad()" in text and not text.startswith("why backward failed")


@pytest.mark.slow  # (the oracle is a python process)
def test_script_warns_at_the_line_that_read_grad(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "reads.py"
    path.write_text(textwrap.dedent(SCRIPT).lstrip("\n"))
    line = _plain_warning_line(path)
    _check(_warnings(lambda: run_script(path, [], lambda call: None)), path, line)


@pytest.mark.slow
def test_explain_errors_with_form_warns_at_the_line_that_read_grad(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "reads.py"
    path.write_text(textwrap.dedent(SCRIPT).lstrip("\n"))
    line = _plain_warning_line(path)

    def run():
        with gradflow.explain_errors():
            exec(compile(path.read_text(), path.name, "exec"), {"__name__": "reads"})
    _check(_warnings(run), path, line)
