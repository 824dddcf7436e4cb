"""`gradflow eval ... --x START:STOP:COUNT`: sweeps as a table, JSON Lines or plots.

Called from `eval` (eval_command.py) when a value is a sweep or --plot is given. Torch is
imported only when the sweep runs, rich only when something is printed (early errors stay light).
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rich.console import Group

    from gradflow.values.specs import SweepRange

from gradflow.cli.common import consoles, progress_bar
from gradflow.errors import ValueInputError


class SweepRequest(NamedTuple):
    source: str
    values: dict[str, str]
    wrt: str | None
    dtype: str
    device: str
    seed: int
    json_: bool
    full: bool
    plot: bool
    plot_file: str | None
    strict: bool = False


def split_plot_file(args: list[str], plot: bool) -> tuple[list[str], str | None]:
    """With --plot, a bare FILE among the leftovers (not a --NAME's value) is the picture to write."""
    if not plot:
        return list(args), None
    rest, file, i = [], None, 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("--") and "=" not in tok and i + 1 < len(args):
            rest += args[i:i + 2]
            i += 2
            continue
        if not tok.startswith("--") and file is None:
            file = tok
        else:
            rest.append(tok)
        i += 1
    return rest, file


def find_sweep(values: dict[str, str], plot: bool, plot_to_stdout_json: bool = False, extras: bool = False):
    """The one swept variable and its range, if any. Errors: two swept variables; --plot without a
    sweep; a terminal plot mixed into --json output; --check/--order/--graph (`extras`) with a sweep."""
    swept = []
    if any(":" in text for text in values.values()):  # only then load the value-spec parser
        from gradflow.values.specs import parse_sweep

        swept = [(name, r) for name, text in values.items() if (r := parse_sweep(name, text)) is not None]
    if len(swept) > 1:
        names = ", ".join(f"--{n} {values[n]}" for n, _ in swept)
        raise ValueInputError("usage", f"only one variable can be swept at a time (got {names})",
                              hint="give the others single values")
    if plot and not swept:
        raise ValueInputError("usage", "--plot draws a sweep, but no value is a sweep START:STOP:COUNT",
                              hint='gradflow eval "x^2" --x=-2:2:41 --plot')
    if swept and extras:
        raise ValueInputError("usage", "--check, --order 2 and --graph look at one point, not at a sweep",
                              hint=f"give --{swept[0][0]} one value for those, or drop them to sweep")
    if plot and plot_to_stdout_json:
        raise ValueInputError("usage", "--json and a terminal --plot would both write to stdout",
                              hint="use --plot FILE.png with --json, or drop --json")
    return swept[0] if swept else None


def run(req: SweepRequest, var: str, rng: SweepRange) -> int:
    """Run the sweep and print it; returns the exit code."""
    picture = None
    if req.plot_file is not None:
        from gradflow.render.plot import check_picture_path

        picture = check_picture_path(req.plot_file)  # before any work
    from gradflow.studies.sweeps import check_sweep

    check_sweep(req.source, var, req.values, req.wrt, rng, req.dtype, req.seed, req.strict)  # early errors: light
    try:
        result, first = _evaluate(req, var, rng)
        if not req.json_ and not req.plot:
            consoles()[0].print(sweep_table(result, first))
        if req.plot:
            _plots(result, picture)
    except (_PipeClosed, BrokenPipeError):  # `| head`: stop quietly
        _quiet_stdout()
        return 0
    return _finish(result)


def _evaluate(req: SweepRequest, var: str, rng: SweepRange):
    from gradflow.studies.sweeps import record, run_sweep
    from gradflow.values.jsonable import dumps

    point_values, first = rng.points(), []
    values = {k: v for k, v in req.values.items() if k != var}
    err = consoles()[1]
    with progress_bar(err, streaming=req.json_) as bar:
        task = bar.add_task(f"sweeping {var}", total=rng.count)

        def on_point(i: int, point):
            if i == 0:
                first.append(point)  # its cut lines go under the table
            if req.json_:  # stream: each point's line goes out as soon as it is computed
                _write_line(dumps(record(var, i, point_values[i], point, req.full)))
            bar.update(task, completed=i + 1)

        result = run_sweep(req.source, var, rng, values, wrt=req.wrt, dtype=req.dtype, device=req.device,
                           seed=req.seed, on_point=on_point, strict=req.strict)
    return result, (first or [None])[0]


def sweep_table(result, first=None) -> Group:
    """L and the grads at every point; `first`: the first point's Explanation (for its cut lines)."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from gradflow.render.table import cut_lines
    from gradflow.values.text import format_number, format_tensor

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in [result.var, "L", *(f"dL/d{leaf}" for leaf in result.wrt)]:
        table.add_column(col, justify="right")
    for r in result.rows:
        grads = (format_tensor(r.grads[w]) for w in result.wrt)
        table.add_row(format_number(r.value), format_tensor(r.output), *grads)
    title = Text(f"L = {result.source.strip()}, sweeping {result.var} ({len(result.values)} points)")
    return Group(title, table, cut_lines(first) if first is not None else Text())


def _plots(result, picture) -> None:
    from rich.text import Text

    from gradflow.render import plot

    out, err = consoles()
    all_series = plot.series(result)
    for s in all_series:
        note = plot.dropped_note(s, len(result.values))
        if note:
            err.print(Text(f"note: {note}", style="yellow"))
    if picture is not None:
        drawn = [s for s in all_series if s.ys]
        if not drawn:  # matplotlib cannot make a figure of no plots
            err.print(Text(f"note: nothing to draw, so {picture} was not written", style="yellow"), soft_wrap=True)
            return
        from gradflow.cli.files import write_file

        write_file(picture, plot.picture(result, drawn, picture))
        err.print(Text(f"wrote {picture}"), soft_wrap=True)
        return
    for s in all_series:
        if s.ys:
            _write_line(plot.terminal(s, result.var, color=out.is_terminal and not out.no_color))


def _finish(result) -> int:
    from rich.text import Text

    from gradflow.render.table import print_error

    err = consoles()[1]
    for msg in dict.fromkeys(m for r in result.rows for m in r.warnings):
        err.print(Text(f"warning: {msg}", style="yellow"), soft_wrap=True)
    failed = [r for r in result.rows if r.error is not None]
    if not failed:
        return 0
    print_error(failed[0].error, err)
    if len(failed) < len(result.rows):
        err.print(Text(f"({len(failed)} of {len(result.rows)} points failed)"))
    return int(failed[0].error.exit_code)


class _PipeClosed(Exception):
    """stdout's reader went away (`| head -1`): stop sweeping, exit quietly."""


def _write_line(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise _PipeClosed from None


def _quiet_stdout() -> None:
    """Send what is still buffered for a closed stdout to devnull (Python docs, "Note on SIGPIPE")."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (e.g. captured in tests)
        pass
