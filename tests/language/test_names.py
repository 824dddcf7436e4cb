"""Node names stay short whatever the program's size (issue #12): a long expression names its long operands by
id (`%83 + x*29`), so names grow with the program, not with its square; the full text is the source between
the node's span. Structural guards only: nothing here times anything."""
import pytest

from gradflow.language.compile import compile_program
from gradflow.language.graph import NAME_WIDTH
from gradflow.limits import as_limits

BIG = as_limits({"length": 10**6, "depth": 10**6, "nodes": 10**6})


def chain(n: int) -> str:
    return " + ".join(f"x*{k}" for k in range(1, n + 1))


def test_a_long_sum_names_its_prefix_by_id():
    g = compile_program(chain(29))
    # ids by hand: x 0, then per term k a constant, x*k, and (from k = 2 on) the add: add k is node 3k - 1
    assert [n.text for n in g.nodes[-3:]] == ["29", "x*29", "%83 + x*29"]
    assert g.nodes[83].text == "%80 + x*28" and g.nodes[-1].args == (83, 85)
    assert g.nodes[-1].abbreviated and not g.nodes[-2].abbreviated
    # short ones are written out in full, as before
    assert g.nodes[29].text == "x*1 + x*2 + x*3 + x*4 + x*5 + x*6 + x*7 + x*8 + x*9 + x*10"
    span = g.nodes[-1].span
    assert g.source[span.start:span.end] == chain(29)  # the full text, by hand


def test_operands_in_parentheses_and_calls():
    long = chain(20)
    g = compile_program(f"sin({long}) * ({long})")
    out = g.nodes[g.output]
    sin = g.nodes[out.args[0]]
    assert sin.text == f"sin(%{sin.args[0]})" and out.text == f"%{sin.id} * %{out.args[1]}"
    assert g.source[out.span.start:out.span.end] == f"sin({long}) * ({long})"
    assert g.source[sin.span.start:sin.span.end] == f"sin({long})"


def test_many_short_operands_keep_both_ends():
    g = compile_program("cat([" + ", ".join(f"x*{k}" for k in range(1, 200)) + "])")
    out = g.nodes[g.output]
    assert out.abbreviated and len(out.text) <= NAME_WIDTH and "…" in out.text
    assert out.text.startswith("cat([%") and out.text.endswith("])")


SHAPES = {
    "left chain": chain,
    "right nested": lambda n: "".join(f"x*{k} + (" for k in range(1, n)) + "x" + ")" * (n - 1),
    "nested calls": lambda n: "sin(" * n + "x" + ")" * n,
    "methods": lambda n: "x" + ".sin()" * n,
    "one call of many": lambda n: "cat([" + ", ".join(f"x*{k}" for k in range(n)) + "])",
    "names": lambda n: "; ".join(f"a{k} = x*{k} + " + ("x" if k == 0 else f"a{k - 1}") for k in range(n)),
    "flags": lambda n: "(" * n + "x" + "".join(f"*{k}).requires_grad_()" for k in range(n)) + "*2",
}


@pytest.mark.parametrize("shape", SHAPES)
def test_names_stay_short_and_their_total_grows_linearly(shape):
    """The class of bug: any shape of long program. Every name (and flag text) is at most NAME_WIDTH, and all
    of them together at most a few times the source: a quadratic total would be ~n times it."""
    for n in (50, 1000):
        g = compile_program(SHAPES[shape](n), BIG)
        texts = [n.text for n in g.nodes] + [s.text for s in g.steps if not hasattr(s, "op")]
        assert max(len(t) for t in texts) <= NAME_WIDTH + 4  # a cut's `detach(...)` may add its own few
        assert sum(len(t) for t in texts) <= 10 * len(g.source) + 100
        for node in g.nodes:  # a name not abbreviated is the source between its span
            assert node.abbreviated or node.text == g.source[node.span.start:node.span.end]


SMALL = ["(x*y1 - detach(x*y2))^2", "out1 = x*y1; out2 = x*y2; L = (detach(out1) - out2)^2",
         "c = detach(x*y); c.requires_grad = true; c*2", "torch.where(x > 0, x, 0.1*x).sum()",
         "with torch.no_grad():\n    a = x*2\na*x", "x.sin().cos()[0] + F.relu(x).sum(dim=0)",
         "sum(" + chain(9) + ")"]


@pytest.mark.parametrize("source", SMALL)
def test_small_programs_are_never_abbreviated(source):
    g = compile_program(source)
    for node in g.nodes:
        assert not node.abbreviated and node.text == source[node.span.start:node.span.end]


def test_the_nodes_default_takes_a_6000_term_program():
    """18,000 nodes within the default `nodes` limit (20,000; it was 2,000 when names grew quadratically)."""
    limits = as_limits({"length": 10**6, "depth": 10**6})
    assert len(compile_program(chain(6000), limits).nodes) == 18_000
