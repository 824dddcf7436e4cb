"""`inspect --autograd`: torch's own autograd graph, named by the user's code, checked against torch's graph
walked in plain torch (tests/render/plain_op_graphs.py, which does not import gradflow)."""
from collections import Counter
from pathlib import Path

import pytest

from gradflow.render.op_graph import to_dot, to_mermaid
from gradflow.report.build import trace
from gradflow.report.op_graph import autograd_graph

from . import plain_op_graphs as plain

PLAIN = Path(plain.__file__)


def traced(model, loss_of, **kw):
    t = trace(autograd=True)
    with t:
        loss = loss_of(model)
    report = t.explain(loss, params=model)
    return autograd_graph(report, t, **kw), report


def drawn_kinds(graph):
    return Counter(n.fn for n in graph.nodes.values() if n.kind in ("op", "param"))


def flow_edge_kinds(graph):
    fn = {k: n.fn for k, n in graph.nodes.items()}
    return Counter((fn[a], fn[b]) for (a, b), how in graph.edges.items() if how == "flow")


def line_of(text: str) -> str:
    number = next(i for i, line in enumerate(PLAIN.read_text().splitlines(), 1) if line.strip().startswith(text))
    return f":{number}"


@pytest.fixture(scope="module")
def net():
    model = plain.Net()
    graph, report = traced(model, plain.net_loss)
    return model, graph, report


def test_nodes_and_edges_are_torchs(net):
    model, graph, _ = net
    nodes, edges = plain.walk(plain.net_loss(model))
    assert drawn_kinds(graph) == plain.kinds(nodes)  # AddmmBackward0 ×2, AccumulateGrad ×4, TBackward0 ×2, ...
    assert drawn_kinds(graph)["AddmmBackward0"] == 2
    assert flow_edge_kinds(graph) == plain.edge_kinds(edges)


def test_leaves_reached_are_torchs_and_frozen_ones_are_added_grey(net):
    model, graph, _ = net
    params = {n.name for n in graph.nodes.values() if n.kind == "param"}
    assert params == plain.leaves_reached(model, plain.net_loss(model)) == {"mid.weight", "mid.bias", "head.weight",
                                                                            "head.bias"}
    frozen = {n.name for n in graph.nodes.values() if n.kind == "frozen"}
    assert frozen == {name for name, p in model.named_parameters() if not p.requires_grad}
    dot = to_dot(graph)
    for key, node in graph.nodes.items():
        if node.kind == "frozen":
            assert f'{key} [label="{node.name}\\nfrozen", shape=box, fillcolor="#e0e0e0", color="#9e9e9e"' in dot


def test_the_cut_is_red_at_its_line_and_enters_the_node_torch_left_an_input_out_of(net):
    model, graph, _ = net
    (cut,) = [n for n in graph.nodes.values() if n.kind == "cut"]
    assert cut.fn == "detach" and cut.line.endswith(line_of("side = z.detach()"))
    fn = {k: n.fn for k, n in graph.nodes.items()}
    inputs = lambda key: sorted(fn[a] for (a, b), how in graph.edges.items() if b == key and how == "flow")
    missing = {b for (a, b), how in graph.edges.items() if how != "flow" and graph.nodes[b].kind == "op"}
    assert sorted((fn[b], inputs(b)) for b in missing) == plain.cut_consumers(plain.net_loss(model))
    (into,) = [b for (a, b), how in graph.edges.items() if how == "cut"]
    assert fn[into] == "AddBackward0" and '-> ' + into + ' [style=dashed, color="#c62828", label="✂ cut"' in \
        to_dot(graph)


def test_ops_are_named_by_line_variable_and_module(net):
    _, graph, _ = net
    mid = next(n for n in graph.nodes.values() if n.fn == "AddmmBackward0" and n.name == "mid")
    assert mid.variable == "z" and mid.line.endswith(line_of("z = self.mid(h)"))
    assert graph.nodes[graph.root].fn == "MeanBackward0"


def test_mermaid_greys_frozen_parameters_as_dot_does(net):
    _, graph, _ = net
    text = to_mermaid(graph)
    frozen = ",".join(k for k, n in graph.nodes.items() if n.kind == "frozen")
    assert "  classDef frozen fill:#e0e0e0,stroke:#9e9e9e,color:#616161" in text.splitlines()
    assert f"  class {frozen} frozen" in text.splitlines()
    assert 'fillcolor="#e0e0e0", color="#9e9e9e", fontcolor="#616161"' in to_dot(graph)


@pytest.fixture(scope="module")
def gpt2():
    model = plain.gpt2(12)
    t = trace(autograd=True)
    with t:
        loss = plain.gpt2_loss(model)
    report = t.explain(loss, params=model)
    return model, *(autograd_graph(report, t, **kw) for kw in ({}, {"fold": False}, {"depth": 3}))


@pytest.mark.slow
def test_gpt2_unfolded_is_torchs_graph(gpt2):
    model, _, whole, _ = gpt2
    nodes, edges = plain.walk(plain.gpt2_loss(model))
    assert drawn_kinds(whole) == plain.kinds(nodes)
    assert flow_edge_kinds(whole) == plain.edge_kinds(edges)


