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
  rules is the one lark finds. climb_rules.py's `RULES` is what the code below assumes of grammar.lark:
  every alternative of every rule it walks, checked when it is built (any difference, and parser.py keeps to
  fastparse; tests/language/test_climb.py then fails loudly);
- the nodes: for each rule it reduces by, Build's method gets the children lark's callback would give it for
  that rule's whole expansion (its child filters drop `"+"`, `","`, `"."`, `"="`; an absent `[args]` is None;
  the `?rule: other` rules are lark's single child, as in fastparse). climb_rules' `DIRECT` lists them, and
  its `probe` checks them against lark's own callbacks when the climber is built (they depend on the rule,
  never on the values);
- the tokens: lark's Tokens with fastparse's types and positions, from lark's root lexer's regular expression
  (climb_rules' `lexer_pattern`), on a text of one line; the contextual lexer's wherever the text parses
  (fastparse's argument).

Why: a one-line program (~34 characters, ~20 tokens) took ~64 shift/reduce steps of fastparse's loop, each a
few table look-ups; here each token is looked at about once, and the operators' levels are in the code.
"""
from __future__ import annotations

import threading
from typing import Any

from gradflow.language.build import Build
from gradflow.language.climb_rules import SKIPPED, SPACES, STARTS_EXPR, TOKENS, layout, lexer_pattern, probe
from gradflow.language.larklib import ExpandSingleChild, Lark, Token, UnlessCallback

_END = Token("_NL", "")
_MADE = 4096  # tokens kept for reuse (`_Climber._lex`, ~1 MB at most); then they are dropped and made again
_SHORT = 200  # characters: the tokens of longer texts are not kept


class GiveUp(Exception):
    """Outside the subset, or not a program at all: the next path parses (and reports) it."""


class Climb(threading.local):
    """Per thread (Build keeps the source it reports errors against), a `_Climber`: it is a plain object, as
    each attribute of a thread-local one costs a look-up of the thread's own."""

    def __init__(self, lark: Lark):
        self.climber = _Climber(lark)

    def parse(self, source: str) -> list:
        """The statements, as the other paths give them; GiveUp (or Build's error) where they must decide."""
        return self.climber.parse(source)


class _Climber:
    """The climber, calling one Build's methods as lark's callbacks would (`probe` checks how)."""

    def __init__(self, lark: Lark):
        self.build = build = Build("")
        rules = layout(lark)
        probe(lark, rules)
        by_rule = lark._parse_tree_builder.create_callback(build)
        for key in SKIPPED:
            if type(by_rule[rules[key]]) is not ExpandSingleChild:
                raise TypeError(key)
        root = lark.parser.lexer.lexer.root_lexer
        pattern, space = lexer_pattern(root.scanner)
        self.scanner: Any = pattern.scanner  # re's (undocumented): matches, each where the one before ended
        if set(root.ignore_types) != {space, "COMMENT"}:
            raise TypeError(f"lark ignores {sorted(root.ignore_types)}")
        # lark's `unless` callbacks: a NAME spelled as a keyword (`with`, `requires_grad`) is that keyword
        if set(root.callback) != {"NAME"} or type(root.callback["NAME"]) is not UnlessCallback or \
                any(t.pattern.flags for t in root.callback["NAME"].scanner.terminals):
            raise TypeError("lark's lexer turns other words into keywords than climb.py expects")
        self.keywords = frozenset(t.pattern.value for t in root.callback["NAME"].scanner.terminals)
        missing = TOKENS - {t.name for t in root.terminals}
        if missing:
            raise TypeError(f"no terminal {sorted(missing)}")
        self.tokens = frozenset(TOKENS)
        self._made: dict[tuple[str, int, str], Token] = {}  # (terminal, place, text with its spaces): its token
        # Build's methods by `BINARY`'s and `COMPARE`'s names (the operators' are set on Build from _binary)
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
        the postlexer adds the final new line (lexing.py; fastparse's `_tokens` too). Build never sees it.

        A token is made once per terminal, text and place (`_made`; in texts of up to _SHORT characters): Build
        only reads them, and most programs of a batch start with the same few (`sum(` at 0, `x` at 4, ...). A
        match, its spaces included, at the same place with the same terminal is the same token; making one (a
        str subclass, eight attributes) costs three times the look-up."""
        matches = iter(self.scanner(text).match, None)  # the spaces at the end, and no token: no match
        if len(text) > _SHORT:  # a long text's tokens are seldom another's: made, not kept
            toks = [self._token(m, text) for m in matches]
        else:
            toks = []
            append, made = toks.append, self._made
            for m in matches:
                key = (m.lastgroup, m.start(), m.group())
                tok = made.get(key)
                if tok is None:
                    tok = self._token(m, text)
                    if len(made) >= _MADE:
                        made.clear()
                    made[key] = tok
                append(tok)
        end = toks[-1].end_pos if toks else 0
        if end != len(text.rstrip(SPACES)) or not toks:
            raise GiveUp  # a character no terminal matches, or no token at all
        toks.append(_END)
        return toks

    def _token(self, m, text: str) -> Token:
        """The token a match of the scanner reads (after its spaces), or GiveUp outside the subset."""
        kind = m.lastgroup
        if kind not in self.tokens:
            raise GiveUp
        start, stop = m.start(1), m.end()  # after the spaces
        value = text[start:stop]
        if kind == "NAME" and value in self.keywords:
            raise GiveUp
        tok = str.__new__(Token, value)
        tok.type = kind
        tok.value = value
        tok.start_pos = start
        tok.line = 1
        tok.column = start + 1
        tok.end_pos = stop
        tok.end_line = 1
        tok.end_column = stop + 1
        return tok

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
            if toks[i].type in STARTS_EXPR:
                value, i = self._expr(toks, i)
                names.append("expr")
                children.append(value)
        rule = self.slicing.get(tuple(names))
        if rule is None:
            raise GiveUp
        return rule(children), i


class _Sequence:
    """`x: item ("," item)* ","?`: Build's method for x over the items (`probe` checks that lark's callbacks,
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
