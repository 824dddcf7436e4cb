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
