"""`--brief` on `eval` and `batch`: the answer only. A brief record is the full record less "nodes", "edges" and
"contributions", error records included; exit codes do not change. Numbers are hand-derived:
L = (x*y1 - detach(x*y2))^2 at x=1, y1=2, y2=7 is 25 and dL/dx = 2*(2 - 7)*2 = -20."""
import json

import pytest
from typer.testing import CliRunner

from gradflow.cli.app import app

BLOG = ["(x*y1 - detach(x*y2))^2", "--x", "1", "--y1", "2", "--y2", "7"]
GRAPH_KEYS = ("nodes", "edges", "contributions")
LINES = "\n".join([
    json.dumps({"id": "blog", "expr": "(x*y1 - detach(x*y2))^2", "vars": {"x": 1, "y1": 2, "y2": 7}}),
    json.dumps({"expr": "detach(x)*2", "vars": {"x": 1}}),  # no gradient reaches x: an answer (exit 0 counts it as done)
    json.dumps({"expr": "sum(x*x)", "vars": {"x": [1, 2, 3]}}),
    json.dumps({"expr": "x*y1", "vars": {"x": 1, "y1": 2, "y2": 7}}),  # an unused value: a warning
    json.dumps({"expr": "log(x)", "vars": {"x": 0}}),  # -inf forward, nonfinite warnings
    "x +* 2",  # not JSON
    json.dumps({"expr": "x +* 2", "vars": {"x": 1}}),  # a syntax error with its source
]) + "\n"


def invoke(args, stdin=None):
    return CliRunner().invoke(app, args, input=stdin)


def _less_graph(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in GRAPH_KEYS}


def test_eval_brief_prints_the_output_and_the_grads_only():
    res = invoke(["eval", *BLOG, "--brief"])
    assert (res.exit_code, res.stdout) == (0, "L = 25\nx.grad = -20\n")
    res = invoke(["eval", "detach(x)*y", "--x", "1", "--y", "2", "--wrt", "x", "--brief"])
    assert res.exit_code == 3  # as without --brief
    assert res.stdout == "L = 2\nx.grad = None  (every path from x to L is cut by detach(x))\n"


@pytest.mark.parametrize("args", [BLOG, ["detach(x)*y", "--x", "1", "--y", "2", "--wrt", "x"], ["x +* 2", "--x", "1"],
                                  ["sum(w*x)", "--w", "[1,2]", "--x", "[3,4]", "--wrt", "all"], ["x=-1:1:3"]])
def test_eval_brief_json_is_the_full_document_less_the_graph(args):
    if args == ["x=-1:1:3"]:
        args = ["x^2", "--x=-1:1:3"]
    full, brief = invoke(["eval", *args, "--json"]), invoke(["eval", *args, "--json", "--brief"])
    assert brief.exit_code == full.exit_code
    fulls = [json.loads(line) for line in full.stdout.splitlines()]
    briefs = [json.loads(line) for line in brief.stdout.splitlines()]
    assert briefs == [_less_graph(d) for d in fulls] and len(briefs) >= 1
    assert [list(d) for d in briefs] == [list(_less_graph(d)) for d in fulls]  # the keys in the same order


@pytest.mark.parametrize("option", [["--flows"], ["--check"], ["--order", "2"], ["--graph", "tree"]])
def test_eval_brief_refuses_the_views_that_need_the_graph(option):
    res = invoke(["eval", *BLOG, "--brief", *option, "--json"])
    name = " ".join(option[:1] + (["2"] if option[0] == "--order" else []))
    assert res.exit_code == 2
    assert f"error: --brief leaves out the nodes and edges that {name} needs" in res.stderr
    doc = json.loads(res.stdout)
    assert doc["error"]["kind"] == "usage" and doc["source"] == BLOG[0] and "nodes" not in doc


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_batch_brief_records_are_the_full_records_less_the_graph(jobs):
    full, brief = invoke(["batch", "-", "--jobs", "1"], LINES), invoke(["batch", "-", "--brief", "--jobs", jobs], LINES)
    assert (full.exit_code, brief.exit_code) == (4, 4) and full.stderr == brief.stderr  # "2 of 7 lines failed"
    fulls = [json.loads(line) for line in full.stdout.splitlines()]
    briefs = [json.loads(line) for line in brief.stdout.splitlines()]
    assert len(briefs) == 7 and briefs == [_less_graph(d) for d in fulls]
    assert (briefs[0]["output"]["value"], briefs[0]["grads"]) == (25.0, {"x": -20.0})
    assert briefs[2]["grads"] == {"x": [2.0, 4.0, 6.0]}  # d sum(x*x)/dx = 2x
    assert briefs[1]["why"] == {"x": "every path from x to L is cut by detach(x)"}


def test_batch_brief_strips_records_made_outside_run_batch():
    """A record the pool makes itself (a worker that died: crashed_record) loses the graph keys too."""
    from gradflow.batch.records import crashed_record, dumps_record

    rec = crashed_record(3, '{"expr": "x*2"}', False, "was killed")
    assert "nodes" in rec
    assert list(json.loads(dumps_record(rec, False, brief=True))) == [k for k in rec if k not in GRAPH_KEYS]
