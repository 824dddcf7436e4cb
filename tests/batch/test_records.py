"""The records of good and bad lines, in one process and in worker processes: one record per non-blank line, in
order, each failed line's error record saying what is wrong. Oracle: hand-derived values (d(a*x + b)/dx = a,
d(x*y)/dx = y), and the records one process makes for those `--jobs 2` makes."""
import json

import pytest

from gradflow.batch import run_batch
from gradflow.limits import as_limits

LINES = [
    "\ufeff" + json.dumps({"id": "a", "expr": "3*x + 1", "vars": {"x": 2}}),  # a byte-order mark on line 1
    json.dumps("x*y"),
    "",
    json.dumps({"id": 4, "expr": "(x*", "vars": {"x": 1}}),  # a syntax error
    '{"expr": "x*2", "vars": {"x": 1}',  # not JSON
    json.dumps({"id": 6, "expr": "x*y", "colour": "red"}),  # an unknown field
    json.dumps({"id": 7, "expr": "sum(w)", "vars": {"w": "ones(40,40)"}}),  # over the elements limit
    json.dumps({"expr": "detach(x)*5", "vars": {"x": 2}}),  # no gradient: an answer
    json.dumps({"id": 9, "expr": "x*y", "vars": {"x": 2, "y": 5}}),  # a program seen above
    json.dumps({"id": 10, "expr": 42}),  # no program
    json.dumps({"id": 11, "expr": "x*" + "+".join(["1"] * 600)}),  # over the length limit
]
OPTIONS = {"values": {"x": "3", "y": "4"}, "limits": as_limits({"elements": 1000, "length": 1000})}


def records(lines, first=1, **options):
    return [json.dumps(r) for r in run_batch(lines, first_line=first, **{**OPTIONS, **options})]


def test_good_and_bad_lines_each_get_their_record():
    got = [json.loads(r) for r in records(LINES)]
    assert (got[0]["id"], got[0]["output"]["value"], got[0]["grads"]["x"]) == ("a", 7.0, 3.0)
    assert (got[1]["output"]["value"], got[1]["grads"]["x"]) == (12.0, 4.0)  # the defaults x=3, y=4
    assert [(r["line"], r["error"]["kind"]) for r in got if r["error"]] == [
        (4, "syntax"), (5, "bad_json"), (6, "bad_record"), (7, "limit_elements"), (8, "no_gradient"),
        (10, "bad_record"), (11, "limit_length")]
    assert (got[2]["source"], got[4]["source"]) == ("(x*", "x*y")  # as written, also where the record failed
    assert got[7]["grads"]["x"] == 5.0  # the line's own y


def test_text_mode_and_a_shard_numbered_from_line_5():
    lines = ["\ufeffx*y", "  2*x  ", "x^", ""]  # line 5 first: its byte-order mark is not skipped
    got = [json.loads(r) for r in records(lines, first=5, text=True)]
    assert [(r["line"], r["error"] and r["error"]["kind"]) for r in got] == [(5, "syntax"), (6, None), (7, "syntax")]
    assert got[1]["grads"]["x"] == 2.0


@pytest.mark.slow
def test_worker_processes_make_the_records_one_process_makes():
    """Real worker processes, good lines and errors among them: the same records, in the same order."""
    from functools import partial

    from gradflow.batch.pool import records_out
    from gradflow.batch.worker import forget_forkserver
    from gradflow.values.jsonable import dumps

    forget_forkserver()  # one left running by an earlier test in this process would be another's
    lines = [json.dumps({"id": i, "expr": f"{i % 7 + 1}*x + {i}", "vars": {"x": i % 5}}) for i in range(300)]
    lines[10] = json.dumps({"id": 10, "expr": "(x*"})
    lines[20] = "not json"
    encode = partial(dumps)
    one = list(records_out(lines, 1, encode, **OPTIONS))
    two = list(records_out(lines, 2, encode, **OPTIONS))
    assert two == one
    got = [json.loads(text) for _, text, _, _ in two]
    assert [r["grads"]["x"] for r in got[:3]] == [1.0, 2.0, 3.0]
    assert (got[10]["error"]["kind"], got[20]["error"]["kind"]) == ("syntax", "bad_json")


def test_the_encoder_workers_run_brings_no_typer_into_the_fork_server():
    """`batch --jobs N`'s fork server preloads the module of the encoder its workers run (pool.py): the command's
    encoder comes from gradflow.batch.records, which imports neither Typer nor the command's options."""
    from gradflow.batch.records import dumps_record
    from gradflow.cli import batch_command

    from ..processes import PYTHON, run

    assert batch_command.dumps_record is dumps_record
    res = run([*PYTHON, "-X", "importtime", "-c", "import gradflow.batch.records"], text=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}
    assert res.returncode == 0 and not {"typer", "click", "rich", "torch"} & imported
