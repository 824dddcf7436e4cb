"""`gradflow batch`: many programs, JSON Lines out (the work is gradflow.batch's)."""
from __future__ import annotations

import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, BinaryIO

import typer

from gradflow.batch.records import dumps_record
from gradflow.cli import options
from gradflow.cli.common import consoles, guarded, option_owners, parse_values, progress_bar, summary_mode
from gradflow.cli.help import help_end
from gradflow.cli.startup import collect_young, pause_collector, resume_collector
from gradflow.errors import ExitCode, GradflowError, ValueInputError, counts_as_failure

if TYPE_CHECKING:
    from gradflow.batch.records import Out
    from gradflow.batch.run import DefaultsUse

InputArg = Annotated[str | None, typer.Argument(
    help="A JSON Lines file, or '-' (the default) for stdin.", show_default=False, metavar="FILE")]
TextOpt = Annotated[bool, typer.Option(
    "--text", help="Each line is a plain program; values come from the command line (--x 1).")]
JobsOpt = Annotated[int | None, typer.Option(
    "--jobs", min=1, show_default=False, metavar="N",
    help="Worker processes [default: the usable cores]; 1 runs in this process. Output stays in input order.")]
FirstLineOpt = Annotated[int, typer.Option(
    "--first-line", min=1, metavar="N",
    help="The number of the input's first line: a shard of a bigger file numbers its lines (and the ids of "
         "lines without one) as the whole file does.")]
HELP_END = help_end([
    """echo '{"id": 1, "expr": "x*y", "vars": {"x": 2, "y": 3}}' | gradflow batch""",
    """printf 'x^2\\nx*y\\n' | gradflow batch --text --x 3 --y 2""",
    """printf 'x^2\\nx^\\n' | gradflow batch --text --x 3    # exit 4: line 2 failed""",
    """echo '"x^2*y"' | gradflow batch --x 3 --y 2 --brief    # the answer only: no nodes, no edges""",
], [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.PARTIAL, ExitCode.INTERRUPTED],
    {ExitCode.OK: "every line has its answer (\"no gradient reaches x\" is one)",
     ExitCode.INPUT: "bad input: an option, or the input cannot be read; --strict: a value no line uses",
     ExitCode.PARTIAL: "partial: some lines failed (each gets an error record)"})


def _open(source: str, limit: int, first: int = 1) -> tuple[Iterator[str | GradflowError], Path | None]:
    """The input's lines (batch.lines: one reader for files, pipes and stdin), and the path when it is a regular
    file (its lines can be counted for a progress bar). A pipe, FIFO or `<(process substitution)` can be read only
    once: it is streamed like stdin."""
    from gradflow.batch.lines import read_lines

    if source == "-":
        from gradflow.cli.streams import stdin_bytes

        return read_lines(stdin_bytes(), limit, "stdin", first), None
    path = Path(source)
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ValueInputError("usage", f"cannot read {source}: it is a directory",
                                  hint="give a JSON Lines file (or a file of programs with --text), or - for stdin")
        fh = path.open("rb")
    except OSError as err:
        raise ValueInputError("usage", f"cannot read {source}: {err.strerror}") from None
    return _closing(fh, read_lines(fh, limit, source, first)), path if stat.S_ISREG(mode) else None


def _closing(fh: BinaryIO, lines: Iterator[str | GradflowError]) -> Iterator[str | GradflowError]:
    with fh:
        yield from lines


def _count_lines(path: Path) -> int | None:
    """Lines in a regular file (for the progress bar), counted in bytes as read_lines splits them."""
    count, last = 0, b"\n"
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                count, last = count + chunk.count(b"\n"), chunk[-1:]
    except OSError:
        return None
    return count + (last != b"\n")


def _source(source: str | None, extra: list[str]) -> tuple[str, list[str]]:
    """Typer binds the first leftover (`--x` in `batch --x 1`) to SOURCE: give it back to the values."""
    if source and source.startswith("--"):
        return "-", [source, *extra]
    return source or "-", extra


