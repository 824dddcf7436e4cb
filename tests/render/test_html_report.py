"""`--html FILE.html` opened in a real browser: Debian's chromium driven by Playwright (never a downloaded
browser). The page is made by a real `gradflow` process; a click on a node must show the values plain torch
computes; a screenshot must be a picture, not a blank page. Skips when chromium or playwright is missing.

Independent truth only: this file does not import gradflow.
"""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sync_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium (Debian: apt-get install chromium)")]
CLASSIC = "out1 = x*y1; out2 = x*y2; L = (out1 - detach(out2))^2"


def _gradflow(*args: str, path: str | None = None, cwd: Path | None = None) -> None:
    env = {**os.environ, "COLUMNS": "100"}
    if path is not None:
        env["PATH"] = path
    done = subprocess.run([sys.executable, "-m", "gradflow", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=240)
    assert done.returncode == 0, done.stderr


def _classic_grads() -> dict[str, float]:
    """x's grad and out1's gradient with out2 detached, by plain torch."""
    x = torch.tensor(1.0, requires_grad=True)
    out1, out2 = x * 2.0, x * 7.0
    out1.retain_grad()
    ((out1 - out2.detach()) ** 2).backward()
    return {"x": float(x.grad), "out1": float(out1.grad)}


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    return page, requests


def _detail(page) -> dict[str, str]:
    rows = page.locator("section.run .detail tr")
    return {rows.nth(i).locator("td").nth(0).inner_text(): rows.nth(i).locator("td").nth(1).inner_text()
            for i in range(rows.count())}


def _clicked(section, text: str) -> dict[str, str]:
    """Click the graph's node that shows `text`; the details the section shows then."""
    section.locator("g.node", has_text=text).click()
    return {k: v for k, v in (r.split("\t") for r in section.locator(".detail tr").all_inner_texts())}


def _sane_screenshot(page, tmp_path: Path) -> None:
    from PIL import Image

    shot = page.screenshot(full_page=True, path=str(tmp_path / "report.png"))
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    assert image.width >= 1000 and image.height >= 600
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, boxes and colours, not a blank page
    assert max(n for n, _ in colours) < 0.95 * image.width * image.height


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_eval_page_click_a_node_shows_torchs_values(browser, tmp_path):
    out = tmp_path / "eval.html"
    _gradflow("eval", CLASSIC, "--x", "1", "--y1", "2", "--y2", "7", "--html", str(out))
    page, requests = _open(browser, out)
    truth = _classic_grads()
    node = page.locator("g.node", has=page.locator("title", has_text=re.compile(r"^n0$")))
    node.click()
    shown = _detail(page)
    assert float(shown["grad"]) == truth["x"] and shown["requires_grad"] == "True"
    assert shown["is_leaf"] == "True" and shown["value"] == "1"
    page.locator("g.node", has=page.locator("title", has_text=re.compile(r"^n2$"))).click()  # out1
    shown = _detail(page)
    assert page.locator(".detail h3").inner_text() == "out1"
    assert float(shown["grad"]) == truth["out1"] and shown["grad_fn"] == "MulBackward0"
    assert "✂ out2 → detach(out2)" in page.locator(".cuts").inner_text()
    assert "x.grad = -20" in page.locator(".table").inner_text()
    assert requests == [out.as_uri()]  # nothing else loaded: no CDN, no network
    _sane_screenshot(page, tmp_path)


def test_eval_page_without_graphviz_lays_out_buttons(browser, tmp_path):
    out = tmp_path / "plain.html"
    _gradflow("eval", CLASSIC, "--x", "1", "--y1", "2", "--y2", "7", "--html", str(out),
              path=str(Path(sys.executable).parent))  # this venv only: no `dot`
    page, _ = _open(browser, out)
    assert page.locator("svg").count() == 0
    page.locator(".rows button[data-key=n0]").click()
    assert float(_detail(page)["grad"]) == _classic_grads()["x"]


def test_inspect_page_click_a_parameter_shows_its_reason_and_line(browser, tmp_path):
    out = tmp_path / "inspect.html"
    _gradflow("inspect", "examples/frozen_encoder.py:main", "--html", str(out), cwd=ROOT)
    page, requests = _open(browser, out)
    page.locator(".items button", has_text=re.compile(r"^adapter\.weight$")).click()
    shown = _detail(page)
    assert shown["status"] == "cut" and shown["requires_grad"] == "True" and shown["grad"] == "—"
    assert "detach()" in shown["reason"] and shown["line"].endswith("frozen_encoder.py:30")
    page.locator(".items button", has_text=re.compile(r"^encoder\.layer1\.weight$")).click()
    assert _detail(page)["requires_grad"] == "False"
    assert requests == [out.as_uri()]
    _sane_screenshot(page, tmp_path)


def test_script_page_has_a_section_per_backward(browser, tmp_path):
    out = tmp_path / "script.html"
    _gradflow("script", "examples/classic_2018.py", "--html", str(out), cwd=ROOT)
    page, _ = _open(browser, out)
    assert page.locator("section.run").count() == 3
    third = page.locator("section.run").nth(2)
    third.locator(".items button", has_text=re.compile(r"^out2$")).click()
    shown = {k: v for k, v in (r.split("\t") for r in third.locator(".detail tr").all_inner_texts())}
    assert shown["requires_grad"] == "False" and shown["status"] == "cut"


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_inspect_autograd_page_click_the_cut_shows_its_line(browser, tmp_path):
    out = tmp_path / "ops.html"
    _gradflow("inspect", "examples/frozen_encoder.py:main", "--autograd", "--html", str(out), cwd=ROOT)
    source = (ROOT / "examples" / "frozen_encoder.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if ".detach()" in text)
    page, requests = _open(browser, out)
    ops = page.locator("section.run").nth(1)  # the modules' section first, then torch's graph
    shown = _clicked(ops, "✂ detach")
    assert shown["grad_fn"] == "detach" and shown["line"].endswith(f"frozen_encoder.py:{line}")
    assert shown["variable"] == "h"
    shown = _clicked(ops, "head.weight")
    assert shown["grad_fn"] == "AccumulateGrad" and shown["status"] == "live"
    assert requests == [out.as_uri()]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_script_autograd_page_click_the_cut_shows_its_line(browser, tmp_path):
    out = tmp_path / "script-ops.html"
    _gradflow("script", "examples/classic_2018.py", "--autograd", "--html", str(out), cwd=ROOT)
    source = (ROOT / "examples" / "classic_2018.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if text == "out1 = out1.detach()")
    page, requests = _open(browser, out)
    assert page.locator("section.run").count() == 6  # each backward's table, then torch's graph of it
    ops = page.locator("section.run").nth(3)  # backward 2's graph: out1 detached
    shown = _clicked(ops, "✂ detach")
    assert shown["grad_fn"] == "detach" and shown["line"].endswith(f"classic_2018.py:{line}")
    assert shown["variable"] == "out1"
    shown = _clicked(ops, "xvar")
    assert shown["grad_fn"] == "AccumulateGrad" and shown["status"] == "live"
    assert requests == [out.as_uri()]
