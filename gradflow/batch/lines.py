"""Reading `gradflow batch`'s input: a stream's bytes into numbered text lines, a line into a Job (torch-free).

The stream (`read_lines`), read the same way from a file, a pipe and stdin:
- Bytes are split on b"\\n" only: a bare \\r stays inside its line (line numbers never shift); \\r\\n ends one.
- Each line is decoded as UTF-8 on its own: a line that is not UTF-8 becomes an error naming its line number,
  and the lines around it are still read. A UTF-8 byte-order mark before line 1 is skipped (run_batch).
- A line longer than the `line` limit (limits.py, `--limit line=N`) becomes an error too. The reader never holds
  more than the limit (+2 bytes) of a line: the rest of an over-long line is read and dropped in chunks. A line
  that runs on past LINE_SKIP_FACTOR times the limit without a line break (a binary file, /dev/zero) ends the
  batch with a LimitError: nothing after it could be reached in reasonable time.
`read_lines` yields, per line, its text or the GradflowError standing in for it; run_batch turns the error
into that line's error record.

A line (`read_job`) is a JSON string (the program), a JSON object {"id", "expr", "vars", "wrt", "dtype"}, or,
in text mode, the program itself. A line that cannot be read raises; `peek` then finds what can be read of it
(its id, its program) for its error record.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from gradflow.errors import GradflowError, LimitError, ValueInputError
from gradflow.limits import LINE_SKIP_FACTOR, MAX_JSON_DEPTH, MAX_VALUE_DIMS, current, too_long

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


# ---- one line -> Job --------------------------------------------------------------------------------------

FIELDS = ("id", "expr", "vars", "wrt", "dtype")
_HINT = 'a line is "EXPR" or {"id": 1, "expr": "x*y", "vars": {"x": 1, "y": 2}, "wrt": "x", "dtype": "float64"}'


@dataclass
class Job:
    """One input line, read and checked (not yet evaluated)."""

    id: Any
    expr: str
    vars: dict[str, Any] = field(default_factory=dict)
    wrt: str | list[str] | None = None
    dtype: str | None = None


def _bad(message: str, hint: str = _HINT) -> ValueInputError:
    return ValueInputError("bad_record", message, hint=hint)


_AS_STRING = {"Infinity": "inf", "-Infinity": "-inf", "NaN": "nan"}


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON (RFC 8259); write it as the string \"{_AS_STRING.get(name, 'nan')}\"")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """An object whose keys are all different: {"x": 1, "x": 2} would silently keep the 2."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _bad(f"the key {json.dumps(twice)} is given twice in one object; which value is meant?",
                   hint="give each field and each variable once")
    return obj


# one decoder: json.loads(..., kw) builds one per call
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
_JSON_TOKENS = r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]'  # a string (maybe unterminated) or a bracket; re caches it


def json_depth(line: str) -> int:
    """How deep [ and { nest in a JSON text (brackets inside strings do not count); linear time."""
    depth = deepest = 0
    for token in re.findall(_JSON_TOKENS, line):
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
    return deepest


def _too_deep(line: str) -> bool:
    """Does the line nest [ and { more than MAX_JSON_DEPTH deep? Few brackets in all: no, at C speed."""
    return line.count("[") + line.count("{") > MAX_JSON_DEPTH and json_depth(line) > MAX_JSON_DEPTH


def _loads(line: str) -> Any:
    """A JSON line, nested at most MAX_JSON_DEPTH deep (Python's decoder recurses: 1,000 [ would overflow it)."""
    if _too_deep(line):
        depth = json_depth(line)
        raise ValueInputError("bad_json", f"the line nests [ and {{ {depth:,} levels deep; at most {MAX_JSON_DEPTH} "
                              "are read", hint=_HINT + f"; a list value may nest {MAX_VALUE_DIMS} levels")
    try:
        return _DECODER.decode(line)
    except (ValueError, RecursionError) as err:
        raise ValueInputError("bad_json", f"the line is not valid JSON: {err}",
                              hint=_HINT + "; use --text for plain expressions") from None


def _check_value(name: str, value: Any) -> Any:
    """Numbers pass through; lists and strings go through the shared value parser."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, list) and all(type(v) in (int, float) for v in value):  # a flat list of numbers: valid
        return value
    from gradflow.values.text import parse_value  # only here: a number needs no parsing

    if isinstance(value, str):
        return parse_value(name, value)
    if isinstance(value, list):
        return parse_value(name, json.dumps(value))
    raise _bad(f"the value of '{name}' must be a number, a list or a string, not {json.dumps(value)}")


def _object_job(number: int, obj: dict) -> Job:
    unknown = [k for k in obj if k not in FIELDS]
    if unknown:
        raise _bad(f"unknown field '{unknown[0]}'", hint="the fields are: " + ", ".join(FIELDS))
    rid = obj.get("id", number)
    if not _valid_id(rid):
        raise _bad(f"\"id\" must be a string or a finite number, not {json.dumps(rid)}")
    expr, vars_ = obj.get("expr"), obj.get("vars", {})
    if not isinstance(expr, str):
        raise _bad("the record needs \"expr\": the program as a string")
    if not isinstance(vars_, dict):
        raise _bad("\"vars\" must be an object of NAME: VALUE")
    wrt, dtype = obj.get("wrt"), obj.get("dtype")
    if wrt is not None and not _valid_wrt(wrt):
        raise _bad("\"wrt\" must be a string ('a,b' or 'all') or a list of names")
    if dtype is not None and not isinstance(dtype, str):
        raise _bad("\"dtype\" must be a string such as \"float64\"")
    return Job(rid, expr, {k: _check_value(k, v) for k, v in vars_.items()}, wrt, dtype)


def read_job(number: int, line: str, text: bool = False) -> Job:
    """One input line -> Job. Raises GradflowError for a line that cannot be read."""
    if text:
        return Job(number, line.strip())
    obj = _loads(line)
    if isinstance(obj, str):
        return Job(number, obj)
    if isinstance(obj, dict):
        return _object_job(number, obj)
    raise _bad(f"a line must be a JSON string or object, not {json.dumps(obj)[:40]}")


def _valid_wrt(wrt: Any) -> bool:
    return isinstance(wrt, str) or (isinstance(wrt, list) and all(isinstance(w, str) for w in wrt))


def _valid_id(rid: Any) -> bool:
    return isinstance(rid, str) or (isinstance(rid, (int, float)) and not isinstance(rid, bool)
                                    and math.isfinite(rid))


def peek(number: int, line: str, text: bool = False) -> Job:
    """What can be read of a line that failed to read: its usable id, "expr" (the record's `source`), "wrt"
    and "dtype"; the line number stands for a missing id."""
    if text:
        return Job(number, line.strip())
    try:
        obj = None if _too_deep(line) else json.loads(line, parse_constant=_reject_constant)
    except Exception:  # noqa: BLE001 - whatever the line holds, its line number still names it
        return Job(number, None)  # type: ignore[arg-type]
    if isinstance(obj, str):
        return Job(number, obj)
    if not isinstance(obj, dict):
        return Job(number, None)  # type: ignore[arg-type]
    rid, expr, wrt, dtype = obj.get("id", number), obj.get("expr"), obj.get("wrt"), obj.get("dtype")
    return Job(rid if _valid_id(rid) else number, expr if isinstance(expr, str) else None,  # type: ignore[arg-type]
               wrt=wrt if _valid_wrt(wrt) else None, dtype=dtype if isinstance(dtype, str) else None)
