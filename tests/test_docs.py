"""README.md and docs/*.md: every example is real output, and every command and op is documented.

The examples are run by tests/docsrun.py (what counts as an example, and how each kind is run, is described
there); `PYTHONPATH=. python docs/refresh.py` rewrites the pasted outputs from real runs. These tests only
compare.
"""
import re
import warnings
from pathlib import Path

import pytest

from .docsrun import DOCS, OPS, ROOT, Block, Table, app, parse, pages, run_items, run_page

# ```console blocks are shown but not run. Each one must be listed here, as (page, its first line): the reason
# it cannot be run. There are none today. (bench/README.md is not a docs page: its timings and its 4-minute
# fuzzing run are shown as ```console there and not checked.)
ILLUSTRATIVE: dict[tuple[str, str], str] = {}

README = ROOT / "README.md"
PAGES = pages()
# real ranks, real Trainers, torchrun (seconds each): checked with -m slow
# Pages whose examples start processes or run many scripts (ranks, trainers, a Jupyter kernel, every failure
# class): run with -m slow.
SLOW_PAGES = {"ddp.md", "fsdp.md", "integrations.md", "huggingface.md", "lightning.md", "failures.md",
              "notebooks.md", "inspect.md", "script.md"}  # real models, processes and training loops
NEEDS = {"huggingface.md": "transformers", "lightning.md": "lightning", "integrations.md": "lightning"}  # extras
# An example that starts real ranks (seconds of CPU each) on a page of the everyday run is left out of that
# page's check and run with -m slow (test_rank_examples_are_real_output); on a slow page it runs with the rest.
RANKS = re.compile(r"^(\w+=\S*\s+)*(gradflow ddp|torchrun)\b")
WITH_SLOW = "starts real ranks: checked with -m slow"


def with_slow(command: str) -> str | None:
    return WITH_SLOW if RANKS.match(command) else None


def everyday(command: str) -> str | None:
    return None if RANKS.match(command) else "checked by the everyday run"


def page_param(page: Path):
    return pytest.param(page, marks=pytest.mark.slow) if page.name in SLOW_PAGES else page


def commands_of(page: Path) -> list[str]:
    """The page's `$ ...` commands and `>>> ...` lines, read, not run: every block with one is run and compared
    by test_examples_are_real_output (test_every_command_example_is_checked holds the exceptions)."""
    return [line.split(" ", 1)[1] for item in parse(page.read_text()) if isinstance(item, Block)
            for line in item.body if line.startswith(("$ ", ">>> "))]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def diff(check) -> str:
    import difflib

    lines = difflib.unified_diff(check.expected, check.got, "shown", "real output", lineterm="", n=2)
    return f"{check.page}:{check.line}: $ {check.command}\n" + "\n".join(lines)


_RUNS: dict[Path, list] = {}


def checks_of(page: Path) -> list:
    """The page's checks, run once per session (other tests below count them)."""
    if page not in _RUNS:
        _RUNS[page] = run_page(page, None if page.name in SLOW_PAGES else with_slow)[0]
    return _RUNS[page]


@pytest.mark.parametrize("page", [page_param(p) for p in PAGES], ids=rel)
def test_examples_are_real_output(page):
    if page.name in NEEDS:  # an optional extra (gradflow[huggingface], gradflow[lightning]) not installed: skip
        pytest.importorskip(NEEDS[page.name])
    checks = checks_of(page)
    bad = [c for c in checks if not c.ok]
    if bad:
        pytest.fail(f"{len(bad)} of {len(checks)} examples differ (PYTHONPATH=. python docs/refresh.py rewrites "
                    "them):\n\n" + "\n\n".join(diff(c) for c in bad), pytrace=False)
    skipped = sorted({c.skipped for c in checks if c.skipped and c.skipped != WITH_SLOW})
    if skipped:
        warnings.warn(f"{rel(page)}: {sum(1 for c in checks if c.skipped in skipped)} examples not checked: "
                      + "; ".join(skipped))


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if p.name not in SLOW_PAGES
                                  and any(RANKS.match(c) for c in commands_of(p))], ids=rel)
def test_rank_examples_are_real_output(page):
    """The examples the everyday run leaves out of test_examples_are_real_output (with_slow), run here."""
    checks = [c for c in run_page(page, everyday)[0] if not c.skipped]  # and the page's `>>>` lines (no process)
    assert any(RANKS.match(c.command) for c in checks)
    bad = [c for c in checks if not c.ok]
    assert not bad, "\n\n".join(diff(c) for c in bad)


def test_every_page_has_checked_examples():
    for page in PAGES:
        if page.name in ("index.md", "design.md"):
            continue
        assert commands_of(page), f"{rel(page)} has no checked example"


