"""Pictures of the autograd graph: the walk, DOT through a real Graphviz, Mermaid, the tree, the CLI.

Hand-derived numbers for the blog example L = (x*y1 - detach(x*y2))^2 at x=1, y1=2, y2=7:
d = -5, dL/dd = -10, flow x*y1 -> d is -10, flow x -> x*y1 is -10*y1 = -20; x*y2 -> detach is cut.
"""
import io
import json
import shutil

import pytest

from gradflow import explain
from gradflow.render.graph_text import to_dot, to_mermaid, to_tree
from gradflow.studies.torch_graph import picture

from ..conftest import BLOG
from ..processes import PYTHON, run

BLOG_EXPR = "(x*y1 - detach(x*y2))^2"
BLOG_ARGS = ["--x", "1", "--y1", "2", "--y2", "7"]
NAMED = ["x", "y1", "y2", "x*y1", "x*y2", "detach(x*y2)", "x*y1 - detach(x*y2)", BLOG_EXPR]


def pic(expr=BLOG_EXPR, **values):
    values = values or BLOG
    return picture(explain(expr, **values))


def by_label(p):
    return {n.label: n for n in p.nodes}


def edge(p, src, dst):
    nodes = by_label(p)
    return next(e for e in p.edges if e.src == nodes[src].key and e.dst == nodes[dst].key)


def test_walk_names_torch_nodes():
    nodes = by_label(pic())
    assert nodes["x"].fn == "AccumulateGrad" and nodes["x"].in_torch
    assert nodes["x*y1"].fn == "MulBackward0" and nodes["x*y1 - detach(x*y2)"].fn == "SubBackward0"
    assert nodes[BLOG_EXPR].fn == "PowBackward0"  # a number exponent, as torch code writes x**2
    assert not nodes["x*y2"].in_torch  # recorded by torch, but the detach hides it from the output
    assert nodes["detach(x*y2)"].fn is None and not nodes["detach(x*y2)"].requires_grad


@pytest.mark.parametrize("expr,values", [
    (BLOG_EXPR, BLOG), ("2^x + x^y", {"x": 1.5, "y": 2}), ("no_grad(x*y)*x + x^3", {"x": 2, "y": 3}),
    ("sum(relu(w) @ w)^0.5", {"w": [[1, 2], [3, 4]]}), ("(x^2)^2 - detach(x)^2", {"x": 3})])
def test_table_and_picture_name_every_torch_node_alike(expr, values):
    """One evaluator: the table's grad_fn and the picture's torch node agree on every node both show."""
    result = explain(expr, **values)
    shown = {n.label: n.fn for n in picture(result).nodes}
    compared = [(r.name, r.grad_fn, shown[r.name]) for r in result.nodes
                if r.grad_fn is not None and r.name in shown and shown[r.name] is not None]
    assert compared and all(table == pic for _, table, pic in compared), compared


def test_flows_and_cuts_on_edges():
    p = pic()
    assert edge(p, "x", "x*y1").flow == "-20" and edge(p, "x", "x*y1").kind == "torch"
    assert edge(p, "x*y1", "x*y1 - detach(x*y2)").flow == "-10"
    assert edge(p, "x*y2", "detach(x*y2)").kind == "cut"
    assert edge(p, "y1", "x*y1").kind == "off"


def test_no_grad_region_is_a_cluster():
    p = pic("(x*y1 - no_grad(x*y2))^2")
    assert [c.label for c in p.clusters] == ["no_grad(x*y2)"]
    assert by_label(p)["x*y2"].cluster == p.clusters[0].key
    assert edge(p, "x", "x*y2").kind == "cut"


def test_identity_wrapper_passes_the_same_tensor():
    p = pic("no_grad(x) * 3", x=2)
    e = edge(p, "x", "no_grad(x)")
    assert e.kind == "same" and e.flow == "3"


def test_dot_text():
    dot = to_dot(pic("(x*y1 - no_grad(x*y2))^2"))
    assert dot.startswith("digraph gradflow {") and dot.rstrip().endswith("}")
    assert "subgraph cluster_r5 {" in dot and 'label="no_grad(x*y2)";' in dot
    assert 'n0 -> n4 [label="✂ cut", style=dashed' in dot
    assert 'n0 -> n2 [label="-20"' in dot


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
def test_dot_renders_with_graphviz():
    res = run(["dot", "-Tsvg"], input=to_dot(pic()).encode())
    assert res.returncode == 0, res.stderr
    svg = res.stdout
    text = svg.decode()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    for name in NAMED + ["AccumulateGrad", "MulBackward0", "SubBackward0", "PowBackward0", "✂ cut"]:
        assert f">{name}" in text.replace("&#45;", "-"), name
    assert "stroke-dasharray" in text  # the dashed cut edge


def test_mermaid_text():
    mm = to_mermaid(pic("(x*y1 - no_grad(x*y2))^2"))
    lines = mm.splitlines()
    assert lines[0] == "flowchart BT"
    assert '  subgraph r5["no_grad(x*y2)"]' in lines and "  end" in lines
    assert '  n0 -.->|"✂ cut"| n4' in lines and '  n0 -->|"-20"| n2' in lines
    assert "  class n0,n2,n6,n8 grad" in lines
    for name in NAMED[:4]:
        assert f'["{name}<br/>' in mm


