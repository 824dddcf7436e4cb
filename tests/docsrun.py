"""Run the examples of README.md and docs/*.md: the harness behind tests/test_docs.py and docs/refresh.py.

What is run, page by page, in document order, in a scratch folder that holds a copy of examples/:

* a ``` block with a line starting with `$ `: a shell session. Each `$ ` line is a command, the lines up
  to the next one are what it prints (stdout and stderr interleaved, as a terminal shows them).
  `gradflow ...` runs in this process (Typer's CliRunner, COLUMNS=100 unless the line sets it); other
  commands (`cat`, `jq`, `printf ... |`) and the `| filter` / `> FILE` around gradflow go through bash.
  `echo $?` prints the exit status of the previous command, as in bash (a pipeline's is its last
  command's). Arguments with `$(...)` are expanded by bash.
* a ```python block whose first line starts with `>>> `: run line by line like a Python prompt (one
  namespace per page, so a later block may use an earlier one's names); each result must print as shown.
* a ``` block right after a line `<!-- $ gradflow ... -->`: the block is that command's output (so a
  ```mermaid block can be rendered by GitHub and still be checked).
* a table whose header is `| command | exit | stderr |`: each row's command is run; its exit status and
  its first `error:`/`warning:` line on stderr (cut at 120 characters, `(nothing)` when stderr is empty)
  must be as shown.

Not run: a ```console block (illustrative; the test module says why each one is allowed) and blocks with
no `$ ` line (commands to copy, Python that is not written as a prompt session).

Output is compared line by line with trailing spaces and trailing blank lines removed.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from typer.testing import CliRunner

# The only imports of gradflow's internals in the docs tests (change here when the package moves).
from gradflow.cli.app import app
from gradflow.language.ops import OPS  # noqa: F401 (tests/test_docs.py uses it)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
COLUMNS = "100"
TABLE_HEADER = "| command | exit | stderr |"
STDERR_CUT = 120


def pages() -> list[Path]:
    """README.md, then every docs/*.md page."""
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


# ---------------------------------------------------------------- parsing


@dataclass
class Block:
    start: int  # line index of the opening fence
    end: int  # line index of the closing fence
    info: str
    body: list[str]
    marker: str | None = None  # the command of a `<!-- $ ... -->` line right above

    @property
    def kind(self) -> str:
        if self.info == "console":
            return "illustrative"
        if self.marker:
            return "output"
        if any(line.startswith("$ ") for line in self.body):
            return "session"
        if self.info in ("python", "pycon") and self.body and self.body[0].startswith(">>> "):
            return "python"
        return "text"


@dataclass
class Table:
    start: int  # line index of the header
    rows: list[tuple[int, str, str, str]]  # (line index, command, exit, stderr)


MARKER = re.compile(r"^<!-- \$ (.*) -->$")
FENCE = re.compile(r"^```([\w+-]*)\s*$")


def parse(text: str):
    """The page's blocks and checked tables, in order."""
    lines = text.split("\n")
    items, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j].rstrip() != "```":
                j += 1
            if j == len(lines):
                raise ValueError(f"line {i + 1}: unclosed ``` block")
            marker = MARKER.match(lines[i - 1]) if i else None
            items.append(Block(i, j, m.group(1), lines[i + 1:j], marker and marker.group(1)))
            i = j + 1
            continue
        if lines[i].strip() == TABLE_HEADER:
            rows, j = [], i + 2
            while j < len(lines) and lines[j].startswith("|"):
                cells = split_row(lines[j])
                if len(cells) != 3:
                    raise ValueError(f"line {j + 1}: a checked table row needs 3 cells")
                rows.append((j, unquote(cells[0]), cells[1].strip(), unquote(cells[2])))
                j += 1
            items.append(Table(i, rows))
            i = j
            continue
        i += 1
    return items


def split_row(line: str) -> list[str]:
    """A Markdown table row's cells (`\\|` is a literal bar)."""
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [c.replace("\\|", "|").strip() for c in cells]


def unquote(cell: str) -> str:
    m = re.fullmatch(r"(`+) ?(.*?) ?\1", cell)
    return m.group(2) if m else cell


def quote(text: str) -> str:
    """A table cell showing `text` as code (longer backtick fence if it holds one; bars escaped)."""
    ticks = "``" if "`" in text else "`"
    pad = " " if ticks == "``" else ""
    return f"{ticks}{pad}{text}{pad}{ticks}".replace("|", "\\|")


# ---------------------------------------------------------------- running


def clean(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def split_unquoted(text: str, chars: str) -> list[tuple[str, str]]:
    """Split at unquoted characters in `chars`: [(text, the separator that ends it or '')]."""
    parts, cur, quote_char, i = [], "", None, 0
    while i < len(text):
        c = text[i]
        if quote_char:
            if c == "\\" and quote_char == '"' and i + 1 < len(text):
                cur += text[i:i + 2]
                i += 2
                continue
            if c == quote_char:
                quote_char = None
        elif c in "'\"":
            quote_char = c
        elif c in chars:
            parts.append((cur, c))
            cur = ""
            i += 1
            continue
        cur += c
        i += 1
    parts.append((cur, ""))
    return parts


def strip_comment(text: str) -> str:
    """Drop a trailing shell comment (an unquoted `#` after a space)."""
    out, quote_char = "", None
    for i, c in enumerate(text):
        if quote_char:
            quote_char = None if c == quote_char else quote_char
        elif c in "'\"":
            quote_char = c
        elif c == "#" and (i == 0 or text[i - 1].isspace()):
            return out.rstrip()
        out += c
    return out


@dataclass
class Ran:
    output: str
    code: int
    stderr: str = ""
    skipped: str | None = None  # why it could not be run here (a tool that is not installed)


@dataclass
class Workspace:
    """The scratch folder a page's examples run in, and the state they share."""
    path: Path
    last_code: int = 0
    globs: dict = field(default_factory=dict)

    def bash(self, command: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "COLUMNS": COLUMNS}
        return subprocess.run(["bash", "-c", command], cwd=self.path, input=stdin, capture_output=True,
                              env=env, timeout=240)  # torchrun examples: 2 ranks on a busy 2-core machine

    def missing_tool(self, command: str) -> str | None:
        words = shlex.split(command)
        while words and re.fullmatch(r"\w+=.*", words[0]):
            words.pop(0)
        if words and words[0] not in ("echo", "printf", "cat") and not shutil.which(words[0]):
            return f"{words[0]} is not installed"
        return None

    def gradflow(self, text: str, stdin: bytes | None):
        """Run `[NAME=VALUE ...] gradflow ARGS` in this process: (click Result, env)."""
        env = {"COLUMNS": COLUMNS}
        words = text.strip()
        while (m := re.match(r"(\w+)=(\S*)\s+", words)):
            env[m.group(1)] = m.group(2)
            words = words[m.end():]
        assert words.startswith("gradflow"), words
        rest = words[len("gradflow"):]
        if "$(" in rest or "$'" in rest or "`" in rest:
            res = self.bash("printf '%s\\0' " + rest)
            assert res.returncode == 0 and not res.stderr, f"bash could not expand {rest}: {res.stderr.decode()}"
            args = res.stdout.decode().split("\0")[:-1]
        else:
            args = shlex.split(rest)
        result = CliRunner().invoke(app, args, input=stdin, env=env)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            import traceback
            raise AssertionError(f"{text}: raised\n" + "".join(traceback.format_exception(
                type(result.exception), result.exception, result.exception.__traceback__)))
        return result

    def run(self, line: str) -> Ran:
        """One `$ ` line."""
        line = strip_comment(line)
        if line.strip() == "echo $?":
            return Ran(f"{self.last_code}\n", 0)
        segments = [seg for seg, _ in split_unquoted(line, "|")]
        at = [k for k, seg in enumerate(segments) if re.match(r"^\s*(\w+=\S*\s+)*gradflow\b", seg)]
        for seg in segments:
            if (why := self.missing_tool(seg)) and not re.match(r"^\s*(\w+=\S*\s+)*gradflow\b", seg):
                return Ran("", 0, skipped=why)
        if not at:  # no gradflow in it: the shell runs it all
            res = self.bash(line)
            self.last_code = res.returncode
            return Ran(res.stdout.decode() + res.stderr.decode(), res.returncode, res.stderr.decode())
        k = at[0]
        before, own, after = segments[:k], segments[k], segments[k + 1:]
        stdin = self.bash("|".join(before)).stdout if before else None
        redirect = None
        parts = split_unquoted(own, "<>")
        own = parts[0][0]
        for (_, sep), (target, _) in zip(parts, parts[1:]):
            if sep == "<":
                stdin = (self.path / target.strip()).read_bytes()
            else:
                redirect = target.strip()
        result = self.gradflow(own, stdin)
        code, stderr = result.exit_code, result.stderr
        if redirect:
            (self.path / redirect).write_bytes(result.stdout_bytes)
            shown = stderr
        elif after:
            res = self.bash("|".join(after), stdin=result.stdout_bytes)
            code = res.returncode
            shown = res.stdout.decode() + res.stderr.decode() + stderr
        else:
            shown = result.output
        self.last_code = code
        return Ran(shown, code, stderr)

    def python(self, body: list[str]) -> list[tuple[str, str, str]]:
        """Run a `>>>` block: [(source lines as shown, expected, got)] per statement."""
        import doctest

        examples = doctest.DocTestParser().get_examples("\n".join(body) + "\n")
        out = []
        for ex in examples:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                try:
                    exec(compile(ex.source, "<docs>", "single"), self.globs)
                except Exception as exc:  # what the prompt shows (doctest's form)
                    kind = type(exc).__qualname__
                    kind = kind if type(exc).__module__ == "builtins" else f"{type(exc).__module__}.{kind}"
                    print(f"Traceback (most recent call last):\n  ...\n{kind}: {exc}")
            shown = ex.source.rstrip("\n").split("\n")
            source = [(">>> " if i == 0 else "... ") + s for i, s in enumerate(shown)]
            out.append(("\n".join(source), ex.want, buf.getvalue()))
        return out


@dataclass
class _Leaving:
    """A workspace that does not run the commands `leave_out` names (run_items)."""
    ws: Workspace
    leave_out: Callable[[str], str | None]

    def run(self, line: str) -> Ran:
        why = self.leave_out(line)
        return Ran("", 0, skipped=why) if why else self.ws.run(line)

    def python(self, body: list[str]) -> list[tuple[str, str, str]]:
        return self.ws.python(body)


@contextlib.contextmanager
def workspace():
    """A scratch folder with a copy of examples/, as the cwd; sys.path and modules restored after."""
    old_cwd, old_path, old_modules = os.getcwd(), list(sys.path), set(sys.modules)
    with tempfile.TemporaryDirectory(prefix="gradflow-docs-") as tmp:
        shutil.copytree(ROOT / "examples", Path(tmp) / "examples")
        os.chdir(tmp)
        try:
            yield Workspace(Path(tmp))
        finally:
            os.chdir(old_cwd)
            sys.path[:] = old_path
            for entry in [k for k in sys.path_importer_cache if not os.path.isabs(k) or k.startswith(tmp)]:
                del sys.path_importer_cache[entry]  # `sys.path.insert(0, "examples")` found the old scratch folder
            for name in set(sys.modules) - old_modules:
                if str(getattr(sys.modules[name], "__file__", "") or "").startswith(tmp):
                    del sys.modules[name]


def first_diag_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith(("error:", "warning:"))]
    if not stderr.strip():
        return "(nothing)"
    return (lines[0] if lines else stderr.splitlines()[0])[:STDERR_CUT].rstrip()


@dataclass
class Check:
    """One checked example: where it is, what the page shows and what running it gave."""
    page: str
    line: int  # 1-based
    command: str
    expected: list[str]
    got: list[str]
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return self.skipped is not None or self.expected == self.got


def run_page(path: Path, leave_out: Callable[[str], str | None] | None = None) -> tuple[list[Check], list]:
    """Run every example of one page: its checks, and the parsed items (for refresh)."""
    items = parse(path.read_text())
    return run_items(items, str(path.relative_to(ROOT)), leave_out), items


def run_items(items: list, name: str, leave_out: Callable[[str], str | None] | None = None) -> list[Check]:
    """Run the examples of parsed items (a page's, or one section's), in order, in one scratch folder. A command
    for which `leave_out` gives a reason is not run: its check is skipped with that reason."""
    checks: list[Check] = []
    with workspace() as real:
        ws = _Leaving(real, leave_out) if leave_out else real
        for item in items:
            if isinstance(item, Table):
                for idx, command, code, stderr in item.rows:
                    ran = ws.run(command)
                    got = [str(ran.code), first_diag_line(ran.stderr)]
                    checks.append(Check(name, idx + 1, command, [code, stderr], got, ran.skipped))
            elif item.kind == "output":
                ran = ws.run(item.marker)
                checks.append(Check(name, item.start + 1, item.marker, clean("\n".join(item.body)),
                                    clean(ran.output), ran.skipped))
            elif item.kind == "session":
                body = item.body
                if not body[0].startswith("$ "):
                    raise ValueError(f"{name}:{item.start + 2}: a session block must start with a `$ ` line")
                starts = [k for k, ln in enumerate(body) if ln.startswith("$ ")] + [len(body)]
                for a, b in zip(starts, starts[1:]):
                    ran = ws.run(body[a][2:])
                    checks.append(Check(name, item.start + 2 + a, body[a][2:], clean("\n".join(body[a + 1:b])),
                                        clean(ran.output), ran.skipped))
            elif item.kind == "python":
                for source, want, got in ws.python(item.body):
                    checks.append(Check(name, item.start + 2, source, clean(want), clean(got)))
    return checks


# ---------------------------------------------------------------- refresh (docs/refresh.py)


def refresh_text(path: Path) -> str:
    """The page with every checked example's output replaced by a real run's."""
    text = path.read_text()
    lines = text.split("\n")
    items = parse(text)
    replacements: list[tuple[int, int, list[str]]] = []  # (first line, end line exclusive, new lines)
    with workspace() as ws:
        for item in items:
            if isinstance(item, Table):
                for idx, command, _code, _stderr in item.rows:
                    ran = ws.run(command)
                    if ran.skipped:
                        continue
                    cells = [quote(command), str(ran.code), quote(first_diag_line(ran.stderr))]
                    cells[2] = "(nothing)" if cells[2] == "`(nothing)`" else cells[2]
                    replacements.append((idx, idx + 1, ["| " + " | ".join(cells) + " |"]))
            elif item.kind == "output":
                ran = ws.run(item.marker)
                if not ran.skipped:
                    replacements.append((item.start + 1, item.end, clean(ran.output)))
            elif item.kind == "session":
                new = []
                for ln in item.body:
                    if ln.startswith("$ "):
                        ran = ws.run(ln[2:])
                        if ran.skipped:
                            raise SystemExit(f"{path}: cannot refresh `{ln}`: {ran.skipped}")
                        new += [ln, *clean(ran.output)]
                replacements.append((item.start + 1, item.end, new))
            elif item.kind == "python":
                new = []
                for source, _want, got in ws.python(item.body):
                    new += [source, *clean(got)]
                replacements.append((item.start + 1, item.end, new))
    for first, end, new in reversed(replacements):
        lines[first:end] = new
    return "\n".join(lines)
