"""A batch line's record: what `gradflow batch` writes for one input line, and its JSON line.

A good line's record is its id and line number plus `eval --json`'s fields. Every other line yields exactly one
record too: a line that cannot be read or evaluated gets an error record (an exception from reading or
evaluating one line becomes that line's error record, an `internal` one for a bug), never the end of the
batch; so does a line whose worker process died while evaluating it (`crashed`). Values given once (the command
line's `--x 1`, `Defaults`) are only handed to programs that use that variable; a line's own "vars" override
them. Parsing goes through `compile_program`, so a repeated program is parsed once. Torch-free until the first
line is evaluated.

`dumps_record` is the encoder `batch --jobs N`'s workers run: it lives here, not beside the Typer command, so
that the fork server that preloads its module does not import Typer and the command's options with it.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gradflow.batch.lines import Job, peek, read_job
from gradflow.errors import GradflowError, ValueInputError
from gradflow.limits import Limits, as_limits, using
from gradflow.values.jsonable import document

Out = tuple[int, str, str | None, str | None]  # a record as the command writes it: (line number, the record as
#                                                one JSON line, its error kind or None, its program's source)


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


def evaluate_job(job: Job, number: int, defaults: Defaults) -> dict:
    """The record of one job: its id plus `eval --json`'s fields. Raises GradflowError."""
    from gradflow.engine.explain import check_arguments, explain_checked  # torch: with the first record
    from gradflow.language.compile import compile_program

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
    job = None
    try:
        job = read_job(number, line, text)
        return evaluate_job(job, number, defaults)
    except Exception as exc:  # a bug in one line must not sink the whole batch either (unless debugging)
        if debug and not isinstance(exc, GradflowError):
            raise
        seen = job or peek(number, line, text)
        error = exc if isinstance(exc, GradflowError) else internal_error(exc)
        return error_record(seen.id, number, seen.expr, error, seen, defaults)


def dumps_record(rec: dict, debug: bool, brief: bool = False) -> str:
    """A record as one JSON line; if even that fails (a bug), the line's error record instead. `brief`: every
    record without the keys a brief record leaves out, also those made outside run_batch (a worker that died)."""
    from gradflow.values.jsonable import dumps

    if brief and "nodes" in rec:
        from gradflow.analysis.explanation import brief_document

        rec = brief_document(rec)
    try:
        return dumps(rec)
    except Exception as exc:
        if debug:
            raise
        return dumps_record(error_record(rec.get("id"), rec.get("line", 0), rec.get("source"), internal_error(exc)),
                            True, brief)


def out(rec: dict, encode: Callable[[dict], str]) -> Out:
    """A record, encoded, with what the command needs besides: its error kind (to count failed lines) and its
    program's source (to see which command-line values some program used)."""
    error, source = rec["error"], rec.get("source")
    return (rec["line"], encode(rec), None if error is None else error["kind"],
            source if isinstance(source, str) else None)
