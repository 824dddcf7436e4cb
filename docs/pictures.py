"""Redraw the pictures the docs show (docs/img/*.png) from real runs; docs/refresh.py calls it.

    PYTHONPATH=. python docs/pictures.py

Needs Graphviz's `dot` for the graphs and Debian's chromium with Playwright for the HTML report's screenshot;
a picture whose tool is missing is left as it is (tests/test_docs.py checks every picture a page shows exists).
"""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
CLASSIC = ["out1 = x*y1; out2 = x*y2; L = (out1 - detach(out2))^2", "--x", "1", "--y1", "2", "--y2", "7"]


def _gradflow(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "gradflow", *args], cwd=ROOT, check=True, capture_output=True)


def _screenshot(page: Path, png: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        tab.goto(page.as_uri())
        tab.locator("g.node").first.click()
        tab.screenshot(path=str(png))
        browser.close()


def main() -> int:
    IMG.mkdir(exist_ok=True)
    if shutil.which("dot") is None:
        print("no Graphviz `dot`: pictures left as they are")
        return 0
    _gradflow("graph", *CLASSIC, "--format", "png", "-o", str(IMG / "eval-graph.png"))
    _gradflow("inspect", "examples/frozen_encoder.py:main", "--graph", "png", "-o", str(IMG / "inspect-modules.png"))
    _gradflow("inspect", "examples/gpt2_layers.py:main", "--graph", "png", "--autograd", "-o",
              str(IMG / "autograd-gpt2.png"))
    with tempfile.TemporaryDirectory() as tmp:  # backward K's graph goes to ops-K.png: the second is the picture
        _gradflow("script", "examples/classic_2018.py", "--autograd", "-o", str(Path(tmp) / "ops.png"))
        shutil.copyfile(Path(tmp) / "ops-2.png", IMG / "autograd-script.png")
    if shutil.which("chromium"):
        with tempfile.TemporaryDirectory() as tmp:
            page = Path(tmp) / "report.html"
            _gradflow("eval", *CLASSIC, "--html", str(page))
            _screenshot(page, IMG / "html-report.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
