"""Parsing one-line expression programs by precedence climbing: the common case, without an LALR loop.

parser.parse tries three paths in turn, each giving up where the next one takes over:

1. this module (`Climb`): one line, no comments, strings, lists, tuples, `...`, `;`, `with` or flags; numbers,
   names, calls (with keyword arguments), methods, attributes, indexing and slicing, parentheses, the binary
   operators, powers, unary minus, one comparison, and `name = expr`. Anything else, any syntax error, any
   error from Build: it gives up (`GiveUp`, or whatever Build raised) and reports nothing;
2. fastparse.Fast: lark's LALR tables in a loop of our own, for every text that parses;
3. the parse tree (parser._tree_parse): every error is reported from there, exactly as always.

It gives the same nodes as the other two because it builds them the same way, from the same tokens:
- the derivation: the grammar is LALR(1), so a text has one; a derivation built here from the grammar's own
  rules is the one lark finds. `_RULES` is what the code below assumes of grammar.lark: every alternative of
  every rule it walks, checked when it is built (any difference, and parser.py keeps to fastparse;
  tests/language/test_climb.py then fails loudly);
- the nodes: for each rule it reduces by, Build's method gets the children lark's callback would give it for
  that rule's whole expansion (its child filters drop `"+"`, `","`, `"."`, `"="`; an absent `[args]` is None;
  the `?rule: other` rules are lark's single child, as in fastparse). `_DIRECT` lists them, and `_probe` checks
  them against lark's own callbacks when the climber is built (they depend on the rule, never on the values);
- the tokens: lark's Tokens with fastparse's types and positions, from lark's root lexer's regular expression
  (`_pattern`), on a text of one line; the contextual lexer's wherever the text parses (fastparse's argument).

Why: a one-line program (~34 characters, ~20 tokens) took ~64 shift/reduce steps of fastparse's loop, each a
few table look-ups; here each token is looked at about once, and the operators' levels are in the code.
"""
from __future__ import annotations

import re
import threading
from typing import Any

from gradflow.language.build import Build
from gradflow.language.larklib import ExpandSingleChild, Lark, Token, UnlessCallback

_END = Token("_NL", "")


class GiveUp(Exception):
    """Outside the subset, or not a program at all: the next path parses (and reports) it."""