def _progress(records: Iterator[Out], path: Path | None, first: int = 1) -> Iterator[Out]:
    """A transient progress bar on stderr, only for a file when stderr is a terminal."""
    total = _count_lines(path) if path is not None and sys.stderr.isatty() else None
    if total is None:
        yield from records
        return
    with progress_bar(consoles()[1], streaming=True) as bar:
        task = bar.add_task("batch", total=total)
        for rec in records:
            bar.update(task, completed=rec[0] - first + 1)
            yield rec


def batch_cmd(ctx: typer.Context, source: InputArg = "-", text: TextOpt = False, wrt: options.WrtOpt = None,
              var: options.VarOpt = None, dtype: options.DtypeOpt = "float32", device: options.DeviceOpt = "cpu",
              limit: options.LimitOpt = None, debug: options.DebugOpt = False, seed: options.SeedOpt = 0,
              strict: options.StrictOpt = False, full: options.FullOpt = False, summary: options.SummaryOpt = False,
              jobs: JobsOpt = None, first_line: FirstLineOpt = 1, brief: options.BriefOpt = False):
    """Evaluate many programs: one JSON line out per input line, in order.

    A line is "EXPR" or {"id": .., "expr": .., "vars": {..}, "wrt": .., "dtype": ..}; with --text, a plain program.

    Values on the command line (--x 1) are defaults for every line that uses them. Blank lines are skipped.
    The number of failed lines goes to stderr; a line whose answer is "no gradient" has not failed.
    A line's "vars" naming a variable its program does not use is a warning in its record, a default no line
    uses a warning on stderr (--strict: errors). Records are made by --jobs worker processes (one per core).
    --brief: records without nodes, edges and contributions (the answer only), made faster.
    """
    def body() -> int:
        pause_collector()  # from the imports on; the records' loop collects the young objects (cli/startup.py)
        try:
            return work()
        finally:
            resume_collector()

    def work() -> int:
        from functools import partial

        from gradflow.batch.pool import needs_hard_exit, records_out, usable_cores
        from gradflow.batch.run import DefaultsUse
        from gradflow.limits import as_limits

        path, extra = _source(source, ctx.args)
        values = parse_values(extra, var, ctx)
        limits = as_limits(limit)
        lines, regular = _open(path, limits.line, first_line)
        jobs_ = jobs or usable_cores()
        records = records_out(lines, jobs_, partial(dumps_record, debug=debug, brief=brief), first_line=first_line,
                              text=text, values=values, wrt=wrt, dtype=dtype, device=device, debug=debug,
                              limits=limits, seed=seed, strict=strict, options=option_owners(ctx),
                              summary=summary_mode(full, summary), brief=brief)
        try:
            return _write_all(records, regular, first_line, DefaultsUse(values, limits), strict)
        finally:
            records.close()  # the workers stop now, whatever ended the loop (a reader gone, Ctrl-C, an error)
            if needs_hard_exit():  # the input's reader thread still waits on a pipe: end without joining it
                from gradflow.cli.streams import exit_hard

                exit_hard()

    guarded(debug, False, body)


def _write_all(records: Iterator[Out], regular: Path | None, first_line: int, uses: DefaultsUse,
               strict: bool) -> int:
    """Every record to stdout, then `N of M lines failed` and the unused defaults on stderr; the exit code."""
    done = failed = 0
    # Reading a stream, each record goes out as soon as it is made (a pipeline may wait on it); from a file,
    # in blocks (a flush per record would be a cost of every record). Ctrl-C still writes every finished record:
    # streams.run_safely flushes stdout on the way out.
    streaming = regular is None  # stdin, a pipe or a FIFO
    for _, out, kind, source in _progress(records, regular, first_line):
        sys.stdout.write(out + "\n")  # a reader gone (`| head -1`) raises BrokenPipeError: guarded() ends quietly
        if streaming:
            sys.stdout.flush()
        done, failed = done + 1, failed + counts_as_failure(kind)
        collect_young(done)
        uses.see({"source": source})
    if failed:
        consoles()[1].print(f"{failed} of {done} lines failed", markup=False)
    if strict:
        uses.refuse()
    for _, message in uses.unused():
        consoles()[1].print(f"warning: {message}", markup=False, style="yellow", soft_wrap=True)
    return int(ExitCode.PARTIAL if failed else ExitCode.OK)
