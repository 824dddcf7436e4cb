"""The `gradflow` command: a thin Typer layer over the library.

Imports no torch at module level: `--help`, `ops` and errors found before
evaluation stay fast. Results go to stdout, diagnostics to stderr.
"""
from __future__ import annotations

import gc

_GC_ON = gc.isenabled()
gc.disable()  # start-up builds only long-lived objects (Typer, click): no cyclic-GC passes over them (~5 ms)

import re  # noqa: E402
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Optional

import typer

from gradflow.errors import ExitCode, GradflowError, ValueInputError

if TYPE_CHECKING:  # rich.console costs ~25 ms: imported only when something is printed through it
    from rich.console import Console

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  help="Show how gradients flow through a PyTorch computation.")

EXTRA = {"allow_extra_args": True, "ignore_unknown_options": True}

# ---- options shared by the commands (declared once) -----------------------------------
ExprArg = Annotated[Optional[str], typer.Argument(
    help="The program, e.g. \"(x*y1 - detach(x*y2))^2\"; '-' reads it from stdin.", show_default=False)]
FileOpt = Annotated[Optional[Path], typer.Option("--file", help="Read the program from this file.")]
WrtOpt = Annotated[Optional[str], typer.Option(
    "--wrt", help="Leaves that require grad: 'a,b' or 'all'. Default: x if used, else every variable.")]
