"""What the commands share: option declarations (declared once), reading programs and values, errors and exit codes.

Imports no torch and no rich at module level: `--help` and early errors stay fast.
"""
from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gradflow.errors import ExitCode, GradflowError, ValueInputError
from gradflow.limits import (
    JSON_FULL_MAX,
    MAX_DEPTH,
    MAX_ELEMENTS,
    MAX_LENGTH,
    MAX_LINE,
    MAX_NODES,
    MAX_TOTAL_ELEMENTS,
)
from gradflow.studies.extras import EVAL_GRAPH_FORMATS

if TYPE_CHECKING:  # rich.console costs ~25 ms: imported only when something is printed through it
    from rich.console import Console

EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}

# ---- options shared by the commands -------------------------------------------------------
# Each option that takes a value names it with a metavar (Typer's default is a type, like <list[str]>).
# Options with fixed values list them in the metavar; the commands still check them (their own messages).
DTYPES = ("float32", "float64", "float16", "bfloat16")  # as gradflow.values.tensors.DTYPES (which imports torch)
DEVICES = ("cpu", "cuda", "mps")  # as gradflow.values.tensors.resolve_device


def choices(values) -> str:
    """The metavar of an option with fixed values: [a|b|c]."""
    return "[" + "|".join(str(v) for v in values) + "]"


def _limit_help() -> str:
    """Built from gradflow.limits, so the defaults it quotes cannot go stale."""
    return (f"Change a resource limit: length ({MAX_LENGTH:,} characters), depth ({MAX_DEPTH:,} levels), "
            f"nodes ({MAX_NODES:,}), elements ({MAX_ELEMENTS:,} per tensor), total ({MAX_TOTAL_ELEMENTS:,} "
            f"elements over all values), line ({MAX_LINE:,} bytes of a batch input line). Repeatable.")


ExprArg = Annotated[str | None, typer.Argument(
    help="The program, e.g. \"(x*y1 - detach(x*y2))^2\"; '-' reads it from stdin.", show_default=False,
    metavar="EXPR")]
FileOpt = Annotated[Path | None, typer.Option("--file", metavar="PATH", help="Read the program from this file.")]
WrtOpt = Annotated[str | None, typer.Option(
    "--wrt", metavar="NAMES", help="Leaves that require grad: 'a,b' or 'all'. Default: x if used, else every "
                                   "variable.")]
VarOpt = Annotated[list[str] | None, typer.Option(
    "--var", metavar="NAME=VALUE", help="A variable's value; needed when its name is an option's (--var json=1). "
                                        "Repeatable.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", metavar=choices(DTYPES), help="Floating-point type of the values.")]
DeviceOpt = Annotated[str, typer.Option("--device", metavar=choices(DEVICES), help="Where torch computes.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one strict JSON document instead of the table.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show Python tracebacks (for bug reports).")]
SeedOpt = Annotated[int, typer.Option("--seed", metavar="INTEGER",
                                      help="Seed for randn()/rand() values: same seed, same values.")]
FullOpt = Annotated[bool, typer.Option("--full", help=f"With --json: tensors over {JSON_FULL_MAX:,} elements in full, "
                                       "not summarised.")]
PlotOpt = Annotated[bool, typer.Option("--plot", help="Sweeps: draw L and dL/dx in the terminal; "
                                       "--plot FILE.png|svg|pdf writes a picture (needs gradflow[plot]).")]
CheckOpt = Annotated[bool, typer.Option("--check", help="Also compare autograd with finite differences (float64).")]
OrderOpt = Annotated[int, typer.Option("--order", metavar=choices((1, 2)),
                                       help="2: also show second derivatives (the Hessian).")]
GraphOpt = Annotated[str | None, typer.Option("--graph", metavar=choices(EVAL_GRAPH_FORMATS),
                                                 help="Also draw the autograd graph.")]
LimitOpt = Annotated[list[str] | None, typer.Option("--limit", metavar="NAME=N", help=_limit_help())]
FlowsOpt = Annotated[bool, typer.Option("--flows", help="Under the table, split each leaf's grad by use.")]
OutOpt = Annotated[Path | None, typer.Option("--output", "-o", metavar="PATH",
                                                help="Write to this file instead of stdout.")]


def consoles() -> tuple[Console, Console]:
    """stdout's and stderr's consoles: a sane width whatever COLUMNS says, control characters shown escaped
    (render/console.py). Every rich console of the package is made there."""
    from gradflow.render.console import new_console

    return new_console(), new_console(stderr=True)


def progress_bar(err: Console, streaming: bool):
    """The one progress bar (rich Progress) of the package: transient, on stderr, only when stderr is a real
    terminal. It never takes stdout over: rich's default would send what is printed to stdout (the --json
    records) through the stderr console, wrapped at its width and coloured, and never into the file stdout
    is. While records stream to stdout (`streaming`), it stays off if stdout is a terminal too: a record
    would land in the bar's line."""
    from rich.progress import Progress

    shown = err.is_terminal and sys.stderr.isatty() and not (streaming and sys.stdout.isatty())
    return Progress(console=err, transient=True, disable=not shown, redirect_stdout=False, redirect_stderr=False)


def refuse_binary_on_terminal(fmt: str | None, output: Path | None, option: str) -> None:
    """A PNG is bytes: on a terminal they print as garbage and can drive it. To a file, a pipe or -o: fine."""
    if fmt == "png" and output is None and sys.stdout.isatty():
        raise ValueInputError("usage", f"{option} png is binary data, which would garble the terminal",
                              hint="write it to a file (-o graph.png) or pipe it (| display), or use svg, "
                                   "which is text")


