"""`gradflow ddp --fail-on/--allow` on merged rank reports (no processes, no torch): inspect's classes per rank,
`unused` and `divergent` as DDP sees them, the ranks named. The rank documents are written by hand, the way
tests/ddp/test_merge.py writes them: what each rank's inspect verdict says of each parameter."""
import pytest

from gradflow.ddp.fail_on import error, gate
from gradflow.ddp.merge import merge
from gradflow.errors import ExitCode, ValueInputError
from gradflow.report.fail_on import parse_classes

F = "net.py"
CUT = f"cut by `detach()` at {F}:9 (in Net)"


def param(name, status="live", norm=1.0, reason=None, cuts=(), aliases=(), requires_grad=True):
    got = status in ("live", "zero")
    return {"name": name, "numel": 3, "status": status, "grad": got, "requires_grad": requires_grad,
            "reason": reason, "line": None, "uses": [], "aliases": list(aliases), "grad_is_none": not got,
            "grad_norm": (0.0 if status == "zero" else norm) if got else None, "routes": [], "cuts": list(cuts)}


def rank(r, params):
    return {"rank": r, "loss": 1.0, "params": params, "lines": [], "warnings": [], "error": None}


def run(ranks, fail_on, allow=()):
    doc = merge(f"{F}:main", F, {"find_unused_parameters": False}, ranks, None)
    return gate(ranks, doc, fail_on, allow)


def table(g):
    return [(f["name"], f["class"], f["ranks"]) for f in g["failures"]]


# body: fine everywhere; adapter: cut on every rank; aux: only rank 0 uses it; enc: frozen on every rank;
# scale: an exactly zero gradient on rank 1 only; head.w: nan on rank 0 only
RANKS = [rank(0, [param("body.w"), param("adapter.w", "cut", reason=CUT, cuts=[f"{F}:9"]), param("aux.w"),
                  param("aux.b"), param("enc.w", "frozen", reason="frozen", requires_grad=False),
                  param("scale", norm=2.0), param("head.w", norm="nan")]),
         rank(1, [param("body.w"), param("adapter.w", "cut", reason=CUT, cuts=[f"{F}:9"]),
                  param("aux.w", "unused", reason="not used in the forward"),
                  param("aux.b", "cut", reason=CUT, cuts=[f"{F}:9"]),
                  param("enc.w", "frozen", reason="frozen", requires_grad=False),
                  param("scale", "zero", reason="its gradient is exactly zero"), param("head.w")])]


def test_unused_and_divergent_keep_ddp_s_meaning():
    g = run(RANKS, "unused,divergent")
    # unused = no gradient on any rank, whatever the reason (DDP's "not used in producing loss"): the cut adapter
    # too; aux.* is divergent only (not also unused or cut on rank 1), and names the rank that lacks it
    assert table(g) == [("adapter.w", "unused", [0, 1]), ("aux.w", "divergent", [1]), ("aux.b", "divergent", [1])]
    assert g["failures"][1]["reason"] == "gets a gradient on rank 0 and none on rank 1"
    assert g["fail_on"] == ["unused", "divergent"] and not g["passed"] and g["unmatched_allow"] == []
    assert set(g["failures"][0]) == {"name", "class", "reason", "line", "ranks"}  # inspect's failure, + ranks


def test_unused_everywhere_for_different_reasons_names_each_rank_s_reason():
    ranks = [rank(0, [param("w"), param("a.w", "cut", reason=CUT, cuts=[f"{F}:9"])]),
             rank(1, [param("w"), param("a.w", "unused", reason="not used in the forward")])]
    g = run(ranks, "unused")
    assert [(f["name"], f["reason"], f["ranks"]) for f in g["failures"]] == \
        [("a.w", CUT, [0]), ("a.w", "not used in the forward", [1])]


def test_inspect_classes_apply_per_rank_and_name_the_ranks():
    g = run(RANKS, "cut,frozen,zero,nonfinite,unreached,untraced,orphan")
    assert table(g) == [("adapter.w", "cut", [0, 1]), ("enc.w", "frozen", [0, 1]), ("scale", "zero", [1]),
                        ("head.w", "nonfinite", [0])]  # aux.b's cut on rank 1 is part of its divergence
    assert g["failures"][0]["line"] == f"{F}:9"
    err = error(g, 2)
    assert err.exit_code == ExitCode.GATE
    assert err.message == "--fail-on cut,frozen,zero,nonfinite,unreached,untraced,orphan: 4 parameters failed " \
                          "(cut: 1, frozen: 1, zero: 1, nonfinite: 1)"
    lines = err.detail.splitlines()
    assert lines[0].split() == ["adapter.w", "cut", "every", "rank:", *CUT.split()]
    assert "rank 1: its gradient is exactly zero" in lines[2] and "rank 0: its gradient holds nan" in lines[3]


def test_allow_globs_on_names_and_aliases_and_unmatched_patterns():
    ranks = [rank(r, [param("body.w"), param("aux.w", aliases=["shared.w"]) if r == 0 else
                      param("aux.w", "unused", aliases=["shared.w"])]) for r in (0, 1)]
    assert table(run(ranks, "all")) == [("aux.w", "divergent", [1])]
    for pat in ("aux.*", "shared.*"):
        g = run(ranks, "all", [pat, "typo.*"])
        assert g["passed"] and g["failures"] == [] and g["unmatched_allow"] == ["typo.*"]
        assert error(g, 2) is None


def test_classes_all_default_and_unknown():
    assert parse_classes("all", {"divergent": "x"})[-1] == "divergent"
    assert "divergent" not in parse_classes("default", {"divergent": "x"})
    with pytest.raises(ValueInputError) as e:
        parse_classes("divergent")  # inspect has no ranks
    assert "divergent" not in e.value.hint
    with pytest.raises(ValueInputError) as e:
        parse_classes("everything", {"divergent": "x"})
    assert e.value.message == "--fail-on: unknown class 'everything'" and "divergent" in e.value.hint
    healthy = [rank(r, [param("w")]) for r in (0, 1)]
    assert run(healthy, "all")["passed"]


def test_a_rank_s_verdicts_keep_every_class_plain_torch_gives():
    """What a rank sends (ddp/rank.py verdicts, no process group needed) is enough for every per-rank class:
    checked against a plain backward of the same model (tests/report/test_fail_on.py's Mixed)."""
    import torch

    from gradflow.ddp.rank import verdicts

    from ..report.test_fail_on import Mixed, X, plain_truth, traced

    truth = plain_truth(Mixed(), X)
    sent = verdicts(traced(Mixed(), X), 0)
    g = run([sent], "all")
    by = {c: {f["name"] for f in g["failures"] if f["class"] == c} for c in ("frozen", "zero", "nonfinite", "cut",
                                                                              "unused", "partly-cut")}
    assert by["frozen"] == truth["frozen"] and by["zero"] == truth["zero"] and by["nonfinite"] == truth["nonfinite"]
    assert by["unused"] == truth["none"] and by["cut"] == {"cut.weight", "cut.bias"}  # unused: DDP's sense
    assert by["partly-cut"] == {"partly.weight", "partly.bias"}
    assert all(f["ranks"] == [0] for f in g["failures"])

    class Huge(torch.nn.Module):  # finite elements whose norm overflows: not nonfinite
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4, dtype=torch.float64))

        def forward(self, x):
            return (self.w * 1e308).sum()  # its gradient: 1e308 each, a norm of 2e308

    report = traced(Huge(), X)
    assert report.params[0].grad_norm == float("inf") and bool(report.params[0].grad.isfinite().all())
    huge = verdicts(report, 0)
    assert run([huge], "nonfinite")["passed"]
