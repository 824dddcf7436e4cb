"""The fast parse (lark's LALR parser calling Build as it reduces, fed by parser.py's own lexer) against the
tree path (lark's contextual lexer and parse tree, then Build over the tree): the same typed program whenever
the text parses, and every error reported by the tree path, so error kinds, messages and spans never change."""
import threading

import pytest
from hypothesis import given, settings

from gradflow import ParseError
from gradflow.errors import LimitError
from gradflow.language import parser

from ..fuzz_support import sources

# Each construct of the grammar, and the texts where lark's contextual lexer and a lexer over every terminal
# differ: words that are terminals in some states (true, requires_grad, with) and names elsewhere.
TEXTS = [
    "x", "x*1 + x*2", "-x^2", "2^3^2", "x**-y^2", "a*b@c - d/e", "x < y", "x >= 1.5e3", "x != .5", "x == 7.",
    "sin(x) + torch.exp(x) + F.relu(x) + (x).tanh()", "x.T", "x.sum(dim=0, keepdim=True)", "x.sum(0, True)",
    "torch.sum(x, keepdim=True, dim=0)", "x[0] + x[1:3].sum() + x[::2].sum() + x[..., -1]",
    "torch.cat([x, y], 0).sum()", "torch.stack((x, y)).sum()", "x.reshape(2, 3).sum()", "x.norm(p='fro')",
    "a = sin((x\n)\n)\nb = a", "# a comment\nu = x*y  # trailing\n\nv = u + 1; ;\nv^2  # last\n",
    "x.requires_grad = true", "x.requires_grad = False; x*y", "true_divide = x; true_divide*2", "x * True",
    "keepdim = x; keepdim", "requires_grad = x\nrequires_grad*2", "withx = x; withx", "x.requires_grad_(False); x*y",
    "with torch.no_grad():\n    a = x*2\n    b = a + 1\nb*x", "with torch.no_grad(): a = x*2; b = a\nb*x",
    "with torch.no_grad():\n\ta = x\nwith torch.inference_mode():\n  with torch.no_grad():\n    c = a\nc*x",
    "  x + 1", "(x\r\n+ 1)", "z = x*y; z.requires_grad_(False); z", "y.detach_(); y*x",
    "c = (x*y).detach().requires_grad_(); c.retain_grad(); c*2", "where(x > 0, x, -x).sum()",
    # the end of input, as fastparse's own LALR loop meets it: after a new line, blank lines or a comment, at the
    # end of a `with` block (the postlexer's last _DEDENTs), a multi-line program, a trailing `;`
    "x\n", "x\n\n\n", "\n\nx", "x  # the end", "x\n# the end\n", "x;", "a = x; b = a\n\nb*a\n",
    "with torch.no_grad():\n    a = x", "with torch.no_grad():\n    a = x\n", "with torch.no_grad():\n  a = x\n\n",
    "with torch.no_grad():\n  with torch.no_grad():\n    a = x\n  b = a\nb", "a = (x +\n  1)\n# c\nb = [a,\n a]",
    # errors: each must come from the tree path, unchanged
    "", "x +", "(x", "x)", "foo(x)", "foo(x) + )", "x.foo()", "x.grad", "torch", "torch.no_grad(x)",
    "x[1.5]", "x[::-1]", "x[..., ...]", "sum(x, keepdim=1)", "sum()", "x = ", "1 = x", "_x", "x $ y",
    "with torch.no_grad():\n    a = x\n  b = a\n", "with foo():\n    x\n", "with torch.no_grad():\nx\n",
    "x.requires_grad = 1", "(x).requires_grad = true", "True", "None + x", "x.retain_grad() * 2",
    "with = 3", "x; with", "x.true", "x.with", "'a' + x", "x(1)", "sum(x, dim=0, dim=1)", "sum(dim=0, x)",
    "\n", "# only a comment", "x\n)", "with torch.no_grad():", "with torch.no_grad():\n", "x +\n", "(x\n",
    "with torch.no_grad():\n    a = x\n  b", "x = x;\n=",
]


def both(text: str):
    """(the fast path's statements or None if it gave up, the tree path's statements or its error)."""
    try:
        fast = parser._fast().parse(text)
    except Exception:  # noqa: BLE001  # the fast path gives up on any error: parse() then takes the tree path
        fast = None
    try:
        tree = parser._tree_parse(text).stmts
    except ParseError as err:
        tree = (err.kind, str(err), err.hint, err.span)
    return fast, tree


def check(text: str) -> None:
    fast, tree = both(text)
    if isinstance(tree, tuple):  # an error: the fast path must not have accepted the text
        assert fast is None, (text, tree)
        with pytest.raises(ParseError) as err:
            parser.parse(text)
        assert (err.value.kind, str(err.value), err.value.hint, err.value.span) == tree
    else:
        assert fast == tree, text  # dataclasses: every node, span and parameter
        assert parser.parse(text).stmts == tree


@pytest.mark.parametrize("text", TEXTS)
def test_fast_and_tree_paths_agree(text):
    check(text)


@settings(max_examples=300, deadline=None)
@given(sources)
def test_fast_and_tree_paths_agree_on_fuzz_texts(text):
    check(text)


