"""What the commands share: reading programs and values, errors and exit codes (their options: options.py).

Imports no torch and no rich at module level: `--help` and early errors stay fast.
"""
from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gradflow.errors import ExitCode, GradflowError, ValueInputError

if TYPE_CHECKING:  # rich.console is slow to import: imported only when something is printed through it
    from rich.console import Console

def write_html(path: Path, title: str, sections: list) -> None:
    """--html: the page (render/html_report.py), written whole or not at all (cli/files.py)."""
    from gradflow.cli.files import write_file
    from gradflow.render.html_report import page

    write_file(path, page(title, sections))


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


def request(wrt: str | None = None, dtype: str | None = None, device: str | None = None, limits=None) -> dict:
    """What a command was asked, for its error document (`--json`): the body adds "source" once the program is
    read, so even a program that does not parse is named there."""
    return {"source": None, "wrt": wrt, "dtype": dtype, "device": device, "limits": limits}


def _error_document(error: GradflowError, about: dict | None) -> dict:
    from gradflow.analysis.explanation import error_document

    if about is None:
        return error_document(error)
    from gradflow.engine.prepare import asked_leaves
    from gradflow.limits import as_limits

    try:
        limits = as_limits(about.get("limits"))
    except GradflowError:  # the bad --limit is the error being reported
        limits = None
    source = about.get("source")
    return error_document(error, source, asked_leaves(source, about.get("wrt"), limits), about.get("dtype"),
                          about.get("device"), about.get("brief", False))


def fail(error: GradflowError, as_json: bool = False, about: dict | None = None) -> typer.Exit:
    """Print an error the user can act on and return the Exit to raise (`about`: see request())."""
    from gradflow.cli.streams import cannot_write, output_failed, unread
    from gradflow.render.plain import print_error  # plain text: no rich on the early-error path

    code = int(error.exit_code)
    with unread():  # if nobody reads the message any more, the exit code still tells
        if as_json:
            from gradflow.values.jsonable import dumps

            try:
                print(dumps(_error_document(error, about)), flush=True)
            except OSError as exc:  # `--json > /dev/full`: say that too, then the error itself
                if not cannot_write(exc):
                    raise
                code = output_failed(exc)
        print_error(error)
    return typer.Exit(code)


def guarded(debug: bool, as_json: bool, body: Callable[[], int], about: dict | None = None):
    """Run a command body: package errors -> message + exit code (`about`: the request, for --json's error
    document; see request()); bugs -> exit 1."""
    try:
        code = body()
    except GradflowError as error:
        if debug:
            traceback.print_exc()
        raise fail(error, as_json, about) from None
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


def program_and_values(expr: str | None, file: Path | None, args: list[str], limits=None,
                       moved: bool = False) -> tuple[str, list[str]]:
    """The program (read_program) and the values' tokens. With --file, Typer binds the first value to EXPR
    (`--file p.txt --x 1`): it goes back to the values (`moved`: whatever it looks like)."""
    if file is not None and expr is not None and (moved or _is_option(expr)):
        return read_program(None, file, limits), [expr, *args]
    return read_program(expr, file, limits), list(args)


def option_owners(ctx: typer.Context) -> dict[str, list[str]]:
    """Every long option (without --) of every gradflow command, and the commands that have it: one rule for
    all commands, so no name is silently a variable in one command and an option in another (`--seed 3`).
    Read from the app itself (cli/app.option_table, handed down in ctx.obj); without it, this command's own."""
    table = ctx.obj() if callable(ctx.obj) else {}
    owners = {"help": [], "version": [], **{name: list(commands) for name, commands in table.items()}}
    here = ctx.info_name or ctx.command.name or ""
    for name in long_options(ctx.command):
        if here not in owners.setdefault(name, []):
            owners[name].append(here)
    return owners


def long_options(command) -> list[str]:
    """A click command's long options, without the --."""
    return [opt[2:] for param in command.params for opt in getattr(param, "opts", []) if opt.startswith("--")]


def _elsewhere(name: str, owners: dict[str, list[str]], ctx: typer.Context) -> str:
    """'' when this command has the option --NAME, else 'of gradflow batch' (the commands that have it)."""
    here = ctx.info_name or ctx.command.name
    others = sorted(set(owners[name]) - {here})
    return "" if here in owners[name] or not others else "of " + " and ".join(f"gradflow {c}" for c in others)


def check_shadowed(source: str, ctx: typer.Context, var: list[str] | None, limits=None):
    """A variable named like an option of any command (json, wrt, seed, order, ...) must come through
    --var NAME=VALUE."""
    from gradflow.language.compile import compile_program
    from gradflow.limits import as_limits

    inputs = compile_program(source, as_limits(limits)).inputs  # a syntax error stops here
    given = {item.partition("=")[0].strip() for item in var or []}
    owners = option_owners(ctx)
    for name in inputs:
        if name in owners and name not in given:
            where = _elsewhere(name, owners, ctx)
            raise ValueInputError("shadowed_name", f"the variable '{name}' has the name of the option --{name}"
                                  f"{f' ({where})' if where else ''}, so --{name} VALUE cannot set it",
                                  hint=f"give its value with --var {name}=VALUE")


def parse_values(extra: list[str], var: list[str] | None, ctx: typer.Context) -> dict[str, str]:
    """`--x 1 --y=2` leftovers and `--var NAME=VALUE` -> {name: text}. A --NAME that is an option of any
    gradflow command is never taken as a variable (the one place that rule lives; check_shadowed says it
    for the program's variables)."""
    values: dict[str, str] = {}
    tokens = list(extra)
    owners = option_owners(ctx)
    while tokens:
        tok = tokens.pop(0)
        if not tok.startswith("--") or len(tok) < 3:
            raise ValueInputError("usage", f"unexpected argument '{tok}'",
                                  hint="quote the whole program as one argument; give values as --NAME VALUE")
        name, eq, value = tok[2:].partition("=")
        if name in owners:
            where = _elsewhere(name, owners, ctx)
            which = f"an option {where}, not of gradflow {ctx.info_name}" if where else "an option"
            raise ValueInputError("shadowed_name", f"--{name} is {which}; an option's name is never taken as a "
                                  "variable's value", hint=f"a variable named {name} takes its value with "
                                                           f"--var {name}=VALUE")
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


def report_error(error: GradflowError, document: dict | None = None) -> int:
    """An error that is the command's outcome: `document` (its --json form) on stdout, the message on stderr
    (rich, as the tables around it); returns the exit code."""
    from gradflow.render.node_table import print_error

    if document is not None:
        from gradflow.values.jsonable import dumps

        print(dumps(document), flush=True)
    print_error(error, consoles()[1])
    return int(error.exit_code)


def print_warnings(result) -> None:
    """A result's warnings to stderr, as eval prints them (--json also has them in `warnings`)."""
    if result.warnings:
        from gradflow.render.node_table import print_warnings as show

        show(result, consoles()[1])


def summary_mode(full: bool, summary: bool) -> bool:
    """--summary (tensors over JSON_FULL_MAX elements as summary objects) or not; --full is the default."""
    if full and summary:
        raise ValueInputError("usage", "--full and --summary contradict each other",
                              hint="tensors are in full by default: give --summary for summary objects")
    return summary


def emit(result, as_json: bool, renderable: Callable[[], Any], summary: bool = False):
    """A result as one strict JSON document (plain print, never rich; `summary`: --summary) or as rich output."""
    if as_json:
        from gradflow.values.jsonable import document

        with document(summary):
            text = result.to_json()
        print(text, flush=True)
    else:
        consoles()[0].print(renderable())
