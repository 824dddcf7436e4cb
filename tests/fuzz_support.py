"""Fuzzing shared by tests/system/test_fuzz.py (small, in CI) and bench/fuzz.py (100,000+ inputs).

Strategies make random text, grammar-shaped programs (with near-misses), values
(0, negatives, huge, tiny, inf, nan, vectors, matrices, bad text) and --wrt; the
property `check_api` / `check_cli` says what every input must get: a result, or a
package error with exit 2/3, strict JSON, and nothing else (no other exception,
no Python warning, no traceback). Not collected by pytest (no test_ prefix).
"""
from __future__ import annotations

import io
import json
import warnings

from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from gradflow import GradflowError, explain
from gradflow.language.compile import compile_program
from gradflow.cli.app import app
from gradflow.language.ops import FUNCTIONS, METHODS, QUALIFIED, short
from gradflow.render.node_table import print_error, print_explanation

VARS = ["x", "y", "z", "w"]
NUMBERS = ["0", "0.0", "1", "2", "3.5", ".5", "7.", "1e38", "1e39", "1e400", "1e-45", "1e-50", "123456789"]
VALUE_TEXT = ["0", "-0", "1", "-2", "0.5", "1e38", "-1e38", "1e-45", "1e400", "nan", "inf", "-inf", "[1,2]",
              "[0,-1,2]", "[[1,2],[3,4]]", "[[0,0],[0,0]]", "[]", "[[]]", "abc", "[1,", "[[1],[2,3]]", "",
              "[true]", "{}", "1j", "[" * 40 + "1" + "]" * 40, "[1e400, -1e400]", "[[1,2,3]]", "[[1],[2],[3]]"]
SYMBOLS = ["+", "-", "*", "/", "@", "^", "**"]
CALLS = sorted(FUNCTIONS) + ["foo", "__class__", "eval", "exec"]
METHOD_NAMES = sorted(METHODS) + ["T", "data", "grad", "foo", "requires_grad"]
TORCH_CALLS = sorted({short(q) for q in QUALIFIED}) + ["torch.foo", "F.bar", "torch.no_grad"]
KEYWORDS = ["dim=0", "dim=-1", "dim=(0, 1)", "keepdim=True", "reduction='sum'", "reduction='none'", "p=1",
            "min=0", "max=1", "dim=1.5", "foo=1", "[x, y]", "(2, -1)", "'mean'", "None", "True"]
SUBSCRIPTS = ["0", "-1", "1:3", ":, 0", "..., -1", "::2", "5", "1.5", "::-1", "None", "x"]
COMPARISONS = [">", "<", ">=", "<=", "==", "!="]
BLOCKS = ["with torch.no_grad():", "with torch.inference_mode():", "with no_grad():", "with torch.enable_grad():"]
ALPHABET = list("xyzw0123456789.eE+-*/@^()_,;=\n\t #[]'\"\\:<>!") + [
    "**", "requires_grad", "true", "false", "sum(", "detach(", "no_grad(", "inference_mode(", "log(", "sqrt(",
    "1e400", "\udcff", "\x00", "é", "__class__", "x.", ".", "torch.", "F.", ".sum(", "dim=", "keepdim=True",
    "...", "with torch.no_grad():\n    ", "\n    ", ".detach_()", ".requires_grad_(False)", "[0]", "[1:]"]

scalars = st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0, 1e38, -1e38, 1e-45, 3e38, 1e308,
                                     float("inf"), float("-inf"), float("nan")]),
                    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10))
vectors = st.lists(scalars, min_size=0, max_size=4)
matrices = st.integers(1, 3).flatmap(lambda n: st.lists(st.lists(scalars, min_size=n, max_size=n),
                                                        min_size=1, max_size=3))
values = st.one_of(scalars, vectors, matrices, st.sampled_from(VALUE_TEXT))