# Every alternative of the rules the climber walks, as lark lists them (`[x]` expanded to with and without x):
# the climber assumes exactly these. `_SKIPPED`: the `?rule: other` it never calls (lark gives the only child).
_RULES: dict[str, set[tuple[str, ...]]] = {
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
_SKIPPED = [(origin, (child,)) for origin, child in (
    ("stmt", "expr"), ("stmt", "assign"), ("expr", "sum"), ("sum", "product"), ("product", "unary"),
    ("unary", "postfix"), ("arg", "value"), ("value", "expr"), ("subscript", "expr"))]
_BINARY = {"PLUS": (1, "add"), "MINUS": (1, "sub"), "STAR": (2, "mul"), "SLASH": (2, "div"), "AT": (2, "matmul")}
_COMPARE = {"LT": "lt", "GT": "gt", "LE": "le", "GE": "ge", "EQ": "eq", "NE": "ne"}
# the rules whose Build method the climber calls itself: (the method, the positions in the rule's expansion of
# the children lark gives it, None for an absent `[x]`)
_DIRECT: dict[tuple[str, tuple[str, ...]], tuple[str, tuple]] = {
    **{(origin, (origin, op, right)): (name, (0, 2)) for origin, right, ops in
       (("sum", "product", ("PLUS", "MINUS")), ("product", "unary", ("STAR", "SLASH", "AT")))
       for op in ops for name in [_BINARY[op][1]]},
    **{("expr", ("sum", op, "sum")): (name, (0, 1, 2)) for op, name in _COMPARE.items()},
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
_TOKENS = {"NUMBER", "NAME", "LPAR", "RPAR", "LSQB", "RSQB", "COMMA", "DOT", "EQUAL", "COLON", "POW", "MINUS",
           "PLUS", "STAR", "SLASH", "AT", "LT", "GT", "LE", "GE", "EQ", "NE"}
_STARTS_EXPR = frozenset({"NUMBER", "NAME", "LPAR", "MINUS"})


def _layout(lark: Lark) -> dict:
    """{(origin, expansion): rule} for the rules in `_RULES`, once lark's grammar is checked to have exactly
    those alternatives and the skipped ones to be lark's single-child expansions; else TypeError."""
    rules: dict = {}
    for rule in lark.rules:
        if rule.origin.name in _RULES:
            rules[rule.origin.name, tuple(s.name for s in rule.expansion)] = rule
    for origin, expansions in _RULES.items():
        have = {e for (o, e) in rules if o == origin}
        if have != expansions:
            raise TypeError(f"grammar.lark's `{origin}` is not what climb.py expects: {sorted(have ^ expansions)}")
    for key in _SKIPPED:
        if not (rules[key].options.expand1 and rules[key].alias is None):
            raise TypeError(f"`{key[0]}: {key[1][0]}` is not expanded to its child")
    return rules


# lark's terminals up to its spaces between tokens, in its order: none of them can start with a space, a tab, a
# form feed or a carriage return (_NL starts with one only before a new line, and the climber reads one line)
_BEFORE_SPACES = (("BOOL", "(?:false|False|true|True)"), ("NUMBER", r"(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"),
                  ("NAME", "[A-Za-z][A-Za-z0-9_]*"), ("_NL", "(\r?\n[\t \x0c]*(#[^\n]*)?)+"),
                  ("STRING", "'[^'\n]*'|\"[^\"\n]*\""))
SPACES = " \t\x0c\r"
_SPACES_PATTERN = "[ \t\x0c\r]+"


def _pattern(scanner) -> tuple[Any, str]:
    """lark's root lexer's regular expression (every terminal a named group, in lark's order: the first that
    matches wins, as in fastparse), made faster, and the name of its spaces' terminal:
    - each terminal's group is moved after it as an empty group: `(?:P)(?P<N>)` for `(?P<N>P)`. It matches the
      same text with the same terminal (`lastgroup`: the group closed last), and `re` tries an alternative only
      when its first character can start it, which a group in front hides;
    - the spaces before a token are matched with it (`[ \t\x0c\r]*+()` in front: group 1 starts the token).
      Where lark's lexer meets a space, no terminal before its spaces' can match (`_BEFORE_SPACES`), so it
      matches the whole run of spaces, and then the token after it: the same tokens, one match each."""
    (lark_pattern,) = scanner._mres
    terminals = [(t.name, t.pattern.to_regexp()) for t in scanner.terminals]
    expected = "|".join(f"(?P<{name}>{regexp})" for name, regexp in terminals)
    if lark_pattern.pattern != expected or scanner.use_bytes or scanner.re_ is not re:
        raise TypeError("lark's lexer is not built as climb.py expects")
    n = len(_BEFORE_SPACES)
    if tuple(terminals[:n]) != _BEFORE_SPACES or terminals[n][1] != _SPACES_PATTERN:
        raise TypeError(f"lark's terminals are not what climb.py expects: {terminals[:n + 1]}")
    alternatives = "|".join(f"(?:{regexp})(?P<{name}>)" for name, regexp in terminals)
    return re.compile(f"[{re.escape(SPACES)}]*+()(?:{alternatives})", scanner.g_regex_flags), terminals[n][0]


class Climb(threading.local):
    """Per thread (Build keeps the source it reports errors against), a `_Climber`: it is a plain object, as
    each attribute of a thread-local one costs a look-up of the thread's own."""

    def __init__(self, lark: Lark):
        self.climber = _Climber(lark)

    def parse(self, source: str) -> list:
        """The statements, as the other paths give them; GiveUp (or Build's error) where they must decide."""
        return self.climber.parse(source)


class _Climber:
    """The climber, calling one Build's methods as lark's callbacks would (`_probe` checks how)."""

    def __init__(self, lark: Lark):
        self.build = build = Build("")
        rules = _layout(lark)
        _probe(lark, rules)
        by_rule = lark._parse_tree_builder.create_callback(build)
        for key in _SKIPPED:
            if type(by_rule[rules[key]]) is not ExpandSingleChild:
                raise TypeError(key)
        root = lark.parser.lexer.lexer.root_lexer
        pattern, space = _pattern(root.scanner)
        self.scanner: Any = pattern.scanner  # re's (undocumented): matches, each where the one before ended
        if set(root.ignore_types) != {space, "COMMENT"}:
            raise TypeError(f"lark ignores {sorted(root.ignore_types)}")
        # lark's `unless` callbacks: a NAME spelled as a keyword (`with`, `requires_grad`) is that keyword
        if set(root.callback) != {"NAME"} or type(root.callback["NAME"]) is not UnlessCallback or \
                any(t.pattern.flags for t in root.callback["NAME"].scanner.terminals):
            raise TypeError("lark's lexer turns other words into keywords than climb.py expects")
        self.keywords = frozenset(t.pattern.value for t in root.callback["NAME"].scanner.terminals)
        missing = _TOKENS - {t.name for t in root.terminals}
        if missing:
            raise TypeError(f"no terminal {sorted(missing)}")
        self.tokens = frozenset(_TOKENS)
        # Build's methods by `_BINARY`'s and `_COMPARE`'s names (the operators' are set on Build from _binary)
        self.binary: dict[str, tuple[int, Any]] = {"PLUS": (1, build.add), "MINUS": (1, build.sub),
                                                   "STAR": (2, build.mul), "SLASH": (2, build.div),
                                                   "AT": (2, build.matmul)}
        self.compare: dict[str, Any] = {"LT": build.lt, "GT": build.gt, "LE": build.le, "GE": build.ge,
                                        "EQ": build.eq, "NE": build.ne}
        self.neg, self.number, self.var = build.neg, build.number, build.var
        self.pow: Any = build.pow
        self.call, self.paren, self.method, self.attr, self.index = \
            build.call, build.paren, build.method, build.attr, build.index
        self.kwarg, self.assign, self.start = build.kwarg, build.assign, build.start
        self.args = _Sequence(build.args)
        self.subscripts = _Sequence(build.subscripts)
        # slices keep lark's callbacks: their placeholders differ by alternative
        self.slicing = {e: by_rule[rule] for (o, e), rule in rules.items() if o == "subscript" and "COLON" in e}

    def parse(self, source: str) -> list:
        if "\n" in source:
            raise GiveUp
        self.build.source = source
        try:
            return self._program(self._lex(source))
        finally:
            self.build.source = ""  # no text kept alive by the thread's parser

    def _lex(self, text: str) -> list:
        """fastparse's tokens for a text of one line (lark's root lexer, lark's positions), then `_END` where
        the postlexer adds the final new line (lexing.py; fastparse's `_tokens` too). Build never sees it."""
        toks: list = []
        append, new, token, keywords, kinds = toks.append, str.__new__, Token, self.keywords, self.tokens
        stop = 0
        for m in iter(self.scanner(text).match, None):  # the spaces at the end, and no token: no match
            kind = m.lastgroup
            if kind not in kinds:
                raise GiveUp
            start, stop = m.start(1), m.end()  # after the spaces
            value = text[start:stop]
            if kind == "NAME" and value in keywords:
                raise GiveUp
            tok = new(token, value)
            tok.type = kind
            tok.value = value
            tok.start_pos = start
            tok.line = 1
            tok.column = start + 1
            tok.end_pos = stop
            tok.end_line = 1
            tok.end_column = stop + 1
            append(tok)
        if stop != len(text.rstrip(SPACES)) or not toks:
            raise GiveUp  # a character no terminal matches, or no token at all
        append(_END)
        return toks

    def _program(self, toks: list) -> list:
        if toks[0].type == "NAME" and toks[1].type == "EQUAL":
            value, i = self._expr(toks, 2)
            stmt = self.assign([toks[0], value])
        else:
            stmt, i = self._expr(toks, 0)
        if toks[i].type != "_NL":
            raise GiveUp
        return self.start([stmt])

    def _expr(self, toks: list, i: int, compare: bool = True):
        """expr: a sum, or one comparison of two sums (`compare`: a comparison may follow). A sum: operands
        joined by the left-associative operators, those of a product (`*`, `/`, `@`) first."""
        left, i = self._unary(toks, i)
        entry = self.binary.get(toks[i].type)
        if entry is not None:
            operands: list = [left]
            pending: list = []  # the operators (level, method) whose right operand is operands[-1]
            while entry is not None:
                level = entry[0]
                while pending and pending[-1][0] >= level:  # left-associative: what came before binds first
                    right = operands.pop()
                    operands[-1] = pending.pop()[1]([operands[-1], right])
                pending.append(entry)
                right, i = self._unary(toks, i + 1)
                operands.append(right)
                entry = self.binary.get(toks[i].type)
            while pending:
                right = operands.pop()
                operands[-1] = pending.pop()[1]([operands[-1], right])
            left = operands[0]
        if compare:
            method = self.compare.get(toks[i].type)
            if method is not None:
                op = toks[i]
                right, i = self._expr(toks, i + 1, False)
                left = method([left, op, right])
        return left, i

    def _unary(self, toks: list, i: int):
        """unary: MINUS unary | postfix POW unary | postfix (powers are right-associative, signed exponents),
        where postfix is an atom (a number, a name, a call, an expression in parentheses), then any `.name`,
        `.name(...)` and `[...]` after it."""
        tok = toks[i]
        kind = tok.type
        if kind == "MINUS":
            operand, i = self._unary(toks, i + 1)
            return self.neg([tok, operand]), i
        if kind == "NUMBER":
            value = self.number([tok])
            i += 1
        elif kind == "NAME":
            if toks[i + 1].type == "LPAR":
                value, i = self._called(toks, i, [tok], self.call)
            else:
                value = self.var([tok])
                i += 1
        elif kind == "LPAR":
            inner, i = self._expr(toks, i + 1)
            if toks[i].type != "RPAR":
                raise GiveUp  # a tuple (an argument only) or an error
            value = self.paren([tok, inner, toks[i]])
            i += 1
        else:
            raise GiveUp
        while True:
            kind = toks[i].type
            if kind == "DOT":
                name = toks[i + 1]
                if name.type != "NAME":
                    raise GiveUp
                if toks[i + 2].type == "LPAR":
                    value, i = self._called(toks, i + 1, [value, name], self.method)
                else:
                    value = self.attr([value, name])
                    i += 2
            elif kind == "LSQB":
                subs, j = self.subscripts.parse(toks, i + 1, self._subscript, "RSQB")
                value = self.index([value, toks[i], subs, toks[j]])
                i = j + 1
            elif kind == "POW":
                op = toks[i]
                exponent, i = self._unary(toks, i + 1)
                return self.pow([value, op, exponent]), i
            else:
                return value, i

    def _called(self, toks: list, i: int, head: list, method):
        """NAME LPAR [args] RPAR at toks[i], after `head` (Build's children so far, the NAME included)."""
        lpar = toks[i + 1]
        kind = toks[i + 2].type
        if kind == "RPAR":
            return method([*head, lpar, None, toks[i + 2]]), i + 3
        if kind == "NAME" and toks[i + 3].type == "EQUAL":
            first, j = self._arg(toks, i + 2)
        else:
            first, j = self._expr(toks, i + 2)  # arg: value: expr, each lark's single child
        args, j = self.args.rest(toks, j, first, self._arg, "RPAR")
        return method([*head, lpar, args, toks[j]]), j + 1

    def _arg(self, toks: list, i: int):
        """arg: value | NAME "=" value, where a value is an expression (strings, lists, tuples: give up)."""
        if toks[i].type == "NAME" and toks[i + 1].type == "EQUAL":
            value, j = self._expr(toks, i + 2)
            return self.kwarg([toks[i], value]), j
        return self._expr(toks, i)

    def _subscript(self, toks: list, i: int):
        """subscript: expr, or a slice `[expr] : [expr] [: [expr]]` (`...`: give up)."""
        names: list = []
        children: list = []
        if toks[i].type != "COLON":
            value, i = self._expr(toks, i)
            if toks[i].type != "COLON":
                return value, i
            names.append("expr")
            children.append(value)
        for _ in range(2):
            if toks[i].type != "COLON":
                break
            names.append("COLON")
            children.append(toks[i])
            i += 1
            if toks[i].type in _STARTS_EXPR:
                value, i = self._expr(toks, i)
                names.append("expr")
                children.append(value)
        rule = self.slicing.get(tuple(names))
        if rule is None:
            raise GiveUp
        return rule(children), i


class _Sequence:
    """`x: item ("," item)* ","?`: Build's method for x over the items (`_probe` checks that lark's callbacks,
    through its `__x_star_N` helper rule, give it exactly those)."""

    def __init__(self, method):
        self.method = method

    def parse(self, toks: list, i: int, item, close: str):
        """The value and the index of the closing token (`close`), from the first item at toks[i]."""
        first, i = item(toks, i)
        return self.rest(toks, i, first, item, close)

    def rest(self, toks: list, i: int, first, item, close: str):
        """The same, once the first item is read (`first`, up to toks[i])."""
        if toks[i].type == close:  # one item, the common case
            return self.method([first]), i
        items = [first]
        while toks[i].type == "COMMA":
            if toks[i + 1].type == close:
                i += 1
                break
            value, i = item(toks, i + 1)
            items.append(value)
        if toks[i].type != close:
            raise GiveUp
        return self.method(items), i


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


def _probe(lark: Lark, rules: dict) -> None:
    """What the climber assumes of lark's callbacks, checked with a transformer that only records: called
    with a rule's whole expansion, each gives Build's method (by name) the children at `_DIRECT`'s positions
    (None: lark's placeholder for an absent `[x]`), and nothing else; a list (args, subscripts) reaches its
    method as its items, through the helper rules; and one statement on a line reaches `start` as itself.
    lark's child filters depend on the rule only, never on the values. Otherwise TypeError."""
    by_rule = lark._parse_tree_builder.create_callback(_Probe())
    cb = {key: by_rule[rule] for key, rule in rules.items()}
    for key, want in _DIRECT.items():
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
