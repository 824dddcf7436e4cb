"""Every result shows itself: print/repr give the terminal table as text, Jupyter the same table in HTML,
results with a graph draw it (render/views.py, display.Shown). The notebook itself: test_notebook.py."""
from __future__ import annotations

import shutil

import pytest
import torch

import gradflow
from gradflow.errors import ValueInputError

CLASSIC = "(x*y1 - detach(x*y2))^2"


def test_repr_is_the_terminal_table_not_a_dataclass_dump():
    r = gradflow.explain(CLASSIC, x=1, y1=2, y2=7)
    text = repr(r)
    assert text == str(r)
    assert "Explanation(" not in text and "tensor(" not in text
    assert "✂ cut: x*y2 → detach(x*y2)" in text and text.endswith("x.grad = -20")
    assert max(map(len, text.splitlines())) <= 100


def test_repr_of_a_long_result_is_cut_short_and_print_shows_all():
    r = gradflow.explain("; ".join(f"a{i} = x*{i}" for i in range(60)) + "; a59", x=1)
    assert len(repr(r).splitlines()) == 41 and "more lines (print() shows them all)" in repr(r)
    assert len(str(r).splitlines()) > 60


def test_html_is_the_same_table_in_colour():
    page = gradflow.explain(CLASSIC, x=1, y1=2, y2=7)._repr_html_()
    assert page.startswith("<pre") and "color: #" in page and "MulBackward0" in page


def test_brief_results_show_the_answer_and_have_no_graph():
    r = gradflow.explain("x*2", x=3, brief=True)
    assert repr(r) == "L = 6\nx.grad = 2"
    with pytest.raises(ValueInputError, match="no graph"):
        r.to_dot()
    assert "image/svg+xml" not in r._repr_mimebundle_()


def test_inspect_report_repr_holds_no_tensor():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    model[0].requires_grad_(False)
    with gradflow.trace() as t:
        loss = model(torch.randn(2, 4)).sum()
    report = t.explain(loss, params=model)
    assert "tensor(" not in repr(report) and "○ 0.*" in repr(report)
    assert report.to_dot().startswith("digraph") and report.to_mermaid().startswith("flowchart")


def test_draw_writes_the_format_the_suffix_names(tmp_path):
    r = gradflow.explain(CLASSIC, x=1, y1=2, y2=7)
    assert r.draw(tmp_path / "g.dot").read_text() == r.to_dot()
    assert r.draw(tmp_path / "g.mmd").read_text() == r.to_mermaid()
    with pytest.raises(ValueInputError, match="picture format"):
        r.draw(tmp_path / "g.txt")
    if shutil.which("dot"):
        assert "<svg" in r.draw(tmp_path / "g.svg").read_text()
        assert r.draw(tmp_path / "g.png").read_bytes().startswith(b"\x89PNG")


def test_studies_show_their_tables():
    assert "remove cut" in repr(gradflow.whatif(CLASSIC, x=1, y1=2, y2=7))
    assert "Side by side" in repr(gradflow.compare(["x*y", "detach(x)*y"], x=1, y=2))


def test_a_repr_that_cannot_draw_says_so_instead_of_raising():
    r = gradflow.explain(CLASSIC, x=1, y1=2, y2=7)
    r.nodes = None  # type: ignore[assignment]  # broken on purpose
    assert repr(r).startswith("<Explanation (cannot be drawn: TypeError")