VarOpt = Annotated[Optional[list[str]], typer.Option(
    "--var", help="A value as NAME=VALUE (for names that clash with options). Repeatable.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="float32 or float64.")]
DeviceOpt = Annotated[str, typer.Option("--device", help="cpu, cuda or mps.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one strict JSON document instead of the table.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show Python tracebacks (for bug reports).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for randn()/rand() values: same seed, same values.")]
FullOpt = Annotated[bool, typer.Option("--full", help="With --json: tensors over 1000 elements in full, "
                                       "not summarised.")]
PlotOpt = Annotated[bool, typer.Option("--plot", help="Sweeps: draw L and dL/dx in the terminal; "
                                       "--plot FILE.png|svg|pdf writes a picture (needs gradflow[plot]).")]
CheckOpt = Annotated[bool, typer.Option("--check", help="Also compare autograd with finite differences (float64).")]
OrderOpt = Annotated[int, typer.Option("--order", help="2: also show second derivatives (the Hessian).")]
GraphOpt = Annotated[Optional[str], typer.Option("--graph", help="Also draw the autograd graph: tree, dot, mermaid.")]
LimitOpt = Annotated[Optional[list[str]], typer.Option(
    "--limit", help="Change a resource limit, NAME=N: length (10000 chars), depth (500), nodes (2000), "
                    "elements (1e6 per tensor), total (1e7). Repeatable.")]
FlowsOpt = Annotated[bool, typer.Option("--flows", help="Under the table, split each leaf's grad by use.")]


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


def consoles() -> tuple[Console, Console]:
    from rich.console import Console

    return Console(), Console(stderr=True)


def fail(error: GradflowError, as_json: bool = False) -> typer.Exit:
    """Print an error the user can act on and return the Exit to raise."""
    from gradflow.render.plain import print_error  # plain text: no rich on the early-error path
    from gradflow.cli.streams import unread

    with unread():  # if nobody reads the message any more, the exit code still tells
        if as_json:
            from gradflow.analysis.explanation import dumps, error_document

            print(dumps(error_document(error)), flush=True)
        print_error(error)
    return typer.Exit(int(error.exit_code))


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
        if debug:
            raise
        consoles()[1].print(f"internal error: {type(exc).__name__}: {exc}\n"
                            "This is a bug in gradflow; rerun with --debug and report the traceback.",
                            markup=False)
        raise typer.Exit(int(ExitCode.INTERNAL)) from None
    raise typer.Exit(code)


def _is_option(token: str | None) -> bool:
    return token is not None and re.fullmatch(r"--[A-Za-z]\w*(=.*)?", token, flags=re.S) is not None


def read_program(expr: str | None, file: Path | None) -> str:
    if expr is not None and file is not None:
        raise ValueInputError("usage", "give the program either as EXPR or with --file, not both")
    if file is not None:
        try:
            return file.read_text()
        except (OSError, UnicodeDecodeError) as err:
            why = getattr(err, "strerror", None) or "not UTF-8 text"
            raise ValueInputError("usage", f"cannot read --file {file}: {why}") from None
    if expr == "-":
        from gradflow.cli.streams import read_stdin

        return read_stdin()
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
    from gradflow.engine.explain import compile_program
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
        if name in values:
            raise ValueInputError("usage", f"--{name} is given twice", hint="give each variable one value")
        values[name] = value
    for item in var or []:
        name, eq, value = item.partition("=")
        if not eq or not name:
            raise ValueInputError("usage", f"--var takes NAME=VALUE, got '{item}'", hint="--var x=1.5")
        values[name.strip()] = value
    return values


@app.command("eval", context_settings=EXTRA)
def eval_cmd(ctx: typer.Context, expr: ExprArg = None, file: FileOpt = None, wrt: WrtOpt = None,
             var: VarOpt = None, dtype: DtypeOpt = "float32", device: DeviceOpt = "cpu",
             json_: JsonOpt = False, debug: DebugOpt = False, check: CheckOpt = False, order: OrderOpt = 1,
             graph: GraphOpt = None, limit: LimitOpt = None, seed: SeedOpt = 0, full: FullOpt = False,
             plot: PlotOpt = False, flows: FlowsOpt = False):
    """Evaluate a program, run backward and show every node's value and gradient.

    Give each variable's value as --NAME VALUE: a number or a JSON list (--x 1, --x=-2, --w "[1,2]").

    Example: gradflow eval "(x*y1 - detach(x*y2))^2" --x 1 --y1 2 --y2 7

    Sweep one variable with --x START:STOP:COUNT (e.g. --x=-2:2:41); tensor values: --x "randn(3,4)", --x @x.npy.
    """
    def body() -> int:
        from gradflow.engine.explain import explain
        from gradflow.cli.sweep_output import SweepRequest, find_sweep, run, split_plot_file

        moved = file and expr is not None and (_is_option(expr) or plot)  # --plot FILE.png lands in EXPR too
        program, rest = (None, [expr, *ctx.args]) if moved else (expr, ctx.args)
        source = read_program(program, file)  # with --file, the first value lands in EXPR: put it back
        check_shadowed(source, ctx, var, limit)
        args, plot_file = split_plot_file(rest, plot)
        values = parse_values(args, var)
        swept = find_sweep(values, plot, json_ and plot_file is None, check or order != 1 or graph is not None)
        if swept:
            return run(SweepRequest(source, values, wrt, dtype, device, seed, json_, full, plot, plot_file), *swept)
        result = explain(source, wrt=wrt, dtype=dtype, device=device, seed=seed, values=values, limits=limit)
        from gradflow.studies.extras import Extras
        from gradflow.limits import as_limits, using
        from gradflow.values.specs import pin_values

        with using(as_limits(limit)):  # --check/--order 2/--graph re-run the program within the same limits
            extra = Extras.compute(result, pin_values(result, values), check=check, order=order, graph=graph)
        return show(result, extra, json_, full, flows)

    guarded(debug, json_, body)


def show(result, extra, as_json: bool, full: bool, flows: bool) -> int:
    """Print an evaluation (JSON, or the table with --flows and the extras) and return the exit code."""
    if as_json:
        from gradflow.analysis.explanation import dumps

        print(dumps(extra.add_to(result.to_dict(full))), flush=True)
        from gradflow.render.table import print_warnings

        print_warnings(result, consoles()[1])  # stdout stays pure JSON; warnings are also in it
    else:
        from gradflow.render.table import print_explanation

        print_explanation(result, *consoles())
        if flows:
            from gradflow.render.flows import print_flows

            print_flows(result, consoles()[0])
        extra.print(*consoles())
    if result.error is not None:  # exit 3: the table / JSON is out, the reason goes to stderr
        from gradflow.render.table import print_error

        print_error(result.error, consoles()[1])
        return int(result.error.exit_code)
    return 0


@app.command("ops")
def ops_cmd(json_: JsonOpt = False):
    """List every operation and function the language knows."""
    from gradflow.language.ops import OPS

    if json_:
        from gradflow.analysis.explanation import dumps

        print(dumps([{"name": o.name, "symbol": o.symbol, "syntax": _syntax(o), "arity": o.arity, "kind": o.kind,
                      "doc": o.doc}
                     for o in OPS.values()]))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table("name", "syntax", "args", "kind", "what it does")
    for o in OPS.values():
        table.add_row(o.name, Text(_syntax(o)), o.arity, o.kind, Text(o.doc))
    consoles()[0].print(table)


def _syntax(o) -> str:
    """How a program writes the op: a * b, -a, f(a), f(a, b)."""
    calls = [f"{o.name}({', '.join('ab'[:n])})" for n in range(o.min_args, o.max_args + 1)]
    if o.kind == "operator":
        return f"a {o.symbol} b" if o.min_args == 2 else f"{o.symbol}a"
    return " or ".join(([f"a {o.symbol} b"] if o.symbol else []) + calls)


def run():  # console-script entry point: pipes, closed streams and Ctrl-C handled in streams.py
    from gradflow.cli.streams import run_safely

    run_safely(lambda: app(prog_name="gradflow"))


from gradflow.cli import graph_command as cli_graph  # noqa: E402,F401
from gradflow.cli import inspect_command as cli_inspect  # noqa: E402,F401
from gradflow.cli import batch_command as cli_batch  # noqa: E402,F401
from gradflow.cli import why_commands as cli_why  # noqa: E402,F401
from gradflow.cli.startup import install as _fast_typer  # noqa: E402

_fast_typer()
gc.freeze()  # what start-up built lives as long as the process: later GC passes skip it
if _GC_ON:
    gc.enable()
