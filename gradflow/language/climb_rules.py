"""What climb.py assumes of lark's grammar, callbacks and lexer, each checked when the climber is built: `RULES`
(every alternative of the rules it walks) by `layout`, `DIRECT` (the children each Build method gets) by `probe`,
the terminals and their order by `lexer_pattern`. Any difference: TypeError, and parser.py keeps to fastparse
(tests/language/test_climb.py then fails loudly)."""
from __future__ import annotations

import re
from typing import Any

from gradflow.language.build import Build
from gradflow.language.larklib import Lark

# Every alternative of the rules the climber walks, as lark lists them (`[x]` expanded to with and without x):
# the climber assumes exactly these. `SKIPPED`: the `?rule: other` it never calls (lark gives the only child).
RULES: dict[str, set[tuple[str, ...]]] = {
    "start": {("__start_star_0",), ()},
    "__start_star_0": {("_line",), ("__start_star_0", "_line")},
    "_line": {("_stmts", "_NL"), ("with_stmt",)},
    "_stmts": {("stmt", "___stmts_star_1"), ("stmt",), ("___stmts_star_1",), ()},
    "stmt": {("assign",), ("setflag",), ("expr",)},
    "assign": {("NAME", "EQUAL", "expr")},
    "expr": {("sum",), *(("sum", op, "sum") for op in ("LT", "GT", "LE", "GE", "EQ", "NE"))},
    "sum": {("product",), ("sum", "PLUS", "product"), ("sum", "MINUS", "product")},
    "product": {("unary",), *(("product", op, "unary") for op in ("STAR", "SLASH", "AT"))},
    "unary": {("postfix",), ("postfix", "POW", "unary"), ("MINUS", "unary")},
    "postfix": {("NUMBER",), ("NAME",), ("NAME", "LPAR", "args", "RPAR"), ("NAME", "LPAR", "RPAR"),
                ("LPAR", "expr", "RPAR"), ("postfix", "DOT", "NAME", "LPAR", "args", "RPAR"),
                ("postfix", "DOT", "NAME", "LPAR", "RPAR"), ("postfix", "DOT", "NAME"),
                ("postfix", "LSQB", "subscripts", "RSQB")},
    "args": {("arg", "__args_star_3", "COMMA"), ("arg", "__args_star_3"), ("arg", "COMMA"), ("arg",)},
    "__args_star_3": {("COMMA", "arg"), ("__args_star_3", "COMMA", "arg")},
    "arg": {("value",), ("NAME", "EQUAL", "value")},
    "value": {("expr",), ("STRING",), ("LSQB", "items", "RSQB"), ("LSQB", "RSQB"),
              ("LPAR", "expr", "COMMA", "items", "RPAR"), ("LPAR", "expr", "COMMA", "RPAR")},
    "subscripts": {("subscript", "__subscripts_star_5", "COMMA"), ("subscript", "__subscripts_star_5"),
                   ("subscript", "COMMA"), ("subscript",)},
    "__subscripts_star_5": {("COMMA", "subscript"), ("__subscripts_star_5", "COMMA", "subscript")},
    "subscript": {("expr",), ("ELLIPSIS",), *(tuple(s for s in (a, "COLON", b) if s) for a in ("expr", "")
                                              for b in ("expr", "")),
                  *(tuple(s for s in (a, "COLON", b, "COLON", c) if s) for a in ("expr", "") for b in ("expr", "")
                    for c in ("expr", ""))},
}
SKIPPED = [(origin, (child,)) for origin, child in (
    ("stmt", "expr"), ("stmt", "assign"), ("expr", "sum"), ("sum", "product"), ("product", "unary"),
    ("unary", "postfix"), ("arg", "value"), ("value", "expr"), ("subscript", "expr"))]
