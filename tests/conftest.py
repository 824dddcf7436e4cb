import pytest
from typer.testing import CliRunner

from gradflow.cli.app import app

BLOG = {"x": 1, "y1": 2, "y2": 7}


@pytest.fixture
def cli():
    """Invoke the CLI in-process: returns the click Result (stdout and stderr apart)."""
    runner = CliRunner()

    def invoke(*args, input=None):
        return runner.invoke(app, list(args), input=input)

    return invoke


def pytest_ignore_collect(collection_path, config):
    """The everyday run (`-m 'not slow'`, pyproject's default) does not import a test module whose tests are all
    slow (a module-level `pytestmark` with pytest.mark.slow): every one of its tests would be deselected, and
    importing it costs each xdist worker seconds (transformers' Trainer, lightning, playwright, nbclient). Any
    other -m (`-m slow`, `-m ""`) collects it as usual."""
    if config.getoption("markexpr") != "not slow" or collection_path.suffix != ".py" \
            or not collection_path.name.startswith("test_"):
        return None
    return True if _all_slow(collection_path.read_text()) else None


def _all_slow(source: str) -> bool:
    """Does this module set `pytestmark = pytest.mark.slow` (or a list holding it) at its top level?"""
    import ast

    if "pytestmark" not in source:
        return False
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            marks = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            return any(ast.unparse(m) == "pytest.mark.slow" for m in marks)
    return False