def _extend(children):
    binary = st.tuples(children, st.sampled_from(SYMBOLS), children).map(lambda t: f"{t[0]} {t[1]} {t[2]}")
    call = st.tuples(st.sampled_from(CALLS), st.lists(children, max_size=3)).map(
        lambda t: f"{t[0]}({', '.join(t[1])})")
    arguments = st.lists(st.one_of(children, st.sampled_from(KEYWORDS)), max_size=3).map(", ".join)
    method = st.tuples(children, st.sampled_from(METHOD_NAMES), arguments, st.booleans()).map(
        lambda t: f"({t[0]}).{t[1]}({t[2]})" if t[3] else f"({t[0]}).{t[1]}")
    torch_call = st.tuples(st.sampled_from(TORCH_CALLS), children, arguments).map(
        lambda t: f"{t[0]}({t[1]}{', ' + t[2] if t[2] else ''})")
    index = st.tuples(children, st.sampled_from(SUBSCRIPTS)).map(lambda t: f"({t[0]})[{t[1]}]")
    compare = st.tuples(children, st.sampled_from(COMPARISONS), children).map(lambda t: f"{t[0]} {t[1]} {t[2]}")
    return st.one_of(binary, binary, call, children.map(lambda c: f"-{c}"), children.map(lambda c: f"({c})"),
                     method, torch_call, index, compare)


expressions = st.recursive(st.sampled_from(VARS + NUMBERS), _extend, max_leaves=12)
statements = st.one_of(
    expressions,
    st.tuples(st.sampled_from(VARS + ["a", "b"]), expressions).map(lambda t: f"{t[0]} = {t[1]}"),
    st.tuples(st.sampled_from(VARS + ["a"]), st.sampled_from(["true", "false", "1"])).map(
        lambda t: f"{t[0]}.requires_grad = {t[1]}"))
plain_programs = st.lists(statements, min_size=1, max_size=4).flatmap(
    lambda ss: st.sampled_from(["; ", "\n", ";"]).map(lambda sep: sep.join(ss)))
blocks = st.tuples(st.sampled_from(BLOCKS), st.lists(statements, min_size=1, max_size=3), plain_programs,
                   st.sampled_from(["    ", "  ", "\t", " "])).map(
    lambda t: f"{t[0]}\n" + "".join(f"{t[3]}{s}\n" for s in t[1]) + t[2])
programs = st.one_of(plain_programs, plain_programs, blocks)


@st.composite
def near_misses(draw):
    """A grammar-shaped program with one character inserted, deleted or replaced."""
    text = draw(programs)
    i = draw(st.integers(0, len(text)))
    ch = draw(st.sampled_from(ALPHABET))
    how = draw(st.sampled_from(["insert", "delete", "replace"]))
    return text[:i] + (ch if how != "delete" else "") + text[i + (how != "insert"):]


random_text = st.one_of(st.text(max_size=40), st.lists(st.sampled_from(ALPHABET), max_size=30).map("".join))
sources = st.one_of(programs, programs, near_misses(), random_text)
value_sets = st.dictionaries(st.sampled_from(VARS + ["a", "q"]), values, max_size=6)
wrts = st.one_of(st.none(), st.just("all"), st.lists(st.sampled_from(VARS + ["q", "all", ""]), max_size=3).map(
    ",".join), st.text(max_size=8))
limit_sets = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "length": st.integers(1, 60), "depth": st.integers(1, 6), "nodes": st.integers(1, 12),
    "elements": st.integers(1, 6), "total": st.integers(1, 20)}))
cases = st.fixed_dictionaries({"source": sources, "values": value_sets, "wrt": wrts, "fit": st.booleans(),
                               "extra": st.integers(0, 20),
                               "dtype": st.sampled_from(["float32", "float32", "float64"]), "limits": limit_sets})


def fitted(case: dict) -> dict:
    """With case["fit"], give exactly the program's variables (so most programs get evaluated)."""
    if not case["fit"]:
        return case["values"]
    try:
        names = compile_program(case["source"]).inputs
    except GradflowError:
        return case["values"]
    return {name: case["values"].get(name, 1.0) for name in names}


def _no_nan(token):
    raise AssertionError(f"non-strict JSON: {token}")


def _console() -> Console:
    return Console(file=io.StringIO(), width=100, color_system=None)


