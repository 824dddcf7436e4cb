"""Batch mode: order, isolation, ids, exit codes, strict JSON per line, parse cache.

Expected numbers are hand-derived (see each comment), not torch against torch.
"""
import json
import math
import os
import threading

import pytest

from gradflow.batch import run_batch
from gradflow.language.compile import compile_program

from ..processes import GRADFLOW, PYTHON, child, run


def _strict(line: str) -> dict:
    def no_constants(name):
        raise AssertionError(f"non-RFC JSON constant {name}")
    return json.loads(line, parse_constant=no_constants)


def test_bad_line_in_the_middle_is_isolated():
    lines = ['"(x*y1 - detach(x*y2))^2"', "{oops", '{"id": "b", "expr": "x*y", "vars": {"x": 3, "y": 4}}']
    recs = list(run_batch(lines, values={"x": "1", "y1": "2", "y2": "7"}))
    assert [r["id"] for r in recs] == [1, 2, "b"]
    assert [r["line"] for r in recs] == [1, 2, 3]
    assert recs[0]["grads"] == {"x": -20.0}  # blog: -10 * y1
    assert recs[1]["error"]["kind"] == "bad_json" and recs[1]["grads"] == {}
    assert recs[2]["grads"] == {"x": 4.0} and recs[2]["output"]["value"] == 12.0  # d(xy)/dx = y
    assert recs[2]["error"] is None


def test_line_vars_override_defaults_and_unused_defaults_are_ignored():
    lines = ['{"expr": "x^3", "vars": {"x": 2}}', '"sin(y)"']
    a, b = run_batch(lines, values={"x": "5", "y": "0"})
    assert a["grads"] == {"x": 12.0}  # 3 x^2 at 2
    assert b["grads"] == {"y": 1.0} and b["wrt"] == ["y"]  # cos(0); x=5 is not handed to it


def test_vector_values_wrt_and_dtype():
    line = '{"expr": "sum(w*w) + 0.1*v", "vars": {"w": [1, 2, 3], "v": 0.2}, "wrt": "all", "dtype": "float64"}'
    (rec,) = run_batch([line])
    assert rec["grads"] == {"w": [2.0, 4.0, 6.0], "v": 0.1}  # 2w; exact 0.1 in float64
    assert rec["output"]["value"] == 14.0 + 0.1 * 0.2 and rec["dtype"] == "float64"


def test_text_mode_shares_values_and_numbers_lines_with_blanks():
    recs = list(run_batch(["tanh(x)", "", "  ", "x*z"], text=True, values={"x": "0.5"}))
    assert [r["id"] for r in recs] == [1, 4]  # blank lines skipped but counted
    assert recs[0]["grads"]["x"] == pytest.approx(1 - math.tanh(0.5) ** 2, rel=1e-6)
    assert recs[1]["error"]["kind"] == "missing_value" and recs[1]["source"] == "x*z"


@pytest.mark.parametrize("line,kind", [
    ('{"id": 9, "expr": "x+", "vars": {"x": 1}}', "syntax"),
    ('{"id": 9, "exp": "x"}', "bad_record"),
    ('{"id": 9, "expr": 3}', "bad_record"),
    ('{"id": 9, "expr": "x", "vars": {"x": true}}', "bad_record"),
    ('{"id": 9, "expr": "x", "vars": {"x": "abc"}}', "bad_value"),
    ('{"id": 9, "expr": "x", "vars": {"x": [1, [2]]}}', "bad_value"),
    ('{"id": 9, "expr": "detach(x)", "vars": {"x": 1}}', "no_gradient"),
    ('{"id": 9, "expr": "x*y", "vars": {"x": 1, "y": 2}, "wrt": "q"}', "unknown_variable"),
])
def test_error_records_keep_the_id(line, kind):
    (rec,) = run_batch([line])
    assert rec["id"] == 9 and rec["line"] == 1 and rec["error"]["kind"] == kind
    assert rec["error"]["message"]


@pytest.mark.parametrize("line", ['[1, 2]', '{"id": true, "expr": "x"}', '{"id": NaN, "expr": "x"}', '1e999'])
def test_unusable_lines_fall_back_to_the_line_number(line):
    (rec,) = run_batch(["", line])
    assert rec["id"] == 2 and rec["error"]["kind"] in ("bad_record", "bad_json")


def test_repeated_expression_is_parsed_once():
    compile_program.cache_clear()
    lines = [json.dumps({"expr": "x*x*y", "vars": {"x": i, "y": 2}}) for i in range(5)]
    recs = list(run_batch(lines))
    assert [r["grads"]["x"] for r in recs] == [4.0 * i for i in range(5)]  # 2xy
    assert compile_program.cache_info().misses == 1


