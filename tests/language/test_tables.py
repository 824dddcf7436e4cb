"""The parse tables ship with the package, generated from grammar.lark and loaded without pickle."""
from lark import Token

from gradflow.language import tables
from gradflow.language.lexing import Continuation
from gradflow.language.parser import parse


def _stale(monkeypatch) -> None:
    """The shipped tables as if the grammar had changed since they were made."""
    real = tables.shipped()
    monkeypatch.setattr(tables, "shipped", lambda: {**real, "grammar_sha256": "stale"})


def _outcome(parser, text: str):
    try:
        tree = parser.parse(text)  # flattened without recursion: long chains make deep trees
        return ("tree", [(t.data, [(c.type, str(c)) if isinstance(c, Token) else type(c).__name__ for c in t.children])
                         for t in tree.iter_subtrees_topdown()])
    except Exception as err:  # the same error class, at the same place, with the same expectations
        return (type(err).__name__, getattr(err, "pos_in_stream", None), sorted(getattr(err, "expected", ()) or ()))


def test_the_shipped_tables_are_the_grammar_s(monkeypatch):
    """They match grammar.lark's hash, and parse like tables built from it now, on 600 generated programs and
    near-misses (syntax errors included). Edit grammar.lark, then run `python -m gradflow.language.tables`."""
    import random

    from ..fuzz_support import gen_source

    assert tables.shipped()["grammar_sha256"] == tables.digest(tables.grammar_text())
    shipped = tables.load(Continuation())
    _stale(monkeypatch)
    built = tables.load(Continuation())
    rng = random.Random(11)
    sources = [gen_source(rng) for _ in range(600)]
    assert any(_outcome(shipped, s)[0] != "tree" for s in sources) and any(_outcome(shipped, s)[0] == "tree"
                                                                           for s in sources)
    assert [_outcome(shipped, s) for s in sources] == [_outcome(built, s) for s in sources]


def test_freeze_and_thaw_round_trip_through_json():
    import json

    data = {"a": [1, (2, "t"), {3: None}], 4: ("l", "d"), "e": {}, "f": [], "g": (), (5, "k"): 1.5, "h": True}
    thawed = tables.thaw(json.loads(json.dumps(tables.freeze(data))))
    assert thawed == data and type(thawed["g"]) is tuple and type(thawed["a"][1]) is tuple


def test_stale_tables_are_not_used_and_parses_are_the_same(monkeypatch):
    """A grammar that no longer matches the tables is built in memory instead: the same parses."""
    programs = ["(x*y1 - detach(x*y2))^2", "a = x*2\nb = (a +\n 1); b^-2", "x.requires_grad = false; x*3"]
    shipped = tables.load(Continuation())
    _stale(monkeypatch)
    built = tables.load(Continuation())
    assert [shipped.parse(p) for p in programs] == [built.parse(p) for p in programs]
    assert parse(programs[1]).stmts[-1].expr.op == "pow"
