"""The `gradflow` command: the Typer app, and every command registered from its own module.

Imports no torch at module level: `--help`, `ops` and errors found before
evaluation stay fast. Results go to stdout, diagnostics to stderr.
"""
from __future__ import annotations

import functools
import importlib
import sys
from typing import Annotated

import typer

from gradflow.cli import options, startup
from gradflow.cli.common import long_options
from gradflow.cli.help import Command, help_end
from gradflow.errors import ExitCode

HELP_END = help_end([
    'gradflow eval "(x*y1 - detach(x*y2))^2" --x 1 --y1 2 --y2 7',
    'gradflow whatif "(x*y1 - x*y2)^2" --x 1 --y1 2 --y2 7',
    'gradflow ops',
    'gradflow eval --help',
], list(ExitCode), {ExitCode.NO_GRADIENT: "no gradient (eval, inspect, script)",
                    ExitCode.PARTIAL: "partial: batch lines or compare programs failed, or inspect could not "
                                      "trace some parameters"})

def _version(value: bool):
    if value:
        from importlib.metadata import version

        typer.echo(f"gradflow {version('gradflow')}")
        raise typer.Exit()


def main(ctx: typer.Context, version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                                   help="Show the version and exit.")] = False):
    """Show how gradients flow through a PyTorch computation.

    Values are given as --NAME VALUE for each variable (--x 1, --x=-2, --w "[1,2]").
    Each command's --help lists its options, examples and exit codes.
    """
    ctx.obj = option_table  # what a command asks for every command's options (cli/common.option_owners)


# One module per command, gradflow/cli/NAME_command.py with a function NAME_cmd and a HELP_END epilog;
# `gradflow --help` lists them in this order. The last field is the command's click context settings.
_COMMANDS: list[tuple[str, dict | None]] = [
    ("eval", options.EXTRA),
    ("ops", None),
    ("graph", options.EXTRA),
    ("inspect", None),
    ("script", None),
    ("batch", options.EXTRA),
    ("whatif", options.EXTRA),
    ("compare", options.EXTRA),
    ("ddp", None),
]
NAMES = [name for name, _ in _COMMANDS]


def make_app(only: str | None = None) -> typer.Typer:
    """The Typer app with every command, or with the one command `only` (what a run of that command needs).

    A run builds only the command it runs (importing its module, Typer reading its signature): a syntax error
    or `gradflow eval --help` never pays for the other eight.
    """
    application = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                              epilog=HELP_END, help="Show how gradients flow through a PyTorch computation.")
    application.callback()(main)
    for name, settings in _COMMANDS:
        if only is None or name == only:
            module = importlib.import_module(f"gradflow.cli.{name}_command")
            application.command(name, cls=Command, epilog=module.HELP_END,
                                 context_settings=settings)(getattr(module, f"{name}_cmd"))
    return application


@functools.cache
def option_table() -> dict[str, tuple[str, ...]]:
    """Every long option (without --) of every command, and the commands that have it: read from the app with
    every command, built when first asked (a run builds only its own command, and asks only once the program
    has parsed, so a syntax error never builds the others)."""
    root = typer.main.get_command(make_app())
    owners: dict[str, list[str]] = {}
    for cname, command in getattr(root, "commands", {}).items():
        for name in long_options(command):
            if cname not in owners.setdefault(name, []):
                owners[name].append(cname)
    return {name: tuple(sorted(cmds)) for name, cmds in sorted(owners.items())}


def __getattr__(name: str):  # PEP 562: `from gradflow.cli.app import app` (tests, docs) gets every command
    if name == "app":
        globals()["app"] = application = make_app()
        return application
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


WATCHED = ("inspect", "script")  # they run the user's code in a child the command watches (cli/work_process.py)


def run():  # console-script entry point: pipes, closed streams and Ctrl-C handled in streams.py
    from gradflow.cli.streams import run_safely

    command = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in NAMES else None  # else: help, --version, a typo
    application = make_app(command)
    startup.before_run()
    if command in WATCHED:
        from gradflow.cli.work_process import run_watched

        run_watched(lambda: run_safely(lambda: application(prog_name="gradflow")), _death_report(command))
    run_safely(lambda: application(prog_name="gradflow"))


def _death_report(command: str):
    """How `command` reports that the user's code ended its work process (with --json: its error document)."""
    args = sys.argv[2:]
    own = args[:args.index("--")] if "--" in args else args  # after --: the script's arguments

    def report(error) -> int:
        from gradflow.cli.common import report_error
        from gradflow.cli.streams import unread

        module = importlib.import_module(f"gradflow.cli.{command}_command")
        with unread():
            return report_error(error, module.error_document(error) if "--json" in own else None)
        return int(error.exit_code)

    return report