BINARY = {"PLUS": (1, "add"), "MINUS": (1, "sub"), "STAR": (2, "mul"), "SLASH": (2, "div"), "AT": (2, "matmul")}
COMPARE = {"LT": "lt", "GT": "gt", "LE": "le", "GE": "ge", "EQ": "eq", "NE": "ne"}
# the rules whose Build method the climber calls itself: (the method, the positions in the rule's expansion of
# the children lark gives it, None for an absent `[x]`)
DIRECT: dict[tuple[str, tuple[str, ...]], tuple[str, tuple]] = {
    **{(origin, (origin, op, right)): (name, (0, 2)) for origin, right, ops in
       (("sum", "product", ("PLUS", "MINUS")), ("product", "unary", ("STAR", "SLASH", "AT")))
       for op in ops for name in [BINARY[op][1]]},
    **{("expr", ("sum", op, "sum")): (name, (0, 1, 2)) for op, name in COMPARE.items()},
    ("unary", ("MINUS", "unary")): ("neg", (0, 1)),
    ("unary", ("postfix", "POW", "unary")): ("pow", (0, 1, 2)),
    ("postfix", ("NUMBER",)): ("number", (0,)),
    ("postfix", ("NAME",)): ("var", (0,)),
    ("postfix", ("NAME", "LPAR", "args", "RPAR")): ("call", (0, 1, 2, 3)),
    ("postfix", ("NAME", "LPAR", "RPAR")): ("call", (0, 1, None, 2)),
    ("postfix", ("LPAR", "expr", "RPAR")): ("paren", (0, 1, 2)),
    ("postfix", ("postfix", "DOT", "NAME", "LPAR", "args", "RPAR")): ("method", (0, 2, 3, 4, 5)),
    ("postfix", ("postfix", "DOT", "NAME", "LPAR", "RPAR")): ("method", (0, 2, 3, None, 4)),
    ("postfix", ("postfix", "DOT", "NAME")): ("attr", (0, 2)),
    ("postfix", ("postfix", "LSQB", "subscripts", "RSQB")): ("index", (0, 1, 2, 3)),
    ("arg", ("NAME", "EQUAL", "value")): ("kwarg", (0, 2)),
    ("assign", ("NAME", "EQUAL", "expr")): ("assign", (0, 2)),
}
# the tokens of the subset (lark's terminal names); any other (a string, `;`, `...`, a keyword, a comment) and
# the climber gives up
TOKENS = {"NUMBER", "NAME", "LPAR", "RPAR", "LSQB", "RSQB", "COMMA", "DOT", "EQUAL", "COLON", "POW", "MINUS",
          "PLUS", "STAR", "SLASH", "AT", "LT", "GT", "LE", "GE", "EQ", "NE"}
STARTS_EXPR = frozenset({"NUMBER", "NAME", "LPAR", "MINUS"})


def layout(lark: Lark) -> dict:
    """{(origin, expansion): rule} for the rules in `RULES`, once lark's grammar is checked to have exactly
    those alternatives and the skipped ones to be lark's single-child expansions; else TypeError."""
    rules: dict = {}
    for rule in lark.rules:
        if rule.origin.name in RULES:
            rules[rule.origin.name, tuple(s.name for s in rule.expansion)] = rule
    for origin, expansions in RULES.items():
        have = {e for (o, e) in rules if o == origin}
        if have != expansions:
            raise TypeError(f"grammar.lark's `{origin}` is not what climb.py expects: {sorted(have ^ expansions)}")
    for key in SKIPPED:
        if not (rules[key].options.expand1 and rules[key].alias is None):
            raise TypeError(f"`{key[0]}: {key[1][0]}` is not expanded to its child")
    return rules


# lark's terminals up to its spaces between tokens, in its order: none of them can start with a space, a tab, a
# form feed or a carriage return (_NL starts with one only before a new line, and the climber reads one line)
BEFORE_SPACES = (("BOOL", "(?:false|False|true|True)"), ("NUMBER", r"(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"),
                  ("NAME", "[A-Za-z][A-Za-z0-9_]*"), ("_NL", "(\r?\n[\t \x0c]*(#[^\n]*)?)+"),
                  ("STRING", "'[^'\n]*'|\"[^\"\n]*\""))
SPACES = " \t\x0c\r"
SPACES_PATTERN = "[ \t\x0c\r]+"


