"""A compiled graph as plain tuples and back (language/packed.py: what `batch --jobs N`'s command sends its
workers): equal to the graph compiled from the text in every field, through pickle, for every kind of node and
step the lowering makes."""
import pickle

import pytest

from gradflow.errors import Span
from gradflow.language.compile import compile_uncached
from gradflow.language.graph import FlagStep, Graph, Node, RetainStep
from gradflow.language.packed import pack, unpack

PROGRAMS = [
    "x",
    "(x*y1 - detach(x*y2))^2",
    "sum(tanh(x*y) + sigmoid(x)^2 - exp(detach(x))/2 + mean(w@w))",
    "torch.sum(x, dim=0, keepdim=True) * 2.5",  # parameters
    "x.exp().sum()",  # methods
    "x.requires_grad_(False); c = (x*y).detach().requires_grad_(); c.retain_grad(); c*2",  # flag and retain steps
    "x.detach_(); x*y",
    "with torch.no_grad():\n    c = x*y\nL = c*x",  # a `with` block
    "no_grad(x*y) + inference_mode(x)*y",  # regions as calls
    "a = x*y; b = a + a; b*b",  # names
    " + ".join(f"tanh(x*{k})" for k in range(40)),  # abbreviated names (over NAME_WIDTH)
]


def fields(graph: Graph) -> list:
    """Every field of every node and step, with its type: a Span must come back a Span, not a tuple."""
    return [(type(s).__name__, [(k, v, type(v)) for k, v in vars(s).items()]) for s in graph.steps] + \
        [[(k, v, type(v)) for k, v in vars(n).items()] for n in graph.nodes]


@pytest.mark.parametrize("source", PROGRAMS)
def test_a_packed_graph_comes_back_equal_in_every_field(source):
    graph = compile_uncached(source)
    back = unpack(pickle.loads(pickle.dumps(pack(graph), protocol=pickle.HIGHEST_PROTOCOL)))
    assert back == graph
    assert fields(back) == fields(graph)
    assert dict(back.inputs) == dict(graph.inputs) and back.inputs is not graph.inputs
    with pytest.raises(TypeError):
        back.inputs["z"] = 0  # read-only, as compiled
    assert all(isinstance(n.span, Span) and (n.inner is None or isinstance(n.inner, Span)) for n in back.nodes)
    assert [back.steps.index(n) for n in back.nodes] == [graph.steps.index(n) for n in graph.nodes]


def test_the_steps_are_the_nodes_themselves():
    """As compiled: the engine finds a step's node by identity in the graph's nodes."""
    back = unpack(pack(compile_uncached(PROGRAMS[5])))
    nodes = [s for s in back.steps if isinstance(s, Node)]
    assert all(any(s is n for n in back.nodes) for s in nodes)
    assert [type(s) for s in back.steps if not isinstance(s, Node)] == [FlagStep, FlagStep, RetainStep]
    assert [(s.node, s.text) for s in back.steps if isinstance(s, FlagStep)] == [
        (0, "x.requires_grad_(False)"), (3, "(x*y).detach().requires_grad_()")]
    plain = unpack(pack(compile_uncached("x*y")))
    assert plain.steps is plain.nodes


def test_a_packed_graph_is_plain_data():
    """Only str, int, float, bool, None and tuples: pickle writes it in C, and nothing of the language's
    classes needs to be importable where it is read (but `unpack`)."""
    def atoms(value):
        if isinstance(value, tuple):
            for v in value:
                yield from atoms(v)
        else:
            yield type(value)

    for source in PROGRAMS:
        assert set(atoms(pack(compile_uncached(source)))) <= {str, int, float, bool, type(None)}
