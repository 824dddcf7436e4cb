"""Output that must arrive whole whatever the terminal: real processes with a pseudo-terminal on stderr or stdout,
FORCE_COLOR, odd COLUMNS/LINES, a full disk (/dev/full), a file-size limit, an ASCII-only encoding, a Graphviz
that hangs, eight runs writing one file at the same instant.

Every run of this module is a real process forked by tests/processes.forked() from one child that imported
torch and matplotlib once; all of them start at the same instant (the concurrent writers need that anyway), so
the ~60 runs cost about one start-up. Each test then checks its own runs."""
import json
import os
import re
import shutil

import pytest

from ..processes import GRADFLOW, ROOT, forked, run

pytestmark = pytest.mark.slow

SWEEP = ["eval", "x^2", "--x=-1:1:3", "--json"]
# x^2 at x = -1, 0, 1: L = 1, 0, 1 and dL/dx = 2x = -2, 0, 2 (by hand)
SWEEP_RECORDS = [(-1.0, 1.0, -2.0), (0.0, 0.0, 0.0), (1.0, 1.0, 2.0)]
NO_ROOM = (b"error: cannot write the output: No space left on device\n"
           b"hint: make room on the disk, or send the output somewhere else\n")
BLOG = ["(x*y1 - detach(x*y2))^2", "--x", "1", "--y1", "2", "--y2", "7"]
PNG = ["graph", "x*2", "--x", "1", "--format", "png"]
HAS_DOT = shutil.which("dot") is not None

SIZES = [{"COLUMNS": "0"}, {"COLUMNS": "1"}, {"COLUMNS": "-5"}, {"COLUMNS": "abc"}, {"COLUMNS": "100000000"},
         {"COLUMNS": ""}, {"LINES": "0"}, {"LINES": "-1", "COLUMNS": "2"}, {"COLUMNS": "39", "LINES": "abc"}]
FULL = [["eval", "x*2", "--x", "1"], ["eval", "x*2", "--x", "1", "--json"], SWEEP, SWEEP[:-1],
        ["batch", "progs.txt", "--text", "--x", "2"], ["graph", "x*2", "--x", "1", "--format", "dot"],
        ["graph", "x*2", "--x", "1"], ["ops"], ["ops", "--json"], ["eval", "--help"], ["--version"],
        ["eval", "2*detach(x)", "--x", "1"]]
ASCII = [
    (["eval", *BLOG, "--check", "--flows"], ["* x ", "x.grad = -20", "x cut: x*y2 -> detach(x*y2)",
                                             "x.grad = -20 = -20 (via x*y1) + 0 (via x*y2, cut by detach(x*y2))"]),
    (["eval", "x^2", "--x=-1:1:5", "--plot"], ["L against x", "dL/dx against x", "*"]),
    (["eval", "x^2", "--x=-1:1:3"], ["L = x^2, sweeping x (3 points)", " --------------\n -1   1      -2\n"]),
    (["graph", *BLOG], ["x*y2  MulBackward0  value 7  x cut here", "^ flow -20"]),
    (["whatif", *BLOG], ["What if ... (L = (x*y1 - detach(x*y2))^2)", "remove cut"]),
    (["inspect", f"{ROOT}/examples/frozen_encoder.py:main"], ["* head.", "|x adapter.*"]),
    (["eval", "--help"], ["gradflow eval"]),
]
# x+x+...+x with 2, 4, ... 16 terms: DOT texts of different lengths, so a mix of two is never one of them
SUMS = ["+".join(["x"] * (2 * i)) for i in range(1, 9)]
CURVES = [f"x^2 + {i % 4 + 1}*x" for i in range(8)]  # 4 pictures that differ (title, curve), each written twice
FSIZE = ("import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
         "resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))")  # as a full disk would, half-way


