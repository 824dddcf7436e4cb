"""How `--help` ends (examples, then exit codes), and the command class that prints it.

Imports no torch and no rich: `--help` stays fast.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from typer.core import TyperCommand

from gradflow.errors import ExitCode

MEANINGS = {
    ExitCode.OK: "done",
    ExitCode.INTERNAL: "a bug in gradflow: rerun with --debug and report it",
    ExitCode.INPUT: "bad input: the program, a value or an option",
    ExitCode.NO_GRADIENT: "no gradient: the output does not require grad",
    ExitCode.PARTIAL: "partial: some of the work failed, the rest is done",
    ExitCode.USER_CODE: "your code failed (inspect): it raised or exited",
    ExitCode.GATE: "a --fail-on class matched (inspect, ddp)",
    ExitCode.DISTRIBUTED: "a rank died, hung or timed out (ddp)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}


def help_end(examples: Iterable[str], codes: Iterable[ExitCode],
             meanings: Mapping[ExitCode, str] | None = None) -> str:
    """The "Examples:" and "Exit codes:" parts, as an epilog.

    A paragraph whose first line is \\b is printed as it is (click rewraps the others).
    An example that does not exit 0 says so in a comment: `# exit 3: ...`.
    """
    say = {**MEANINGS, **(meanings or {})}
    lines = ["\b", "Examples:", *(f"  {e}" for e in examples), "",
             "\b", "Exit codes:", *(f"  {int(c):<4} {say[c]}" for c in codes)]
    return "\n".join(lines)


class Command(TyperCommand):
    """Typer's command, with each argument shown by its metavar alone in --help.

    Typer 0.2x adds the type to an argument (`EXPR <str>`) even when it has a metavar.
    """

    def format_options(self, ctx, formatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                sections["Arguments"].append((param.metavar or record[0], record[1]))
            elif param.param_type_name == "option":
                sections["Options"].append(record)
        for title, rows in sections.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
