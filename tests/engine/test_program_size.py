"""Big generated programs (issue #12): values and grads against hand-derived sums, short names everywhere in
the results (JSON, table, flows), and the full text of any node by its span."""
import json

import pytest

from gradflow import explain
from gradflow.language.graph import NAME_WIDTH

BIG = {"length": 10**6, "depth": 10**6, "nodes": 10**6}


def chain(n: int) -> str:
    return " + ".join(f"x*{k}" for k in range(1, n + 1))


@pytest.mark.parametrize("n", [400, 2000])
def test_big_sum_values_and_grads(n):
    """L = sum_k x*k = x n(n+1)/2, so dL/dx = n(n+1)/2; float64 holds these sums exactly."""
    r = explain(chain(n), x=1.5, dtype="float64", limits=BIG)
    total = n * (n + 1) // 2
    assert r.output.value.item() == 1.5 * total and r.grad("x") == total
    # every partial sum is a node, its value x times a triangular number, its grad 1
    adds = [node for node in r.nodes if node.op == "add"]
    assert [a.value.item() for a in adds[:3]] == [1.5 * 3, 1.5 * 6, 1.5 * 10] and len(adds) == n - 1
    assert all(a.grad.item() == 1 for a in adds)
    flows = r.flows["x"]  # x's grad split by use: the use in x*k carries k
    assert sorted(f.flow.item() for f in flows) == list(range(1, n + 1))


def test_big_vector_sum_and_its_json():
    n = 1000
    r = explain(f"sum({chain(n)})", x=[1.0, -2.0], dtype="float64", limits=BIG)
    total = n * (n + 1) // 2
    assert r.output.value.item() == -total and r.grad("x") == [total, total]
    doc = json.loads(r.to_json())
    names = [node["name"] for node in doc["nodes"]] + [node["expr"] for node in doc["nodes"]]
    names += [e[k] for e in doc["edges"] for k in ("from", "to")] + [c["via"] for c in doc["contributions"]["x"]]
    assert max(len(name) for name in names) <= NAME_WIDTH
    assert doc["output"]["name"] == f"sum(%{3 * n - 1})"
    start, end = doc["nodes"][-1]["span"]
    assert doc["source"][start:end] == f"sum({chain(n)})" == r.full_expr(len(r.nodes) - 1)
    start, end = doc["nodes"][3 * 7 - 1]["span"]  # the add of term 7
    assert doc["source"][start:end] == chain(7)


def test_small_programs_keep_full_text_and_their_span_agrees():
    r = explain("a = x*y1; (a - detach(x*y2))^2", x=1, y1=2, y2=7)
    for node in r.to_dict()["nodes"]:
        start, end = node["span"]
        assert node["expr"] == r.source[start:end] == r.full_expr(node["id"])


def test_table_numbers_the_nodes_when_names_are_abbreviated(cli):
    res = cli("eval", f"sin({chain(20)})", "--x", "1", "--limit", "depth=1000")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "%N is node N" in out and "%60 ● sin(%59)" in " ".join(out.split())
    assert "%59 ● %56 + x*20" in " ".join(out.split())
    assert max(len(line.rstrip()) for line in out.splitlines()) < 200
    short = cli("eval", "sin(x*2)", "--x", "1")
    assert "%" not in short.stdout  # small programs: the table as before


def test_graph_labels_carry_their_ids_when_names_are_abbreviated(cli):
    for fmt, expected in (("tree", "%60 = sin(%59)"), ("dot", "%59 = %56 + x*20"), ("mermaid", "%0 = x")):
        res = cli("graph", f"sin({chain(20)})", "--x", "1", "--format", fmt)
        assert res.exit_code == 0 and expected in res.stdout, (fmt, res.output)
    assert "%" not in cli("graph", "sin(x*2)", "--x", "1").stdout
