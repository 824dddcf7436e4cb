"""Invariants of the tracer and the report that their bookkeeping must keep: Python's garbage collector is left as it
was found, cyclic garbage made inside a long traced block is collected, and each shortcut gives the general answer."""
import gc
import weakref

import pytest
import torch

import gradflow


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_state_is_restored_after_trace_and_explain(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        w = torch.nn.Parameter(torch.ones(3))
        with gradflow.trace() as t:
            loss = (w * 2).sum()
        assert gc.isenabled() is enabled
        t.explain(loss, params={"w": w})
        assert gc.isenabled() is enabled
        with pytest.raises(ValueError), gradflow.trace():
            raise ValueError("user code failed")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_the_collector_stays_on_while_a_trace_records_and_explains():
    """The trace leaves Python's garbage collector alone: a long block's cyclic garbage is collected as usual."""

    class Cycle:
        pass

    gc.enable()
    refs = []
    x = torch.ones(2, requires_grad=True)
    with gradflow.trace() as t:
        for _ in range(10):
            c = Cycle()
            c.me = c  # only the cyclic collector frees it
            refs.append(weakref.ref(c))
            del c
        y = x
        for _ in range(200):
            y = y * 1.0
        loss = y.sum()
        assert gc.isenabled()
        gc.collect()
        assert all(r() is None for r in refs)
    assert t.explain(loss, params={"x": x}).param("x").status == "live" and gc.isenabled()


def test_batched_grad_norms_are_torch_norms_exactly():
    """Norms taken in one torch call per dtype are bit for bit the per-tensor ones, and keep the float64 rescue of
    float32 under- and overflow (hand-derived: |(1e-30,)*4| = 2e-30, |(1e30,)*4| = 2e30)."""
    import math

    from gradflow.report.norms import grad_norms

    torch.manual_seed(0)
    gs = [torch.randn(s) * 10.0 ** k for s, k in [((64, 64), -3), ((64,), 2), ((3,), 0), ((7, 5), 5)] * 5]
    gs += [torch.randn(8, 8).t(), torch.randn(4).double(), torch.randn(4, dtype=torch.bfloat16)]
    gs += [torch.randn(5, 3).t() * 10.0 ** k for k in range(-2, 3)] + [torch.randn(300, 200)] * 2  # stacked by
    #                                            shape (a Linear weight's grad is transposed); too big to stack
    gs += [torch.randn(4, 6)[:, ::2], torch.randn(4, 6)[:, ::2], torch.randn(2, 3, 4).permute(2, 0, 1),
           torch.empty(0, 3), torch.empty(0, 3)]  # neither contiguous nor transposed; empty
    got = grad_norms(gs + [torch.full((4,), 1e-30), torch.full((4,), 1e30), torch.zeros(3),
                           torch.tensor([float("nan"), 1.0])])
    assert got[:len(gs)] == [float(torch.linalg.vector_norm(g)) for g in gs]
    assert math.isclose(got[-4], 2e-30, rel_tol=1e-6) and math.isclose(got[-3], 2e30, rel_tol=1e-6)
    assert got[-2] == 0.0 and math.isnan(got[-1])


def _shares(report, name):
    return [r.share for r in report.param(name).routes]


def test_routes_of_parameters_used_once_and_more_are_hand_derived():
    """A parameter's only use is not hooked (its flow is its whole grad); one used twice is, per use; and when
    part of the loss was computed before the trace, the traced use's share is its own, not the whole grad's.
    Hand-derived: d/dw sum(w*a + w*b) = a + b per use; share of use k = <g_k, g> / |g|^2."""
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0])
    once, twice = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    with gradflow.trace() as t:
        loss = (once * a).sum() + (twice * a).sum() + (twice * b).sum()
    report = t.explain(loss, params={"once": once, "twice": twice})
    g = a + b
    assert _shares(report, "once") == [1.0]
    assert report.param("once").routes[0].norm == pytest.approx(float(a.norm()))
    assert _shares(report, "twice") == pytest.approx([float(a @ g / (g @ g)), float(b @ g / (g @ g))])
    assert [r.norm for r in report.param("twice").routes] == pytest.approx([float(a.norm()), float(b.norm())])

    w = torch.nn.Parameter(torch.ones(2))
    before = (w * a).sum()  # computed outside the trace
    with gradflow.trace() as t:
        loss = before * 1.0 + (w * b).sum()
    report = t.explain(loss, params={"w": w})
    g = a + b
    route = report.param("w").routes[0]
    assert route.share == pytest.approx(float(b @ g / (g @ g)))  # not 1: the grad also came from outside
    assert route.norm == pytest.approx(float(b.norm()))
    assert report.param("w").grad_norm == pytest.approx(float(g.norm()))


