"""Rewrite the outputs pasted in README.md and docs/*.md from real runs (the tests only compare).

    PYTHONPATH=. python docs/refresh.py            # every page
    PYTHONPATH=. python docs/refresh.py docs/eval.md

Run it from the repository root after changing what a command prints, then read the diff: a changed output
may mean the prose around it needs changing too. What is run, and how, is described in tests/docsrun.py.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from docs.pictures import main as draw_pictures  # noqa: E402
from tests.docsrun import pages, refresh_text  # noqa: E402


def main(argv: list[str]) -> int:
    targets = [Path(a).resolve() for a in argv] or pages()
    for page in targets:
        new = refresh_text(page)
        if new != page.read_text():
            page.write_text(new)
            print(f"rewrote {page.relative_to(ROOT)}")
    return 0 if argv else draw_pictures()  # every page: the pictures too (docs/pictures.py)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
