"""The whatif / compare examples (docs/whatif.md, docs/compare.md) are real output: rerun them and compare.

They lived in the README's "What if I cut here?" and "Side by side" sections before the manual moved to
docs/. tests/test_docs.py runs every page; this keeps a test per whatif/compare example, and their count.
"""
import functools

import pytest

from .docsrun import DOCS, Block, parse, run_page

PAGES = [DOCS / "whatif.md", DOCS / "compare.md"]
COMMANDS = ("gradflow whatif ", "gradflow compare ")


def _commands():
    """(page, command) for each whatif/compare `$ ` line, found without running anything."""
    out = []
    for page in PAGES:
        for item in parse(page.read_text()):
            if isinstance(item, Block) and item.kind == "session":
                out += [(page, ln[2:]) for ln in item.body if ln.startswith("$ " + COMMANDS[0])
                        or ln.startswith("$ " + COMMANDS[1])]
    return out


@functools.lru_cache(maxsize=None)
def _checks(page):
    return {c.command: c for c in run_page(page)[0]}


@pytest.mark.parametrize("page,command", _commands(), ids=lambda v: v[9:60] if isinstance(v, str) else v.name)
def test_docs_example(page, command):
    check = _checks(page)[command]
    if check.skipped:  # only a filter after a pipe (jq) may be missing; gradflow itself always runs
        assert "|" in command
        pytest.skip(check.skipped)
    assert check.got == check.expected


def test_examples_found():
    plain = [cmd for _, cmd in _commands() if "|" not in cmd]
    assert len(plain) >= 4
    assert any("--modes" in cmd for cmd in plain)
