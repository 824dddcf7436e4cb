"""The package's shape, checked where it can rot: the import contract, the linter and the type checker.

The contracts live in pyproject.toml ([tool.importlinter]): layers only point down (imports inside
functions count), the language, value text, limits and the analysis never import torch, rendering never
evaluates, and no module imports itself back through others.
"""
import shutil
import sys
from pathlib import Path

import pytest

from ..processes import run

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return path


def _check(args: list[str], timeout: float = 300):
    res = run(args, cwd=ROOT, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def test_import_contracts_hold():
    out = _check([_tool("lint-imports")])
    assert "0 broken" in out and "4 kept" in out, out


def test_ruff_is_clean_on_the_package():
    _check([_tool("ruff"), "check", "gradflow"])


@pytest.mark.slow
def test_mypy_is_clean_on_the_package():
    out = _check([_tool("mypy")], timeout=600)
    assert "Success: no issues found" in out
