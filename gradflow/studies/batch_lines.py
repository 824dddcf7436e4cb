"""Batch input as numbered text lines, read the same way from a file, a pipe and stdin (torch-free).

- Bytes are split on b"\\n" only: a bare \\r stays inside its line (line numbers never shift); \\r\\n ends one.
- Each line is decoded as UTF-8 on its own: a line that is not UTF-8 becomes an error naming its line number,
  and the lines around it are still read. A UTF-8 byte-order mark before line 1 is skipped (run_batch).
- A line longer than the `line` limit (limits.py, `--limit line=N`) becomes an error too. The reader never holds
  more than the limit (+2 bytes) of a line: the rest of an over-long line is read and dropped in chunks. A line
  that runs on past LINE_SKIP_FACTOR times the limit without a line break (a binary file, /dev/zero) ends the
  batch with a LimitError: nothing after it could be reached in reasonable time.

`read_lines` yields, per line, its text or the GradflowError standing in for it; `run_batch` turns the error
into that line's error record.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from gradflow.errors import GradflowError, LimitError, ValueInputError
from gradflow.limits import LINE_SKIP_FACTOR, current, too_long

_CHUNK = 1 << 16  # bytes read at a time while dropping the rest of an over-long line


def read_lines(stream: BinaryIO, limit: int | None = None, name: str = "the input",
               first: int = 1) -> Iterator[str | GradflowError]:
    """The lines of a binary stream, in order, each as text or as the error that stands for it; messages number
    the lines from `first` (a shard of a bigger input: as the whole input does)."""
    limit = current().line if limit is None else limit
    number = first - 1
    while True:
        raw = stream.readline(limit + 2)  # +1 for the \n, +1 more to see a line that is too long
        if not raw:
            return
        number += 1
        ended = raw.endswith(b"\n")
        body = raw[:-1] if ended else raw
        if ended and body.endswith(b"\r"):
            body = body[:-1]
        if len(body) > limit:
            if not ended:
                _skip_rest(stream, number, limit, name, len(raw))
            yield too_long("line", f"line {number} has", limit=limit)
            continue
        try:
            yield body.decode("utf-8")
        except UnicodeDecodeError as err:
            yield ValueInputError("bad_text", f"line {number} is not UTF-8 text: byte 0x{body[err.start]:02x} at "
                                  f"byte {err.start + 1} of the line ({err.reason})",
                                  hint="save the input as UTF-8 (JSON Lines are UTF-8 text)")


def _skip_rest(stream: BinaryIO, number: int, limit: int, name: str, seen: int) -> None:
    """Read and drop the rest of an over-long line, in chunks; give up on a line that never ends."""
    budget = LINE_SKIP_FACTOR * limit
    while seen <= budget:
        raw = stream.readline(_CHUNK)
        if not raw or raw.endswith(b"\n"):
            return
        seen += len(raw)
    raise LimitError("limit_line", f"line {number} of {name} runs on for more than {budget:,} bytes without a "
                     f"line break, so reading stopped (the line limit is {limit:,} bytes)",
                     hint=f"check that {name} is JSON Lines (one record per line); a longer line needs --limit "
                          f"line=N (the rest of a line over the limit is skipped up to {LINE_SKIP_FACTOR} times "
                          "the limit)")
