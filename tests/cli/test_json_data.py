"""JSON carries the data: every `--json` output prints every tensor in full, whatever its size, so a consumer's
type never changes with size; summaries only with --summary; over the `json` limit an error (exit 2), never a
silent summary.

Oracle: sum(x*y) with x = ones(N) and y = 3 gives dL/dx = y = 3 for every element and dL/dy = sum(x) = N (by
hand); N = 1,200 is over the old 1,000-element summary threshold.
"""
import json
import textwrap

import pytest
from typer.testing import CliRunner

from gradflow import explain
from gradflow.cli.app import app
from gradflow.errors import LimitError
from gradflow.limits import JSON_FULL_MAX, MAX_JSON_ELEMENTS

N = 1200
PROGRAM, VALUES = "sum(x*y)", ["--x", f"ones({N})", "--y", "3"]
SCRIPT = f"""\
    import torch
    x = torch.ones({N}, requires_grad=True)
    loss = (x * 3).sum()
    loss.backward()
    """


def _run(args, stdin=None):
    return CliRunner().invoke(app, args, input=stdin)


def _docs(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def _x_grads(name: str, tmp_path, extra: list[str]) -> list:
    """dL/dx as each --json output carries it (one per record)."""
    if name == "eval":
        return [d["grads"]["x"] for d in _docs(_run(["eval", PROGRAM, *VALUES, "--json", *extra]).stdout)]
    if name == "sweep":
        res = _run(["eval", PROGRAM, "--x", f"ones({N})", "--y=3:4:2", "--json", *extra])
        return [d["grads"]["x"] for d in _docs(res.stdout)]
    if name == "batch":
        line = json.dumps({"expr": PROGRAM, "vars": {"x": f"ones({N})", "y": 3}})
        return [d["grads"]["x"] for d in _docs(_run(["batch", *extra], line + "\n").stdout)]
    if name == "whatif":
        doc = _docs(_run(["whatif", PROGRAM, *VALUES, "--json", *extra]).stdout)[0]
        return [doc["current"]["grads"]["x"]]
    if name == "compare":
        doc = _docs(_run(["compare", PROGRAM, "sum(x)*y", *VALUES, "--json", *extra]).stdout)[0]
        return [row["grads"]["x"] for row in doc["rows"]]
    path = tmp_path / "s.py"
    path.write_text(textwrap.dedent(SCRIPT))
    doc = _docs(_run(["script", str(path), "--json", *extra]).stdout)[0]
    return [doc["grads"]["x"], doc["tensors"][0]["grad"]]


COMMANDS = ["eval", "sweep", "batch", "whatif", "compare", "script"]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_json_output_prints_big_tensors_in_full(name, tmp_path):
    grads = _x_grads(name, tmp_path, [])
    assert grads and all(g == [3.0] * N for g in grads[:1]), str(grads)[:300]
    assert all(isinstance(g, list) and len(g) == N for g in grads)  # the type never depends on the size


@pytest.mark.parametrize("name", COMMANDS)
def test_summary_is_opt_in(name, tmp_path):
    grads = _x_grads(name, tmp_path, ["--summary"])
    assert grads[0] == {"shape": [N], "dtype": "float32", "mean": 3.0, "min": 3.0, "max": 3.0,
                        "norm": pytest.approx(3 * N ** 0.5)}


@pytest.mark.parametrize("args", [
    ["eval", PROGRAM, *VALUES, "--json"],
    ["eval", PROGRAM, "--x", f"ones({N})", "--y=3:4:2", "--json"],
    ["whatif", PROGRAM, *VALUES, "--json"],
    ["compare", PROGRAM, "sum(x)*y", *VALUES, "--json"],
], ids=["eval", "sweep", "whatif", "compare"])
def test_over_the_json_limit_is_an_error_never_a_summary(args):
    res = _run([*args, "--limit", f"json={N}"])  # x alone has N elements; its grad N more
    assert res.exit_code == 2, res.output
    error = _docs(res.stdout)[0]["error"]
    assert error["kind"] == "limit_json"
    assert error["message"] == (f"the JSON output would print more than {N:,} tensor elements in full; "
                                f"the limit is {N:,}")
    assert "--summary" in error["hint"] and f"--limit json={10 * N}" in error["hint"]
    assert "error: the JSON output would print more than" in res.stderr
    ok = _run([*args, "--limit", f"json={10 * N}"])  # the hint's figure is enough
    assert ok.exit_code == 0, ok.output


def test_over_the_json_limit_in_batch_and_script(tmp_path):
    lines = json.dumps({"expr": PROGRAM, "vars": {"x": f"ones({N})", "y": 3}}) + "\n" + '"x*2"\n'
    res = _run(["batch", "--limit", f"json={N}", "--x", "5"], lines)
    first, second = _docs(res.stdout)
    assert (first["error"]["kind"], first["source"], first["grads"]) == ("limit_json", PROGRAM, {})
    assert (second["error"], second["grads"]) == (None, {"x": 2.0})  # the other lines go on
    assert res.exit_code == 4
    path = tmp_path / "s.py"
    path.write_text(textwrap.dedent(SCRIPT))
    res = _run(["script", str(path), "--json", "--limit", f"json={N}"])
    assert res.exit_code == 2 and _docs(res.stdout)[-1]["error"]["kind"] == "limit_json"


def test_the_default_limit_stops_a_huge_document_before_it_is_built():
    result = explain("sum(x)", x=f"ones({MAX_JSON_ELEMENTS + 1})")
    with pytest.raises(LimitError) as err:
        result.to_dict()
    assert err.value.kind == "limit_json" and f"{MAX_JSON_ELEMENTS:,}" in err.value.message
    assert MAX_JSON_ELEMENTS == 10_000_000


def test_full_and_summary_together_is_a_usage_error():
    res = _run(["eval", PROGRAM, *VALUES, "--json", "--full", "--summary"])
    assert res.exit_code == 2
    assert "--full and --summary contradict each other" in res.stderr


def test_the_summary_threshold_is_unchanged():
    small = _docs(_run(["eval", "sum(x)", "--x", f"ones({JSON_FULL_MAX})", "--json", "--summary"]).stdout)[0]
    assert small["grads"]["x"] == [1.0] * JSON_FULL_MAX