@pytest.mark.slow
def test_gpt2_twelve_blocks_fold_into_one(gpt2):
    model, folded, whole, _ = gpt2
    (fold,) = folded.folds
    assert fold.label == "transformer.h.0–h.11 ×12" and fold.count == 12
    plain_count = plain.kinds(plain.walk(plain.gpt2_loss(model))[0])["AddmmBackward0"]
    in_fold = sum(n.fn == "AddmmBackward0" for n in folded.nodes.values() if n.fold == 0)
    outside = sum(n.fn == "AddmmBackward0" for n in folded.nodes.values() if n.fold is None)
    assert in_fold * 12 + outside == plain_count == whole.count("AddmmBackward0") == 4 * 12
    assert len(folded.nodes) < len(whole.nodes) / 8  # a picture a person can read
    inside = next(n for n in folded.nodes.values() if n.fold == 0 and n.fn == "AccumulateGrad")
    assert folded.shown_name(inside).split(".")[0] in ("ln_1", "ln_2", "attn", "mlp")


@pytest.mark.slow
def test_gpt2_tied_weight_is_one_node(gpt2):
    model, folded, whole, _ = gpt2
    assert model.lm_head.weight is model.transformer.wte.weight
    nodes, _ = plain.walk(plain.gpt2_loss(model))
    tied = [n for n in nodes if type(n).__name__ == "AccumulateGrad" and n.variable is model.lm_head.weight]
    assert len(tied) == 1
    for graph in (whole, folded):
        (wte,) = [n for n in graph.nodes.values() if n.kind == "param" and "lm_head.weight" in
                  [n.name, *n.aliases]]
        assert wte.name == "transformer.wte.weight" and wte.aliases == ["lm_head.weight"]
    assert "= lm_head.weight (tied)" in to_dot(folded)


@pytest.mark.slow
def test_gpt2_depth_draws_each_block_as_one_node(gpt2):
    _, _, _, by_module = gpt2
    modules = [n for n in by_module.nodes.values() if n.kind == "module"]
    assert [n.name for n in modules if n.fold is not None] == ["transformer.h.0"]
    assert by_module.folds[0].label == "transformer.h.0–h.11 ×12"
    assert all(n.name.count(".") <= 2 for n in by_module.nodes.values() if n.kind != "cut")


def test_cli_draws_it_and_asks_for_a_picture(cli, tmp_path):
    user = tmp_path / "net.py"
    user.write_text(f"import sys\nsys.path.insert(0, {str(PLAIN.parent)!r})\nimport plain_op_graphs as plain\n\n"
                    "def main():\n    net = plain.Net()\n    return plain.net_loss(net), net\n")
    r = cli("inspect", f"{user}:main", "--graph", "dot", "--autograd")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("digraph autograd {") and "✂ detach" in r.stdout and "AddmmBackward0" in r.stdout
    r = cli("inspect", f"{user}:main", "--autograd")
    assert r.exit_code == 2 and "--autograd draws a picture" in r.stderr


def test_the_python_api_draws_itself(tmp_path):
    import shutil

    import gradflow

    model = plain.Net()
    with gradflow.trace(autograd=True) as t:
        loss = plain.net_loss(model)
    graph = gradflow.autograd_graph(t.explain(loss, params=model), t)
    assert graph.to_dot() == to_dot(graph) and graph.to_mermaid() == to_mermaid(graph)
    assert graph.draw(tmp_path / "ops.mmd").read_text() == to_mermaid(graph)
    assert "autograd graph of the loss: " in str(graph) and "AddmmBackward0 ×2" in str(graph)
    if shutil.which("dot"):
        assert graph.draw(tmp_path / "ops.svg").read_text().count('class="node"') == len(graph.nodes)


def test_a_trace_without_autograd_names_nothing_but_draws_torchs_graph():
    model = plain.Net()
    t = trace()
    with t:
        loss = plain.net_loss(model)
    graph = autograd_graph(t.explain(loss, params=model), t)
    nodes, _ = plain.walk(plain.net_loss(model))
    assert drawn_kinds(graph) == plain.kinds(nodes)
    assert not [n for n in graph.nodes.values() if n.kind == "op" and n.line]


def test_depth_draws_each_module_whole(net):
    model, _, report = net
    t = trace(autograd=True)
    with t:
        loss = plain.net_loss(model)
    graph = autograd_graph(t.explain(loss, params=model), t, depth=1)
    modules = {n.name: n for n in graph.nodes.values() if n.kind == "module"}
    own = modules.pop(type(model).__name__)  # the ops of Net.forward itself (z + side)
    assert own.params == 0 and own.ops == 1
    assert set(modules) == {name for name, _ in model.named_children()}
    assert {name: n.params for name, n in modules.items()} == {
        name: len(list(m.parameters())) for name, m in model.named_children()}
    assert modules["enc"].status == "frozen" and modules["head"].status == "live"
    assert "m0 [label=" in to_dot(graph) and ":" not in "".join(graph.nodes)  # DOT and Mermaid ids
