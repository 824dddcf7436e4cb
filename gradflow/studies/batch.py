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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from gradflow.errors import GradflowError, ValueInputError
from gradflow.limits import MAX_JSON_DEPTH, MAX_VALUE_DIMS, Limits, as_limits, using
from gradflow.values.jsonable import document

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
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, list) and all(type(v) in (int, float) for v in value):  # a flat list of numbers: valid
        return value
    from gradflow.values.text import parse_value  # (not for numbers: an import statement costs ~0.7 us a call)

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


def _peek(number: int, line: str, text: bool = False) -> Job:
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
    ok_wrt = isinstance(wrt, str) or (isinstance(wrt, list) and all(isinstance(w, str) for w in wrt))
    return Job(rid if _valid_id(rid) else number, expr if isinstance(expr, str) else None,  # type: ignore[arg-type]
               wrt=wrt if ok_wrt else None, dtype=dtype if isinstance(dtype, str) else None)


@dataclass
class Defaults:
    """What every line gets unless it says otherwise."""

    values: dict[str, Any] = field(default_factory=dict)
    wrt: str | list[str] | None = None
    dtype: str = "float32"
    device: str = "cpu"
    limits: Limits | None = None
    seed: int = 0
    strict: bool = False  # a line's "vars" naming a variable its program does not use: an error, not a warning
    options: frozenset[str] = frozenset()  # names --NAME cannot give (the command's options): hint --var
    summary: bool = False  # JSON tensors over JSON_FULL_MAX elements as summary objects (--summary)
    brief: bool = False  # records without "nodes", "edges" and "contributions" (--brief; explain(brief=True))


def _values(job: Job, defaults: Defaults, inputs: Mapping[str, int]) -> dict[str, Any]:
    """The line's own vars, plus those defaults whose names the program uses (`inputs`: its variables)."""
    shared = {k: v for k, v in defaults.values.items() if k in inputs and k not in job.vars}
    for name in inputs:
        if name in defaults.options and name not in shared and name not in job.vars:  # `--seed 3` seeds
            raise ValueInputError("missing_value", f"no value for variable '{name}'",
                                  hint=f"--{name} is an option, so give '{name}' in the line's \"vars\" or "
                                       f"with --var {name}=VALUE")
    return {**shared, **job.vars}  # the line's own vars all go on: one its program does not use is a warning


@cache
def _engine() -> tuple:
    """The engine's entry points, imported by the first record (torch with them): an import statement per record
    ~0.7 us."""
    from gradflow.engine.explain import check_arguments, explain_checked
    from gradflow.language.compile import compile_program

    return compile_program, check_arguments, explain_checked


def evaluate_job(job: Job, number: int, defaults: Defaults) -> dict:
    """The record of one job: its id plus `eval --json`'s fields. Raises GradflowError."""
    compile_program, check_arguments, explain_checked = _engine()
    limits = as_limits(defaults.limits)
    graph = compile_program(job.expr, limits)  # once: explain_checked takes the graph
    values = _values(job, defaults, graph.inputs)
    wrt, dtype = job.wrt if job.wrt is not None else defaults.wrt, job.dtype or defaults.dtype
    check_arguments(job.expr, wrt, dtype, defaults.device, values)  # as explain() would
    result = explain_checked(graph, values, wrt=wrt, dtype=dtype, device=defaults.device, seed=defaults.seed,
                             measure_edges=True, limits=limits, strict=defaults.strict, brief=defaults.brief)
    with using(limits), document(defaults.summary):  # over the json limit: an error record
        return {"id": job.id, "line": number, **result.to_dict()}


def error_record(rid: Any, number: int, source: str | None, error: GradflowError, job: Job | None = None,
                 defaults: Defaults | None = None) -> dict:
    """A failed line: the same keys as `eval --json` prints for an error, with what is known of its request
    (the line's own "wrt"/"dtype", else the defaults')."""
    from gradflow.analysis.explanation import error_document
    from gradflow.engine.prepare import asked_leaves

    defaults = defaults or Defaults()
    wrt = job.wrt if job is not None and job.wrt is not None else defaults.wrt
    dtype = job.dtype if job is not None and job.dtype else defaults.dtype
    return {"id": rid, "line": number, **error_document(error, source, asked_leaves(source, wrt, defaults.limits),
                                                        dtype, defaults.device, defaults.brief)}


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
        seen = _peek(number, line, text)
        return error_record(seen.id, number, seen.expr, err, seen, defaults)
    except Exception as exc:  # a bug in reading one line must not sink the whole batch either
        if debug:
            raise
        seen = _peek(number, line, text)
        return error_record(seen.id, number, seen.expr, internal_error(exc), seen, defaults)
    try:
        return evaluate_job(job, number, defaults)
    except GradflowError as err:
        return error_record(job.id, number, job.expr, err, job, defaults)
    except Exception as exc:  # a bug must not sink the whole batch (unless debugging)
        if debug:
            raise
        return error_record(job.id, number, job.expr, internal_error(exc), job, defaults)


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
    A line given as a GradflowError (batch_lines.read_lines: not UTF-8, too long) yields that
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
