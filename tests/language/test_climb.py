"""The precedence climber (climb.py, parser.parse's first path) against the tree path (lark's parse tree, then
Build over it): the same typed program, every node and span, whenever it does not give up; and where it gives
up (a text outside its subset, or any error), parser.parse gives exactly what it gave before."""
import ast
import dataclasses
import functools
import importlib.util
import json
import pathlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradflow import ParseError
from gradflow.errors import Span
from gradflow.language import climb, climb_rules, parser
from gradflow.language.larklib import Token
from gradflow.language.tables import OPTIONS, grammar_text

from ..fuzz_support import sources
from .test_fast_parse import TEXTS

ROOT = pathlib.Path(__file__).resolve().parents[2]


def climbed(text: str):
    """The climber's statements, or None where it gives up (on any error, as parser.parse does)."""
    try:
        return parser._climb().parse(text)
    except Exception:  # noqa: BLE001  # parse() then takes the next path
        return None


def tree(text: str):
    try:
        return parser._tree_parse(text).stmts
    except ParseError as err:
        return (err.kind, str(err), err.hint, err.span)


def check(text: str) -> bool:
    """The climber agrees with the tree path, and so does parser.parse; True if the climber took the text."""
    mine, want = climbed(text), tree(text)
    if isinstance(want, tuple):  # an error: the climber must have given up, and parse() reports it as before
        assert mine is None, (text, want)
        with pytest.raises(ParseError) as err:
            parser.parse(text)
        assert (err.value.kind, str(err.value), err.value.hint, err.value.span) == want
        return False
    if mine is not None:
        assert mine == want, text  # dataclasses: every node, span, parameter and flag
        assert repr(mine) == repr(want), text
    assert parser.parse(text).stmts == want
    return mine is not None


@functools.lru_cache(maxsize=1)
def bench_programs() -> list[str]:
    """bench/run.py's 10,000 all-distinct programs (the `batch --jobs` benchmark's records)."""
    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "bench" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [json.loads(line)["expr"] for line in module.distinct_lines()]


