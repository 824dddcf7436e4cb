"""PyTorch's spellings: methods, torch.* and F.* names, keyword arguments, indexing, comparisons and `with`
blocks parse to the same typed trees as gradflow's own spellings; every mistake is a ParseError naming the fix."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradflow import ParseError, parse
from gradflow.language.graph import FlagStep, RetainStep, lower
from gradflow.language.ops import FUNCTIONS, METHODS, OPS, QUALIFIED
from gradflow.language.syntax import Call, ExprStmt, Num, Var, With


def sx(e) -> str:
    """An expression tree as an s-expression, with its parameters."""
    if isinstance(e, Num):
        return f"{e.value:g}"
    if isinstance(e, Var):
        return e.name
    params = "".join(f" {k}={v!r}" for k, v in e.params)
    return f"({e.op} {' '.join(sx(a) for a in e.args)}{params})"


def tree(text: str) -> str:
    (st_,) = parse(text).stmts
    return sx(st_.expr)


def err(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        lower(parse(text))
    return info.value


@pytest.mark.parametrize("spellings", [
    ["exp(x)", "x.exp()", "torch.exp(x)", "(x).exp()"],
    ["relu(x)", "x.relu()", "torch.relu(x)", "F.relu(x)", "torch.nn.functional.relu(x)"],
    ["x^2", "x**2", "pow(x, 2)", "x.pow(2)", "torch.pow(x, 2)", "torch.pow(input=x, exponent=2)"],
    ["x * y", "x.mul(y)", "torch.mul(x, y)"],
    ["x @ y", "x.matmul(y)", "torch.matmul(x, y)"],
    ["-x", "x.neg()", "torch.neg(x)"],
    ["detach(x*y)", "(x*y).detach()", "torch.detach(x*y)", "(x*y).data"],
    ["sum(x, 0, True)", "x.sum(0, True)", "x.sum(dim=0, keepdim=True)", "torch.sum(x, keepdim=True, dim=0)"],
    ["sum(x)", "x.sum()", "torch.sum(x)", "x.sum(dim=None)"],
    ["mean(x, (0, 1))", "x.mean(dim=(0, 1))", "x.mean([0, 1])"],
    ["max(x, y)", "x.max(y)", "torch.max(x, y)", "torch.max(x, other=y)"],
    ["softmax(x, -1)", "x.softmax(-1)", "F.softmax(x, dim=-1)", "torch.softmax(x, dim=-1)"],
    ["clamp(x, 0, 1)", "x.clamp(0, 1)", "x.clip(min=0, max=1)", "torch.clamp(x, max=1, min=0)"],
    ["reshape(x, (2, 3))", "x.reshape(2, 3)", "x.reshape((2, 3))", "x.reshape([2, 3])", "torch.reshape(x, (2, 3))"],
    ["cat([x, y], 1)", "torch.cat([x, y], dim=1)", "torch.cat((x, y), 1)", "torch.concat(tensors=[x, y], dim=1)"],
    ["x.t()", "x.T", "torch.t(x)"],
    ["cross_entropy(x, t)", "F.cross_entropy(x, t)", "F.cross_entropy(x, t, reduction='mean')",
     'torch.nn.functional.cross_entropy(x, t, reduction="mean")'],
    ["x > 0", "x.gt(0)", "torch.gt(x, 0)"],
    ["where(x > 0, x, y)", "torch.where(x > 0, x, y)", "torch.where(condition=x > 0, input=x, other=y)"],
])
def test_spellings_parse_to_one_tree(spellings):
    trees = {s: tree(s) for s in spellings}
    assert len(set(trees.values())) == 1, trees


def test_parameters_take_their_defaults():
    assert tree("x.sum()") == "(sum x dim=None keepdim=False)"
    assert tree("F.normalize(x)") == "(normalize x p=2.0 dim=1 eps=1e-12)"
    assert tree("F.mse_loss(x, y, reduction='none')") == "(mse_loss x y reduction='none')"
    assert tree("x.reshape(-1)") == "(reshape x shape=(-1,))"
    assert tree("x.view(2, -1)") == "(view x shape=(2, -1))"


@pytest.mark.parametrize("text,want", [
    ("x[0]", "(index x index=(0,))"),
    ("x[-1]", "(index x index=(-1,))"),
    ("x[1:3]", "(index x index=(('slice', 1, 3, None),))"),
    ("x[:, 0]", "(index x index=(('slice', None, None, None), 0))"),
    ("x[..., -1]", "(index x index=('...', -1))"),
    ("x[::2]", "(index x index=(('slice', None, None, 2),))"),
    ("x[1:]", "(index x index=(('slice', 1, None, None),))"),
    ("x[:-1, 1::3]", "(index x index=(('slice', None, -1, None), ('slice', 1, None, 3)))"),
    ("x[0][1]", "(index (index x index=(0,)) index=(1,))"),
    ("x.t()[0].sum()", "(sum (index (t x) index=(0,)) dim=None keepdim=False)"),
])
def test_indexing(text, want):
    assert tree(text) == want


@pytest.mark.parametrize("text,want", [
    ("x + 1 > y * 2", "(gt (add x 1) (mul y 2))"),
    ("-x <= 2^y", "(le (neg x) (pow 2 y))"),
    ("x == y", "(eq x y)"),
    ("x != y", "(ne x y)"),
    ("(x >= 0) * x", "(mul (ge x 0) x)"),
    ("x.sum() ** 2", "(pow (sum x dim=None keepdim=False) 2)"),
    ("-x.exp()", "(neg (exp x))"),
    ("2 * x.T @ y", "(matmul (mul 2 (t x)) y)"),
])
def test_comparisons_and_postfix_precedence(text, want):
    assert tree(text) == want


def test_node_text_is_the_expression_as_written():
    g = lower(parse("(x*y1 - (x*y2).detach())**2"))
    assert [n.text for n in g.nodes] == ["x", "y1", "x*y1", "y2", "x*y2", "(x*y2).detach()",
                                         "x*y1 - (x*y2).detach()", "2", "(x*y1 - (x*y2).detach())**2"]


@pytest.mark.parametrize("text,kind,message,hint", [
    ("x.sigmod()", "unknown_method", "unknown method '.sigmod()'", "did you mean '.sigmoid()'?"),
    ("torch.sigmod(x)", "unknown_function", "unknown function 'torch.sigmod'", "did you mean 'torch.sigmoid'?"),
    ("F.softmx(x, dim=0)", "unknown_function", "unknown function 'F.softmx'", "did you mean 'F.softmax'?"),
    ("softmx(x, 0)", "unknown_function", "unknown function 'softmx'", "did you mean 'softmax'?"),
    ("x.sum(dims=0)", "unknown_keyword", ".sum() got an unexpected keyword argument 'dims'",
     "did you mean 'dim'? .sum() takes: dim, keepdim"),
    ("F.mse_loss(x, y, reduce='sum')", "unknown_keyword", "unexpected keyword argument 'reduce'",
     "did you mean 'reduction'?"),
    ("x.max(dim=0)", "unknown_keyword", ".max(dim=...) returns (values, indices) in torch", "elementwise"),
    ("mul(x, y)", "unknown_function", "unknown function 'mul'", "write a * b or a.mul(b) or torch.mul(a, b)"),
    ("x.sum(dim=0.5)", "argument", ".sum(): dim must be a whole number, got 0.5", "dim=None"),
    ("x.sum(dim=y)", "argument", ".sum(): dim must be a whole number written in the program, got y", None),
    ("x.reshape(2, 1.5)", "argument", "shape must be a whole number, got 1.5", None),
    ("x.sum(keepdim=1)", "argument", "keepdim must be True or False, got 1", None),
    ("x.requires_grad_(None)", "argument", "requires_grad must be True or False, got None", None),  # fuzzing
    ("F.softmax(x, dim=None)", "argument", "dim must be a whole number", None),
    ("F.mse_loss(x, y, reduction='avg')", "argument", "reduction must be 'mean' or 'sum' or 'none', got 'avg'",
     None),
    ("torch.cat(x, y)", "argument", "tensors must be a list of tensors", None),
    ("torch.cat([])", "argument", "tensors must be a list of tensors", None),
    ("torch.clamp(x, min=y)", "argument", "min must be a number written in the program, got y", None),
    ("exp(True)", "argument", "exp(): input must be a tensor", None),
    ("x * True", "argument", "True is not a tensor", "keepdim=True"),
    ("torch.max(x, 1)", "argument", "reduces along dim 1 in torch", "torch.clamp(a, min=1)"),
    ("x.min(0)", "argument", "reduces along dim 0 in torch", "torch.clamp(a, max=0)"),
    ("F.softmax(x)", "arity", "F.softmax() missing required argument 'dim'", "dim=-1"),
    ("torch.where(x > 0, x)", "arity", "torch.where() takes 3 arguments, got 2", None),
    ("x.exp(1)", "arity", ".exp() takes 0 arguments, got 1", None),
    ("x.sum(0, dim=1)", "arity", ".sum() got multiple values for argument 'dim'", None),
    ("x.sum(dim=0, 1)", "syntax", "positional argument follows keyword argument", None),
    ("x.sum(dim=0, dim=1)", "syntax", "keyword argument repeated: dim", None),
    ("x[1.5]", "argument", "an index must be a whole number, got 1.5", None),
    ("x[y]", "argument", "an index must be a whole number written in the program, got y", "tensors as indices"),
    ("x[::-1]", "argument", "slice step must be positive (torch has no negative steps)", None),
    ("x[..., 0, ...]", "argument", "an index can only have a single ellipsis", None),
    ("x.grad", "unknown_method", "'.grad' is not a value in gradflow", "the table shows every node's grad"),
    ("x.exp", "unknown_method", "'.exp' is a method: call it, .exp()", None),
    ("x.foo", "unknown_method", "unknown attribute '.foo'", None),
    ("F.relu", "unknown_function", "'F.relu' is a function: call it", None),
    ("y = torch.nn", "unknown_function", "'torch.nn' is a module, not a value", None),
    ("torch.no_grad(x*y)", "unknown_function", "torch.no_grad() is a context, not a function",
     "with torch.no_grad():"),
    ("z = x.detach().retain_grad()", "syntax", "retain_grad() returns None", "statement of its own"),
    ("(x*y).requires_grad = false", "syntax", "sets a variable's flag", "requires_grad_(False)"),
])
def test_mistakes_name_the_fix(text, kind, message, hint):
    e = err(text)
    assert e.kind == kind and message in e.message, (e.kind, e.message)
    assert hint is None or hint in e.hint, e.hint
    assert e.span is not None and e.caret() is not None


def test_flags_and_retain_grad_are_steps_not_nodes():
    g = lower(parse("x.requires_grad_(False); c = (x*y).detach().requires_grad_(); c.retain_grad(); c*2"))
    flags = [s for s in g.steps if isinstance(s, (FlagStep, RetainStep))]
    assert [(type(s).__name__, g.nodes[s.node].text, s.text) for s in flags] == [
        ("FlagStep", "x", "x.requires_grad_(False)"),
        ("FlagStep", "(x*y).detach()", "(x*y).detach().requires_grad_()"),
        ("RetainStep", "(x*y).detach()", "c.retain_grad()")]
    assert [s.value for s in flags[:2]] == [False, True] and g.nodes[g.output].text == "c*2"
    assert err("x.requires_grad_(False)").kind == "empty"  # statements that act on x are not L


def test_detach_in_place_is_read_by_later_uses():
    g = lower(parse("z = x*y; a = z*2; z.detach_(); z*a"))
    assert [(n.text, n.op) for n in g.nodes] == [("x", "var"), ("y", "var"), ("x*y", "mul"), ("2", "const"),
                                                 ("z*2", "mul"), ("z.detach_()", "detach"), ("z*a", "mul")]
    assert g.nodes[-1].args == (5, 4)  # the later z is the detached one; a kept its path
    g = lower(parse("x.detach_(); x*y"))  # an input: requires_grad_(False), as torch does it on a leaf
    assert [(type(s).__name__, s.value if isinstance(s, FlagStep) else None) for s in g.steps][:2] == [
        ("Node", None), ("FlagStep", False)]


# ---- with blocks -------------------------------------------------------------------

def body_texts(stmts):
    out = []
    for s in stmts:
        out.append((s.mode, body_texts(s.body)) if isinstance(s, With) else type(s).__name__)
    return out


@pytest.mark.parametrize("text,want", [
    ("with torch.no_grad():\n    c = x*y\nL = c*x", [("no_grad", ["Assign"]), "Assign"]),
    ("with torch.no_grad():\n    c = x*y\n    d = c*2\nd*x\n", [("no_grad", ["Assign", "Assign"]), "ExprStmt"]),
    ("with no_grad():\n  c = x*y\nc*x", [("no_grad", ["Assign"]), "ExprStmt"]),
    ("with torch.inference_mode():\n    with torch.no_grad():\n        a = x\n    b = a\nb",
     [("inference_mode", [("no_grad", ["Assign"]), "Assign"]), "ExprStmt"]),
    ("with torch.no_grad():\n    with torch.no_grad():\n        a = x\nb = a; b",
     [("no_grad", [("no_grad", ["Assign"])]), "Assign", "ExprStmt"]),
    ("with torch.no_grad(): c = x*y; d = c\nd*x", [("no_grad", ["Assign", "Assign"]), "ExprStmt"]),
    # blank lines, comments at any indentation, a continued line inside brackets, CRLF, tabs, trailing spaces
    ("with torch.no_grad():\n\n  # note\n    c = (x *\n y)\n\n        # more\n    d = c\r\nd\n   ",
     [("no_grad", ["Assign", "Assign"]), "ExprStmt"]),
    ("with torch.no_grad():\n\tc = x\nc", [("no_grad", ["Assign"]), "ExprStmt"]),
    # outside blocks, indentation means nothing (programs written before blocks)
    ("  a = x\n      b = a\n  b", ["Assign", "Assign", "ExprStmt"]),
    ("    with torch.no_grad():\n        c = x\n  c", [("no_grad", ["Assign"]), "ExprStmt"]),
])
def test_blocks(text, want):
    assert body_texts(parse(text).stmts) == want


@pytest.mark.parametrize("text,message,hint", [
    ("with torch.no_grad():\n    c = x*y\n  d = c\nd", "unindent does not match any outer indentation level at "
     "line 3, column 3", "indent every line"),
    ("with torch.no_grad():\n    c = x*y\n        d = c\nd", "unexpected indent at line 3, column 9", None),
    ("with torch.no_grad():\nc = x*y\nc", "unexpected 'c' at line 2, column 1", "expected an indented block"),
    ("with torch.no_grad():", "unexpected end of input at position 21", "expected an indented block"),
    ("with torch.no_grad() x", "unexpected 'x' at position 21", "expected ':'"),
    ("with torch.enable_grad():\n    c = x\nc", "`with torch.enable_grad():` is not a block gradflow knows",
     "did you mean 'torch.no_grad()'?"),
    ("with torch.no_grad(x):\n    c = x\nc", "`with torch.no_grad(x):` is not a block gradflow knows", None),
    ("with torch.no_grad():\n    x.requires_grad_(False)\n", "the program has no expression to evaluate", None),
])
def test_block_mistakes(text, message, hint):
    e = err(text)
    assert message in e.message, e.message
    assert hint is None or hint in e.hint, e.hint


def test_block_nodes_name_their_block():
    g = lower(parse("with torch.no_grad():\n    c = x*y\nL = c*x"))
    c = next(n for n in g.nodes if n.names == ("c",))
    assert c.modes == ("no_grad",) and c.block == "`with torch.no_grad():` on line 1" and c.region is None
    g = lower(parse("with torch.inference_mode(): c = no_grad(x*y)\nc"))
    inner = next(n for n in g.nodes if n.text == "x*y")
    assert inner.modes == ("inference_mode", "no_grad") and inner.block is None
    assert g.nodes[inner.region].text == "no_grad(x*y)"


# ---- generated: gradflow's spellings and PyTorch's give the same graph -----------------

_UNARY = [op for op in OPS.values() if [p.kind for p in op.params] == ["tensor"] and op.kind != "flag"
          and op.role == "plain"]


def _spelled(op, arg: str, how: int) -> str:
    spellings = [f"{f}({arg})" for f in op.functions] + [f"({arg}).{m}()" for m in op.methods]
    spellings += [f"{q.replace('torch.nn.functional.', 'F.')}({arg})" for q in op.torch] + [
        f"{q}({arg})" for q in op.torch]
    spellings += [f"-({arg})"] if op.name == "neg" else []
    return spellings[how % len(spellings)]


@st.composite
def programs(draw):
    """A nest of one-tensor ops, each written two ways: (one spelling, another)."""
    a = b = "x"
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(_UNARY))
        a, b = _spelled(op, a, draw(st.integers(0, 9))), _spelled(op, b, draw(st.integers(0, 9)))
    return a, b


@settings(max_examples=150, deadline=None)
@given(programs())
def test_every_spelling_of_every_unary_op_lowers_alike(pair):
    one, other = (lower(parse(p)) for p in pair)
    assert [(n.op, n.args) for n in one.nodes] == [(n.op, n.args) for n in other.nodes], pair


def test_every_spelling_table_is_consistent():
    for table in (FUNCTIONS, METHODS, QUALIFIED):
        for name, op in table.items():
            assert op.name in OPS and name
    assert isinstance(parse("x").stmts[0], ExprStmt) and isinstance(parse("x.exp()").stmts[0].expr, Call)


def test_torch_and_F_name_the_modules_unless_a_method_is_meant():
    assert tree("F.relu(x)") == "(relu x)" and tree("torch.sum(x)") == "(sum x dim=None keepdim=False)"
    g = lower(parse("F = x*2; F.sum()"))  # F.sum is no function of torch.nn.functional: the variable's method
    assert [n.op for n in g.nodes] == ["var", "const", "mul", "sum"]
