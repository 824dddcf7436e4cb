"""Batch mode: many programs in one process, one strict-JSON record per input line.

A line is a JSON string (the program), a JSON object {"id", "expr", "vars",
"wrt", "dtype"}, or, in text mode, the program itself. Values given once (the
command line's `--x 1`) are defaults that a line's own "vars" override; a
default is only handed to programs that use that variable. Blank lines are
skipped (they still count for line numbers). Every other line yields exactly
one record, in input order; a failing line yields an error record and the
batch goes on. Parsing goes through `api.compile_program`, so a repeated
program is parsed once. Torch-free until the first line is evaluated.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gradflow.errors import GradflowError, ValueInputError

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


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # one decoder: json.loads(..., kw) builds one per call


def _loads(line: str) -> Any:
    try:
        return _DECODER.decode(line)
    except ValueError as err:
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
        obj = json.loads(line, parse_constant=_reject_constant)
    except ValueError:
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


def _values(job: Job, defaults: Defaults) -> dict[str, Any]:
    """The line's own vars, plus those defaults whose names the program uses."""
    from gradflow.language.compile import compile_program

    inputs = compile_program(job.expr).inputs
    shared = {k: v for k, v in defaults.values.items() if k in inputs and k not in job.vars}
    return {**shared, **job.vars}


def evaluate_job(job: Job, number: int, defaults: Defaults) -> dict:
    """The record of one job: its id plus `eval --json`'s fields. Raises GradflowError."""
    from gradflow.engine.explain import explain

    result = explain(job.expr, wrt=job.wrt if job.wrt is not None else defaults.wrt,
                     dtype=job.dtype or defaults.dtype, device=defaults.device, values=_values(job, defaults))
    return {"id": job.id, "line": number, **result.to_dict()}


def error_record(rid: Any, number: int, source: str | None, error: GradflowError) -> dict:
    """A failed line: the same keys as `eval --json` prints for an error."""
    from gradflow.analysis.explanation import error_document

    return {"id": rid, "line": number, **error_document(error, source)}


def internal_error(exc: Exception) -> GradflowError:
    return GradflowError("internal", f"{type(exc).__name__}: {exc}",
                         hint="this is a bug in gradflow; rerun with --debug and report the traceback")


def record(number: int, line: str, defaults: Defaults, text: bool = False, debug: bool = False) -> dict:
    """Exactly one record for one non-blank line; never raises a GradflowError."""
    try:
        job = read_job(number, line, text)
    except GradflowError as err:
        return error_record(_peek_id(number, line), number, None, err)
    try:
        return evaluate_job(job, number, defaults)
    except GradflowError as err:
        return error_record(job.id, number, job.expr, err)
    except Exception as exc:  # a bug must not sink the whole batch (unless debugging)
        if debug:
            raise
        return error_record(job.id, number, job.expr, internal_error(exc))


def run_batch(lines: Iterable[str], *, text: bool = False, values: dict[str, Any] | None = None,
              wrt: str | list[str] | None = None, dtype: str = "float32", device: str = "cpu",
              debug: bool = False) -> Iterator[dict]:
    """Yield one record per non-blank line, in order. A record with `error` not None failed.

    `values` are defaults for every line (text values are parsed by the shared value parser);
    a JSON line's own "vars", "wrt" and "dtype" override them.
    """
    from gradflow.values.text import parse_value

    shared = {k: parse_value(k, v) if isinstance(v, str) else v for k, v in (values or {}).items()}
    defaults = Defaults(shared, wrt, dtype, device)
    for number, line in enumerate(lines, 1):
        if line.strip():
            yield record(number, line, defaults, text, debug)
