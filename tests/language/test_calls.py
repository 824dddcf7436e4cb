"""Binding a call's arguments to an op's parameters: quick_bind, the common case, against the Binder."""
from gradflow import ParseError


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