def test_a_submodule_with_its_own_named_modules_is_named_as_torch_names_it():
    """A submodule that overrides named_modules is named as torch names it (oracle: torch's
    named_parameters on the same model)."""

    class Hiding(torch.nn.Sequential):
        def named_modules(self, memo=None, prefix="", remove_duplicate=True):  # hides its second child
            yield prefix, self
            yield from self[0].named_modules(memo, f"{prefix}.first" if prefix else "first", remove_duplicate)

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Hiding(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)))
    x = torch.ones(1, 2)
    with gradflow.trace() as t:
        loss = model(x).sum()
    report = t.explain(loss, params=model)
    assert [p.name for p in report.params] == [n for n, _ in model.named_parameters()]
    assert "1.first.weight" in [p.name for p in report.params]


def test_module_calls_are_seen_and_torch_is_left_as_found():
    """Module calls are seen through nn.Module._call_impl while a trace records: restored after it (also when the
    user's code raises, and after nested traces), the user's own hooks still run, a module overriding __call__ is
    seen, and each op is attributed to the innermost module running (oracle: the modules' own names)."""
    plain = torch.nn.Module._call_impl
    fired = []

    class Wrapped(torch.nn.Linear):
        def __call__(self, *args, **kwargs):
            return super().__call__(*args, **kwargs) * 1.0

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), Wrapped(2, 1))
    handle = model[0].register_forward_hook(lambda m, a, out: fired.append(m))
    try:
        with gradflow.trace() as outer:
            with gradflow.trace() as inner:
                loss = model(torch.ones(1, 2)).sum()
            model(torch.ones(1, 2))
        assert torch.nn.Module._call_impl is plain
        with pytest.raises(ValueError), gradflow.trace():
            model(torch.ones(1, 2))
            raise ValueError("user code failed")
        assert torch.nn.Module._call_impl is plain
        with gradflow.trace() as patched:  # something else replaces _call_impl meanwhile: theirs stays after
            ours = torch.nn.Module._call_impl
            torch.nn.Module._call_impl = lambda self, *a, **k: ours(self, *a, **k)  # type: ignore[method-assign]
            model(torch.ones(1, 2))
        theirs = torch.nn.Module._call_impl
        assert theirs is not plain and len(patched.ops) == 5
        model(torch.ones(1, 2))  # ours, called by theirs after the trace, passes the call straight on
    finally:
        torch.nn.Module._call_impl = plain  # type: ignore[method-assign]
        handle.remove()
    assert fired == [model[0]] * 5 and len(patched.ops) == 5 and patched.state.stack == []
    report = inner.explain(loss, params=model)
    assert {p.name: p.routes[0].module for p in report.params} == {"0.weight": "0", "0.bias": "0",
                                                                    "2.weight": "2", "2.bias": "2"}
    forward = ["ones", "linear", "relu", "linear", "mul"]
    assert [r.name for r in inner.ops] == [*forward, "sum"]
    assert [r.name for r in outer.ops] == [*forward, "sum", *forward]  # both saw the first forward
    assert [r.module for r in outer.ops[1:5]] == [id(model[0]), id(model[1]), id(model[2]), id(model)]
    assert not inner.state.stack and not outer.state.stack and outer.state.roots == [model]


def test_the_flow_graph_is_the_trace_as_explained():
    """The data-flow graph built lazily is the one of the ops recorded when explain ran, not of ops recorded later
    by the same trace entered again (hand-derived: y = w * 2 and loss = y.sum(): two ops)."""
    w = torch.nn.Parameter(torch.ones(2))
    t = gradflow.trace()
    with t:
        loss = (w * 2).sum()
    report = t.explain(loss, params={"w": w})
    with t:
        (w * 3).sum()
    assert len(t.ops) == 4
    graph = report.graph
    assert [r.name for r in graph.relevant_ops()] == ["mul", "sum"]
    assert len(graph.to_loss) == 3  # w, y and the loss


