"""The lowered graph: its nodes are the frozen dataclass, however graph.py fills them."""
import pytest


def test_lowered_nodes_are_the_frozen_dataclass_built_the_usual_way():
    """graph._node fills a Node's dict directly: it must still equal, hash and refuse changes like Node(...)."""
    import dataclasses

    from gradflow.language.compile import compile_program
    from gradflow.language.graph import Node

    graph = compile_program("with torch.no_grad():\n    a = x*2\nb = a + no_grad(x*3)\nb.sum()")
    for node in graph.nodes:
        usual = Node(**{f.name: getattr(node, f.name) for f in dataclasses.fields(Node)})
        assert node == usual and hash(node) == hash(usual) and repr(node) == repr(usual)
        with pytest.raises(dataclasses.FrozenInstanceError):
            node.text = "changed"  # type: ignore[misc]
        assert dataclasses.replace(node, names=("z",)).names == ("z",) and node.names != ("z",)
    assert [n.names for n in graph.nodes if n.names] == [("x",), ("a",), ("b",)]
    assert any(n.block for n in graph.nodes) and any(n.region is not None for n in graph.nodes)
