"""The report from the ranks' verdicts (no processes, no torch): classes, the branch, DDP's behaviour, the fix."""
from gradflow.ddp.branch import definition_line, enclosing_branch
from gradflow.ddp.merge import fold, merge, torch_said

SOURCE = '''class Net:
    def __init__(self):
        self.aux = Linear()

    def forward(self, x, rank):
        h = self.body(x)
        if rank == 0:  # only rank 0
            h = h + self.aux(h)
        for i in range(3):
            h = h * 2
        return h
'''


def param(name, grad, status="live", line=None, uses=(), reason=None):
    return {"name": name, "numel": 3, "status": status, "grad": grad, "requires_grad": True, "reason": reason,
            "line": line, "uses": list(uses)}


def rank(r, params, lines=()):
    return {"rank": r, "loss": 1.0, "params": params, "lines": list(lines), "warnings": [], "error": None}


def test_branch_around_a_line_and_definition_lines(tmp_path):
    src = tmp_path / "net.py"
    src.write_text(SOURCE)
    b = enclosing_branch(f"{src}:8")
    assert b is not None and b.line == f"{src}:7" and b.code == "if rank == 0:"  # the comment left out
    assert enclosing_branch(f"{src}:10").code == "for i in range(3):"
    assert enclosing_branch(f"{src}:6") is None and enclosing_branch(f"{src}:7") is None  # the test is not inside
    assert enclosing_branch("no/such/file.py:3") is None
    assert definition_line(str(src), "aux") == f"{src}:3" and definition_line(str(src), "nothing") is None


def test_unused_everywhere_divergent_and_healthy(tmp_path):
    src = tmp_path / "net.py"
    src.write_text(SOURCE)
    s = str(src)
    ranks = [rank(0, [param("body.w", True), param("aux.w", True, uses=[f"{s}:8"]),
                      param("aux.b", True, uses=[f"{s}:8"]), param("old.w", False, "unused")], [f"{s}:6", f"{s}:8"]),
             rank(1, [param("body.w", True), param("aux.w", False, "unused"), param("aux.b", False, "unused"),
                      param("old.w", False, "unused")], [f"{s}:6"])]
    rep = merge("net.py:main", s, {"wrapped_by": "you", "find_unused_parameters": True, "static_graph": False},
                ranks, None)
    assert [p["name"] for p in rep["unused"]] == ["old.w"]
    (g,) = rep["divergent"]
    assert g["params"] == ["aux.w", "aux.b"] and g["gradient_on"] == [0] and g["none_on"] == [1]
    assert g["branch"] == {"line": f"{s}:7", "code": "if rank == 0:"}
    assert rep["found"] == ["unused", "divergent"]
    assert sorted(rep["find_unused_forced_by"]) == ["aux.b", "aux.w", "old.w"]
    assert "rank 0 blocks in the 1st backward" in rep["ddp_would"]["find_unused_parameters=False"]
    assert any(f"the branch at {s}:7" in f for f in rep["fix"])
    healthy = merge("net.py:main", s, {"find_unused_parameters": False}, [rank(0, [param("w", True)]),
                                                                         rank(1, [param("w", True)])], None)
    assert healthy["found"] == [] and healthy["fix"] == [] and healthy["divergent"] == []


def test_frozen_parameters_are_not_ddp_s_concern():
    frozen = {**param("enc.w", False, "frozen"), "requires_grad": False}
    rep = merge("x.py:f", "x.py", {}, [rank(0, [frozen]), rank(1, [frozen])], None)
    assert rep["unused"] == [] and rep["ranks"][0]["no_gradient"] == []


def test_fold_by_module_and_torch_indices_named():
    rows = fold([param("a.w", False, "unused", reason="r"), param("a.b", False, "unused", reason="r"),
                 param("c.w", False, "cut", reason="x")])
    assert [(r["name"], r["numel"]) for r in rows] == [("a.*", 6), ("c.w", 3)]
    said_raw = [{"ok": False, "stage": "iteration 1, backward", "message": "[pair.cc] Connection closed by "
                 "peer [127.0.0.1]:1"},
                {"ok": False, "stage": "iteration 2, forward", "unused": {"1": ["aux.w"]},
                 "message": "Expected to have finished reduction in the prior iteration before starting a new one. "
                            "This error indicates that your module has parameters that were not used in producing "
                            "loss. You can enable..."}]
    said = torch_said(said_raw)
    assert said[0]["blocked"] and not said[1]["blocked"] and said[1]["unused"] == ["aux.w"]
    for gone in ("[pair.cc:537] Read error [127.0.0.1]:29571: Connection reset by peer.",
                 "[pair.cc:589] Write error [127.0.0.1]:29571: Broken pipe"):  # how gloo says it, by timing
        assert torch_said([{"ok": False, "stage": "iteration 1, backward", "message": gone}, said_raw[1]])[0]["blocked"]
    assert said[1]["said"].endswith("were not used in producing loss.")