def test_a_parameter_used_twice_in_a_chain_has_each_use_measured():
    """The search for the node consuming a parameter stops at nodes made before the op (its inputs'), so the
    second of two chained uses is not also credited with the first (each F.linear makes two nodes here). Oracle:
    plain torch with the two uses given separate copies A and B of W: their grads are the per-use flows."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(3, 3))
    x = torch.randn(2, 3)
    with gradflow.trace() as t:
        loss = torch.nn.functional.linear(torch.nn.functional.linear(x, w), w).pow(2).sum()
    report = t.explain(loss, params={"w": w})
    a, b = w.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ga, gb = torch.autograd.grad(torch.nn.functional.linear(torch.nn.functional.linear(x, a), b).pow(2).sum(), [a, b])
    g = ga + gb
    routes = report.param("w").routes
    assert [r.op for r in routes] == ["linear", "linear"]
    assert torch.allclose(routes[0].flow, ga) and torch.allclose(routes[1].flow, gb)
    expected = [float((f * g).sum() / (g * g).sum()) for f in (ga, gb)]
    assert [round(r.share, 5) for r in routes] == [round(e, 5) for e in expected]


def test_source_lines_cached_per_instruction_are_each_calls_own_line():
    """lines() keeps each frame's `file:line` by (code object, instruction): the same instruction of another code
    object, another instruction of the same code, and a library frame's line are each their own (oracle: the
    frames' own f_lineno, read next to each call), cache cold or warm."""
    import heapq
    import sys

    from gradflow.tracer import source_lines as source

    def caller_line():
        return source.lines(2)

    first = lambda: (caller_line(), sys._getframe().f_lineno)  # noqa: E731
    second = lambda: (caller_line(), sys._getframe().f_lineno)  # noqa: E731  (same instructions, other code)

    def via_library():  # heapq.nsmallest is Python: a library frame between the user's line and the callback
        out = []
        heapq.nsmallest(1, [0], key=lambda _: out.append((source.lines(2), sys._getframe(1).f_lineno)))
        return out[0], sys._getframe().f_lineno - 1

    def calls():
        got = []
        for _ in range(2):
            got.append((caller_line(), sys._getframe().f_lineno))
            got.append((caller_line(), sys._getframe().f_lineno))  # the same code, another instruction
            got += [first(), second(), via_library()]
        return got

    source._AT.clear()
    warm_or_cold = [calls(), calls()]
    source._AT.clear()
    assert not source._AT
    here = source.short_path(__file__)
    for got in warm_or_cold:
        for (user, library), n in got[:4]:
            assert (user, library) == (f"{here}:{n}", None)
        assert got[0][1] != got[1][1] and got[2][1] != got[3][1]
        ((user, library), heap_line), n = got[4]
        assert user == f"{here}:{n}" and library == f"heapq.py:{heap_line}", (user, library)
        assert got[5:] == got[:5]


def test_a_dropped_trace_is_freed_without_the_cyclic_collector():
    """The mode holds its trace only while it is on (no Trace <-> mode cycle): a trace and its records, explained
    or not, are freed as soon as they are dropped, with the collector off; re-entered, the trace records again, and
    a reentrant checkpoint's recomputation (the mode put back on at explain) is still seen."""
    from torch.utils.checkpoint import checkpoint

    was = gc.isenabled()
    gc.disable()
    try:
        lin = torch.nn.Linear(3, 3)
        with gradflow.trace() as t:
            loss = lin(torch.ones(2, 3)).sum()
        report = t.explain(loss, params=lin)
        with t:  # entered again
            loss = lin(loss.reshape(1, 1).expand(2, 3)).sum()
        assert [r.name for r in t.ops][-2:] == ["linear", "sum"]
        refs = [weakref.ref(t), weakref.ref(t.state), weakref.ref(t._mode)]
        del t, report, loss
        assert [r() for r in refs] == [None, None, None]
        with gradflow.trace() as t:
            loss = checkpoint(lin, torch.ones(2, 3, requires_grad=True), use_reentrant=True).sum()
        assert t.explain(loss, params=lin).param("weight").status == "live"
        assert t._mode.t is None
        ref = weakref.ref(t)
        del t
        assert ref() is None
    finally:
        if was:
            gc.enable()


def test_a_mode_left_on_inside_the_block_runs_torch_plainly_after_it():
    """A TorchFunctionMode entered inside the block and never left: torch pops it, not the trace's mode, at the
    block's end; the trace's mode, no longer holding its trace, then lets every op run as it would (right values)
    and records nothing."""
    from torch.overrides import TorchFunctionMode

    depth = torch._C._len_torch_function_stack()
    with gradflow.trace() as t:
        TorchFunctionMode().__enter__()
    try:
        n = len(t.ops)
        assert torch.equal(torch.ones(2) * 3, torch.tensor([3.0, 3.0])) and len(t.ops) == n
    finally:
        while torch._C._len_torch_function_stack() > depth:
            torch._C._pop_torch_function_stack()


