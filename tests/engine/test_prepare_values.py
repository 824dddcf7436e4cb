"""prepare.check_values in one pass: the same values (in program order), the same parsed texts and the same first
error as checking name by name, for values given in any order, with unused, missing, text and bad-text values."""
import itertools
import random

import pytest

from gradflow.engine.prepare import check_values
from gradflow.errors import GradflowError
from gradflow.language.compile import compile_program
from gradflow.values.text import parse_value


def _name_by_name(graph, values):
    """The rule spelled out: every input needs a value (the first missing one, in program order, is the error,
    with a typo hint from the unused ones); text values are parsed in the order given; program order out."""
    names = list(graph.inputs)
    unused = [k for k in values if k not in graph.inputs]
    for name in names:
        if name not in values:
            near = {"y": "yy", "x": "xx"}.get(name) if {"y": "yy", "x": "xx"}.get(name) in unused else None
            near = near or (unused[0] if len(unused) == 1 else None)
            return ("missing_value", f"no value for variable '{name}'", near)
    parsed = {}
    for k, v in values.items():
        if k in graph.inputs:
            try:
                parsed[k] = parse_value(k, v) if isinstance(v, str) else v
            except GradflowError as err:
                return (err.kind, err.message, None)
    return {n: parsed[n] for n in names}


@pytest.mark.parametrize("source", ["x*y", "y*x + z", "sum(z)*x"])
def test_check_values_equals_the_rule_name_by_name(source):
    graph = compile_program(source)
    pool = {"x": [1.5, "2", "randn(2)", "bad(", [1, 2]], "y": [3, "0.25", "nan", "((("], "z": [[1.0, 2.0], "ones(2)"],
            "yy": [1], "xx": [2], "q": [7, "zz("]}
    rng = random.Random(11)
    for _ in range(300):
        names = rng.sample(list(pool), rng.randint(0, len(pool)))
        values = {n: rng.choice(pool[n]) for n in names}
        expected = _name_by_name(graph, values)
        try:
            got = check_values(graph, values)
        except GradflowError as err:
            assert isinstance(expected, tuple), (values, err)
            assert (err.kind, err.message) == expected[:2], values
            if expected[0] == "missing_value":
                assert (f"the value given for '{expected[2]}'" in err.hint) == (expected[2] is not None), values
            continue
        assert isinstance(expected, dict), (values, expected)
        assert list(got) == list(expected) == list(graph.inputs)
        for name in got:
            assert repr(got[name]) == repr(expected[name])


def test_a_value_list_in_any_order_comes_back_in_program_order():
    graph = compile_program("c*b + a")
    for order in itertools.permutations("abc"):
        assert list(check_values(graph, {n: 1 for n in order})) == ["c", "b", "a"]


def test_unused_warnings_shortcut_equals_the_general_path():
    """Every value used: [] at once; otherwise the warnings unused_values words, in the order given."""
    from gradflow.engine.explain import unused_warnings
    from gradflow.engine.prepare import UNUSED_KIND, unused_values

    rng = random.Random(2)
    names = ["x", "y", "y1", "y2", "w"]
    for _ in range(200):
        given = dict.fromkeys(rng.sample(names, rng.randint(0, 5)), 1)
        used = {n: i for i, n in enumerate(rng.sample(names, rng.randint(0, 5)))}
        got = [(w.kind, w.node, w.message) for w in unused_warnings(given, used)]
        assert got == [(UNUSED_KIND, None, m) for _, m in unused_values(given, list(used))]


def test_using_enters_the_limits_only_where_they_change():
    from gradflow.limits import DEFAULT, as_limits, current, using

    other = as_limits({"depth": 77})
    for outer in (DEFAULT, other):
        with using(outer):
            for limits in (DEFAULT, other, as_limits({"depth": 77})):
                with using(limits) as given:
                    assert current() == limits and given is limits
                assert current() is outer