def test_cli_exit_codes_count_and_strict_json(cli):
    stdin = '"log(x)"\n\n"x+"\n{"id": "n", "expr": "log(x)", "vars": {"x": -1}}\n'
    res = cli("batch", "-", "--x", "2", input=stdin)
    assert res.exit_code == 4
    assert res.stderr.strip() == "1 of 3 lines failed"
    recs = [_strict(line) for line in res.stdout.splitlines()]
    assert [r["id"] for r in recs] == [1, 3, "n"]
    assert recs[0]["grads"] == {"x": 0.5}  # 1/x
    assert recs[2]["output"]["value"] == "nan" and recs[2]["grads"] == {"x": -1.0}


def test_cli_all_good_and_values_before_file(cli, tmp_path):
    f = tmp_path / "progs.txt"
    f.write_text("x*y\nx-y\n")
    res = cli("batch", "--text", "--x", "3", "--y", "5", str(f))
    assert res.exit_code == 2  # the file must come first: '--x' cannot be a file name
    res = cli("batch", str(f), "--text", "--x", "3", "--y", "5")
    assert res.exit_code == 0 and res.stderr == ""
    assert [_strict(line)["grads"] for line in res.stdout.splitlines()] == [{"x": 5.0}, {"x": 1.0}]


def test_cli_stdin_default_and_missing_file(cli):
    res = cli("batch", "--text", "--x", "3", input="x^2\n")
    assert res.exit_code == 0 and _strict(res.stdout)["grads"] == {"x": 6.0}
    res = cli("batch", "no/such/file.jsonl")
    assert res.exit_code == 2 and "cannot read" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_broken_pipe_is_quiet(tmp_path):
    f = tmp_path / "many.txt"
    f.write_text("x*y\n" * 400)  # ~400 KB of records: far more than a pipe buffer
    with child(GRADFLOW + ["batch", str(f), "--text", "--x", "1", "--y", "2"]) as proc:
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 0
    assert _strict(first.decode())["grads"] == {"x": 2.0}
    assert err == ""


def test_bad_lines_only_do_not_import_torch():
    code = ("import sys; from gradflow.batch import run_batch; "
            "r = list(run_batch(['x+', '{', '\"sin(\"'])); "
            "assert [x['error']['kind'] for x in r] == ['bad_json', 'bad_json', 'syntax'], r; "
            "assert 'torch' not in sys.modules")
    res = run(PYTHON + ["-c", code], text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.slow
def test_progress_bar_on_a_terminal_keeps_records_on_stdout(tmp_path):
    pty = pytest.importorskip("pty")

    f = tmp_path / "progs.txt"
    f.write_text("".join(f"x*{i}\n" for i in range(50)))
    main, sub = pty.openpty()  # stderr is a terminal, stdout a pipe
    chunks = []

    def drain():  # keep reading the terminal so the child never blocks on it
        while True:
            try:
                data = os.read(main, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    with child(GRADFLOW + ["batch", str(f), "--text", "--x", "2"], stderr=sub) as proc:
        os.close(sub)
        threading.Thread(target=drain, daemon=True).start()
        out = proc.stdout.read().decode()
        assert proc.wait(timeout=60) == 0
    assert [_strict(line)["grads"]["x"] for line in out.splitlines()] == [float(i) for i in range(50)]
    assert b'"grads"' not in b"".join(chunks)


def test_records_carry_the_same_fields_as_eval_json(cli):
    ok = json.loads(cli("eval", "x*y", "--x", "1", "--y", "2", "--json").stdout)
    bad = json.loads(cli("eval", "x +", "--x", "1", "--json").stdout)
    good_rec, bad_rec = run_batch(['"x*y"', '"x +"'], values={"x": 1, "y": 2})
    assert set(good_rec) == set(ok) | {"id", "line"}
    assert {k: v for k, v in good_rec.items() if k not in ("id", "line")} == ok
    assert set(bad_rec) == set(bad) | {"id", "line", "source"}
    assert bad_rec["error"] == bad["error"]


def test_non_finite_numbers_inside_vectors_stay_strict_json():
    (rec,) = run_batch(['{"expr": "sum(log(w))", "vars": {"w": [1, -1, 0]}}'])
    line = json.dumps(rec, allow_nan=False)  # raises if a NaN/inf slipped through as a float
    log_node = next(n for n in _strict(line)["nodes"] if n["name"] == "log(w)")
    assert log_node["value"] == [0.0, "nan", "-inf"]  # log 1, log -1, log 0
    assert rec["grads"]["w"] == [1.0, -1.0, "inf"]  # 1/w