def test_reports_written_inline_are_those_of_the_general_path(monkeypatch):
    """report_build._reports writes a live parameter's only use inline (route, norm, share, "zero"); every parameter's
    report is that of _param_report + _measure with its own norm (oracle: those, monkeypatched in), on parameters
    live once, zero (multiplied by 0: hand-derived grad 0), used twice, frozen, unused and untraced-free; and the
    values are plain torch's (grad norms of autograd.grad, shares summing to 1)."""
    from gradflow.report import build as R
    from gradflow.report.norms import grad_norm

    def general(trace, graph, named, grads, whys, serials, module_name, partial):
        out = []
        for (name, tensors), g, why, s in zip(named.items(), grads, whys or [None] * len(grads), serials):
            p = R._param_report(trace, graph, name, tensors, g, module_name, partial, why, s)
            if g is not None:
                R._measure(p, grad_norm(g))
            out.append(p)
        return out

    torch.manual_seed(0)
    nn = torch.nn
    model = nn.ModuleDict({"seq": nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.GELU(), nn.Linear(4, 1)),
                           "twice": nn.Linear(3, 3), "frozen": nn.Linear(3, 3), "unused": nn.Linear(2, 2)})
    model["frozen"].requires_grad_(False)
    zero = nn.Parameter(torch.randn(3))
    model.register_parameter("zero", zero)

    def step(x):
        h = model["twice"](model["twice"](x))
        return model["seq"](model["frozen"](h)).sum() + (zero * 0.0).sum()

    x = torch.randn(5, 3)
    got = []
    for inline in (True, False):
        if not inline:
            monkeypatch.setattr(R, "_reports", general)
        with gradflow.trace() as t:
            loss = step(x)
        got.append(t.explain(loss, params=model))
    fast, slow = got
    assert fast.to_dict() == slow.to_dict()
    assert repr(fast.params) == repr(slow.params)
    once = {s: u[0].op for s, u in fast.graph.uses.items() if len(u) == 1}  # (`uses` of those used once)
    assert fast.graph.whole_once() == once and len(once) == 7
    for a, b in zip(fast.params, slow.params):
        assert (a.name, a.status, a.reason, a.grad_norm, a.serial, a.aliases) == \
            (b.name, b.status, b.reason, b.grad_norm, b.serial, b.aliases)
        assert [(r.op, r.line, r.module, r.norm, r.share, r.cut) for r in a.routes] == \
            [(r.op, r.line, r.module, r.norm, r.share, r.cut) for r in b.routes]
        assert all(r.flow is a.grad for r in a.routes if r.share == 1.0)
    params = [p for p in model.parameters() if p.requires_grad]
    want = dict(zip([n for n, p in model.named_parameters() if p.requires_grad],
                    torch.autograd.grad(step(x), params, allow_unused=True)))
    for p in fast.params:
        if p.name in want and want[p.name] is not None:
            assert p.grad_norm == float(torch.linalg.vector_norm(want[p.name]))
    assert fast.param("zero").status == "zero" and fast.param("zero").grad_norm == 0.0
    assert fast.param("seq.0.weight").status == "live" and fast.param("seq.0.weight").routes[0].share == 1.0
    assert [r.op for r in fast.param("twice.weight").routes] == ["linear", "linear"]
    assert abs(sum(r.share for r in fast.param("twice.weight").routes) - 1.0) < 1e-5
    assert fast.param("frozen.weight").status == "frozen" and fast.param("unused.weight").status == "unused"


