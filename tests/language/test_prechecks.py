"""check_tree's depth limit: sound shortcuts, exact at its edge."""
import pytest
from hypothesis import given, settings

from gradflow import ParseError
from gradflow.errors import LimitError
from gradflow.language import parser

from ..fuzz_support import sources


def nesting(program) -> int:
    """The deepest level checks.check_tree counts: enclosing `with` blocks plus the expression's depth."""
    from gradflow.language.prechecks import tree_depth
    from gradflow.language.syntax import SetFlag, With

    best, todo = 0, [(st, 0) for st in program.stmts]
    while todo:
        st, blocks = todo.pop()
        if isinstance(st, With):
            best = max(best, blocks + 1)
            todo.extend((inner, blocks + 1) for inner in st.body)
        elif not isinstance(st, SetFlag):
            best = max(best, blocks + tree_depth(st.expr))
    return best


@settings(max_examples=300, deadline=None)
@given(sources)
def test_a_program_never_nests_deeper_than_its_length(text):
    """check_tree skips its walk when the text is no longer than the depth limit: sound only if every level
    takes at least one character of its own."""
    try:
        program = parser.parse(text)
    except ParseError:
        return
    assert nesting(program) <= len(text)


@pytest.mark.parametrize("text", ["-(-(-(-x)))", "x.T.T.T", "x[0][0][0]", "sin(cos(exp(x)))", "x^x^x^x",
                                  "with torch.no_grad():\n with torch.no_grad():\n  with torch.no_grad():\n   x\n",
                                  "torch.cat([torch.cat([x]), x]).sum()", "((((x))))", "x.sum().sum().sum()"])
def test_the_depth_limit_still_holds_at_its_edge(text):
    from gradflow.language.prechecks import check_tree
    from gradflow.limits import Limits

    program = parser.parse(text)
    depth = nesting(program)
    assert depth <= len(text)
    check_tree(program, Limits(depth=depth))
    with pytest.raises(LimitError, match=f"nests? {depth} levels; the limit is {depth - 1}"):
        check_tree(program, Limits(depth=depth - 1))