@functools.lru_cache(maxsize=1)
def known_texts() -> list[str]:
    """Every one-line string literal of the test suite, and every quoted argument of a `$ gradflow` line of the
    manual: the programs the suite and the docs already use (and many strings that are no program at all)."""
    found = set(TEXTS)
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 300:
                found.add(node.value)
    for path in sorted((ROOT / "docs").glob("*.md")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("$ gradflow"):
                found.update(a or b for a, b in re.findall(r'"([^"]*)"|\'([^\']*)\'', line))
    return sorted(t for t in found if "\n" not in t)  # the climber gives up on a new line before anything else


@pytest.mark.parametrize("text", TEXTS)
def test_the_fast_parse_texts(text):
    check(text)


def test_every_text_of_the_suite_and_the_manual():
    texts = known_texts()
    taken = sum(check(t) for t in texts)
    assert len(texts) > 2000 and taken > 500, (len(texts), taken)


def test_the_benchmark_programs_all_take_the_climber():
    """A twentieth of them here (all of them with -m slow); each one must be taken, so the path cannot silently stop
    being used for the programs it exists for."""
    for text in bench_programs()[::20]:
        assert check(text), text


@pytest.mark.slow
def test_all_ten_thousand_benchmark_programs():
    for text in bench_programs():
        assert check(text), text


@pytest.mark.parametrize("text", [
    "x", "x*1 + x*2", "-x^2", "x^-1", "2^3^2", "x**-y^2", "--x", "2*-x", "-2^-2^-2", "a-b-c", "a/b/c*d@e",
    "a + b*c - d/e@f*g - h < -x^2^3*2 - 1", "(x + 1) >= (y)", "x != .5", "x == 7.", "1e-3 + 2E+2", "sin(x)",
    "torch.exp(x)", "F.relu(x)", "(x).tanh()", "x.T", "x.T.T^2.5", "x.sum(dim=0) * 0 + x.mean(0)",
    "x.sum(0, )", "pow(x, 2, )", "torch.sum(x, dim=0)", "x[0]", "x[0, 1]", "x[0,]", "x[1:3]",
    "x[::2]", "x[:, 0]", "x[:]", "x[::]", "x[1:]", "x[:1]", "x[1::2]", "x[:2:]", "x[-1]", "x[0][1].sum()",
    "x.reshape(2, 3)[1, ::2].sum()", "a = x*y", "loss = sum((x - y)^2)", "  x  +\t1 ", "x\r", "mean(x.exp())",
    "where(x > 0, x, -x).sum()", "sum((((tanh(y) * (3 - x)) + ((3 - 1.5))^2) - x))", "x.detach_()",
    "x.requires_grad_()", "z = x.detach()", "max(x, y)", "torch.where(x < y, x, y)",
])
def test_the_subset_is_taken(text):
    assert check(text), text


@pytest.mark.parametrize("text", [
    # outside the subset, but programs: the climber gives up, the next path parses them as before
    "x; y", "x;", "a = x; a", "x  # a comment", "x.norm(p='fro')", "torch.cat([x, y]).sum()",
    "torch.stack((x, y)).sum()", "x[..., -1]", "x.requires_grad = true", "x * True", "true_divide = x",
    "with torch.no_grad(): a = x*2", "x\n", "a = x\nb = a", "(x\n+ 1)", "x.requires_grad_(False)",
    "requires_grad = x", "withx = x; withx",
    # errors: each reported by the tree path, as always
    "", " ", "x +", "(x", "x)", "foo(x)", "foo(x) + )", "x.foo()", "x.grad", "x < y < z", "x = y = z",
    "x[1.5]", "x[::-1]", "x[:::]", "sum(x, keepdim=1)", "sum()", "x = ", "1 = x", "_x", "x $ y", "x ^", "-",
    "f(,)", "sum(x,,)", "x[]", "x[,]", "x.", "x.1", "1.x", "x..y", "(x, y)", "x(1)", "sum(dim=0, x)",
    "sum(x, dim=0, dim=1)", "a == = b", "x = = y", "x ** * y", "x @@ y", "'a' + x", "x !", "x <> y",
])
def test_outside_the_subset_it_gives_up(text):
    assert not check(text), text


def flat(stmts) -> list:
    """Every node of the statements in pre-order, each as its type and its fields other than nodes (spans,
    names, values, parameters): equal lists, equal programs, without the recursion of dataclass equality."""
    out, todo = [], list(reversed(stmts))
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            out.append("[")
            todo.extend(reversed(node))
            continue
        if not dataclasses.is_dataclass(node):
            out.append(node)
            continue
        out.append(type(node).__name__)
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, Span) or isinstance(value, list):
                todo.append(value)
            else:
                out.append((f.name, value))
    return out


def test_deep_nesting_gives_up_to_the_next_path():
    """Python's recursion limit: the climber gives up, fastparse (no recursion) parses it, as the tree path."""
    for text in ["(" * 2000 + "x" + ")" * 2000, "-" * 3000 + "x", "x" + "^x" * 3000, "sin(" * 1500 + "x" + ")" * 1500]:
        assert climbed(text) is None
        assert flat(parser.parse(text).stmts) == flat(parser._tree_parse(text).stmts)


def test_long_sums_take_the_climber():
    """Left-associative operators are a loop, not a recursion: any length."""
    text = " + ".join(f"x*{k}" for k in range(2000))
    mine = climbed(text)
    assert mine is not None and flat(mine) == flat(parser._tree_parse(text).stmts)
    assert flat(parser.parse(text).stmts) == flat(mine)


# Random programs of the subset: odd spacing, nesting, unary minus chains, powers, comparisons, calls with
# keyword arguments, methods, attributes, indexing and slices; and names, functions, methods and arguments that
# are wrong, so that Build's errors come up too.
_space = st.sampled_from(["", "", " ", "  ", "\t", " \t"])
_leaf = st.sampled_from(["x", "y", "a1", "x_2", "torch", "F", "T", "true_x", "sum", "withx", "1", "2.5", ".5",
                         "7.", "1e-3", "2E+2", "0", "3"])
