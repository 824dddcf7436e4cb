"""Sweeps (`eval --x START:STOP:COUNT`, gradflow.sweep) checked point by point against SymPy."""
import json
import math

import pytest
import sympy as sp

from gradflow import sweep
from gradflow.errors import LimitError, ValueInputError
from gradflow.values.specs import parse_sweep

from ..processes import PYTHON, child, run

X, Y1, Y2, CUT = sp.symbols("x y1 y2 cut")
BLOG_Y = {"y1": 2, "y2": 7}
# detach(x*y2) is a constant to differentiation: differentiate with a stand-in symbol, then substitute.
FORMS = {
    "(x*y1 - x*y2)^2": ((X * Y1 - X * Y2) ** 2, None),
    "(x*y1 - detach(x*y2))^2": ((X * Y1 - CUT) ** 2, X * Y2),
}


def oracle(expr: str, x: float) -> tuple[float, float]:
    f, cut = FORMS[expr]
    env = {X: x, Y1: 2, Y2: 7}
    grad = sp.diff(f, X)
    if cut is not None:
        f, grad = f.subs(CUT, cut), grad.subs(CUT, cut)
    return float(f.subs(env)), float(grad.subs(env))


def _flat(text: str) -> str:
    """Messages as one line (rich wraps stderr at 80 columns under CliRunner)."""
    return " ".join(text.split())


def _strict(text: str):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


@pytest.mark.parametrize("expr", FORMS)
def test_api_against_sympy(expr):
    r = sweep(expr, "x", -2, 2, 41, dtype="float64", **BLOG_Y)
    assert len(r.values) == 41 and r.values[0] == -2 and r.values[-1] == 2 and r.values[20] == 0
    for x, L, g in zip(r.values, r.outputs(), r.grads("x")):
        want_L, want_g = oracle(expr, x)
        assert L == pytest.approx(want_L, rel=1e-12, abs=1e-12)
        assert g == pytest.approx(want_g, rel=1e-12, abs=1e-12)


def test_cut_changes_the_slope():
    """Same L everywhere, but the slope is 50x undetached and -20x with x*y2 detached."""
    full = sweep("(x*y1 - x*y2)^2", "x", -1, 1, 5, dtype="float64", **BLOG_Y)
    cut = sweep("(x*y1 - detach(x*y2))^2", "x", -1, 1, 5, dtype="float64", **BLOG_Y)
    assert full.outputs() == cut.outputs() == [25.0, 6.25, 0.0, 6.25, 25.0]
    assert full.grads("x") == [-50.0, -25.0, 0.0, 25.0, 50.0]
    assert cut.grads("x") == [20.0, 10.0, 0.0, -10.0, -20.0]


@pytest.mark.parametrize("expr", FORMS)
def test_cli_json_lines_against_sympy(cli, expr):
    res = cli("eval", expr, "--x=-2:2:41", "--y1", "2", "--y2", "7", "--json")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.endswith("\n") and "\n\n" not in res.stdout
    lines = res.stdout.splitlines()
    assert len(lines) == 41
    for i, line in enumerate(lines):
        doc = _strict(line)
        x = -2 + 0.1 * i
        assert doc["sweep"] == {"var": "x", "index": i, "value": pytest.approx(x, abs=1e-12)}
        want_L, want_g = oracle(expr, x)
        assert doc["output"]["value"] == pytest.approx(want_L, rel=1e-5, abs=1e-5)
        assert doc["grads"]["x"] == pytest.approx(want_g, rel=1e-5, abs=1e-5)
        assert {"schema", "source", "nodes", "edges", "why", "warnings", "error"} <= set(doc)