def fail(error: GradflowError, as_json: bool = False) -> typer.Exit:
    """Print an error the user can act on and return the Exit to raise."""
    from gradflow.cli.streams import cannot_write, output_failed, unread
    from gradflow.render.plain import print_error  # plain text: no rich on the early-error path

    code = int(error.exit_code)
    with unread():  # if nobody reads the message any more, the exit code still tells
        if as_json:
            from gradflow.analysis.explanation import error_document
            from gradflow.values.jsonable import dumps

            try:
                print(dumps(error_document(error)), flush=True)
            except OSError as exc:  # `--json > /dev/full`: say that too, then the error itself
                if not cannot_write(exc):
                    raise
                code = output_failed(exc)
        print_error(error)
    return typer.Exit(code)


def guarded(debug: bool, as_json: bool, body: Callable[[], int]):
    """Run a command body: package errors -> message + exit code; bugs -> exit 1."""
    try:
        code = body()
    except GradflowError as error:
        if debug:
            traceback.print_exc()
        raise fail(error, as_json) from None
    except typer.Exit:
        raise
    except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly
        from gradflow.cli.streams import stdout_gone

        raise typer.Exit(stdout_gone()) from None
    except Exception as exc:  # a bug: say so, briefly, unless --debug
        from gradflow.cli.streams import cannot_write, output_failed

        if cannot_write(exc):  # not a bug: stdout is on a full disk (or over a quota, a file-size limit)
            raise typer.Exit(output_failed(exc)) from None
        if debug:
            raise
        consoles()[1].print(f"internal error: {type(exc).__name__}: {exc}\n"
                            "This is a bug in gradflow; rerun with --debug and report the traceback.",
                            markup=False)
        raise typer.Exit(int(ExitCode.INTERNAL)) from None
    raise typer.Exit(code)


def _is_option(token: str | None) -> bool:
    return token is not None and re.fullmatch(r"--[A-Za-z]\w*(=.*)?", token, flags=re.S) is not None


def read_program(expr: str | None, file: Path | None, limits=None) -> str:
    """The program: EXPR, `--file PATH` or `-` (stdin); from a file or stdin, at most the `length` limit is read."""
    if expr is not None and file is not None:
        raise ValueInputError("usage", "give the program either as EXPR or with --file, not both")
    if file is not None or expr == "-":
        from gradflow.cli.streams import read_stdin, read_text
        from gradflow.limits import as_limits

        limit = as_limits(limits).length
        if file is None:
            return read_stdin(limit)
        try:
            with file.open("rb") as fh:
                return read_text(fh, limit, f"in --file {file}")
        except OSError as err:
            raise ValueInputError("usage", f"cannot read --file {file}: {err.strerror or err}") from None
    if expr is None:
        raise ValueInputError("usage", "no program given",
                              hint='gradflow eval "(x*y1 - detach(x*y2))^2" --x 1 --y1 2 --y2 7')
    if _is_option(expr):  # an option where EXPR should be
        raise ValueInputError("usage", f"the program must come first, before the values (got '{expr}')",
                              hint='gradflow eval "EXPR" --x 1 --y 2, or EXPR - to read the program from stdin')
    return expr


def option_names(ctx: typer.Context) -> set[str]:
    """The command's own long options (without --): variables cannot be given as --NAME then."""
    names = {o[2:] for p in ctx.command.params for o in getattr(p, "opts", []) if o.startswith("--")}
    return names | {"help"}


def check_shadowed(source: str, ctx: typer.Context, var: list[str] | None, limits=None):
    """A variable named like an option (json, wrt, ...) must come through --var NAME=VALUE."""
    from gradflow.language.compile import compile_program
    from gradflow.limits import as_limits

    given = {item.partition("=")[0].strip() for item in var or []}
    options = option_names(ctx)
    for name in compile_program(source, as_limits(limits)).inputs:
        if name in options and name not in given:
            raise ValueInputError("shadowed_name", f"the variable '{name}' has the name of the option --{name}, "
                                  f"so --{name} VALUE cannot set it",
                                  hint=f"give its value with --var {name}=VALUE")


def parse_values(extra: list[str], var: list[str] | None) -> dict[str, str]:
    """`--x 1 --y=2` leftovers and `--var NAME=VALUE` -> {name: text}."""
    values: dict[str, str] = {}
    tokens = list(extra)
    while tokens:
        tok = tokens.pop(0)
        if not tok.startswith("--") or len(tok) < 3:
            raise ValueInputError("usage", f"unexpected argument '{tok}'",
                                  hint="quote the whole program as one argument; give values as --NAME VALUE")
        name, eq, value = tok[2:].partition("=")
        if not eq:
            if not tokens:
                raise ValueInputError("missing_value", f"--{name} needs a value", hint=f"--{name} 1.5")
            value = tokens.pop(0)
        _once(values, name, f"--{name}")
        values[name] = value
    routes = {name: f"--{name}" for name in values}
    for item in var or []:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise ValueInputError("usage", f"--var takes NAME=VALUE, got '{item}'", hint="--var x=1.5")
        name = name.strip()
        _once(values, name, routes.get(name, f"--var {name}=..."), f"--var {name}=...")
        values[name] = value
    return values


def _once(values: dict[str, str], name: str, first: str, second: str | None = None) -> None:
    """A variable gets one value, whichever way it is given (--x 1, --x=1, --var x=1): never the last one silently."""
    if name in values:
        second = second or first
        how = f"{first} is given twice" if first == second else f"{name} is given twice ({first} and {second})"
        raise ValueInputError("usage", how, hint="give each variable one value")


def emit(result, as_json: bool, renderable: Callable[[], Any]):
    """A result as one strict JSON document (plain print, never rich) or as rich output."""
    if as_json:
        print(result.to_json(), flush=True)
    else:
        consoles()[0].print(renderable())
