"""`gradflow compare`: several programs side by side on the same values, or one program's cut mechanisms."""
from __future__ import annotations

from typing import Annotated

import typer

from gradflow.cli import options
from gradflow.cli.common import check_shadowed, emit, guarded, parse_values, print_warnings, read_program, request
from gradflow.cli.help import help_end
from gradflow.errors import ExitCode, GradflowError, ValueInputError

ExprsArg = Annotated[list[str] | None, typer.Argument(
    help="Programs to compare (each quoted), then the values: --x 1 --y 2.", show_default=False, metavar="EXPR")]
ModesOpt = Annotated[bool, typer.Option(
    "--modes", help="Rewrite ONE program's cuts to detach, no_grad, inference_mode, no cut, requires_grad = false.")]
HELP_END = help_end([
    'gradflow compare "(x*y - x*z)^2" "(detach(x*y) - x*z)^2" --x 1 --y 2 --z 7',
    'gradflow compare "(x*y1 - detach(x*y2))^2" --modes --x 1 --y1 2 --y2 7',
    'gradflow compare "x*y" "detach(x)*y" --x 1 --y 2    # no grad for one: an answer, exit 0',
    'gradflow compare "x*y" "x*" --x 1 --y 2    # exit 4: one does not parse',
], [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.PARTIAL, ExitCode.INTERRUPTED],
    {ExitCode.OK: "every program ran (no gradient is an answer; with --modes, a failing mechanism is a finding)",
     ExitCode.INPUT: "bad input; or every program failed, the first with bad input",
     ExitCode.PARTIAL: "partial: some programs failed (each has an error row)"})


def split_programs(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Leading tokens are programs; from the first --NAME on, values (the rest of the command line)."""
    for i, tok in enumerate(tokens):
        if tok.startswith("--") and len(tok) > 2:
            return tokens[:i], tokens[i:]
    return list(tokens), []


def _check_program(program: str, ctx: typer.Context, var: list[str] | None):
    """Usage errors stop the command; a program that does not parse only gets its own error row."""
    read_program(program, None)
    try:
        check_shadowed(program, ctx, var)
    except GradflowError as err:
        if err.kind == "shadowed_name":
            raise


def compare_cmd(ctx: typer.Context, exprs: ExprsArg = None, modes: ModesOpt = False, wrt: options.WrtOpt = None,
                var: options.VarOpt = None, dtype: options.DtypeOpt = "float32", device: options.DeviceOpt = "cpu",
                json_: options.JsonOpt = False, debug: options.DebugOpt = False, strict: options.StrictOpt = False,
                summary: options.SummaryOpt = False, limit: options.LimitOpt = None):
    """Several programs side by side on the same values: output and each leaf's grad.

    With --modes, one program's cuts are rewritten to each mechanism. A program that gets no gradient is an
    answer, not a failure. A value no program uses is a warning (--strict: an error).
    """
    about = request(wrt, dtype, device)

    def body() -> int:
        from gradflow.limits import as_limits, using
        from gradflow.studies.compare import compare

        programs, rest = split_programs(list(exprs or []) + list(ctx.args))
        if not programs:
            where = "the programs must come first, before the values" if rest else "no program given"
            raise ValueInputError("usage", where, hint='gradflow compare "EXPR1" "EXPR2" --x 1')
        if len(programs) == 1:
            about["source"] = programs[0]
        for p in programs:
            _check_program(p, ctx, var)
        with using(as_limits(limit)):
            result = compare(programs, modes=modes, wrt=wrt, dtype=dtype, device=device,
                             values=parse_values(rest, var, ctx), strict=strict)
        from gradflow.render.whatif import compare_view

        with using(as_limits(limit)):
            emit(result, json_, lambda: compare_view(result), summary)
        print_warnings(result)
        return result.exit_code

    guarded(debug, json_, body, about)
