"""The rich consoles everything is printed through (cli/common.consoles() and the tree written to a file).

Two guarantees, whatever the environment says:
- a table as wide as it needs when its stream is not a terminal and COLUMNS does not say a width (`| grep`,
  `> file`): rich would wrap long node names at 80 columns, and a grep for a name would miss it;
- a sane size: rich takes COLUMNS/LINES as given, so COLUMNS=0 printed nothing at all (not even the error) and
  COLUMNS=1 a character per line. A width outside [MIN_WIDTH, MAX_WIDTH] is brought inside it (a narrower
  terminal wraps the lines itself), a height under 1 becomes 25 (rich's default);
- control characters in any printed text are shown escaped (gradflow/display.py), by a render hook that sees
  every segment rich prints, so user text (a comment, a file name, a module name) cannot drive the terminal.
"""
from __future__ import annotations

import os
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType, RenderHook, RenderResult
from rich.segment import Segment

from gradflow.display import visible

MIN_WIDTH = 40  # below this, even the per-node blocks (render/node_table.py) break every few characters
MAX_WIDTH = 4096  # above this, a padded line would cost memory for nothing (COLUMNS=100000000)
DEFAULT_HEIGHT = 25


class _Visible:
    """A renderable printed with its control characters escaped (rich's own control codes pass untouched)."""

    def __init__(self, renderable: RenderableType):
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.renderable, options):
            if segment.control or segment.text.isprintable():
                yield segment
            else:
                yield Segment(visible(segment.text), segment.style)


class _ShowControls(RenderHook):
    def process_renderables(self, renderables: list[Any]) -> list[Any]:
        return [_Visible(r) for r in renderables]


def sane_size(console: Console) -> Console:
    """Bring the console's width into [MIN_WIDTH, MAX_WIDTH] and its height to at least 1."""
    width = console.width
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        console.width = min(max(width, MIN_WIDTH), MAX_WIDTH)
    if console.height < 1:
        console.height = DEFAULT_HEIGHT
    return console


def natural_width(console: Console) -> Console:
    """Not a terminal and no width in COLUMNS (unset, or not a number, as rich reads it): no wrapping below
    MAX_WIDTH. Nothing gradflow prints pads itself to the console's width (tables and text take what they
    need), so a wide console costs nothing."""
    columns = os.environ.get("COLUMNS")  # where rich reads it (gradflow never gives a console an environment)
    if not console.is_terminal and not (columns or "").isdigit():
        console.width = MAX_WIDTH
    return console


def new_console(**kwargs) -> Console:
    """A rich Console (same arguments) with a sane size and control characters shown escaped."""
    console = Console(**kwargs)
    console.push_render_hook(_ShowControls())
    return sane_size(console if "width" in kwargs else natural_width(console))

