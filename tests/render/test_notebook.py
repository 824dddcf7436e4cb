"""examples/gradflow.ipynb run in a real Jupyter kernel (nbclient + ipykernel), its outputs checked against
plain torch: the HTML tables hold the gradients torch computes, the pictures are SVG.

Independent truth only: this file does not import gradflow. The kernelspec is installed into a temporary
prefix (never $HOME) and IPython's own folder is a temporary one too.
"""
from __future__ import annotations

import html
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
torch = pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.slow


def _torch_grad(detach_first: bool, detach_second: bool) -> float:
    """dL/dx of L = (x*y1 - x*y2)^2 at x=1, y1=2, y2=7, with either product detached, by plain torch."""
    x = torch.tensor(1.0, requires_grad=True)
    out1, out2 = x * 2.0, x * 7.0
    loss = ((out1.detach() if detach_first else out1) - (out2.detach() if detach_second else out2)) ** 2
    loss.backward()
    return float(x.grad)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    from ipykernel.kernelspec import install
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    prefix = tmp_path_factory.mktemp("jupyter")
    kernels = Path(install(kernel_name="gradflow-test", prefix=str(prefix))).parent
    spec_file = kernels / "gradflow-test" / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec["argv"][0] = sys.executable  # this venv's Python
    spec["env"] = {"IPYTHONDIR": str(prefix / "ipython")}  # IPython's folder: not $HOME's
    spec_file.write_text(json.dumps(spec))
    km = KernelManager(kernel_name="gradflow-test", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    nb = nbformat.read(EXAMPLES / "gradflow.ipynb", as_version=4)
    nbclient.NotebookClient(nb, km=km, timeout=180, resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    return nb


def _data(nb, index: int) -> dict:
    """The display data of code cell `index` (0-based among code cells)."""
    cell = [c for c in nb.cells if c.cell_type == "code"][index]
    assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs
    results = [o for o in cell.outputs if o.output_type == "execute_result"]
    return results[-1].data if results else {}


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _row(page: str, name: str) -> list[str]:
    """The cells of the table row of `name` in the HTML table, as text."""
    for line in _text(page).splitlines():
        cells = line.split()
        if len(cells) > 1 and cells[0] in "●✂○◌" and cells[1] == name:
            return cells
    raise AssertionError(f"no row {name!r} in\n{_text(page)}")


@pytest.mark.parametrize("cell, detached, name", [(0, (False, False), "x"), (1, (True, False), "x"),
                                                   (2, (False, True), "x")])
def test_html_table_holds_the_gradient_torch_computes(executed, cell, detached, name):
    data = _data(executed, cell)
    grad = _torch_grad(*detached)
    row = _row(data["text/html"], name)
    assert float(row[-1]) == grad  # the grad column
    assert f"x.grad = {grad:g}" in _text(data["text/html"])
    assert f"x.grad = {grad:g}" in data["text/plain"]  # the same table as text
    assert 'style="' in data["text/html"]  # colours inline: no stylesheet to load


def test_cut_marks_and_colours_reach_the_notebook(executed):
    page = _data(executed, 2)["text/html"]
    assert _row(page, "out2")[0] == "✂"
    assert "✂ cut: out2 → detach(out2)" in _text(page)
    assert re.search(r'<span style="color: #[0-9a-f]{6}[^"]*">✂', page)  # the mark in a colour


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_pictures_are_svg_and_name_the_nodes(executed):
    data = _data(executed, 2)
    svg = data["image/svg+xml"]
    assert "<svg" in svg and "out2" in svg and "detach" in svg
    assert "<svg" in data["text/html"]  # beside the table: a notebook shows only the richest type
    assert "<svg" in _data(executed, 6)["image/svg+xml"]  # the model's modules


def test_mermaid_text_prints(executed):
    cell = [c for c in executed.cells if c.cell_type == "code"][3]
    printed = "".join(o.text for o in cell.outputs if o.output_type == "stream")
    assert printed.startswith("flowchart BT") and "✂ cut" in printed


def test_model_report_watch_and_health_show_tables_not_tensors(executed):
    report, health, watch = (_data(executed, i) for i in (6, 7, 8))
    x = torch.randn(1)  # the tensors' repr never reaches the page
    assert "tensor(" not in report["text/plain"] and "tensor(" not in report["text/html"], x
    assert _row(report["text/html"], "adapter.*")[0] == "✂"
    assert "frozen: requires_grad is False" in _text(report["text/html"])
    assert "gradient norm per layer" in health["text/plain"]
    assert watch["text/plain"].startswith("3 steps, 12 parameter tensors")
    assert len(report["text/plain"]) < 3000  # short: the repr was 31,147 characters of tensors before
