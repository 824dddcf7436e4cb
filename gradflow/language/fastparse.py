"""Parsing without a parse tree, for a process that parses many texts (batch, sweeps): an LALR loop over lark's
tables calls Build's methods as it reduces, fed by a lexer that matches every terminal at once.

Why it is kept beside lark's own parser (parser.py): over all-distinct programs (`batch --brief` of 10,000
lines, bench/run.py (e)) lark's parser and the tree pass made the whole command more than 15% slower than
this loop (figures in bench/README.md). It parses every text that parses, to the same nodes (tests pin it);
on an error it stops (`NotFast`, a table miss, a build or indentation error) and parser.py parses the text
again with lark, which reports it exactly as before: a syntax error anywhere wins over an unknown function
before it.

lark stays the parser generator (the tables come from it), the grammar's reader and the error reporter; only the
hot loop is ours (`Fast._parse`). It reads lark's insides (its table layout, lexers and rule callbacks, the
private ones through gradflow/compat.py): `_layout` checks the table when the parser is built, and on any other
lark parser.py keeps to lark's own parser.
"""
from __future__ import annotations

import threading
from itertools import chain
from operator import itemgetter
from typing import Any

from lark import Lark, Token
from lark.lexer import UnlessCallback
from lark.parse_tree_builder import ExpandSingleChild

from gradflow.compat import lark_rule_callbacks, lark_scanner_patterns
from gradflow.language.lexing import Continuation, at_end
from gradflow.language.transformer import Build


class Fast(threading.local):
    """Per thread (Build keeps the source it reports errors against): an LALR parser over lark's tables with
    callbacks bound to one Build, fed by `_tokens`."""

    def __init__(self, lark: Lark):
        self.build = Build("")
        by_rule = lark_rule_callbacks(lark, self.build)
        for rule, f in by_rule.items():
            if type(f) is ExpandSingleChild and len(rule.expansion) == 1:  # `?sum: product`: the child itself, in C
                by_rule[rule] = itemgetter(0)
        # lark's table holds a copy of a rule per reduce action, each hashed and compared by Python methods at
        # every reduction: here every action of a rule shares one _Rule, hashed and compared by identity
        table = lark.parser.parser.parser.parse_table
        rules: dict = {}
        callbacks: dict = {}
        states: dict = {}
        for state, actions in table.states.items():
            states[state] = row = {}
            for term, (action, arg) in actions.items():
                if not isinstance(arg, int):
                    if arg not in rules:
                        rules[arg] = _Rule(arg.origin, tuple(arg.expansion))
                        callbacks[rules[arg]] = by_rule[arg]
                    arg = rules[arg]
                row[term] = (action, arg)
        _skip_unit_states(states, callbacks, set(table.end_states.values()))
        self.states = states
        self.start, self.end = table.start_states["start"], table.end_states["start"]
        self.shift = _layout(states, self.start, self.end)
        for rule, callback in callbacks.items():
            rule.callback = callback
        self.lexers = lark.parser.lexer.lexer.lexers  # lark's contextual lexer: one per parser state
        self.patterns = {state: lark_scanner_patterns(lexer.scanner) for state, lexer in self.lexers.items()}
        root = lark.parser.lexer.lexer.root_lexer  # lark's lexer over every terminal (the contextual one's fallback)
        (self.pattern,) = lark_scanner_patterns(root.scanner)  # every terminal a named group, in lark's order
        self.ignore = frozenset(root.ignore_types)
        self.newlines = frozenset(root.newline_types)
        self.keywords: dict[str, dict[str, str]] = {}  # NAME -> {"with": "WITH", ...}: lark's `unless` callbacks
        for name, callback in root.callback.items():
            if type(callback) is not UnlessCallback or any(t.pattern.flags for t in callback.scanner.terminals):
                raise TypeError(name)  # not plain keywords (a callback of lark's own, `"with"i`): no fast path
            self.keywords[name] = {t.pattern.value: t.name for t in callback.scanner.terminals}
        self.postlex = Continuation()
        self.always = frozenset(self.postlex.always_accept)  # lexed in every state (the contextual lexer's too)

    def parse(self, source: str) -> list:
        self.build.source = source
        try:
            return self._parse(source)
        finally:
            self.build.source = ""  # no text kept alive by the thread's parser

    def _parse(self, text: str) -> list:
        """lark's LALR loop (its ParserState.feed_token for each token, then for the end of input), over this
        object's copy of its tables: shift the token, or reduce by a rule (its callback over the values it
        spans) and go to the state its name leads to from the state below, until the token is shifted. The end
        of input is never shifted: reducing it reaches the end state, with the program. No action for a token
        (a KeyError): the text has an error, which the tree path reports. No terminal has a callback (lark
        makes them for rules only), so a shifted token is its own value."""
        states, shift, end = self.states, self.shift, self.end
        stack = [self.start]  # the states; `_tokens` reads the last one
        values: list = []
        if "\n" in text:
            tokens = self.postlex.process(self._tokens(text, stack, False))
        else:  # one line: the postlexer would only add the final _NL, which `_tokens` does
            tokens = self._tokens(text, stack, True)
        for tok in chain(tokens, _END):
            row = states[stack[-1]]
            while True:
                action, rule = row[tok.type]
                if action is shift:
                    stack.append(rule)
                    values.append(tok)
                    break
                size = rule.size
                if size:
                    children = values[-size:]
                    del stack[-size:]
                    del values[-size:]
                else:
                    children = []
                values.append(rule.callback(children))
                goto = states[stack[-1]][rule.name][1]  # a Shift (`_layout` checked every goto)
                if goto == end:  # only `start` leads there, and only at the end of input (`_layout`)
                    return values[-1]
                stack.append(goto)
                row = states[goto]
        raise NotFast  # not reached: the end of input is never shifted

    def _tokens(self, text: str, stack: list, end_line: bool):
        """The tokens of lark's contextual lexer. Each is matched against every terminal at once (lark's order,
        its `unless` keywords), which gives the contextual lexer's token wherever the parser accepts it in its
        state (`stack[-1]`); where it does not, that state's own lexer (lark's) matches again. `end_line`: the
        final _NL the postlexer (lexing.py) adds, for a text of one line."""
        tok: Any = None
        new, token, match = str.__new__, Token, self.pattern.match
        ignore, newlines, keywords, states, always = self.ignore, self.newlines, self.keywords, self.states, self.always
        pos = line_start = 0
        line, end = 1, len(text)
        while pos < end:
            m = match(text, pos)
            if m is None:
                raise NotFast  # a character no terminal matches
            kind = m.lastgroup
            if kind in ignore:  # spaces, comments: every state's lexer has them too
                if kind in newlines and "\n" in m.group():
                    line += m.group().count("\n")
                    line_start = pos + m.group().rindex("\n") + 1
                pos = m.end()
                continue
            if kind in keywords:
                kind = keywords[kind].get(m.group(), kind)
            if kind not in states[stack[-1]] and kind not in always:
                m, kind = self._contextual(stack[-1], text, pos)
            start, pos = pos, m.end()
            value = m.group()
            tok = new(token, value)
            tok.type, tok.value = kind, value
            tok.start_pos, tok.line, tok.column = start, line, start - line_start + 1
            if kind in newlines and "\n" in value:
                line += value.count("\n")
                line_start = start + value.rindex("\n") + 1
            tok.end_pos, tok.end_line, tok.end_column = pos, line, pos - line_start + 1
            yield tok
        if end_line and tok is not None:
            yield Token("_NL", "", *at_end(tok))

    def _contextual(self, state, text: str, pos: int):
        """The match of lark's lexer for this parser state (only the terminals it accepts), and its type."""
        lexer = self.lexers[state]
        for pattern in self.patterns[state]:
            m = pattern.match(text, pos)
            if m is not None:
                kind = m.lastgroup
                unless = lexer.callback.get(kind)
                if unless is not None:
                    kind = unless.scanner.fullmatch(m.group()) or kind
                if kind in self.ignore:
                    break
                return m, kind
        raise NotFast  # lark reports what is wrong here


