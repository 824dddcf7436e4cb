"""Shell scripting without surprises (issue 12): one set of values for many programs, the same options on
`batch` as on `eval`, option names never taken as variables, exit codes scripts can live with, complete error
JSON. Expected numbers are hand-derived: d(x*y1)/dx = y1 = 2.
"""
import json

import pytest
from typer.testing import CliRunner

from gradflow.analysis.explanation import error_document
from gradflow.batch import run_batch
from gradflow.cli.app import app
from gradflow.errors import GradflowError

UNUSED = "a value was given for 'y2', which the program does not use"
TYPO = "a value was given for 'yy1', which the program does not use; did you mean 'y1'?"
NONE_USES = "a value was given for 'y2', which none of the programs uses"

# Every command that takes values, given one it does not use: (args, stdin, JSON flag or None)
COMMANDS = {
    "eval": (["eval", "x*y1", "--x", "1", "--y1", "2"], None, "--json"),
    "sweep": (["eval", "x*y1", "--x=0:1:2", "--y1", "2"], None, "--json"),
    "compare": (["compare", "x*y1", "x*y1*1", "--x", "1", "--y1", "2"], None, "--json"),
    "modes": (["compare", "--modes", "x*y1 - detach(x)", "--x", "1", "--y1", "2"], None, "--json"),
    "whatif": (["whatif", "x*y1", "--x", "1", "--y1", "2"], None, "--json"),
    "graph": (["graph", "x*y1", "--x", "1", "--y1", "2"], None, None),
    "batch": (["batch", "-", "--x", "1", "--y1", "2"], '"x*y1"\n', None),
}


def invoke(args, stdin=None):
    return CliRunner().invoke(app, args, input=stdin)


def warnings_of(doc: dict) -> list[str]:
    return [w["message"] for w in doc["warnings"] if w["kind"] == "unused_value"]


def grads_x(command: str, res) -> list[float]:
    """The grads of x the command printed: batch's records, eval's `x.grad = ` line."""
    if command == "batch":
        return [json.loads(line)["grads"]["x"] for line in res.stdout.splitlines()]
    if command == "eval":
        return [float(line.split("=")[1]) for line in res.stdout.splitlines() if line.startswith("x.grad =")]
    return []


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name,message", [("y2", UNUSED), ("yy1", TYPO)])
def test_an_unused_value_is_a_warning_on_stderr(command, name, message):
    args, stdin, _ = COMMANDS[command]
    res = invoke([*args, f"--{name}", "7"], stdin)
    assert res.exit_code == 0, res.stderr
    if command == "compare":
        message = message.replace("the program does not use", "none of the programs uses")
    if command == "batch":  # a command-line default: no line's program uses it
        message = message.replace("the program does not use", "no line's program uses")
    assert f"warning: {message}\n" in res.stderr
    assert "error" not in res.stderr
    assert all(g == 2.0 for g in grads_x(command, res))  # y1
    assert grads_x(command, res) or command not in ("eval", "batch")


@pytest.mark.parametrize("command", [c for c in COMMANDS if COMMANDS[c][2]])
def test_an_unused_value_is_in_the_json_warnings(command):
    args, stdin, flag = COMMANDS[command]
    res = invoke([*args, "--yy1", "7", flag], stdin)
    assert res.exit_code == 0, res.stderr
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    want = TYPO.replace("the program does not use", "none of the programs uses") if command == "compare" else TYPO
    assert all(warnings_of(d) == [want] for d in docs) and docs
    if command in ("eval", "sweep"):
        assert [d["grads"]["x"] for d in docs] == [2.0] * len(docs)  # y1


@pytest.mark.parametrize("command", COMMANDS)
def test_strict_makes_an_unused_value_an_error(command):
    args, stdin, _ = COMMANDS[command]
    res = invoke([*args, "--y2", "7", "--strict"], stdin)
    assert res.exit_code == 2, res.stdout + res.stderr
    assert "error: a value was given for 'y2'" in res.stderr
    assert "hint: did you mean 'y1'?" not in res.stderr  # y2 is no typo of y1 (difflib: too different)