def _jobs(tmp) -> dict[str, dict]:
    (tmp / "progs.txt").write_text("x^2\nx*3\nx^3\n")
    (tmp / "bin").mkdir()
    (tmp / "bin" / "dot").write_text("#!/bin/sh\nexec sleep 60\n")  # a Graphviz that never finishes
    (tmp / "bin" / "dot").chmod(0o755)
    for folder in ("writers", "cut_short", "slow_dot"):
        (tmp / folder).mkdir()
    (tmp / "cut_short" / "g.dot").write_text("old graph\n")
    (tmp / "cut_short" / "p.svg").write_text("old picture\n")
    jobs = {
        "sweep_pty": {"args": SWEEP, "stderr": "pty"},  # `script -qc "gradflow eval ... > sw.jsonl"`: was empty
        "sweep_forced": {"args": SWEEP, "env": {"FORCE_COLOR": "1"}},  # CI: the records went to the stderr log
        "sweep_both_pty": {"args": SWEEP, "stdout": "pty", "stderr": "pty"},  # one terminal: whole lines, no bar
        "batch_pty": {"args": ["batch", "progs.txt", "--text", "--x", "2"], "stderr": "pty"},
        "dot_forced": {"args": ["graph", "x*2", "--x", "1", "--format", "dot"], "stderr": "pty",
                       "env": {"FORCE_COLOR": "1"}},
        "json_error_full": {"args": ["eval", "x^", "--x", "1", "--json"], "stdout": "/dev/full"},
        "warning_full": {"args": ["eval", "x/0", "--x", "1"], "stderr": "/dev/full"},
        "slow_dot": {"args": ["graph", "x*2", "--x", "1", "--format", "svg", "-o", "g.svg"], "cwd": tmp / "slow_dot",
                     "env": {"PATH": f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}"},
                     "setup": "import gradflow.render.graphviz as g; g.GRAPHVIZ_SECONDS = 1"},
        "typo_ascii": {"args": ["eval", "x²", "--x", "1"], "encoding": "ascii"},  # user text: escaped, not guessed
        "png_pty": {"args": PNG, "stdout": "pty"},
        "inspect_png_pty": {"args": ["inspect", f"{ROOT}/examples/frozen_encoder.py:main", "--graph", "png"],
                            "stdout": "pty"},
        "svg_pty": {"args": ["graph", "x*2", "--x", "1", "--format", "svg"], "stdout": "pty"},
        "png_file": {"args": PNG},
        "cut_short_dot": {"args": ["graph", SUMS[3], "--x", "1", "--format", "dot", "-o", "g.dot"],
                          "cwd": tmp / "cut_short", "setup": FSIZE},
        "cut_short_svg": {"args": ["eval", "x^2", "--x=-1:1:3", "--plot", "p.svg"], "cwd": tmp / "cut_short",
                          "setup": FSIZE},
    }
    for i, size in enumerate(SIZES):
        jobs[f"size_live{i}"] = {"args": ["eval", "x*2", "--x", "1"], "env": size}
        jobs[f"size_cut{i}"] = {"args": ["eval", "2*detach(x)", "--x", "1"], "env": size}
    for i, args in enumerate(FULL):
        jobs[f"full{i}"] = {"args": args, "stdout": "/dev/full"}
    for i, (args, _) in enumerate(ASCII):
        jobs[f"ascii{i}"] = {"args": args, "encoding": "ascii"}
    writers = tmp / "writers"  # 8 runs write out.dot and 8 out.svg at the same instant; 16 more, the references
    for i, (s, c) in enumerate(zip(SUMS, CURVES)):
        dot, svg = ["graph", s, "--x", "1", "--format", "dot", "-o"], ["eval", c, "--x=-2:2:9", "--plot"]
        jobs[f"dot_writer{i}"] = {"args": [*dot, "out.dot"], "cwd": writers}
        jobs[f"svg_writer{i}"] = {"args": [*svg, "out.svg"], "cwd": writers}
        jobs[f"dot_ref{i}"] = {"args": [*dot, f"dot{i}.dot"], "cwd": writers}
        if i < 4:
            jobs[f"svg_ref{i}"] = {"args": [*svg, f"svg{i}.svg"], "cwd": writers}
    return jobs


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    pytest.importorskip("matplotlib")
    tmp = tmp_path_factory.mktemp("runs")
    rc = tmp / "matplotlibrc"  # reproducible SVG (fixed ids, no date): a run's file compares byte for byte
    rc.write_text("svg.hashsalt: gradflow\nbackend: Agg\n")
    jobs = _jobs(tmp)
    preload = ("torch", "matplotlib.pyplot", "gradflow.cli.sweep_output", "gradflow.studies.sweeps",
               "gradflow.render.plot", "gradflow.render.node_table", "gradflow.studies.torch_graph",
               "gradflow.render.graph_text",
               "gradflow.engine.explain", "gradflow.batch.run", "gradflow.cli.files", "typer._adapters",
               "pydantic", "plotille", "rich.progress", "rich.tree")
    warm = [["eval", "x*2", "--x", "1"], SWEEP, ["eval", "x^2", "--x=-1:1:3", "--plot", tmp / "warm.svg"],
            ["graph", "x*2", "--x", "1", "--format", "dot"], ["batch", tmp / "progs.txt", "--text", "--x", "2"]]
    results = forked(list(jobs.values()), tmp, preload=preload, warm=warm,
                     env={"MATPLOTLIBRC": str(rc), "SOURCE_DATE_EPOCH": "0"})
    return tmp, dict(zip(jobs, results))


