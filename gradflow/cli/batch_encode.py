"""`gradflow batch`'s records as JSON lines: the encoder its workers run (batch_pool), in a module of its own so
that the fork server of `--jobs N`, which preloads the encoder's module before it forks a worker, does not import
Typer and the command's options with it (which would delay the first worker)."""
from __future__ import annotations


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
        from gradflow.studies.batch import error_record, internal_error

        return dumps_record(error_record(rec.get("id"), rec.get("line", 0), rec.get("source"), internal_error(exc)),
                            True, brief)