def test_cli_table(cli):
    res = cli("eval", "(x*y1 - detach(x*y2))^2", "--x=-1:1:3", "--y1", "2", "--y2", "7", "--wrt", "all")
    assert res.exit_code == 0, res.stderr
    rows = [ln.split() for ln in res.stdout.splitlines()]
    assert ["x", "L", "dL/dx", "dL/dy1", "dL/dy2"] in rows
    assert ["-1", "25", "20", "-10", "—"] in rows  # dL/dy1 = 2(x*y1 - x*y2)*x; y2 only under detach
    assert ["1", "25", "-20", "-10", "—"] in rows
    assert "cut: x*y2 → detach(x*y2)" in res.stdout


def test_non_finite_points_in_json_are_strings(cli):
    res = cli("eval", "log(x)", "--x=-1:1:3", "--json")
    assert res.exit_code == 0, res.stderr
    docs = [_strict(ln) for ln in res.stdout.splitlines()]
    assert [d["output"]["value"] for d in docs] == ["nan", "-inf", 0.0]
    assert [d["grads"]["x"] for d in docs] == [-1.0, "inf", 1.0]


def test_terminal_plot_drops_non_finite_points(cli):
    res = cli("eval", "log(x)", "--x=-1:1:21", "--plot")
    assert res.exit_code == 0, res.stderr
    assert "L against x" in res.stdout and "dL/dx against x" in res.stdout
    # x = -1 .. -0.1 give nan and x = 0 gives -inf: 11 of 21 for L; only x = 0 (inf) for dL/dx
    assert "L: dropped 11 of 21 points" in _flat(res.stderr)
    assert "dL/dx: dropped 1 of 21 points" in _flat(res.stderr)


def test_plot_series_never_holds_non_finite():
    from gradflow.render.plot import series

    for s in series(sweep("log(x)", "x", -1, 1, 21)):
        assert s.ys and all(math.isfinite(y) for y in s.ys)
        assert len(s.xs) == len(s.ys) == 21 - s.dropped


def test_plot_with_nothing_finite(cli):
    res = cli("eval", "log(x)", "--x=-3:-1:5", "--plot")
    assert res.exit_code == 0, res.stderr
    assert "L: nothing to plot, all 5 points are nan/inf" in _flat(res.stderr)


def test_plot_picture(cli, tmp_path):
    pytest.importorskip("matplotlib")
    for name in ("sweep.png", "sweep.svg"):
        out = tmp_path / name
        res = cli("eval", "log(x)", "--plot", str(out), "--x=-1:1:21")
        assert res.exit_code == 0, res.stderr
        data = out.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") if name.endswith(".png") else b"<svg" in data
        assert f"wrote {out}" in res.stderr.replace("\n", "")  # a long path wraps without spaces