def test_every_command_example_is_checked():
    """A block with a `$ ` line is always run; the only blocks shown and not run are listed ```console ones."""
    for page in PAGES:
        for item in parse(page.read_text()):
            if isinstance(item, Block) and item.kind == "illustrative":
                key = (rel(page), item.body[0] if item.body else "")
                assert key in ILLUSTRATIVE, f"{rel(page)}:{item.start + 1}: a ```console block is not run; " \
                                            "make it runnable, or list it in ILLUSTRATIVE with the reason"


def test_every_op_in_docs_language():
    lang = (DOCS / "language.md").read_text()
    missing = [name for name in OPS if not re.search(rf"\b{name}\b", lang)]
    assert missing == []


def test_every_op_in_ops_listing():
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["ops"], env={"COLUMNS": "200"})
    cells = [line.split("│")[1] for line in res.stdout.splitlines() if line.startswith("│")]
    assert [c.split()[0] for c in cells if c.strip() and not c.startswith("   ")] == list(OPS)
    shown = {c.strip() for c in cells}
    for op in OPS.values():  # every spelling: F.f(...) also stands for torch.nn.functional.f(...), as said under it
        assert {s for s in op.spellings() if not s.startswith("torch.nn.functional.")} <= shown, op.name
        assert all(s.replace("torch.nn.functional.", "F.", 1) in shown for s in op.spellings())


def readme_section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_readme_has_the_four_blog_cases():
    """The classic example: four commands, their real output (checked above), the four answers."""
    section = readme_section("The classic example")
    sessions = [b for b in parse(section) if isinstance(b, Block) and b.kind == "session"]
    commands = [ln for b in sessions for ln in b.body if ln.startswith("$ gradflow") and "--y2 7" in ln]
    assert len(commands) == 4
    outs = "\n".join("\n".join(b.body) for b in sessions)
    for grad in ("x.grad = 50", "x.grad = 70", "x.grad = -20"):
        assert grad in outs
    assert "every path from x to L is cut by detach(x*y1) and detach(x*y2)" in outs  # both: no x.grad, and why
    assert "$ echo $?\n3" in outs  # both detached: exit 3
    # this section's examples run here (the whole README, with its batch pool and ranks, runs in the test above)
    readme_checks = [c for c in run_items(parse(section), rel(README)) if "--y2 7" in c.command]
    assert len(readme_checks) == 4 and all(c.ok and not c.skipped for c in readme_checks)


def cli_commands() -> list[str]:
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"})
    assert res.exit_code == 0
    section = res.stdout.split("Commands:")[1].split("\n\n")[0]  # the list, not the examples after it
    return [m.group(1) for m in re.finditer(r"^\s{2}(\w+)\s", section, flags=re.M)]


def test_every_command_has_a_page_and_a_readme_row():
    commands = cli_commands()
    assert {"eval", "whatif", "compare", "graph", "batch", "inspect", "ops"} <= set(commands)
    table = readme_section("Commands")
    for cmd in commands:
        page = DOCS / f"{cmd}.md"
        assert page.exists(), f"`gradflow {cmd}` has no page docs/{cmd}.md"
        assert page.read_text().startswith(f"# gradflow {cmd}\n")
        row = [ln for ln in table.splitlines() if ln.startswith(f"| [`gradflow {cmd}")]
        assert len(row) == 1 and f"](docs/{cmd}.md)" in row[0], f"README's command table: no row for {cmd}"
        assert any(c.startswith(f"gradflow {cmd}") for c in commands_of(page)), \
            f"docs/{cmd}.md runs no `gradflow {cmd}` example"


def links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_page_is_linked_from_the_index_and_the_readme():
    index = set(links((DOCS / "index.md").read_text()))
    readme = set(links(README.read_text()))
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "index.md":
            assert page.name in index, f"docs/index.md does not link {page.name}"
        assert f"docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    heads = re.findall(r"^#+ (.*)$", re.sub(r"```.*?```", "", text, flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def test_relative_links_resolve():
    for page in [*PAGES, ROOT / "bench" / "README.md"]:
        for link in links(page.read_text()):
            if re.match(r"\w+://", link):
                continue
            target, _, anchor = link.partition("#")
            path = (page.parent / target).resolve() if target else page
            assert path.exists(), f"{rel(page)}: broken link {link}"
            if anchor and path.suffix == ".md":
                assert anchor in anchors(path.read_text()), f"{rel(page)}: no heading for {link}"


def test_readme_is_a_front_page():
    assert len(README.read_text().splitlines()) <= 200, "README.md is the front page; the manual is docs/"


def test_checked_tables_are_found():
    limits = [i for i in parse((DOCS / "limits.md").read_text()) if isinstance(i, Table)]
    assert limits and len(limits[0].rows) >= 20


def test_every_picture_a_page_shows_exists():
    """docs/pictures.py draws them (Graphviz, chromium); a page must not show a missing one."""
    for page in pages():
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text()):
            if not target.startswith("http"):
                picture = page.parent / target
                assert picture.exists() and picture.stat().st_size > 1000, f"{page.name}: {target}"