def test_tree_marks_shared_subexpressions():
    from rich.console import Console

    console = Console(record=True, width=120, color_system=None, file=io.StringIO())
    console.print(to_tree(pic("a = x*y; a*a + sin(a)", x=1, y=2)))
    rows = [line.split("── ")[-1] for line in console.export_text().splitlines()]
    uses = [r for r in rows if r.startswith("a  MulBackward0")]
    assert len(uses) == 3  # three uses of a ...
    assert [r.endswith("↺ shared, shown above") for r in uses] == [False, True, True]  # ... expanded once
    assert sum(r.startswith("x  AccumulateGrad") for r in rows) == 1


def test_cli_tree(cli):
    res = cli("graph", BLOG_EXPR, *BLOG_ARGS)
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith(BLOG_EXPR + "  PowBackward0  value 25  grad 1")
    assert any("x*y2  MulBackward0  value 7  ✂ cut here" in line for line in lines)
    assert any("x  AccumulateGrad  value 1  grad -20  ↑ flow -20" in line for line in lines)


@pytest.mark.parametrize("fmt,start", [("dot", "digraph gradflow {"), ("mermaid", "flowchart BT")])
def test_cli_text_formats(cli, fmt, start):
    res = cli("graph", BLOG_EXPR, *BLOG_ARGS, "--format", fmt)
    assert res.exit_code == 0 and res.stdout.startswith(start)


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot is not installed")
def test_cli_svg_and_png_files(cli, tmp_path):
    for fmt, magic in [("svg", b"<?xml"), ("png", b"\x89PNG")]:
        out = tmp_path / f"g.{fmt}"
        res = cli("graph", BLOG_EXPR, *BLOG_ARGS, "--format", fmt, "-o", str(out))
        assert res.exit_code == 0, res.stderr
        assert out.read_bytes().startswith(magic)


def test_cli_without_graphviz(cli, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    res = cli("graph", BLOG_EXPR, *BLOG_ARGS, "--format", "svg")
    assert res.exit_code == 2
    assert "Graphviz" in res.stderr and "apt-get install graphviz" in res.stderr


def test_cli_bad_format(cli):
    res = cli("graph", BLOG_EXPR, *BLOG_ARGS, "--format", "jpeg")
    assert res.exit_code == 2 and "unknown --format 'jpeg'" in res.stderr


def test_eval_graph_dot(cli):
    res = cli("eval", BLOG_EXPR, *BLOG_ARGS, "--graph", "dot")
    assert res.exit_code == 0
    assert "x.grad = -20" in res.stdout and "digraph gradflow {" in res.stdout


def test_eval_graph_json(cli):
    res = cli("eval", BLOG_EXPR, *BLOG_ARGS, "--graph", "mermaid", "--json")
    doc = json.loads(res.stdout)
    assert doc["graph"]["format"] == "mermaid" and doc["graph"]["text"].startswith("flowchart BT")
    assert {n["label"] for n in doc["graph"]["nodes"]} == set(NAMED + ["2"])
    assert doc["grads"] == {"x": -20.0}


def test_eval_graph_svg_points_to_graph_command(cli):
    res = cli("eval", BLOG_EXPR, *BLOG_ARGS, "--graph", "svg")
    assert res.exit_code == 2 and "gradflow graph" in res.stderr


def test_cli_import_stays_torch_free():
    code = "import sys, gradflow.cli.app; assert 'torch' not in sys.modules"
    res = run(PYTHON + ["-c", code], text=True)
    assert res.returncode == 0, res.stderr


def test_torch_inner_steps_fold_into_their_op():
    # v @ W with a 1-D v: torch records Unsqueeze -> Mm -> Squeeze; flows v.grad = W @ [1,1], W.grad = outer(v, [1,1])
    p = pic("sum(v @ W)", v=[1, 2], W=[[1, 2], [3, 4]])
    mm = by_label(p)["v @ W"]
    assert mm.fn == "SqueezeBackward4" and mm.inner == ["MmBackward0", "UnsqueezeBackward0"]
    assert {n.label for n in p.nodes} == {"v", "W", "v @ W", "sum(v @ W)"}
    assert edge(p, "v", "v @ W").flow == "[3, 7]" and edge(p, "W", "v @ W").flow == "[[1, 1], [2, 2]]"


def test_cli_variable_named_like_an_option(cli):
    """`format` is graph's own option: --format 2 would be read as the picture format."""
    res = cli("graph", "format*x", "--x", "1", "--format", "2")
    assert res.exit_code == 2
    assert "the variable 'format' has the name of the option --format" in res.stderr
    assert "--var format=VALUE" in res.stderr
    res = cli("graph", "format*x", "--x", "1", "--var", "format=2")
    assert res.exit_code == 0 and "grad 2" in res.stdout  # d(format*x)/dx = format = 2


def test_no_edge_is_drawn_live_where_no_gradient_flows():
    """out2 detached: torch records x -> x*y2, but nothing flows back along it (plain torch: a hook on x*y2
    never runs). Drawn grey, not green and bold; x -> x*y1, which carries -20, stays green."""
    import torch

    x = torch.tensor(1.0, requires_grad=True)
    seen = []
    out2 = x * 7.0
    out2.register_hook(seen.append)
    ((x * 2.0 - out2.detach()) ** 2).backward()
    assert seen == [] and float(x.grad) == -20.0
    p = pic()
    kinds = {(e.src, e.dst): e.kind for e in p.edges}
    assert kinds[("n0", "n4")] == "idle" and kinds[("n0", "n2")] == "torch"
    dot = to_dot(p)
    assert 'n0 -> n4 [label="", color="#9e9e9e"' in dot and 'n0 -> n2 [label="-20", color="#2e7d32"' in dot
