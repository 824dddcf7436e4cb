"""`gradflow eval ... --x START:STOP:COUNT`: sweeps as a table, JSON Lines or plots.

Called from `eval` (eval_command.py) when a value is a sweep or --plot is given. Torch is
imported only when the sweep runs, rich only when something is printed (early errors stay light).
"""
from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
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
    summary: bool  # --summary: JSON tensors over JSON_FULL_MAX elements as summary objects
    plot: bool
    plot_file: str | None
    strict: bool = False
    brief: bool = False  # --brief: every point's evaluation brief (its JSON without nodes, edges, contributions)


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
    """Run the sweep and print it as it goes (table rows and JSON lines stream; plots come at the end);
    returns the exit code."""
    picture = None
    if req.plot_file is not None:
        from gradflow.render.plot import check_picture_path

        picture = check_picture_path(req.plot_file)  # before any work
    from gradflow.studies.sweeps import check_sweep

    graph, _, leaves = check_sweep(req.source, var, req.values, req.wrt, rng, req.dtype, req.seed,
                                   req.strict)  # early errors
    tally = _Tally()
    table = None if req.json_ or req.plot else _TableStream(
        f"L = {graph.source.strip()}, sweeping {var} ({rng.count} points)",
        [var, "L", *(f"dL/d{leaf}" for leaf in leaves)], rng.points())
    result = _evaluate(req, var, rng, tally, table)  # a reader gone (`| head`): guarded() ends quietly
    if req.plot:
        _plots(result, picture)
    return tally.finish()


def _evaluate(req: SweepRequest, var: str, rng: SweepRange, tally: _Tally, table: _TableStream | None):
    """Every point, each printed as soon as it is computed. Only a plot keeps the points' rows (it needs them
    all); otherwise memory stays flat however many points there are."""
    from gradflow.studies.sweeps import record, run_sweep
    from gradflow.values.jsonable import document, dumps
    from gradflow.values.text import format_number, format_tensor

    point_values, first = rng.points(), []
    values = {k: v for k, v in req.values.items() if k != var}
    err = consoles()[1]
    with progress_bar(err, streaming=not req.plot) as bar:
        task = bar.add_task(f"sweeping {var}", total=rng.count)

        def on_point(i: int, point):
            tally.add(point)
            if i == 0:
                first.append(point)  # its cut lines go under the table
            if req.json_:
                with document(req.summary):
                    text = dumps(record(var, i, point_values[i], point))
                _write_line(text)
            elif table is not None:
                table.add([format_number(point_values[i]), format_tensor(point.output.value),
                           *(format_tensor(point.grads[w]) for w in point.grads)])
            bar.update(task, completed=i + 1)

        result = run_sweep(req.source, var, rng, values, wrt=req.wrt, dtype=req.dtype, device=req.device,
                           seed=req.seed, on_point=on_point, rows=req.plot, strict=req.strict,
                           brief=req.brief)
    if table is not None:
        table.close(first[0] if first else None)
    return result


class _TableStream:
    """The sweep table, a row at a time: the swept values (known before any point) set their
    column's width, the rows of the first BLOCK points (or of BLOCK_SECONDS from the first) the others'; then
    each row goes out as soon as its point is computed (`| head` returns at once, memory stays flat). A later
    cell wider than its column widens only its own row. The layout is the one rich gave the whole table
    (box.SIMPLE_HEAD, right-justified), without trailing spaces."""

    BLOCK, BLOCK_SECONDS = 50, 0.2

    def __init__(self, title: str, heads: list[str], points: list[float]):
        from rich.text import Text

        from gradflow.values.text import format_number

        consoles()[0].print(Text(title))  # through rich: control characters in the program shown escaped
        self.heads = heads
        self.widths: list[int] | None = None
        self.pending: list[list[str]] = []
        self.first_width = max(len(format_number(x)) for x in points)
        self.started = 0.0

    def add(self, cells: list[str]) -> None:
        if self.widths is not None:
            _write_line(self._line(cells))
            return
        self.pending.append(cells)
        self.started = self.started or time.monotonic()
        if len(self.pending) >= self.BLOCK or time.monotonic() - self.started > self.BLOCK_SECONDS:
            self._open()

    def _open(self) -> None:
        widths = [max(len(c) for c in column) for column in zip(self.heads, *self.pending)]
        widths[0] = max(widths[0], self.first_width)
        self.widths = widths
        rule = " " + "─" * (sum(widths) + 3 * (len(widths) - 1))
        _write_line("\n".join(["", self._line(self.heads), rule, *map(self._line, self.pending)]))
        self.pending = []

    def _line(self, cells: list[str]) -> str:
        return " " + "   ".join(c.rjust(w) for c, w in zip(cells, self.widths or []))

    def close(self, first) -> None:
        """The rows still held back (a short sweep), then the first point's cut lines."""
        from gradflow.render.node_table import cut_lines

        if self.widths is None:
            self._open()
        _write_line("")
        if first is not None:
            consoles()[0].print(cut_lines(first))


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


class _Tally:
    """What the end of a sweep reports (its warnings once each, the failed points), counted as the points go."""

    def __init__(self):
        self.count, self.failed, self.error, self.warnings = 0, 0, None, {}

    def add(self, point) -> None:
        self.count += 1
        for w in point.warnings:
            self.warnings.setdefault(w.message)
        if point.error is not None:
            self.failed += 1
            self.error = self.error or point.error

    def finish(self) -> int:
        from rich.text import Text

        from gradflow.render.node_table import print_error

        err = consoles()[1]
        for msg in self.warnings:
            err.print(Text(f"warning: {msg}", style="yellow"), soft_wrap=True)
        if self.error is None:
            return 0
        print_error(self.error, err)
        if self.failed < self.count:
            err.print(Text(f"({self.failed} of {self.count} points failed)"))
        return int(self.error.exit_code)


def _write_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()  # each line as it comes