def test_plot_picture_without_matplotlib(cli, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    res = cli("eval", "x^2", "--x=-1:1:5", "--plot", str(tmp_path / "a.png"))
    assert res.exit_code == 2
    assert "needs matplotlib" in _flat(res.stderr) and "gradflow[plot]" in res.stderr
    assert not (tmp_path / "a.png").exists()


@pytest.mark.parametrize("args,message", [
    (["--x=-1:1:3", "--y=0:1:2"], "only one variable can be swept"),
    (["--x", "1", "--y", "2", "--plot"], "no value is a sweep"),
    (["--x=-1:1:3", "--y", "2", "--plot", "--json"], "would both write to stdout"),
    (["--x=-1:1:3", "--y", "2", "--plot", "out.txt"], "cannot tell the picture format"),
    (["--x=-1:1:1000000", "--y", "2"], "the limit is 100,000"),
])
def test_cli_usage_errors(cli, args, message):
    res = cli("eval", "x*y", *args)
    assert res.exit_code == 2
    assert message in _flat(res.stderr)
    assert "Traceback" not in res.stderr


def test_sweep_text_elsewhere_is_refused():
    from gradflow import explain

    with pytest.raises(ValueInputError, match="only `gradflow eval` and gradflow.sweep"):
        explain("x*y", x=1, y="0:1:5")


def test_no_gradient_sweep_exits_3(cli):
    res = cli("eval", "(detach(x*y1) - detach(x*y2))^2", "--x=-1:1:3", "--y1", "2", "--y2", "7")
    assert res.exit_code == 3
    assert "does not require grad" in _flat(res.stderr)


def test_parse_sweep_and_api_errors():
    r = parse_sweep("x", "-2:2:5")
    assert r.points() == [-2.0, -1.0, 0.0, 1.0, 2.0]
    assert parse_sweep("x", "0.5:0.5:1").points() == [0.5]
    assert parse_sweep("x", "1.5") is None and parse_sweep("x", "[1,2]") is None
    with pytest.raises(ValueInputError):
        parse_sweep("x", "0:1:0")
    with pytest.raises(LimitError):
        parse_sweep("x", "0:1:100001")
    with pytest.raises(ValueInputError):
        sweep("x^2", "x", 0, 1, 2.5)


def test_records_and_to_dict_are_strict_json():
    r = sweep("sum(x*w)", "x", 0, 1, 3, w="[1, 2]", wrt="all")
    recs = r.records()
    assert [rec["sweep"]["value"] for rec in recs] == [0.0, 0.5, 1.0]
    assert [rec["grads"]["w"] for rec in recs] == [[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]]
    d = _strict(json.dumps(r.to_dict(), allow_nan=False))
    assert d["output"] == [0.0, 1.5, 3.0] and d["grads"]["x"] == [3.0, 3.0, 3.0]


def _run(code: str, **kw):
    return child(PYTHON + ["-c", code], text=True, **kw)


def test_errors_before_evaluating_stay_torch_free():
    with _run("import sys\nfrom gradflow.cli.app import app\n"
              "for args in (['x*', '--x', '0:1:3'], ['x*y', '--x', '0:1:3', '--y', 'randm(3)'],\n"
              "             ['x*y', '--x', '0:1:3', '--y', 'ones(-1)']):\n"
              "    try:\n        app(['eval', *args])\n    except SystemExit as e:\n        print(e.code)\n"
              "print('torch' in sys.modules, 'rich.console' in sys.modules)") as proc:
        out, err = proc.communicate(timeout=60)
    assert out.split() == ["2", "2", "2", "False", "False"], err


@pytest.mark.slow
def test_json_lines_into_a_closed_pipe():
    """`gradflow eval ... --json | head -1`: the sweep stops quietly, no 'Exception ignored'."""
    with _run("from gradflow.cli.app import run; import sys\n"
              "sys.argv = ['gradflow', 'eval', 'x^2', '--x=0:1:100000', '--json']\nrun()") as proc:
        first = proc.stdout.readline()
        proc.stdout.close()
        assert _strict(first)["sweep"]["index"] == 0
        assert proc.wait(timeout=120) == 0
        err = proc.stderr.read()
    assert "Exception ignored" not in err and "Traceback" not in err and "internal error" not in err


def test_keep_false_keeps_only_rows():
    r = sweep("x^2", "x", 0, 1, 3, keep=False)
    assert r.points == [] and r.records() == []
    assert r.outputs() == [0.0, 0.25, 1.0] and r.grads("x") == [0.0, 1.0, 2.0]


def test_random_fixed_values_are_drawn_once():
    """w = randn(3) is built once, before the sweep: dL/dx = sum(w) is the same at every point."""
    from gradflow import explain

    r = sweep("x*sum(w)", "x", -1, 1, 4, w="randn(3)", seed=4, dtype="float64")
    w = explain("x*sum(w)", x=0.0, w="randn(3)", seed=4, dtype="float64").node("w").value
    assert r.grads("x") == [pytest.approx(w.sum().item(), rel=1e-15)] * 4
    assert r.outputs() == pytest.approx([x * w.sum().item() for x in r.values], rel=1e-15)


def test_sweep_with_file_and_picture(cli, tmp_path):
    """With --file, Click puts the first leftover (here the picture's name) into EXPR: it is put back."""
    pytest.importorskip("matplotlib")
    prog, pic = tmp_path / "prog.txt", tmp_path / "f.png"
    prog.write_text("(x*y1 - detach(x*y2))^2\n")
    res = cli("eval", "--file", str(prog), "--plot", str(pic), "--x=-1:1:3", "--y1", "2", "--y2", "7")
    assert res.exit_code == 0, res.stderr
    assert pic.read_bytes().startswith(b"\x89PNG")
    res = cli("eval", "--file", str(prog), "--x=-1:1:3", "--y1", "2", "--y2", "7")
    assert res.stdout.splitlines()[0] == "L = (x*y1 - detach(x*y2))^2, sweeping x (3 points)"


def test_table_rows_stream_as_points_are_computed(cli, monkeypatch):
    """Each row of the table goes out as soon as its point is computed (`| head -3` needs no more points):
    the 60th row is written while the 60th point is the last one evaluated. Values against SymPy."""
    import gradflow.cli.sweep_output as out
    import gradflow.engine.evaluate as engine

    evaluated, written = [0], []
    real_evaluate, real_write = engine.evaluate, out._write_line

    def counting(*a, **kw):
        evaluated[0] += 1
        return real_evaluate(*a, **kw)

    def recording(line: str):
        written.extend((text, evaluated[0]) for text in line.split("\n"))
        real_write(line)

    monkeypatch.setattr(engine, "evaluate", counting)
    monkeypatch.setattr(out, "_write_line", recording)
    res = cli("eval", "(x*y1 - detach(x*y2))^2", "--x=-2:2:201", "--y1", "2", "--y2", "7")
    assert res.exit_code == 0, res.stderr
    rows = [(text.split(), when) for text, when in written if text.strip() and text.split()[0][0] in "-0123456789"]
    assert len(rows) == 201
    assert [when for _, when in rows[60:]] == list(range(61, 202))  # row i out right after point i
    assert rows[0][1] <= out._TableStream.BLOCK  # the first rows wait for the first block at most
    for cells, _ in rows[::25]:
        x = float(cells[0])
        assert [float(c) for c in cells[1:]] == pytest.approx(oracle("(x*y1 - detach(x*y2))^2", x), rel=1e-3)
    title, blank, header = res.stdout.splitlines()[:3]
    assert (title, blank, header.split()) == ("L = (x*y1 - detach(x*y2))^2, sweeping x (201 points)", "",
                                              ["x", "L", "dL/dx"])


def test_a_printed_sweep_keeps_no_rows(monkeypatch):
    """The CLI asks run_sweep for no rows unless it plots: memory does not grow with the number of points."""
    from gradflow.studies import sweeps

    kept, real = [], sweeps.run_sweep

    def spy(*a, **kw):
        result = real(*a, **kw)
        kept.append(len(result.rows))
        return result

    monkeypatch.setattr(sweeps, "run_sweep", spy)
    from typer.testing import CliRunner

    from gradflow.cli.app import app

    for extra in ([], ["--json"]):
        res = CliRunner().invoke(app, ["eval", "x^2", "--x=0:1:30", *extra])
        assert res.exit_code == 0, res.stderr
    assert kept == [0, 0]


@pytest.mark.slow
def test_a_table_sweep_into_head_returns_at_once():
    """The issue's command: 100,000 points into `| head -3` took minutes (the table waited for every point)."""
    res = run(["bash", "-c", f'{PYTHON[0]} -m gradflow eval "(x*y1 - detach(x*y2))^2" --x=-2:2:100000 --y1 2 '
                             '--y2 7 | head -3'], timeout=30)
    assert res.returncode == 0, res.stderr
    title, blank, header = res.stdout.decode().splitlines()
    assert (title, blank, header.split()) == ("L = (x*y1 - detach(x*y2))^2, sweeping x (100000 points)", "",
                                              ["x", "L", "dL/dx"])