def lexer_pattern(scanner) -> tuple[Any, str]:
    """lark's root lexer's regular expression (every terminal a named group, in lark's order: the first that
    matches wins, as in fastparse), made faster, and the name of its spaces' terminal:
    - each terminal's group is moved after it as an empty group: `(?:P)(?P<N>)` for `(?P<N>P)`. It matches the
      same text with the same terminal (`lastgroup`: the group closed last), and `re` tries an alternative only
      when its first character can start it, which a group in front hides;
    - the spaces before a token are matched with it (`[ \t\x0c\r]*+()` in front: group 1 starts the token).
      Where lark's lexer meets a space, no terminal before its spaces' can match (`BEFORE_SPACES`), so it
      matches the whole run of spaces, and then the token after it: the same tokens, one match each."""
    (lark_pattern,) = scanner._mres
    terminals = [(t.name, t.pattern.to_regexp()) for t in scanner.terminals]
    expected = "|".join(f"(?P<{name}>{regexp})" for name, regexp in terminals)
    if lark_pattern.pattern != expected or scanner.use_bytes or scanner.re_ is not re:
        raise TypeError("lark's lexer is not built as climb.py expects")
    n = len(BEFORE_SPACES)
    if tuple(terminals[:n]) != BEFORE_SPACES or terminals[n][1] != SPACES_PATTERN:
        raise TypeError(f"lark's terminals are not what climb.py expects: {terminals[:n + 1]}")
    alternatives = "|".join(f"(?:{regexp})(?P<{name}>)" for name, regexp in terminals)
    return re.compile(f"[{re.escape(SPACES)}]*+()(?:{alternatives})", scanner.g_regex_flags), terminals[n][0]


class _Probe:
    """A transformer with Build's methods, each answering what it was given (lark's Tree for the other rules,
    as for Build)."""

    def __getattr__(self, name: str):
        if name.startswith("_") or not _is_method(name):
            raise AttributeError(name)
        return lambda children: (name, list(children))


def _is_method(name: str) -> bool:
    """Has Build a method of this name (its own, or a base class's)?"""
    for klass in Build.__mro__:
        if name in vars(klass):
            return callable(vars(klass)[name])
    return False


def probe(lark: Lark, rules: dict) -> None:
    """What the climber assumes of lark's callbacks, checked with a transformer that only records: called
    with a rule's whole expansion, each gives Build's method (by name) the children at `DIRECT`'s positions
    (None: lark's placeholder for an absent `[x]`), and nothing else; a list (args, subscripts) reaches its
    method as its items, through the helper rules; and one statement on a line reaches `start` as itself.
    lark's child filters depend on the rule only, never on the values. Otherwise TypeError."""
    by_rule = lark._parse_tree_builder.create_callback(_Probe())
    cb = {key: by_rule[rule] for key, rule in rules.items()}
    for key, want in DIRECT.items():
        got = cb[key](list(range(len(key[1]))))
        if got != (want[0], list(want[1])):
            raise TypeError(f"lark's callback for {key} gives {got}, not {want}")
    for origin, item, star in (("args", "arg", "__args_star_3"), ("subscripts", "subscript", "__subscripts_star_5")):
        for n in (1, 2, 3):
            for trailing in (False, True):
                rest = None
                for k in range(1, n):
                    rest = cb[star, ("COMMA", item)](["c", k]) if rest is None else \
                        cb[star, (star, "COMMA", item)]([rest, "c", k])
                expansion = tuple(s for s in (item, rest is not None and star, trailing and "COMMA") if s)
                children = [0, *(() if rest is None else (rest,)), *(("c",) if trailing else ())]
                if cb[origin, expansion](children) != (origin, list(range(n))):
                    raise TypeError(f"lark's callbacks for {origin} differ")
    line = cb["_line", ("_stmts", "_NL")]([cb["_stmts", ("stmt",)](["s"]), "nl"])
    if cb["start", ("__start_star_0",)]([cb["__start_star_0", ("_line",)]([line])]) != ("start", ["s"]):
        raise TypeError("lark's callbacks for a statement differ")
