"""The `gradflow` command: the Typer app, and every command registered from its own module.

Imports no torch at module level: `--help`, `ops` and errors found before
evaluation stay fast. Results go to stdout, diagnostics to stderr.
"""
from __future__ import annotations

from gradflow.cli import startup

startup.begin()  # before the imports below: see startup.py

from typing import Annotated  # noqa: E402

import typer  # noqa: E402

from gradflow.cli import (  # noqa: E402
    batch_command,
    compare_command,
    eval_command,
    graph_command,
    inspect_command,
    ops_command,
    whatif_command,
)
from gradflow.cli.common import EXTRA  # noqa: E402

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Show how gradients flow through a PyTorch computation.")


def _version(value: bool):
    if value:
        from importlib.metadata import version

        typer.echo(f"gradflow {version('gradflow')}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Show the version and exit.")] = False):
    """Show how gradients flow through a PyTorch computation.

    Values are given as --NAME VALUE for each variable (--x 1, --x=-2, --w "[1,2]").
    """


# One module per command; `gradflow --help` lists them in this order.
app.command("eval", context_settings=EXTRA)(eval_command.eval_cmd)
app.command("ops")(ops_command.ops_cmd)
app.command("graph", context_settings=EXTRA)(graph_command.graph_cmd)
app.command("inspect")(inspect_command.inspect_cmd)
app.command("batch", context_settings=EXTRA)(batch_command.batch_cmd)
app.command("whatif", context_settings=EXTRA)(whatif_command.whatif_cmd)
app.command("compare", context_settings=EXTRA)(compare_command.compare_cmd)


def run():  # console-script entry point: pipes, closed streams and Ctrl-C handled in streams.py
    from gradflow.cli.streams import run_safely

    startup.in_command()
    run_safely(lambda: app(prog_name="gradflow"))


startup.finish()
