"""Free a long autograd graph without deep recursion.

torch frees a graph node by node with an explicit stack, but not once Python has
touched a node (read its `grad_fn`, walked `next_functions`, added a hook): that
node then owns its Python object, and freeing it frees the next node from inside
its destructor. A chain of 50,000 such nodes overflows the C stack (SIGSEGV) when
its last tensor goes away. gradflow's tracer touches only the nodes of ops that use
a parameter, but a loop that uses one at every step touches them all.

`free_graph` holds every node of the graph, lets go of the tensors, then releases
the nodes in topological order (the loss's node first): each node dies when its
last parent has already died, so freeing it reaches only nodes still held here.
"""
from __future__ import annotations

from collections import deque


def graph_nodes(roots: list) -> list:
    """Every autograd node reachable from `roots`, each after all of its parents (Kahn's order)."""
    children: dict = {}
    parents: dict = {}
    todo = [r for r in roots if r is not None]
    for r in todo:
        parents.setdefault(r, 0)
    while todo:
        node = todo.pop()
        if node in children:
            continue
        children[node] = [f for f, _ in node.next_functions if f is not None]
        for f in children[node]:
            parents[f] = parents.get(f, 0) + 1
            if f not in children:
                todo.append(f)
    order = [n for n, k in parents.items() if k == 0]
    i = 0
    while i < len(order):
        for f in children.pop(order[i]):
            parents[f] -= 1
            if parents[f] == 0:
                order.append(f)
        i += 1
    return order


def free_graph(tensors: list) -> None:
    """Free the graphs behind the tensors in `tensors`, emptying the list.

    Their graph is freed only if nothing else holds these tensors (or tensors computed on the way): the
    caller drops its own references first. Nodes still held elsewhere stay alive, as they would anyway.
    """
    roots = [t.grad_fn for t in tensors if getattr(t, "grad_fn", None) is not None]
    nodes = deque(graph_nodes(roots))
    tensors.clear()
    del roots
    while nodes:
        nodes.popleft()