_binary = st.sampled_from(["+", "-", "*", "/", "@", "^", "**", "<", ">", "<=", ">=", "==", "!="])
_functions = st.sampled_from(["sin", "exp", "sum", "mean", "pow", "max", "where", "tanh", "relu", "detach",
                              "torch.sum", "torch.exp", "F.relu", "foo", "torch.no_grad"])
_methods = st.sampled_from(["sum", "exp", "pow", "reshape", "mean", "detach", "abs", "T", "shape", "bogus",
                            "requires_grad_", "retain_grad"])
_keywords = st.sampled_from(["dim", "keepdim", "exponent", "p", "x"])


def _joined(parts: list[str], spaces: list[str]) -> str:
    return "".join(p + s for p, s in zip(parts, spaces + [""] * len(parts)))


def _extend(inner):
    arg = st.one_of(inner, st.tuples(_keywords, _space, inner).map(lambda t: f"{t[0]}{t[1]}={t[2]}"))
    args = st.tuples(st.lists(arg, max_size=3), st.booleans(), _space).map(
        lambda t: (t[2] + ",").join(t[0]) + ("," if t[1] and t[0] else ""))
    part = st.one_of(st.just(""), inner)
    subscript = st.one_of(inner, st.tuples(part, part).map(":".join), st.tuples(part, part, part).map(":".join))
    return st.one_of(
        st.tuples(inner, _space, _binary, _space, inner).map("".join),
        st.tuples(st.sampled_from(["-", "- ", "--"]), inner).map("".join),
        st.tuples(_space, inner, _space).map(lambda t: f"({''.join(t)})"),
        st.tuples(_functions, args).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, _methods, st.none() | args).map(lambda t: f"{t[0]}.{t[1]}" + ("" if t[2] is None
                                                                                       else f"({t[2]})")),
        st.tuples(inner, st.lists(subscript, min_size=1, max_size=3), st.booleans()).map(
            lambda t: f"{t[0]}[{', '.join(t[1])}{',' if t[2] else ''}]"),
    )


subset_programs = st.tuples(st.none() | st.sampled_from(["a", "loss", "x", "F"]), _space,
                            st.recursive(_leaf, _extend, max_leaves=10), _space).map(
    lambda t: (f"{t[0]} = " if t[0] else "") + "".join(t[1:]))


@settings(max_examples=250, deadline=None)
@given(subset_programs)
def test_random_subset_programs(text):
    check(text)


@settings(max_examples=100, deadline=None)
@given(sources)
def test_the_fuzz_texts(text):
    check(text)


def test_parse_takes_the_climber_for_the_common_programs(monkeypatch):
    """With fastparse and the tree path gone, the common programs still parse: the climber parses them."""
    want = {t: parser._tree_parse(t).stmts for t in ["sin(x) * (y - 1.5)^2", "x.sum(dim=0) + x[0, 1:]"]}
    monkeypatch.setattr(parser, "_FAST", [None])

    def no_tree(source):
        raise AssertionError(f"the tree path parsed {source!r}")

    monkeypatch.setattr(parser, "_tree_parse", no_tree)
    for text, stmts in want.items():
        assert parser.parse(text).stmts == stmts


def test_the_climber_is_built_with_this_grammar_and_lark():
    """If grammar.lark or lark changes what climb.py relies on, parser.py quietly keeps to fastparse: this test
    is what says so. Update climb_rules.py (`RULES`, `DIRECT`) and the code in climb.py that walks them with the grammar."""
    assert parser._climb() is not None
    climb.Climb(parser._lark())  # and it says why, if not


def _lark_for(grammar: str):
    from gradflow.language.larklib import Lark
    from gradflow.language.lexing import Continuation

    return Lark(grammar, postlex=Continuation(), **OPTIONS)


