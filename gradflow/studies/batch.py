"""Batch mode: many programs in one process, one strict-JSON record per input line.

A line is a JSON string (the program), a JSON object {"id", "expr", "vars",
"wrt", "dtype"}, or, in text mode, the program itself. Values given once (the
command line's `--x 1`) are defaults that a line's own "vars" override; a
default is only handed to programs that use that variable. Blank lines are
skipped (they still count for line numbers). Every other line yields exactly
one record, in input order; a failing line yields an error record and the
batch goes on: an exception from reading or evaluating one line becomes that
line's error record (an `internal` one for a bug), never the end of the batch.
A line may also be given as the GradflowError that stands for it (batch_lines.py:
a line that is not UTF-8 or is too long): it becomes that line's error record.
Parsing goes through `api.compile_program`, so a repeated program is parsed
once. Torch-free until the first line is evaluated.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gradflow.errors import GradflowError, ValueInputError
from gradflow.limits import MAX_JSON_DEPTH, MAX_VALUE_DIMS, Limits, as_limits

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


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON (RFC 8259); write it as a string, e.g. \"nan\"")


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
    from gradflow.values.text import parse_value

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return parse_value(name, value)
    if isinstance(value, list):
        if all(type(v) in (int, float) for v in value):  # a flat list of numbers is always valid
            return value
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
    if wrt is not None and not (isinstance(wrt, str) or (isinstance(wrt, list) and
                                                         all(isinstance(w, str) for w in wrt))):
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


def _valid_id(rid: Any) -> bool:
    return isinstance(rid, str) or (isinstance(rid, (int, float)) and not isinstance(rid, bool)
                                    and math.isfinite(rid))


def _peek_id(number: int, line: str) -> Any:
    """The id of a line that failed to read, if it has a usable one."""
    try:
        obj = None if _too_deep(line) else json.loads(line, parse_constant=_reject_constant)
    except Exception:  # noqa: BLE001 - whatever the line holds, its line number still names it
        return number
    rid = obj.get("id", number) if isinstance(obj, dict) else number
    return rid if _valid_id(rid) else number


@dataclass
class Defaults:
    """What every line gets unless it says otherwise."""

    values: dict[str, Any] = field(default_factory=dict)
    wrt: str | list[str] | None = None
    dtype: str = "float32"
    device: str = "cpu"
    limits: Limits | None = None


def _values(job: Job, defaults: Defaults) -> dict[str, Any]:
    """The line's own vars, plus those defaults whose names the program uses."""
    from gradflow.language.compile import compile_program

    inputs = compile_program(job.expr, defaults.limits).inputs
    shared = {k: v for k, v in defaults.values.items() if k in inputs and k not in job.vars}
    return {**shared, **job.vars}


def evaluate_job(job: Job, number: int, defaults: Defaults) -> dict:
    """The record of one job: its id plus `eval --json`'s fields. Raises GradflowError."""
    from gradflow.engine.explain import explain

    result = explain(job.expr, wrt=job.wrt if job.wrt is not None else defaults.wrt,
                     dtype=job.dtype or defaults.dtype, device=defaults.device, values=_values(job, defaults),
                     limits=defaults.limits)
    return {"id": job.id, "line": number, **result.to_dict()}


def error_record(rid: Any, number: int, source: str | None, error: GradflowError) -> dict:
    """A failed line: the same keys as `eval --json` prints for an error."""
    from gradflow.analysis.explanation import error_document

    return {"id": rid, "line": number, **error_document(error, source)}


def crashed_record(number: int, line: str, text: bool, how: str) -> dict:
    """The record of a line whose worker process died while evaluating it (`batch --jobs N`)."""
    rid, source = number, None
    try:
        job = read_job(number, line, text)
        rid, source = job.id, job.expr
    except Exception:  # noqa: BLE001 - it was read once already; whatever happens, its line number names it
        pass
    error = GradflowError("crashed", f"the worker process evaluating line {number} {how} before its record was made",
                          hint="it may have run out of memory (the kernel then sends SIGKILL) or met a crash in "
                               "torch; run this line alone with --jobs 1 to see, and report it if it crashes")
    return error_record(rid, number, source, error)


def internal_error(exc: Exception) -> GradflowError:
    return GradflowError("internal", f"{type(exc).__name__}: {exc}",
                         hint="this is a bug in gradflow; rerun with --debug and report the traceback")


def record(number: int, line: str, defaults: Defaults, text: bool = False, debug: bool = False) -> dict:
    """Exactly one record for one non-blank line; raises nothing but KeyboardInterrupt (and bugs with `debug`)."""
    try:
        job = read_job(number, line, text)
    except GradflowError as err:
        return error_record(_peek_id(number, line), number, None, err)
    except Exception as exc:  # a bug in reading one line must not sink the whole batch either
        if debug:
            raise
        return error_record(number, number, None, internal_error(exc))
    try:
        return evaluate_job(job, number, defaults)
    except GradflowError as err:
        return error_record(job.id, number, job.expr, err)
    except Exception as exc:  # a bug must not sink the whole batch (unless debugging)
        if debug:
            raise
        return error_record(job.id, number, job.expr, internal_error(exc))


def run_batch(lines: Iterable[str | GradflowError], *, text: bool = False, values: dict[str, Any] | None = None,
              wrt: str | list[str] | None = None, dtype: str = "float32", device: str = "cpu",
              debug: bool = False, limits=None, first_line: int = 1) -> Iterator[dict]:
    """Yield one record per non-blank line, in order. A record with `error` not None failed.

    `values` are defaults for every line (text values are parsed by the shared value parser);
    a JSON line's own "vars", "wrt" and "dtype" override them. `limits` as for explain(). A line given as
    a GradflowError (batch_lines.read_lines: not UTF-8, too long) yields that line's error record.
    `first_line` numbers the first line (a shard of a bigger input numbers its lines, and the ids of lines
    without one, as the whole input does; a UTF-8 byte-order mark is skipped only on line 1).
    """
    from gradflow.values.text import parse_value

    shared = {k: parse_value(k, v) if isinstance(v, str) else v for k, v in (values or {}).items()}
    defaults = Defaults(shared, wrt, dtype, device, as_limits(limits))
    for number, line in enumerate(lines, first_line):
        if isinstance(line, GradflowError):
            yield error_record(number, number, None, line)
            continue
        if number == 1:
            line = line.removeprefix("\ufeff")  # a UTF-8 byte-order mark (Windows editors write one)
        if line.strip():
            yield record(number, line, defaults, text, debug)
