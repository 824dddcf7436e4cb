"""The fast parse (fastparse.py: an LALR loop over lark's tables calling Build as it reduces) against the
tree path (lark's contextual lexer and parse tree, then Build over the tree): the same typed program whenever
the text parses, and every error reported by the tree path, so error kinds, messages and spans never change."""
import functools

import lark
import pytest
from hypothesis import given, settings

from gradflow import ParseError, compat
from gradflow.language import parser
from gradflow.language.fastparse import NotFast
from gradflow.language.lexing import IndentationProblem

from ..fuzz_support import sources


@functools.cache
def fast():
    return parser._fast()

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
    "sum(x, axis=0, keepdims=True) + x.var(ddof=0) + std(x, correction=0) + argmax(x, axis=1)",
    "F.smooth_l1_loss(round(x), y, beta=0.5) + F.linear(x, w).sum() + torch.argmin(x, dim=0, keepdim=True)",
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
        mine = fast().parse(text)
    except (NotFast, KeyError, ParseError, IndentationProblem):  # it gives up on an error: parse() takes the tree
        mine = None
    try:
        tree = parser._tree_parse(text).stmts
    except ParseError as err:
        tree = (err.kind, str(err), err.hint, err.span)
    return mine, tree


def check(text: str) -> None:
    mine, tree = both(text)
    if isinstance(tree, tuple):  # an error: the fast path must not have accepted the text
        assert mine is None, (text, tree)
        with pytest.raises(ParseError) as err:
            parser.parse(text)
        assert (err.value.kind, str(err.value), err.value.hint, err.value.span) == tree
    else:
        assert mine == tree, text  # dataclasses: every node, span and parameter
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
        assert fast().parse(text) == parser._tree_parse(text).stmts


def test_without_the_fast_path_everything_still_parses(monkeypatch):
    """A lark whose insides differ from what fastparse.py reads: parser.py keeps to the tree path."""
    monkeypatch.setattr(parser, "_FAST", [None])
    assert parser.parse("x*1 + sin(x)").stmts == parser._tree_parse("x*1 + sin(x)").stmts
    with pytest.raises(ParseError, match="unknown function 'foo'"):
        parser.parse("foo(x)")


def test_the_fast_path_is_built_with_this_lark():
    assert fast() is not None and fast().keywords == {"NAME": {"with": "WITH", "requires_grad": "REQUIRES_GRAD"}}


def test_the_fast_path_is_not_built_over_a_table_laid_out_otherwise():
    """fastparse's LALR loop reads lark 1.3.1's table layout; any other (here: the end of input shifted, a goto
    that reduces, a second way into the end state) and building it raises, so parser.py keeps to the tree path."""
    from gradflow.language.fastparse import _layout

    fast = parser._fast()
    assert fast is not None and _layout(fast.states, fast.start, fast.end) is fast.shift
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


def test_parse_takes_the_fast_path_once_a_text_has_parsed(monkeypatch):
    """The first text goes through lark's parser (a syntax error loads no node classes), later ones through the
    fast path; an error there, and lark's parser reports it as always."""
    monkeypatch.setattr(parser, "_FAST", [])
    calls = []
    tree_parse = parser._tree_parse
    monkeypatch.setattr(parser, "_tree_parse", lambda text: calls.append(text) or tree_parse(text))
    parser.parse("x*2")
    assert calls == ["x*2"] and parser._FAST[0] is not None
    assert parser.parse("sin(x) + 1").stmts == tree_parse("sin(x) + 1").stmts and calls == ["x*2"]
    with pytest.raises(ParseError, match="unknown function 'foo'"):
        parser.parse("foo(x)")
    assert calls == ["x*2", "foo(x)"]


def test_a_bug_in_the_fast_path_is_not_hidden(monkeypatch):
    """Only the errors of a text send it to lark's parser: anything else the fast path raises is a bug, and
    shows."""
    monkeypatch.setattr(parser, "_FAST", [fast()])
    monkeypatch.setattr(fast(), "_parse", lambda text: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        parser.parse("x*2")


def test_without_lark_s_insides_parse_keeps_to_lark_s_parser(monkeypatch):
    """gradflow/compat.py's lark insides gone (another lark): no fast path, every text parses as before."""
    monkeypatch.delattr(parser._lark(), "_parse_tree_builder")
    assert parser._fast() is None
    monkeypatch.setattr(parser, "_FAST", [])
    for text in ["x*2", "sin(x) + 1", "x.sum(dim=0)"]:
        assert parser.parse(text).stmts == parser._tree_parse(text).stmts
    assert parser._FAST == [None]
    with pytest.raises(TypeError):  # a lexer without its patterns where fastparse reads them
        compat.lark_scanner_patterns(object())


def test_on_another_lark_version_parse_keeps_to_lark_s_parser(monkeypatch):
    monkeypatch.setattr(lark, "__version__", "1.4.0")
    assert parser._fast() is None