def check_api(case: dict) -> str:
    """Run one case through explain(), the table and JSON; return 'ok', 'no_gradient' or the error kind."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = _api(case)
    assert not caught, f"Python warning leaked: {caught[0].category.__name__}: {caught[0].message}"
    return outcome


def _api(case: dict) -> str:
    try:
        r = explain(case["source"], wrt=case["wrt"], dtype=case["dtype"], values=fitted(case),
                    limits=case["limits"])
    except GradflowError as err:
        assert int(err.exit_code) in (2, 3) and err.message and err.kind
        json.loads(json.dumps(err.to_dict(), allow_nan=False))
        print_error(err, _console())
        return err.kind
    print_explanation(r, _console(), _console())
    doc = json.loads(r.to_json(), parse_constant=_no_nan)
    assert all(set(w) == {"kind", "node", "message"} for w in doc["warnings"])
    if r.error is not None:
        assert int(r.error.exit_code) in (2, 3)
        return r.error.kind
    return "ok"


EXTRAS = [[], [], [], ["--check"], ["--order", "2"], ["--graph", "tree"], ["--graph", "dot"],
          ["--graph", "mermaid"], ["--check", "--order", "2", "--graph", "mermaid"], ["graph"],
          ["graph", "--format", "dot"], ["graph", "--format", "mermaid"]]


def cli_args(case: dict) -> list[str]:
    extra = list(EXTRAS[case.get("extra", 0) % (len(EXTRAS) + 1) % len(EXTRAS)])
    command = extra.pop(0) if extra[:1] == ["graph"] else "eval"
    args = [command, case["source"]]
    for name, v in fitted(case).items():
        args.append(f"--{name}={v if isinstance(v, str) else json.dumps(v)}")
    if case["wrt"] is not None:
        args.append(f"--wrt={case['wrt']}")
    if command == "eval":
        args += [f"--limit={name}={n}" for name, n in (case["limits"] or {}).items()]
        args += ["--json"] if len(case["source"]) % 2 else []
    return args + extra + ["--dtype", case["dtype"]]


def batch_line(case: dict) -> str:
    """The case as one `gradflow batch` line (values and wrt may be of any JSON type)."""
    return json.dumps({"expr": case["source"], "vars": fitted(case), "wrt": case["wrt"], "dtype": case["dtype"]})


def check_cli(case: dict, runner: CliRunner | None = None) -> int:
    """Run one case through the CLI in-process; exit 0/2/3 (batch: 0/4), no traceback, strict JSON."""
    batch = case.get("extra", 0) % (len(EXTRAS) + 1) == len(EXTRAS)
    args = ["batch", "-"] if batch else cli_args(case)
    res = (runner or CliRunner()).invoke(app, args, input=batch_line(case) + "\n" if batch else None)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code in ((0, 4) if batch else (0, 2, 3)), (res.exit_code, res.stderr)
    if batch:
        assert json.loads(res.stdout, parse_constant=_no_nan)["line"] == 1
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    if "--json" in args and res.stdout.strip():
        json.loads(res.stdout, parse_constant=_no_nan)
    return res.exit_code


# ---- the same shapes from a seeded random.Random (fast: the 100,000-input run uses this) --------

def gen_expr(rng, budget: int) -> str:
    if budget <= 1 or rng.random() < 0.25:
        return rng.choice(VARS) if rng.random() < 0.6 else rng.choice(NUMBERS)
    kind = rng.random()
    if kind < 0.45:
        left = rng.randint(1, budget - 1)
        return f"{gen_expr(rng, left)} {rng.choice(SYMBOLS)} {gen_expr(rng, budget - left)}"
    if kind < 0.65:
        name = rng.choice(CALLS) if rng.random() < 0.08 else rng.choice(sorted(FUNCTIONS))
        op = FUNCTIONS.get(name)
        n = rng.randint(op.min_args, op.max_args) if op and rng.random() < 0.9 else rng.randint(0, 3)
        return f"{name}({', '.join(gen_expr(rng, budget // max(n, 1)) for _ in range(n))})"
    if kind < 0.72:
        extra = rng.choice(KEYWORDS) if rng.random() < 0.4 else ""
        return f"({gen_expr(rng, budget - 1)}).{rng.choice(METHOD_NAMES)}({extra})"
    if kind < 0.77:
        return f"{rng.choice(TORCH_CALLS)}({gen_expr(rng, budget - 1)}, {rng.choice(KEYWORDS)})"
    if kind < 0.81:
        return f"({gen_expr(rng, budget - 1)})[{rng.choice(SUBSCRIPTS)}]"
    if kind < 0.84:
        return f"{gen_expr(rng, budget // 2)} {rng.choice(COMPARISONS)} {gen_expr(rng, budget // 2)}"
    return ("-{}" if kind < 0.92 else "({})").format(gen_expr(rng, budget - 1))


def gen_program(rng) -> str:
    stmts = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.6:
            stmts.append(gen_expr(rng, rng.randint(1, 14)))
        elif r < 0.85:
            stmts.append(f"{rng.choice(VARS + ['a', 'b'])} = {gen_expr(rng, rng.randint(1, 10))}")
        else:
            flag = rng.choice(["true", "false", "True", "false", "1"])
            stmts.append(f"{rng.choice(VARS + ['a'])}.requires_grad = {flag}")
    if rng.random() < 0.15:  # the first statements inside a `with` block
        k = rng.randint(1, len(stmts))
        return f"{rng.choice(BLOCKS)}\n" + "".join(f"    {s}\n" for s in stmts[:k]) + "\n".join(stmts[k:])
    return rng.choice(["; ", "\n", ";"]).join(stmts)


def gen_pathological(rng) -> str:
    n = rng.choice([10, 100, 600, 3000])
    return rng.choice([
        "(" * n + "x" + ")" * n, "0+" + "-" * n + "x", "+".join(["x"] * n), "^".join(["2"] * (n % 40 + 2)),
        "x" + "*x" * n, "sum(" * (n // 2) + "x" + ")" * (n // 2), "x^" + "^".join(["9"] * (n % 12 + 1)),
        "exp(" * 6 + "x" + ")" * 6, "x" * n, "#" + "(" * n + "\nx", ";" * n + "x", "1" * n + "*x",
        "x @ y", "x * y", "sum(x * y)", "sum(x @ y)", "log(x) + sqrt(y)", "x / y", "detach(x) * no_grad(y)"])


def gen_nested_cuts(rng) -> str:
    """detach / no_grad / inference_mode nested 1-4 deep around parts of an expression, used again outside."""
    inner = gen_expr(rng, rng.randint(1, 6))
    for _ in range(rng.randint(1, 4)):
        cut = rng.choice(["detach", "no_grad", "inference_mode"])
        inner = f"{cut}({inner})" if rng.random() < 0.7 else f"{cut}({inner} {rng.choice(SYMBOLS)} {gen_expr(rng, 2)})"
    return f"{inner} {rng.choice(SYMBOLS)} {gen_expr(rng, rng.randint(1, 4))}"


def gen_source(rng) -> str:
    r = rng.random()
    if r < 0.1:
        return gen_nested_cuts(rng)
    if r < 0.5:
        return gen_program(rng)
    if r < 0.7:
        text = gen_program(rng)
        i = rng.randint(0, len(text))
        return text[:i] + rng.choice(ALPHABET + [""]) + text[i + rng.randint(0, 1):]
    if r < 0.8:
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 30)))
    if r < 0.95:
        return "".join(chr(rng.randint(0, 0x10FFFF)) for _ in range(rng.randint(0, 12)))
    return gen_pathological(rng)


def gen_scalar(rng):
    return rng.choice([0.0, -0.0, 1.0, -1.0, 2.0, 1e38, -1e38, 1e-45, 3e38, 1e308, float("inf"),
                       float("-inf"), float("nan"), rng.uniform(-5, 5), rng.randint(-3, 3)])


def gen_value(rng):
    r = rng.random()
    if r < 0.4:
        return gen_scalar(rng)
    if r < 0.6:
        return [gen_scalar(rng) for _ in range(rng.choice([0, 1, 2, 3, 4, 50]))]
    if r < 0.75:
        rows, cols = rng.randint(1, 3), rng.randint(1, 3)
        return [[gen_scalar(rng) for _ in range(cols)] for _ in range(rows)]
    if r < 0.8:
        n = rng.choice([30, 300])
        return [[1.0]] * n if rng.random() < 0.5 else [[1.0] * n]
    return rng.choice(VALUE_TEXT)


def gen_case(rng) -> dict:
    names = VARS + ["a", "q"]
    limits = None
    if rng.random() < 0.15:
        limits = {k: rng.randint(1, hi) for k, hi in [("length", 60), ("depth", 6), ("nodes", 12),
                                                        ("elements", 200), ("total", 600)] if rng.random() < 0.5}
    wrt = rng.choice([None] * 6 + ["all", "all", "x", "x,y", "y,z,w", "q", "", ",", "all,x", "x x"])
    return {"source": gen_source(rng), "values": {n: gen_value(rng) for n in names if rng.random() < 0.5},
            "wrt": wrt, "fit": rng.random() < 0.9, "extra": rng.randrange(len(EXTRAS) + 1), "dtype": rng.choice(["float32", "float32", "float64"]),
            "limits": limits}


# ---- whole batch inputs as bytes: nested JSON, broken UTF-8, mixed line ends -------------------------------

def gen_batch_line(rng) -> bytes:
    r = rng.random()
    if r < 0.35:
        return batch_line(gen_case(rng)).encode()
    if r < 0.45:
        return json.dumps(gen_source(rng)).encode("utf-8", "surrogatepass")
    if r < 0.55:
        depth = rng.choice([10, 63, 64, 65, 1000, 5000])
        opener = rng.choice(["[", '{"a":', '{"expr": "x", "vars": {"x": '])
        return (opener * depth + "1").encode()
    if r < 0.65:  # invalid UTF-8 somewhere in an otherwise fine line
        good = batch_line(gen_case(rng)).encode()
        i = rng.randint(0, len(good))
        return good[:i] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80", b"\xf4\x90\x80\x80"]) + good[i:]
    if r < 0.75:  # a carriage return, tab or NUL inside the line
        good = batch_line(gen_case(rng)).encode()
        i = rng.randint(0, len(good))
        return good[:i] + rng.choice([b"\r", b"\t", b"\x00", b"\x1b[31m"]) + good[i:]
    if r < 0.85:
        return rng.choice([b"", b"   ", b"\t", b"{}", b"[]", b"null", b"1", b'"', b"{", b'{"expr": 1}', b'{"expr": "x", "expr": "y"}'])
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))


def gen_batch_bytes(rng) -> bytes:
    """Several lines joined by \\n, \\r\\n or a bare \\r, maybe a byte-order mark first, maybe no final newline."""
    lines = [gen_batch_line(rng) for _ in range(rng.randint(1, 6))]
    out = b""
    for i, line in enumerate(lines):
        out += line + (rng.choice([b"\n", b"\n", b"\r\n", b"\r"]) if i < len(lines) - 1 or rng.random() < 0.7 else b"")
    if rng.random() < 0.1 and lines[0].strip():
        out = b"\xef\xbb\xbf" + out
    return out


def expected_lines(data: bytes) -> list[int]:
    """The line numbers that must each get exactly one record: lines split on \\n only, blank lines (only
    whitespace as Python's str counts it: \\x1c-\\x1f too, as in RFC 7464's record separator) skipped but counted."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return [i + 1 for i, raw in enumerate(parts) if raw.decode("utf-8", "replace").strip()]  # str's whitespace


def check_batch_bytes(data: bytes, runner: CliRunner | None = None, jobs: int = 2) -> int:
    """One record per non-blank line, in order, strict JSON, exit 0 (all fine) or 4 (some lines failed), made
    by `jobs` worker processes (1: in this process)."""
    res = (runner or CliRunner()).invoke(app, ["batch", "-", "--jobs", str(jobs)], input=data)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code in (0, 4), (res.exit_code, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    records = [json.loads(line, parse_constant=_no_nan) for line in res.stdout.splitlines()]
    assert [r["line"] for r in records] == expected_lines(data), (data, [r["line"] for r in records])
    assert all(r["error"] is None or r["error"]["kind"] != "internal" for r in records), records
    return res.exit_code
