"""`gradflow script --autograd`: each backward's graph as torch recorded it, checked against torch's graph walked in
plain torch while the same script runs plainly (tests/script/plain_script_graphs.py, which does not import
gradflow): the nodes and edges by type, the leaves reached and their names, the frozen parameters; the cuts at
the lines the scripts mark by hand."""
import shutil
from collections import Counter
from pathlib import Path

import pytest

from gradflow.errors import ValueInputError
from gradflow.render.op_graph import to_dot, to_mermaid
from gradflow.script.run import run_script

from . import plain_script_graphs as plain

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "examples" / "classic_2018.py"
HERE = Path(__file__).parent
CUTS = HERE / "graph_scripts" / "cuts_and_modules.py"
GAN = HERE / "scripts" / "gan_step.py"
GPT2 = HERE / "graph_scripts" / "gpt2_step.py"


def calls_of(path, args=(), autograd=True) -> list:
    calls: list = []
    run_script(Path(path), list(args), calls.append, autograd=autograd)
    return calls


def torch_kinds(graph) -> Counter:
    """The node types of what gradflow drew from torch's graph (not the cuts and frozen leaves it adds)."""
    return Counter(n.fn for n in graph.nodes.values() if n.kind in ("op", "param") and n.fn)


def flow_edges(graph) -> Counter:
    fn = {k: n.fn for k, n in graph.nodes.items()}
    return Counter((fn[a], fn[b]) for (a, b), how in graph.edges.items() if how == "flow")


def names(graph, kind: str) -> set[str]:
    return {n.name for n in graph.nodes.values() if n.kind == kind}


def cut_lines(graph) -> list[int]:
    return sorted(int(n.line.rsplit(":", 1)[1]) for n in graph.nodes.values() if n.kind == "cut")


def same_as_torch(graph, truth: dict) -> None:
    assert torch_kinds(graph) == truth["kinds"]
    assert flow_edges(graph) == truth["edges"]
    assert {n.name for n in graph.nodes.values() if n.fn == "AccumulateGrad"} == truth["leaves"]


def line_with(path, text: str) -> int:
    return next(i for i, line in enumerate(Path(path).read_text().splitlines(), 1) if text in line)


def test_classic_2018_each_backward_is_torchs_graph_with_its_detach():
    truths = plain.backward_graphs(CLASSIC)
    graphs = [c.autograd_graph() for c in calls_of(CLASSIC)]
    assert len(graphs) == len(truths) == 3
    for graph, truth in zip(graphs, truths):
        same_as_torch(graph, truth)
        assert truth["leaves"] == {"xvar"}
    assert [cut_lines(g) for g in graphs] == [[], [line_with(CLASSIC, "out1 = out1.detach()")],
                                              [line_with(CLASSIC, "out2 = out2.detach()")]]
    (cut,) = [n for n in graphs[2].nodes.values() if n.kind == "cut"]
    assert cut.variable == "out2" and cut.how == "detach"
    dot = to_dot(graphs[2])
    assert f'label="✂ detach\\nout2 = …  {cut.line}", shape=octagon, fillcolor="#ff9a9a", color="#c62828"' in dot
    assert f"classic_2018.py:{truths[2]['line']}" in graphs[2].title  # the backward's own line
    (mul,) = [n for n in graphs[2].nodes.values() if n.fn == "MulBackward0"]  # out2's was cut off
    third = [i for i, line in enumerate(CLASSIC.read_text().splitlines(), 1) if line == "out1 = xvar * y1"][2]
    assert mul.variable == "out1" and mul.line.endswith(f"classic_2018.py:{third}")