def test_a_batch_records_unused_var_is_a_warning_in_its_record_or_with_strict_its_error():
    line = '{"expr": "x*y1", "vars": {"x": 1, "y1": 2, "y2": 7}}\n'  # the example
    res = invoke(["batch", "-"], line)
    (rec,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert res.exit_code == 0 and rec["error"] is None and rec["grads"] == {"x": 2.0}
    assert warnings_of(rec) == [UNUSED]
    (rec,) = run_batch(['{"expr": "x*y1", "vars": {"x": 1, "y1": 2, "yy1": 7}}'])
    assert warnings_of(rec) == [TYPO] and rec["grads"] == {"x": 2.0}
    res = invoke(["batch", "-", "--strict"], line)
    (rec,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert res.exit_code == 4 and rec["error"]["kind"] == "unknown_variable"
    assert rec["error"]["message"] == UNUSED and rec["source"] == "x*y1"


def test_a_missing_value_points_at_the_unused_one():
    res = invoke(["eval", "x*y", "--x", "1", "--yy", "2"])  # was: an error about yy; now y is missing
    assert res.exit_code == 2 and "error: no value for variable 'y'\n" in res.stderr
    assert "the value given for 'yy' is not used: a typo?" in res.stderr


def test_batch_defaults_are_for_the_lines_that_use_them():
    """A default some line uses is no warning, even where other lines do not use it; one no line uses is."""
    res = invoke(["batch", "--text", "--x", "3", "--y", "2", "--yy", "5"], "x^2\nx*y\n")
    assert res.exit_code == 0
    assert [json.loads(x)["grads"]["x"] for x in res.stdout.splitlines()] == [6.0, 2.0]  # 2x, y
    assert res.stderr == "warning: a value was given for 'yy', which no line's program uses; did you mean 'y'?\n"
    # a line that does not parse might have used it: nothing to say (as compare)
    res = invoke(["batch", "--text", "--x", "3", "--zz", "5", "--strict"], "x^2\nx^\n")
    assert res.exit_code == 4 and "zz" not in res.stderr


# ---- batch takes eval's options; an option's name is never a variable ------------------------------------


def test_batch_seed_is_the_seed_as_in_eval_not_a_variable():
    values = ["--x", "1", "--w", "randn(3)", "--seed", "3"]
    want = json.loads(invoke(["eval", "sum(w*x)", *values, "--json"]).stdout)["grads"]["x"]
    res = invoke(["batch", "--text", *values], "sum(w*x)\n")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["grads"]["x"] == want  # d/dx sum(w*x) = sum(w), w drawn with seed 3
    other = json.loads(invoke(["batch", "--text", *values[:-1], "4"], "sum(w*x)\n").stdout)["grads"]["x"]
    assert other != want
    # the example: `seed` was silently a variable (grads {"x": 3})
    res = invoke(["batch", "-", "--seed", "3", "--x", "1"], '"seed*x"\n')
    error = json.loads(res.stdout)["error"]
    assert error["kind"] == "missing_value" and res.exit_code == 4
    assert error["hint"] == "--seed is an option, so give 'seed' in the line's \"vars\" or with --var seed=VALUE"
    res = invoke(["batch", "-", "--seed", "3", "--x", "1", "--var", "seed=5"], '"seed*x"\n')
    assert json.loads(res.stdout)["grads"] == {"x": 5.0}


def test_batch_limit_dtype_and_device_as_in_eval():
    res = invoke(["batch", "--text", "--limit", "elements=2", "--x", "[1,2,3]"], "sum(x)\n")
    assert json.loads(res.stdout)["error"]["kind"] == "limit_elements"
    res = invoke(["batch", "--text", "--dtype", "float64", "--device", "cpu", "--x", "0.1"], "x*x\n")
    rec = json.loads(res.stdout)
    assert (rec["dtype"], rec["device"], rec["grads"]["x"]) == ("float64", "cpu", 0.2)  # 2x, exact in float64
    assert invoke(["batch", "--text", "--seed", "-1e3"], "x\n").exit_code == 2


def _options() -> dict[str, set[str]]:
    import typer

    group = typer.main.get_command(app)
    return {name: {o[2:] for p in c.params for o in getattr(p, "opts", []) if o.startswith("--")}
            for name, c in group.commands.items()}


VALUE_COMMANDS = {"eval": ["eval", "x"], "graph": ["graph", "x"], "whatif": ["whatif", "x"],
                  "compare": ["compare", "x"], "batch": ["batch", "--text"]}


@pytest.mark.parametrize("command", VALUE_COMMANDS)
def test_no_option_of_any_command_is_taken_as_a_variable(command):
    options = _options()
    every = set().union(*options.values()) - options[command]
    assert {"seed", "order", "text", "modes", "format"} <= every | options[command]
    for name in sorted(every):
        res = invoke([*VALUE_COMMANDS[command], "--x", "1", f"--{name}", "2"], "x\n")
        assert res.exit_code == 2, (name, res.stdout)
        assert f"error: --{name} is an option of gradflow " in res.stderr, res.stderr
        assert f"hint: a variable named {name} takes its value with --var {name}=VALUE" in res.stderr


def test_a_variable_named_like_any_commands_option_comes_through_var():
    res = invoke(["eval", "text*x", "--x", "1"])  # --text is batch's
    assert res.exit_code == 2
    assert "the variable 'text' has the name of the option --text (of gradflow batch)" in res.stderr
    res = invoke(["eval", "text*x", "--x", "1", "--var", "text=3", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["grads"] == {"x": 3.0}


# ---- exit codes: no gradient is an answer in batch and compare --------------------------------------------


def test_batch_no_gradient_is_an_answer_not_a_failure():
    res = invoke(["batch", "--text", "--x", "1"], "2*detach(x)\nx*3\n")
    recs = [json.loads(x) for x in res.stdout.splitlines()]
    assert res.exit_code == 0 and res.stderr == ""  # was 4, "1 of 2 lines failed"
    assert recs[0]["error"]["kind"] == "no_gradient" and recs[0]["grads"] == {"x": None}
    assert recs[1]["grads"] == {"x": 3.0}
    res = invoke(["batch", "--text", "--x", "1"], "2*detach(x)\nx*\n")
    assert res.exit_code == 4 and res.stderr == "1 of 2 lines failed\n"  # only the input error counts


def test_compare_no_gradient_is_an_answer_and_eval_keeps_3():
    res = invoke(["compare", "x*y", "detach(x)*y", "--x", "1", "--y", "2", "--json"])
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["exit_code"] == 0  # was 4
    assert [r["grads"]["x"] for r in doc["rows"]] == [2.0, None]
    assert invoke(["compare", "detach(x)", "--x", "1"]).exit_code == 0  # was 3
    assert invoke(["compare", "x*y", "x*", "--x", "1", "--y", "2"]).exit_code == 4
    assert invoke(["eval", "detach(x)*2", "--x", "1"]).exit_code == 3


# ---- error JSON is complete --------------------------------------------------------------------------------

KEYS = set(error_document(GradflowError("k", "m")))


def test_error_documents_carry_source_wrt_dtype_device():
    res = invoke(["eval", "x*", "--x", "1", "--dtype", "float64", "--json"])
    doc = json.loads(res.stdout)
    assert res.exit_code == 2 and set(doc) == KEYS
    assert (doc["source"], doc["wrt"], doc["dtype"], doc["device"]) == ("x*", None, "float64", "cpu")
    doc = json.loads(invoke(["eval", "x*", "--x", "1", "--wrt", "a,b", "--json"]).stdout)
    assert doc["wrt"] == ["a", "b"]  # asked for: the program does not parse
    doc = json.loads(invoke(["eval", "x*y", "--x", "1", "--json"]).stdout)  # parses: the leaves it chooses
    assert (doc["source"], doc["wrt"], doc["error"]["kind"]) == ("x*y", ["x"], "missing_value")
    doc = json.loads(invoke(["whatif", "a*b", "--a", "1", "--json"]).stdout)
    assert (doc["source"], doc["wrt"], doc["dtype"]) == ("a*b", ["a", "b"], "float32")
    doc = json.loads(invoke(["eval", "-", "--x", "1", "--json"], "x +").stdout)  # read from stdin
    assert doc["source"] == "x +"
    ok = json.loads(invoke(["eval", "x", "--x", "1", "--json"]).stdout)
    assert KEYS <= set(ok)  # an error document has the keys of a result


def test_batch_error_records_carry_what_the_line_asked():
    lines = ['{"id": "r", "expr": "x*2", "vars": {"x": 1}, "wrt": "x", "dtype": "float64", "oops": 1}',
             '{"id": "j", "expr": "x*2"',
             '{"id": "p", "expr": "x*", "dtype": "float64"}',
             '"y*x"']
    bad_record, bad_json, syntax, missing = run_batch(lines, device="cpu")
    assert bad_record["error"]["kind"] == "bad_record" and bad_record["id"] == "r"
    assert (bad_record["source"], bad_record["wrt"], bad_record["dtype"]) == ("x*2", ["x"], "float64")
    assert bad_json["error"]["kind"] == "bad_json" and bad_json["source"] is None and bad_json["id"] == 1 + 1
    assert (syntax["source"], syntax["wrt"], syntax["dtype"], syntax["device"]) == ("x*", None, "float64", "cpu")
    assert (missing["source"], missing["wrt"], missing["error"]["kind"]) == ("y*x", ["x"], "missing_value")
    assert all(set(r) == KEYS | {"id", "line"} for r in (bad_record, bad_json, syntax, missing))


def test_the_python_api_warns_too_and_strict_raises():
    from gradflow import ValueInputError, explain, sweep, whatif

    result = explain("x*y1", x=1, y1=2, y2=7)
    assert result.grad("x") == 2.0 and [w.message for w in result.warnings] == [UNUSED]
    assert [w.message for w in whatif("x*y1", x=1, y1=2, yy1=7).warnings] == [TYPO]
    swept = sweep("x*y1", "x", 0, 1, 2, y1=2, y2=7)
    assert swept.grads("x") == [2.0, 2.0] and all(w.message == UNUSED for p in swept.points for w in p.warnings)
    for run in (explain, whatif):
        with pytest.raises(ValueInputError, match="which the program does not use"):
            run("x*y1", x=1, y1=2, y2=7, strict=True)
