"""`gradflow script FILE.py --autograd`: a graph file per backward shown in full (-o), the line under its table,
the graph in the --html page, the options' errors. The graphs' content is checked against plain torch in
tests/script/test_autograd.py; here, what the command writes, for which backward() calls."""
import shutil
from pathlib import Path

import pytest

from ..script import plain_script_graphs as plain

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "examples" / "classic_2018.py"
LOOP = ROOT / "examples" / "train_loop.py"


def test_each_backward_writes_its_graph_and_says_where(cli, tmp_path):
    r = cli("script", str(CLASSIC), "--autograd", "-o", str(tmp_path / "ops.dot"))
    assert r.exit_code == 0, r.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["ops-1.dot", "ops-2.dot", "ops-3.dot"]
    truths = plain.backward_graphs(CLASSIC)
    for k, truth in enumerate(truths, 1):
        dot = (tmp_path / f"ops-{k}.dot").read_text()
        assert dot.startswith("digraph autograd {") and f"backward {k} at " in dot
        assert dot.count(" [label=") == sum(truth["kinds"].values()) + (k > 1)  # torch's nodes, and the cut
        assert f"→ {tmp_path / f'ops-{k}.dot'}" in r.stdout
    detach = next(i for i, line in enumerate(CLASSIC.read_text().splitlines(), 1) if line == "out2 = out2.detach()")
    assert f"✂ detach\\nout2 = …  " in (tmp_path / "ops-3.dot").read_text()
    assert f"classic_2018.py:{detach}\"" in (tmp_path / "ops-3.dot").read_text()
    assert "5 nodes for torch's 4, 5 edges, 1 cut →" in r.stdout


def test_without_o_the_line_says_how_to_draw_it(cli):
    r = cli("script", str(CLASSIC), "--autograd")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.count("autograd graph of L: backward ") == 3 and "(-o FILE.svg draws it)" in r.stdout


@pytest.mark.slow
def test_a_loop_draws_the_first_backward_and_the_steps_asked(cli, tmp_path):
    r = cli("script", str(LOOP), "--autograd", "-o", str(tmp_path / "ops.mmd"), "--steps", "150:150")
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ops-1.mmd", "ops-150.mmd"]
    first, frozen = ((tmp_path / f"ops-{k}.mmd").read_text() for k in (1, 150))
    assert first.startswith("flowchart TB") and "frozen" not in first
    assert "model.0.weight<br/>frozen" in frozen  # the schedule froze the first layer at step 100


def test_options_of_the_graph_need_autograd_and_a_known_suffix(cli, tmp_path):
    r = cli("script", str(CLASSIC), "-o", str(tmp_path / "ops.svg"))
    assert r.exit_code == 2 and "-o draws the autograd graph: it goes with --autograd" in r.stderr
    r = cli("script", str(CLASSIC), "--depth", "2")
    assert r.exit_code == 2 and "--depth draws the autograd graph" in r.stderr
    r = cli("script", str(CLASSIC), "--autograd", "-o", str(tmp_path / "ops.txt"))
    assert r.exit_code == 2 and "cannot tell a picture format from 'ops.txt'" in r.stderr
    assert not list(tmp_path.iterdir())  # refused before the script ran


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_the_html_page_shows_each_graph_after_its_backward(cli, tmp_path):
    page = tmp_path / "script.html"
    r = cli("script", str(CLASSIC), "--autograd", "--html", str(page))
    assert r.exit_code == 0, r.stderr
    html = page.read_text()
    titles = [f"backward {k}: the autograd graph torch recorded" for k in (1, 2, 3)]
    assert all(t in html for t in titles)
    assert html.index("backward 2 at ") < html.index(titles[1]) < html.index("backward 3 at ")
    assert html.count("<svg") == 6  # each backward's program graph, then torch's


def test_a_backward_from_a_tensor_without_grad_fn_draws_nothing(cli, tmp_path):
    r = cli("script", str(ROOT / "examples" / "fail_no_grad_path.py"), "--autograd", "-o", str(tmp_path / "o.dot"))
    assert r.exit_code == 3, r.stderr  # no gradient: .item() cut every path
    assert "has no grad_fn: torch recorded no graph" in r.stdout and not list(tmp_path.iterdir())


def test_json_records_name_each_graph_and_its_size(cli, tmp_path):
    import json

    r = cli("script", str(CLASSIC), "--autograd", "--json", "-o", str(tmp_path / "ops.dot"))
    assert r.exit_code == 0, r.stderr
    records = [json.loads(line) for line in r.stdout.splitlines()]
    truths = plain.backward_graphs(CLASSIC)  # torch's graph of each backward, walked in plain torch
    assert len(records) == len(truths) == 3
    for k, (rec, truth) in enumerate(zip(records, truths), 1):
        graph = rec["autograd"]
        dot = (tmp_path / f"ops-{k}.dot").read_text()
        assert graph["file"] == str(tmp_path / f"ops-{k}.dot")
        assert graph["torch_nodes"] == sum(truth["kinds"].values())
        assert graph["nodes"] == dot.count(" [label=") and graph["edges"] == dot.count(" -> ")
        assert graph["cuts"] == (k > 1)  # the 2nd and 3rd backward each go through one detach
    plain_json = [json.loads(line) for line in cli("script", str(CLASSIC), "--json").stdout.splitlines()]
    assert all("autograd" not in rec for rec in plain_json)  # only asked for, as the table's line is