def test_a_tensor_taking_a_dead_tensors_id_gets_its_own_serial_on_every_path():
    """Serials by id(tensor), checked against a weak reference kept per serial: a new tensor at a dead one's
    address (Python reuses them at once) is a new tensor on the general path (ops outside modules), the fast path
    (ops inside a module) and the leaf-module path; the dead one's reference is let go; seen() and known() answer
    for the live ones only."""
    class Body(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.act = torch.nn.GELU()

        def forward(self, x):
            return self.act(x) * 2.0  # a leaf-module call, then an op on the fast path

    body = Body()
    addresses, kept = [], []
    with gradflow.trace() as t:
        for i in range(20):
            y = torch.ones(2, 3) + i  # outside any module: the general path
            addresses.append(id(y))
            z = body(y)
            addresses.append(id(z))
            if i % 5 == 0:
                kept.append(z)
            del y, z
    assert [r.name for r in t.ops[:4]] == ["ones", "add", "gelu", "mul"] and len(t.ops) == 4 * 20
    outs = [s for r in t.ops for s in r.outs]
    assert len(addresses) > len(set(addresses))  # addresses were reused ...
    assert len(outs) == len(set(outs))  # ... and every result got its own serial
    ids, refs = t._ids, t._refs
    assert all(refs[s] is not None for s in ids.values())
    assert sum(r is not None for r in refs) == len(ids)  # the dead ones' references let go
    assert {id(x) for x in t.seen()} == {id(x) for x in kept}
    assert [t.known(x) for x in kept] == [t.ops[4 * 5 * k + 3].outs[0] for k in range(4)]


def test_the_tensors_retaining_grad_are_found_in_one_pass_over_the_references():
    """truth._retaining walks the trace's weak references once: the live non-leaf tensors that retain grad, as
    trace.seen() filtered gives them (oracle: the tensors the user called retain_grad() on), with dead tensors and
    reused addresses in between, a leaf whose retain_grad() is a no-op, and a followed Python value's serial."""
    from gradflow.report.truth import _retaining

    lin = torch.nn.Linear(3, 3)
    w = torch.ones(3, requires_grad=True)
    w.retain_grad()  # a leaf: retains_grad stays False
    kept = []
    with gradflow.trace() as t:
        h = lin(torch.ones(2, 3)) * w
        for i in range(10):
            y = h + i
            if i % 3 == 0:
                y.retain_grad()
                kept.append(y)
            del y  # its address is taken by the next one
        scale = float(h.sum().detach())  # a Python value followed: a serial without a tensor
        loss = (sum(kept) * scale).sum()
    assert None in t._refs
    found = _retaining(t)
    assert [id(a) for a in found] == [id(a) for a in kept]
    assert {id(a) for a in found} == {id(a) for a in t.seen() if not a.is_leaf and a.retains_grad}
    t.explain(loss, params=lin)
    assert all(a.grad is None for a in kept) and w.grad is None  # explain leaves .grad as it was


def test_hidden_uses_are_found_only_where_a_custom_function_ran_and_there_as_before():
    """truth.hidden_serials answers at once when no custom autograd.Function's forward ran (only there is a use
    hidden); with one, the parameters it used without being given them (oracle: the Function's closure's) are found,
    and on every trace the answer is the walk of all uses."""
    from gradflow.report.truth import hidden_serials

    from ..report.test_untraced import Opaque as Closure  # uses `lin` from its closure; its backward gives it nothing

    first, inner = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    for custom in (False, True):
        with gradflow.trace() as t:
            h = first(torch.ones(2, 3))
            (Closure.apply(h, inner) if custom else inner(h)).sum()
        every = set(range(len(t._refs)))
        walked = {u.serial for u in t.state.uses if u.hidden}
        assert hidden_serials(t, every) == walked
        assert walked == ({t.known(inner.weight), t.known(inner.bias)} if custom else set())
        assert bool(t.state.functions) == custom


def test_parameters_each_used_once_are_whole_and_a_second_forward_makes_them_searched():
    """arm()'s shortcut when no leaf is used twice (no search, no hook: each use is its leaf's whole grad), and its
    general path when a trace entered again makes the first forward's uses no longer the only ones. Oracle: plain
    torch's grads of the same model, and zero for the first forward's uses (they do not reach the second loss)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    x, y = torch.randn(5, 4), torch.randn(5, 4)
    params = dict(model.named_parameters())
    plain_x = torch.autograd.grad(model(x).pow(2).sum(), list(params.values()))
    plain_y = torch.autograd.grad(model(y).pow(2).sum(), list(params.values()))

    t = gradflow.trace()
    with t:
        loss = model(x).pow(2).sum()
    report = t.explain(loss, params=model)
    assert [u.whole for u in t.state.uses] == [True] * len(params)
    assert report.graph.whole_once() == {u.serial: u.op for u in t.state.uses}  # (read from the columns at once)
    for (name, p), g in zip(params.items(), plain_x):
        (route,) = report.param(name).routes
        assert route.share == 1.0 and torch.allclose(route.flow, g)
        assert report.param(name).grad_norm == pytest.approx(float(g.norm()))

    with t:  # the same trace again: each parameter now has two uses, the second forward's reaching its loss
        loss = model(y).pow(2).sum()
    report = t.explain(loss, params=model)
    assert [u.whole for u in t.state.uses] == [False] * (2 * len(params))
    assert report.graph.whole_once() == {}
    for (name, p), g in zip(params.items(), plain_y):
        routes = report.param(name).routes
        assert len(routes) == 1 and torch.allclose(routes[0].flow, g) and routes[0].share == pytest.approx(1.0)
        assert report.param(name).grad_norm == pytest.approx(float(g.norm()))


def _walk(obj, out):  # the plain walk an op's tensors are found by (oracle for tracer/records._into)
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _walk(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _walk(x, out)
    return out


def test_an_ops_tensors_are_those_a_walk_of_every_argument_finds():
    """inputs() / tensors_in() pass arguments of a type that holds no tensor (tracer/records._NO_TENSOR) by their
    exact type, before any isinstance: the same tensors, in the same order, as the plain isinstance walk of every
    argument, on ints, bools, subclasses of int and tuple, torch.Size, nested containers, Parameters and a tensor
    subclass; and no type in _NO_TENSOR can hold or be a tensor (torch.Size: ints only)."""
    import enum
    from collections import namedtuple

    from gradflow.tracer.records import _NO_TENSOR, inputs, tensors_in

    class Sub(torch.Tensor):
        pass

    class Level(enum.IntEnum):
        ONE = 1

    Pair = namedtuple("Pair", "a b")
    a, b, c = torch.ones(2), torch.zeros(3), torch.nn.Parameter(torch.ones(1))
    s = torch.ones(2).as_subclass(Sub)
    cases = [
        ((a, 8, 4), {}), ((a,), {"dim": 1, "keepdim": True}), ((a, torch.Size([2, 1])), {}), ((8, a, None, "x"), {}),
        (([a, b], 0), {}), (((a, [b, {"k": c}]), Level.ONE), {"out": None, "w": [s, (a,)]}),
        ((Pair(a, (b, 3)), slice(1, 2)), {"d": {"e": c, "f": torch.float32, "g": torch.device("cpu")}}),
        ((True, 2.5, torch.Size([]), (), [], {}), {"x": s}), ((c, c, a), {}), ((), {}),
    ]
    for args, kwargs in cases:
        expected = _walk(list(args), [])
        _walk(kwargs, expected)
        got = inputs(args, kwargs)
        assert len(got) == len(expected) and all(x is y for x, y in zip(got, expected)), (args, kwargs)
        for obj in (args, kwargs, *args):
            assert [id(x) for x in tensors_in(obj, [])] == [id(x) for x in _walk(obj, [])]
    for kind in _NO_TENSOR:
        assert not issubclass(kind, (torch.Tensor, list, dict))
        assert not issubclass(kind, tuple) or kind is torch.Size
    assert all(type(n) is int for n in torch.Size(torch.tensor([2, 3])))  # (made from a tensor: ints)


def test_the_ops_that_used_a_reported_parameter_are_found_for_all_and_for_some_parameters():
    """report.use_ops (a set of the use columns' ops at once when every use is of a reported parameter) is the ops
    that used a reported parameter, also when only some uses are (params a submodule). Hand-derived: the model's
    two `linear` ops, then only the second one's."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    with gradflow.trace() as t:
        loss = model(torch.randn(2, 3)).sum()
    whole, part = t.explain(loss, params=model), t.explain(loss, params=model[2])
    linears = [r.index for r in t.ops if r.name == "linear"]
    assert len(linears) == 2 and whole.use_ops == set(linears) and part.use_ops == {linears[1]}


def test_a_view_made_under_no_grad_and_written_twice_runs_as_without_the_trace():
    """torch refuses to say the grad_fn or is_leaf of such a view (it raises), yet allows more writes under no_grad:
    the trace must not ask (nn.Embedding's padding row, a LLaMA built with a pad_token_id)."""
    def step():
        torch.manual_seed(0)
        emb = torch.nn.Embedding(5, 2, padding_idx=0)
        with torch.no_grad():
            row = emb.weight[0]
            row.fill_(1.0)
            row.mul_(3.0)
        (emb(torch.tensor([0, 2])) ** 2).sum().backward()
        return emb.weight.detach().clone(), emb.weight.grad

    plain = step()
    with gradflow.trace():
        traced = step()
    assert plain[0][0].tolist() == [3.0, 3.0]  # the writes happened
    assert torch.equal(traced[0], plain[0]) and torch.equal(traced[1], plain[1])