def test_valid_texts_take_the_fast_path():
    """Words that are terminals in some parser states only (true, requires_grad) are names elsewhere: the
    fast lexer asks lark's lexer of that state rather than giving up."""
    for text in ["x * True", "true_divide = x; true_divide*2", "x.requires_grad_(False); x", "x.sum(0, True)",
                 "requires_grad = x\nrequires_grad*2", "x.requires_grad = true\nx*2", "x*1 + x*2"]:
        assert parser._fast().parse(text) == parser._tree_parse(text).stmts


def test_a_build_error_before_a_syntax_error_is_still_the_syntax_error():
    """The tree path parses the whole text before building any node, so a syntax error anywhere wins over an
    unknown function before it; building while parsing must not change which error is reported."""
    with pytest.raises(ParseError) as err:
        parser.parse("foo(x) + )")
    assert err.value.kind == "syntax" and "unexpected ')' at position 9" in str(err.value)
    with pytest.raises(ParseError) as err:
        parser.parse("x[1.5]; (")
    assert err.value.kind == "syntax"


@pytest.mark.parametrize("path", ["climb", "fast"])
def test_threads_parse_their_own_texts(path):
    """Each thread has its own parser state (Build keeps the text it reports against): climb.py's and
    fastparse's."""
    texts = [" + ".join(f"x*{k}" for k in range(n, n + 40)) for n in range(8)]
    want = [parser._tree_parse(t).stmts for t in texts]
    got: dict[int, list] = {}

    def work(i):
        parse = parser._climb().parse if path == "climb" else parser._fast().parse
        got[i] = [parse(texts[i]) for _ in range(30)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(runs == [want[i]] * 30 for i, runs in got.items()) and len(got) == len(texts)


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


def test_quick_bind_agrees_with_the_binder_for_every_op():
    """calls.quick_bind answers the common call (exactly an op's tensors, positionally) without a Binder: for
    every op and spelling, with 0-3 operands of each kind, it gives Binder.bind's answer or leaves it to it."""
    from itertools import product

    from gradflow.errors import Span
    from gradflow.language.calls import Binder, quick_bind
    from gradflow.language.ops import FUNCTIONS, METHODS
    from gradflow.language.syntax import Call, Keyword, Num, Str, Var

    s = Span(0, 1)
    kinds = [Var(s, s, "a"), Num(s, s, 2.0), Call(s, s, "neg", [Var(s, s, "b")]), Var(s, s, "True"),
             Var(s, s, "None"), Str(s, s, "sum"), Keyword("dim", Num(s, s, 0.0), s)]
    answered = 0
    for table, method in ((FUNCTIONS, False), (METHODS, True)):
        for name, op in table.items():
            for n in range(4):
                for args in product(kinds, repeat=n) if n < 3 else [tuple(kinds[:3])]:
                    receiver = Var(s, s, "r") if method else None
                    quick = quick_bind(op, list(args), receiver)
                    try:
                        want = Binder(op, name, s, "src", method).bind(list(args), receiver)
                    except ParseError:
                        assert quick is None, (name, args)
                        continue
                    if quick is not None:
                        answered += 1
                        assert quick == want, (name, args)
    assert answered > 100


def nesting(program) -> int:
    """The deepest level checks.check_tree counts: enclosing `with` blocks plus the expression's depth."""
    from gradflow.language.checks import tree_depth
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
    from gradflow.language.checks import check_tree
    from gradflow.limits import Limits

    program = parser.parse(text)
    depth = nesting(program)
    assert depth <= len(text)
    check_tree(program, Limits(depth=depth))
    with pytest.raises(LimitError, match=f"nests? {depth} levels; the limit is {depth - 1}"):
        check_tree(program, Limits(depth=depth - 1))


def test_without_the_fast_path_everything_still_parses(monkeypatch):
    """A lark whose insides differ from what fastparse.py reads: parser.py keeps to the tree path."""
    monkeypatch.setattr(parser, "_FAST", [None])
    assert parser.parse("x*1 + sin(x)").stmts == parser._tree_parse("x*1 + sin(x)").stmts
    with pytest.raises(ParseError, match="unknown function 'foo'"):
        parser.parse("foo(x)")


def test_the_fast_path_is_built_with_this_lark():
    fast = parser._fast()
    assert fast is not None and fast.keywords == {"NAME": {"with": "WITH", "requires_grad": "REQUIRES_GRAD"}}


def test_the_fast_path_is_not_built_over_a_table_laid_out_otherwise():
    """fastparse's LALR loop reads lark 1.3.1's table layout; any other (here: the end of input shifted, a goto
    that reduces, a second way into the end state) and building it raises, so parser.py keeps to the tree path."""
    from gradflow.language.fastparse import _layout

    fast = parser._fast()
    assert _layout(fast.states, fast.start, fast.end) is fast.shift
    shift, (reduce_, rule) = fast.shift, next(a for row in fast.states.values() for a in row.values()
                                               if a[0] is not fast.shift)
    some = next(s for s, row in fast.states.items() if "$END" in row)
    goto = next((s, k) for s, row in fast.states.items() for k in row if not k.isupper())
    for state, symbol, action in [(some, "$END", (shift, fast.end)), (goto[0], goto[1], (reduce_, rule)),
                                  (fast.start, "NAME", (shift, fast.end))]:
        states = {s: dict(row) for s, row in fast.states.items()}
        states[state][symbol] = action
        with pytest.raises(TypeError):
            _layout(states, fast.start, fast.end)