def _skip_unit_states(states: dict, callbacks: dict, ends: set) -> None:
    """A state whose every action reduces by one rule `A: B` whose callback is the child itself (`?sum:
    product`) only pops itself and goes to the state A leads to: the gotos and shifts into it go there
    directly (LR parsers' default reductions: a valid text parses to the same values; an error is still found
    before its token is shifted, and the tree path then reports it)."""
    unit = {}
    for state, row in states.items():
        actions = set(row.values())
        if len(actions) == 1:
            ((action, rule),) = actions
            if not isinstance(rule, int) and len(rule.expansion) == 1 and type(callbacks[rule]) is itemgetter:
                unit[state] = rule.origin.name

    def target(state, symbol):
        seen = 0
        while True:
            action, arg = states[state][symbol]
            if not isinstance(arg, int) or arg not in unit or seen > len(unit):
                return arg
            follow = states[state].get(unit[arg])
            if follow is None or not isinstance(follow[1], int) or follow[1] in ends:
                return arg
            symbol, seen = unit[arg], seen + 1

    for state, row in states.items():
        for symbol, (action, arg) in list(row.items()):
            if isinstance(arg, int) and arg in unit:
                row[symbol] = (action, target(state, symbol))


def _layout(states: dict, start: int, end: int):
    """lark's Shift action, once the table is as `Fast._parse` reads it (lark 1.3.1's): every action (Shift,
    state) or (Reduce, rule); every goto (on a rule's name) a Shift; the end of input never shifted; the end
    state reached only by the goto on `start` from the start state, and without actions of its own (so the
    parse is over when a reduction reaches it). Otherwise TypeError: parser.py keeps to the tree path."""
    shift = states[start]["start"][0]
    kinds = {action for row in states.values() for action, _ in row.values()}
    if states[start]["start"][1] != end or states[end] or len(kinds) != 2:
        raise TypeError("not lark's LALR table layout")
    for state, row in states.items():
        for symbol, (action, arg) in row.items():
            if (action is shift) != isinstance(arg, int):
                raise TypeError(symbol)
            if action is shift and symbol == "$END" or action is not shift and not symbol.isupper():
                raise TypeError(symbol)
            if arg == end and (state, symbol) != (start, "start"):
                raise TypeError(symbol)
    return shift


class NotFast(Exception):
    pass


_END = (Token("$END", ""),)  # what lark feeds at the end of input; never shifted, so never a value


class _Rule:
    """What an LALR parser reads of a rule it reduces by: its origin and expansion (lark's), its length, its
    origin's name and its callback (fastparse's loop)."""

    __slots__ = ("origin", "expansion", "size", "name", "callback")

    def __init__(self, origin, expansion: tuple):
        self.origin, self.expansion = origin, expansion
        self.size, self.name = len(expansion), origin.name  # what fastparse's loop reads
        self.callback: Any = None  # Build's method (through lark's child filter), set once the table is built