def sweep_records(stdout: bytes) -> list[tuple]:
    """(x, L, dL/dx) of each JSON line; every line must be one whole JSON document."""
    lines = stdout.decode().replace("\r\n", "\n").splitlines()  # a terminal writes \r\n
    docs = [json.loads(line) for line in lines]
    return [(d["sweep"]["value"], d["output"]["value"], d["grads"]["x"]) for d in docs]


# ---- machine output goes to stdout, whole, whatever the terminal ----------------------------------------------

def test_json_records_reach_stdout_with_a_terminal_on_stderr_or_force_color(ran):
    _, runs = ran
    for name in ("sweep_pty", "sweep_forced", "sweep_both_pty"):
        res = runs[name]
        assert res["code"] == 0, res["stderr"]
        assert sweep_records(res["stdout"]) == SWEEP_RECORDS, name
        assert b"schema" not in res["stderr"]
    assert b"\x1b" not in runs["sweep_pty"]["stdout"] + runs["sweep_forced"]["stdout"]  # no colour codes
    batch = runs["batch_pty"]
    assert batch["code"] == 0, batch["stderr"]
    # x^2, x*3, x^3 at x = 2: L = 4, 6, 8 and dL/dx = 2x = 4, 3, 3x^2 = 12
    records = [json.loads(line) for line in batch["stdout"].splitlines()]
    assert [(r["source"], r["output"]["value"], r["grads"]["x"]) for r in records] \
        == [("x^2", 4.0, 4.0), ("x*3", 6.0, 3.0), ("x^3", 8.0, 12.0)]
    dot = runs["dot_forced"]
    assert dot["code"] == 0 and dot["stdout"].startswith(b"digraph gradflow {\n") and dot["stdout"].endswith(b"}\n")
    assert b"\x1b" not in dot["stdout"]


# ---- any COLUMNS / LINES gives readable output ----------------------------------------------------------------

@pytest.mark.parametrize("i", range(len(SIZES)), ids=[" ".join(f"{k}={v}" for k, v in s.items()) for s in SIZES])
def test_any_columns_or_lines_gives_the_table_the_grad_line_and_the_error(ran, i):
    _, runs = ran
    live, cut = runs[f"size_live{i}"], runs[f"size_cut{i}"]
    for res, code in ((live, 0), (cut, 3)):
        out = res["stdout"].decode()
        assert res["code"] == code, res["stderr"]
        assert 40 <= max(map(len, out.splitlines())) <= 4096, out  # not a character a line, not padded away
        assert len(out) < 5000
    live_out, cut_out = live["stdout"].decode(), cut["stdout"].decode()
    # the output node's row in the table, or its block (a narrow console)
    row = re.search(r"● x\*2 +mul +2 +True +False +MulBackward0 +1 *\n", live_out)
    assert row or "● x*2  mul\n  grad 1 ·" in live_out
    assert re.search(r"✂ 2\*detach\(x\)( +|  )mul", cut_out), cut_out
    assert "x.grad = 2" in live_out and live["stderr"] == b""
    assert "x.grad = None  (every path from x to L" in cut_out
    assert cut["stderr"].startswith(b"error: the output '2*detach(x)' does not require grad, so backward cannot run")


# ---- ordinary problems are not "internal errors" --------------------------------------------------------------

@pytest.mark.parametrize("i", range(len(FULL)), ids=[" ".join(a) for a in FULL])
def test_a_full_disk_is_a_clear_error_with_exit_2(ran, i):
    res = ran[1][f"full{i}"]
    assert (res["code"], res["stderr"]) == (2, NO_ROOM)


def test_a_full_disk_under_an_error_or_a_warning(ran):
    _, runs = ran
    doc = runs["json_error_full"]  # the JSON error document cannot be written: both messages, exit 2
    assert doc["code"] == 2
    assert doc["stderr"] == NO_ROOM + b"error: syntax error: unexpected end of input at position 2\n" \
                                      b"  x^\n    ^\nhint: expected '(', '-', a name, a number\n"
    warning = runs["warning_full"]  # stderr is the full one: stdout keeps its table, the exit code tells
    assert warning["code"] == 2 and "x.grad = inf" in warning["stdout"].decode()


def test_graphviz_past_its_time_is_a_clear_error(ran):
    tmp, runs = ran
    res = runs["slow_dot"]
    assert res["code"] == 2
    assert res["stderr"] == (b"error: Graphviz's dot -Tsvg did not finish in 1 s, so it was stopped\n"
                             b"hint: write the DOT text instead (--format dot -o graph.dot) and render it yourself, "
                             b"or use --format mermaid / tree\n")
    assert list((tmp / "slow_dot").iterdir()) == []  # no picture, no temporary file