def test_a_detach_a_no_grad_block_and_a_frozen_encoder():
    (truth,) = plain.backward_graphs(CUTS)
    (call,) = calls_of(CUTS)
    graph = call.autograd_graph()
    same_as_torch(graph, truth)
    assert truth["leaves"] == {"net.mid.weight", "net.mid.bias", "net.head.weight", "net.head.bias"}
    assert names(graph, "frozen") == truth["frozen"] == {"net.enc.weight", "net.enc.bias"}
    assert cut_lines(graph) == plain.marked_lines(CUTS)
    assert sorted(n.how for n in graph.nodes.values() if n.kind == "cut") == ["detach", "no_grad"]
    behind = {n.name: n.status for n in graph.nodes.values() if n.kind == "param" and not n.fn}
    assert behind == {"aux.weight": "cut", "aux.bias": "cut"}  # no node in torch's graph: drawn behind the cut
    mid = next(n for n in graph.nodes.values() if n.fn == "AddmmBackward0" and n.name == "net.mid")
    assert mid.variable == "z" and mid.line.endswith(f":{line_with(CUTS, 'z = self.mid(h)')}")
    dot = to_dot(graph)
    assert "✂ linear under no_grad\\naux\\nprior = …" in dot
    for key, node in graph.nodes.items():
        if node.kind == "frozen":
            assert f'{key} [label="{node.name}\\nfrozen", shape=box, fillcolor="#e0e0e0", color="#9e9e9e"' in dot


def test_a_gan_step_two_backwards_the_first_cut_at_the_inline_detach():
    truths = plain.backward_graphs(GAN)
    graphs = [c.autograd_graph() for c in calls_of(GAN)]
    for graph, truth in zip(graphs, truths):
        same_as_torch(graph, truth)
    assert [t["leaves"] for t in truths] == [{"D.weight", "D.bias"}, {"D.weight", "D.bias", "G.weight", "G.bias"}]
    assert [cut_lines(g) for g in graphs] == [plain.marked_lines(GAN), []]
    assert {n.name: n.status for n in graphs[0].nodes.values() if n.name.startswith("G.")} == {
        "G.weight": "cut", "G.bias": "cut"}
    assert graphs[1].title.startswith("autograd graph of loss_g: backward 2 at ")


@pytest.mark.slow
def test_a_tiny_gpt2_script_is_torchs_graph_folded_and_tied_once():
    (truth,) = plain.backward_graphs(GPT2, ["3"])
    (call,) = calls_of(GPT2, ["3"])
    whole, folded = call.autograd_graph(fold=False), call.autograd_graph()
    same_as_torch(whole, truth)
    assert "model.transformer.wte.weight" in truth["leaves"] and "model.lm_head.weight" not in truth["leaves"]
    (wte,) = [n for n in folded.nodes.values() if n.name == "model.transformer.wte.weight"]
    assert wte.aliases == ["model.lm_head.weight"]
    (fold,) = folded.folds
    assert fold.label == "model.transformer.h.0–h.2 ×3"
    in_fold = sum(n.fn == "AddmmBackward0" for n in folded.nodes.values() if n.fold == 0)
    outside = sum(n.fn == "AddmmBackward0" for n in folded.nodes.values() if n.fold is None)
    assert in_fold * 3 + outside == truth["kinds"]["AddmmBackward0"] == 4 * 3
    by_module = call.autograd_graph(depth=4)  # model.transformer.h.0: the names count the variable too
    assert {n.name for n in by_module.nodes.values() if n.kind == "module" and n.fold is not None} == {
        "model.transformer.h.0"}


def test_the_record_draws_itself_from_python(tmp_path):
    first = calls_of(CLASSIC)[0]
    graph = first.autograd_graph()
    assert graph.to_dot() == to_dot(graph) and graph.to_mermaid() == to_mermaid(graph)
    assert graph.draw(tmp_path / "ops.mmd").read_text() == to_mermaid(graph)
    assert "autograd graph of L: backward 1 at " in str(graph) and "MulBackward0 ×2" in str(graph)
    if shutil.which("dot"):
        bundle = graph._repr_mimebundle_()
        assert bundle["image/svg+xml"].count('class="node"') == len(graph.nodes)


def test_without_autograd_the_record_says_how_to_get_the_graph():
    first = calls_of(CLASSIC, autograd=False)[0]
    with pytest.raises(ValueInputError) as err:
        first.autograd_graph()
    assert "backward 1 has no autograd graph" in str(err.value) and "--autograd" in err.value.hint
