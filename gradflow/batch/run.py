"""A batch: many programs, one strict-JSON record per non-blank input line, in input order.

`run_batch` makes the records in this process: the library's entry point, and what each worker of
`batch --jobs N` runs on its chunks (pool.records_out makes the same records in N worker processes). Blank lines
are skipped (they still count for line numbers). `DefaultsUse` is the command's check that each value given once
on the command line is used by some line's program.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from gradflow.batch.records import Defaults, error_record, record
from gradflow.errors import GradflowError
from gradflow.limits import Limits, as_limits


class DefaultsUse:
    """Which command-line defaults (the values given once for every line) some line's program uses. A default
    no line uses is a warning (maybe a typo), or with --strict an error. Each record's program is looked at
    (compile_program: cached) only until every default has been used, so the usual batch pays nothing."""

    WHO = "no line's program uses"
    unknowable = False  # some line could not be read or parsed: it might have used them

    def __init__(self, names: Iterable[str], limits: Limits | None = None):
        self.left = dict.fromkeys(names)
        self.seen: set[str] = set()  # the variables of the programs looked at, for "did you mean"
        self.limits = limits

    def see(self, rec: dict) -> None:
        if not self.left or self.unknowable:
            return
        source = rec.get("source")
        if not isinstance(source, str):  # a line that cannot be read: it might have used them
            self.unknowable = True
            return
        from gradflow.language.compile import compile_program

        try:
            inputs = compile_program(source, self.limits).inputs
        except GradflowError:  # as in compare: unknowable while some program does not parse
            self.unknowable = True
            return
        self.seen.update(inputs)
        for name in inputs:
            self.left.pop(name, None)

    def unused(self) -> list[tuple[str, str]]:
        """(name, warning) for each default no line used (none when some line could not be read or parsed)."""
        from gradflow.engine.prepare import unused_values

        return [] if self.unknowable else unused_values(list(self.left), sorted(self.seen), self.WHO)

    def refuse(self) -> None:
        """--strict: a default no line used is an error (exit 2)."""
        from gradflow.engine.prepare import refuse_unused

        if not self.unknowable:
            refuse_unused(list(self.left), sorted(self.seen), self.WHO, "the batch's programs'")


def run_batch(lines: Iterable[str | GradflowError], *, text: bool = False, values: dict[str, Any] | None = None,
              wrt: str | list[str] | None = None, dtype: str = "float32", device: str = "cpu",
              debug: bool = False, limits=None, seed: int = 0, strict: bool = False,
              options: Iterable[str] = (), summary: bool = False, first_line: int = 1,
              brief: bool = False) -> Iterator[dict]:
    """Yield one record per non-blank line, in order. A record with `error` not None failed (or, kind
    "no_gradient", got the answer that no gradient reaches its leaves).

    `values` are defaults for every line that uses them (text values are parsed by the shared value parser);
    a JSON line's own "vars", "wrt" and "dtype" override them. A line's "vars" naming a variable its program
    does not use is a warning in its record, or with `strict` its error record. `limits` and `seed` as for
    explain(); `options`: the command line's option names, which a missing value's hint then gives as --var.
    A line given as a GradflowError (lines.read_lines: not UTF-8, too long) yields that
    line's error record. Tensors are in full (a record over the `json` limit is an error record), or with
    `summary` over JSON_FULL_MAX elements summary objects. `first_line` numbers the first line (a shard of a
    bigger input numbers its lines, and the ids of lines without one, as the whole input does; a UTF-8
    byte-order mark is skipped only on line 1). `brief`: each record without "nodes", "edges" and "contributions"
    (explain(brief=True); an error record too).
    """
    from gradflow.engine.prepare import check_seed
    from gradflow.values.text import parse_value

    check_seed(seed)
    shared = {k: parse_value(k, v) if isinstance(v, str) else v for k, v in (values or {}).items()}
    defaults = Defaults(shared, wrt, dtype, device, as_limits(limits), seed, strict, frozenset(options), summary,
                        brief)
    for number, line in enumerate(lines, first_line):
        if isinstance(line, GradflowError):
            yield error_record(number, number, None, line, None, defaults)
            continue
        if number == 1:
            line = line.removeprefix("\ufeff")  # a UTF-8 byte-order mark (Windows editors write one)
        if line.strip():
            yield record(number, line, defaults, text, debug)