@pytest.mark.parametrize("i", range(len(ASCII)), ids=[a[0] if a[0] != "eval" else " ".join(a[:3]) for a, _ in ASCII])
def test_an_ascii_terminal_gets_ascii_marks(ran, i):
    res = ran[1][f"ascii{i}"]
    args, expected = ASCII[i]
    assert res["code"] == 0, res["stderr"]
    text = res["stdout"].decode("ascii")  # raises if anything is not ASCII
    res["stderr"].decode("ascii")
    for piece in expected:
        assert piece in text, (piece, text)


def test_ascii_user_text_is_escaped_not_guessed(ran):
    typo = ran[1]["typo_ascii"]
    assert typo["code"] == 2
    assert typo["stderr"].startswith(b"error: syntax error: unexpected character '\\u00b2' (not an ASCII digit: "
                                     b"numbers are written with 0-9) at position 1\n")


def test_pythonioencoding_ascii_in_a_plain_process():
    """As the harness's ASCII runs, with Python itself making the streams ASCII."""
    res = run(GRADFLOW + ["eval", *BLOG], env={"PYTHONIOENCODING": "ascii"})
    assert res.returncode == 0, res.stderr
    text = res.stdout.decode("ascii")
    assert "|* x " in text and "x.grad = -20" in text and "x cut: x*y2 -> detach(x*y2)" in text


# ---- binary output is not written to a terminal ----------------------------------------------------------------

def test_png_to_a_terminal_is_refused_but_not_to_a_file(ran):
    _, runs = ran
    for name, option in (("png_pty", "format"), ("inspect_png_pty", "graph")):
        res = runs[name]
        assert res["code"] == 2 and res["stdout"] == b""
        assert res["stderr"] == (f"error: --{option} png is binary data, which would garble the terminal\n"
                                 "hint: write it to a file (-o graph.png) or pipe it (| display), or use svg, which "
                                 "is text\n").encode()
    if HAS_DOT:
        assert runs["svg_pty"]["code"] == 0 and b"<svg" in runs["svg_pty"]["stdout"]
        assert runs["png_file"]["code"] == 0 and runs["png_file"]["stdout"].startswith(b"\x89PNG\r\n\x1a\n")


# ---- files: whole or not at all ---------------------------------------------------------------------------------

def test_eight_runs_writing_one_file_leave_one_whole_output(ran):
    """Released at the same instant, 8 runs write out.dot (8 different graphs) and 8 out.svg (4 different
    pictures). Before: the SVG was a mix of several runs (not even XML), while every run said "wrote out.svg"."""
    tmp, runs = ran
    work = tmp / "writers"
    for name in [f"{kind}{i}" for kind in ("dot_writer", "svg_writer", "dot_ref") for i in range(8)] + \
            [f"svg_ref{i}" for i in range(4)]:
        assert runs[name]["code"] == 0, runs[name]["stderr"]
    assert [runs[f"svg_writer{i}"]["stderr"] for i in range(8)] == [b"wrote out.svg\n"] * 8
    dots = [(work / f"dot{i}.dot").read_bytes() for i in range(8)]
    svgs = [(work / f"svg{i}.svg").read_bytes() for i in range(4)]
    assert len(set(map(len, dots))) == 8 and len(set(map(len, svgs))) == 4
    assert (work / "out.dot").read_bytes() in dots
    assert (work / "out.svg").read_bytes() in svgs
    assert {p.name for p in work.iterdir()} == {"out.dot", "out.svg", *(f"dot{i}.dot" for i in range(8)),
                                               *(f"svg{i}.svg" for i in range(4))}  # no temporary file left


def test_a_write_cut_short_keeps_the_old_file_and_leaves_no_temporary(ran):
    """A file-size limit stops the write half-way. Before: the file held the new picture's first 2,000 bytes."""
    tmp, runs = ran
    dot, svg = runs["cut_short_dot"], runs["cut_short_svg"]
    assert (dot["code"], dot["stderr"]) == (2, b"error: cannot write g.dot: File too large\n")
    assert (svg["code"], svg["stderr"]) == (2, b"error: cannot write p.svg: File too large\n")
    folder = tmp / "cut_short"
    assert (folder / "g.dot").read_text() == "old graph\n" and (folder / "p.svg").read_text() == "old picture\n"
    assert {p.name for p in folder.iterdir()} == {"g.dot", "p.svg"}
