"""`gradflow batch`: many programs in one process, JSON Lines out (see gradflow.studies.batch)."""
from __future__ import annotations

import gc
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated

import typer

from gradflow.cli.common import (
    DebugOpt,
    DeviceOpt,
    DtypeOpt,
    VarOpt,
    WrtOpt,
    consoles,
    guarded,
    parse_values,
    progress_bar,
)
from gradflow.cli.help import help_end
from gradflow.errors import ExitCode, ValueInputError

InputArg = Annotated[str | None, typer.Argument(
    help="A JSON Lines file, or '-' (the default) for stdin.", show_default=False, metavar="FILE")]
TextOpt = Annotated[bool, typer.Option(
    "--text", help="Each line is a plain program; values come from the command line (--x 1).")]
HELP_END = help_end([
    """echo '{"id": 1, "expr": "x*y", "vars": {"x": 2, "y": 3}}' | gradflow batch""",
    """printf 'x^2\\nx*y\\n' | gradflow batch --text --x 3 --y 2""",
    """printf 'x^2\\nx^\\n' | gradflow batch --text --x 3    # exit 4: line 2 failed""",
], [ExitCode.OK, ExitCode.INTERNAL, ExitCode.INPUT, ExitCode.PARTIAL, ExitCode.INTERRUPTED],
    {ExitCode.OK: "every line succeeded",
     ExitCode.INPUT: "bad input: an option, or the input cannot be read",
     ExitCode.PARTIAL: "partial: some lines failed (each gets an error record)"})


def _open(source: str) -> tuple[Iterable[str], int | None]:
    """The input lines, and how many there are when that is cheap to know (a regular file). A pipe, FIFO or
    `<(process substitution)` can be read only once: it is streamed like stdin, with no count."""
    if source == "-":
        return sys.stdin, None
    path = Path(source)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return _read(path), None
        with path.open(encoding="utf-8") as fh:
            total = sum(1 for _ in fh)
        return _read(path), total
    except OSError as err:
        raise ValueInputError("usage", f"cannot read {source}: {err.strerror}") from None


def _source(source: str | None, extra: list[str]) -> tuple[str, list[str]]:
    """Typer binds the first leftover (`--x` in `batch --x 1`) to SOURCE: give it back to the values."""
    if source and source.startswith("--"):
        return "-", [source, *extra]
    return source or "-", extra


def _read(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8") as fh:
        yield from fh


def _progress(records: Iterator[dict], total: int | None) -> Iterator[dict]:
    """A transient progress bar on stderr, only for a file when stderr is a terminal."""
    if total is None or not sys.stderr.isatty():
        yield from records
        return
    with progress_bar(consoles()[1], streaming=True) as bar:
        task = bar.add_task("batch", total=total)
        for rec in records:
            bar.update(task, completed=rec["line"])
            yield rec


def _write(line: str, flush: bool) -> bool:
    """One record out; False when the reader has gone away (`| head -1`)."""
    try:
        sys.stdout.write(line + "\n")
        if flush:
            sys.stdout.flush()
        return True
    except BrokenPipeError:  # Python docs, "Note on SIGPIPE": silence the final flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False


def batch_cmd(ctx: typer.Context, source: InputArg = "-", text: TextOpt = False, wrt: WrtOpt = None,
              var: VarOpt = None, dtype: DtypeOpt = "float32", device: DeviceOpt = "cpu",
              debug: DebugOpt = False):
    """Evaluate many programs: one JSON line out per input line, in order.

    A line is "EXPR" or {"id": .., "expr": .., "vars": {..}, "wrt": .., "dtype": ..}; with --text, a plain program.

    Values on the command line (--x 1) are defaults for every line that uses them. Blank lines are skipped.
    The number of failed lines goes to stderr.
    """
    def body() -> int:
        from gradflow.studies.batch import run_batch
        from gradflow.values.jsonable import dumps

        path, extra = _source(source, ctx.args)
        values = parse_values(extra, var)
        lines, total = _open(path)
        records = run_batch(lines, text=text, values=values, wrt=wrt, dtype=dtype, device=device, debug=debug)
        done = failed = 0
        # Reading a stream, each record goes out as soon as it is made (a pipeline may wait on it); from a file,
        # in blocks (a flush per record cost ~5% of a batch). Ctrl-C still writes every finished record:
        # streams.run_safely flushes stdout on the way out.
        streaming = total is None  # stdin, a pipe or a FIFO
        for rec in _progress(records, total):
            if not _write(dumps(rec), streaming):
                return int(ExitCode.OK)
            done, failed = done + 1, failed + (rec["error"] is not None)
            if done == 1:
                gc.freeze()  # torch's many objects are long-lived: keep them out of every collection
        if failed:
            consoles()[1].print(f"{failed} of {done} lines failed", markup=False)
        return int(ExitCode.PARTIAL if failed else ExitCode.OK)

    guarded(debug, False, body)
