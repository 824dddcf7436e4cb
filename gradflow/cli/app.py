"""The `gradflow` command: the Typer app, and every command registered from its own module.

Imports no torch at module level: `--help`, `ops` and errors found before
evaluation stay fast. Results go to stdout, diagnostics to stderr.
"""
from __future__ import annotations

from gradflow.cli import startup

startup.begin()  # before the imports below: see startup.py

from collections.abc import Callable  # noqa: E402
from typing import Annotated, Any  # noqa: E402

import typer  # noqa: E402

from gradflow.cli import (  # noqa: E402
    batch_command,
    compare_command,
    ddp_command,
    eval_command,
    graph_command,
    inspect_command,
    ops_command,
    script_command,
    whatif_command,
)
from gradflow.cli.common import EXTRA  # noqa: E402
from gradflow.cli.help import Command, help_end  # noqa: E402
from gradflow.errors import ExitCode  # noqa: E402

HELP_END = help_end([
    'gradflow eval "(x*y1 - detach(x*y2))^2" --x 1 --y1 2 --y2 7',
    'gradflow whatif "(x*y1 - x*y2)^2" --x 1 --y1 2 --y2 7',
    'gradflow ops',
    'gradflow eval --help',
], list(ExitCode), {ExitCode.NO_GRADIENT: "no gradient (eval, inspect, script, compare)",
                    ExitCode.PARTIAL: "partial: batch lines or compare programs failed, or inspect could not "
                                      "trace some parameters"})

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None, epilog=HELP_END,
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
    Each command's --help lists its options, examples and exit codes.
    """


# One module per command; `gradflow --help` lists them in this order.
_COMMANDS: list[tuple[str, Callable[..., Any], str, dict | None]] = [
    ("eval", eval_command.eval_cmd, eval_command.HELP_END, EXTRA),
    ("ops", ops_command.ops_cmd, ops_command.HELP_END, None),
    ("graph", graph_command.graph_cmd, graph_command.HELP_END, EXTRA),
    ("inspect", inspect_command.inspect_cmd, inspect_command.HELP_END, None),
    ("script", script_command.script_cmd, script_command.HELP_END, None),
    ("batch", batch_command.batch_cmd, batch_command.HELP_END, EXTRA),
    ("whatif", whatif_command.whatif_cmd, whatif_command.HELP_END, EXTRA),
    ("compare", compare_command.compare_cmd, compare_command.HELP_END, EXTRA),
    ("ddp", ddp_command.ddp_cmd, ddp_command.HELP_END, None),
]
for _name, _function, _help_end, _settings in _COMMANDS:
    app.command(_name, cls=Command, epilog=_help_end, context_settings=_settings)(_function)


def run():  # console-script entry point: pipes, closed streams and Ctrl-C handled in streams.py
    from gradflow.cli.streams import run_safely

    startup.in_command()
    run_safely(lambda: app(prog_name="gradflow"))


startup.finish()