@pytest.mark.parametrize("old,new", [
    ("| postfix POW unary    -> pow", "| postfix POW postfix  -> pow"),  # powers no longer right-associative
    ("| sum \"-\" product       -> sub", "| sum \"-\" product       -> sub\n    | sum \"%\" product -> mod"),
    ("| MINUS unary          -> neg", "| MINUS postfix        -> neg"),
    ("args: arg (\",\" arg)* \",\"?", "args: arg (\",\" arg)*"),  # no trailing comma
])
def test_a_grammar_it_does_not_expect_turns_it_off(old, new):
    text = grammar_text()
    assert old in text
    with pytest.raises(TypeError, match="grammar.lark's"):
        climb.Climb(_lark_for(text.replace(old, new)))


def test_its_operators_are_build_s_by_the_names_it_checks():
    """`probe` checks lark's callbacks by Build's method names (`BINARY`, `COMPARE`): the climber calls those."""
    climber = parser._climb().climber
    assert {op: (level, getattr(climber.build, name)) for op, (level, name) in climb_rules.BINARY.items()} == \
        climber.binary
    assert {op: getattr(climber.build, name) for op, name in climb_rules.COMPARE.items()} == climber.compare


def test_lark_callbacks_it_does_not_expect_turn_it_off(monkeypatch):
    """What the climber assumes of lark's child filters is checked against lark itself when it is built."""
    key = ("sum", ("sum", "PLUS", "product"))
    monkeypatch.setitem(climb_rules.DIRECT, key, ("add", (0, 1, 2)))
    with pytest.raises(TypeError, match="lark's callback"):
        climb.Climb(parser._lark())


_TOKEN = ("type", "value", "start_pos", "line", "column", "end_pos", "end_line", "end_column")


def test_its_tokens_are_lark_s():
    """Every token the climber reads is the one lark's own lexer over every terminal gives (Lark.lex: the root
    lexer fastparse matches with, then the postlexer's final new line), every position included."""
    lark, climber = parser._lark(), parser._climb().climber
    texts = [*known_texts(), *bench_programs()[1::40], "  x  +\t1 \r", "x\x0c*\ty", "\r x", "2.e3*.5E-2**x"]
    lexed = 0
    for text in texts:
        try:
            mine = climber._lex(text)
        except climb.GiveUp:
            continue
        theirs = list(lark.lex(text))
        assert [type(t) for t in mine[:-1]] == [Token] * len(theirs[:-1])
        assert [[getattr(t, a) for a in _TOKEN] for t in mine[:-1]] == [[getattr(t, a) for a in _TOKEN]
                                                                        for t in theirs[:-1]], text
        assert theirs[-1].type == mine[-1].type == "_NL"
        lexed += 1
    assert lexed > 1000


def test_its_reused_tokens_are_lark_s(monkeypatch):
    """A token is made once per terminal, place and text (spaces before it included) and then reused: texts that
    share tokens at the same places (and ones that differ only in the spaces, or the terminal, there) give lark's
    tokens whether theirs were made now or before, and the kept tokens stay bounded."""
    lark, climber = parser._lark(), parser._climb().climber
    monkeypatch.setattr(climber, "_made", {})
    monkeypatch.setattr(climb, "_MADE", 8)
    texts = ["sum(x)", "sum(x * 2)", "sum( x)", "sum (x)", "sum(x2)", "sum(2)", "x", " x", "x1", "1", "1.5", "1e5",
             "-x", "x-1", "x - 1", "x <= 1", "x < =1", "x<1", "sum(x)", "x**2", "x^2", "x*2", "mean(x)"] * 2
    for text in texts:
        mine = climber._lex(text)
        assert len(climber._made) <= 8
        assert [[getattr(t, a) for a in _TOKEN] for t in mine[:-1]] == [[getattr(t, a) for a in _TOKEN]
                                                                        for t in list(lark.lex(text))[:-1]], text
    reused = climber._lex("sum(x)")
    assert climber._lex("sum(x)")[0] is reused[0]  # kept, not made again
    long = "+".join(["x"] * (climb._SHORT // 2 + 1))
    assert [[getattr(t, a) for a in _TOKEN] for t in climber._lex(long)[:-1]] == \
        [[getattr(t, a) for a in _TOKEN] for t in list(lark.lex(long))[:-1]]
    assert climber._lex(long)[0] is not climber._lex(long)[0]  # a long text's tokens: made, not kept
