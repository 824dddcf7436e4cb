"""Gradient health per layer (report/layer_health.py) as a terminal bar chart or a picture.

Both are the "plot grad flow" chart: one bar per layer in forward order, the grad norm on a log scale, and the
layers a log scale cannot show marked apart: exactly zero (`0`), no gradient at all (None, `—`) and nan/inf
(`!`). Vanishing layers are marked `▼`, exploding ones `▲`. Pictures use matplotlib (the `plot` extra).
Never imports torch: a HealthReport holds plain numbers.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from gradflow.display import fit_name, visible
from gradflow.values.text import format_number

if TYPE_CHECKING:
    from gradflow.report.layer_health import HealthReport, LayerHealth

BAR_WIDTH = 32
NAME_WIDTH = 28
EIGHTHS = " ▏▎▍▌▋▊▉"
MARK = {"ok": ("", "green"), "vanishing": ("▼ ", "yellow"), "exploding": ("▲ ", "red"),
        "nonfinite": ("! ", "red"), "zero": ("0 ", "yellow"), "none": ("— ", "dim")}


def scale(health: HealthReport) -> tuple[int, int] | None:
    """(lowest, highest) power of ten around the finite, non-zero norms; None when there is none."""
    norms = [x.grad_norm for x in health.layers if x.grad_norm and math.isfinite(x.grad_norm)]
    if not norms:
        return None
    lo, hi = math.floor(math.log10(min(norms))), math.ceil(math.log10(max(norms)))
    return lo, hi if hi > lo else lo + 1


def bar(norm: float, lo: int, hi: int, width: int = BAR_WIDTH) -> str:
    """A bar of log10(norm) between 10**lo and 10**hi, in eighths of a character (at least one eighth)."""
    eighths = max(1, round((math.log10(norm) - lo) / (hi - lo) * width * 8))
    full, part = divmod(min(eighths, width * 8), 8)
    return "█" * full + (EIGHTHS[part] if part else "")


def chart(health: HealthReport, width: int = BAR_WIDTH, columns: int | None = None) -> Text:
    """The terminal chart: a title, one line per layer, an axis, and a legend of the marks used. In `columns`
    (the console's width) names lose their front rather than break (display.fit_name), the bars shorten, and a
    note that does not fit beside its bar goes under it."""
    bounds = scale(health)
    lo, hi = bounds or (0, 1)
    longest = max((len(visible(x.name)) for x in health.layers), default=5)
    name_width = min(NAME_WIDTH, longest)
    if columns is not None:
        # the whole bar if the names fit beside it, else names of up to WIDE_NAME
        name_width = min(longest, max(NAME_WIDTH, columns - _NUMBER - width,
                                      min(WIDE_NAME, columns - _NUMBER - MIN_BAR)))
        bars = columns - name_width - _NUMBER  # all the rest, or less to keep the notes beside their bars
        notes = max((len(x.describe()) + 4 for x in health.layers if x.describe()), default=0)
        width = max(MIN_BAR, min(width, bars - notes if bars - notes >= MIN_BAR else bars))
    out = Text(f"gradient norm per layer, in forward order (log scale, {len(health.layers)} layers)\n")
    for layer in health.layers:
        out.append_text(_line(layer, lo, hi, width, name_width, columns))
        out.append("\n")
    if bounds:
        left, right = f"1e{lo:+03d}", f"1e{hi:+03d}"
        out.append(" " * (name_width + 2) + left + " " * max(1, width - len(left) - len(right)) + right + "\n",
                   style="dim")
    out.append_text(legend(health, columns))
    return out


MIN_BAR = 12
WIDE_NAME = 42  # `…layers.0.self_attn.q_proj.lora_A.default` at 80 columns
_NUMBER = 2 + 2 + 11  # the gaps around the bar and the number after it


def _line(layer: LayerHealth, lo: int, hi: int, width: int, name_width: int, columns: int | None = None) -> Text:
    name = fit_name(visible(layer.name), name_width)
    mark, style = MARK[layer.status]
    line = Text(name.ljust(name_width) + "  ")
    if layer.status in ("ok", "vanishing", "exploding") and layer.grad_norm:
        line.append(bar(layer.grad_norm, lo, hi, width).ljust(width), style=style)
    else:
        line.append(mark.strip().ljust(width), style=style)
    value = "None" if layer.grad_norm is None else format_number(layer.grad_norm)
    line.append("  " + value.rjust(11))
    note = layer.describe()
    if note:
        note = f"{mark if layer.flagged else ''}{note}"
        under = columns is not None and len(line) + 2 + len(note) > columns
        indent = max(2, min(name_width + 2, (columns or 0) - len(note)))  # under the bar, or as far as it fits
        line.append(("\n" + " " * indent if under else "  ") + note, style=style)
    return line


LEGEND = {"vanishing": "▼ > {f}x below its running median", "exploding": "▲ > {f}x above its running median",
          "nonfinite": "! nan or inf", "zero": "0 exactly zero", "none": "— None (no gradient)"}


def legend(health: HealthReport, columns: int | None = None) -> Text:
    """The marks used and the rule, on lines of at most `columns` (the chart is printed without wrapping)."""
    seen = {x.status for x in health.layers}
    parts = [text.format(f=f"{health.factor:g}") for status, text in LEGEND.items() if status in seen]
    rule = (f"running median: of the layer and up to {health.window} layers on each side "
            "(finite, non-zero norms only)")
    if columns is None:
        return Text("  ".join(parts) + ("\n" if parts else "") + rule, style="dim")
    lines = textwrap.wrap("  ".join(parts), columns, break_on_hyphens=False) + textwrap.wrap(rule, columns)
    return Text("\n".join(lines), style="dim")


def picture(health: HealthReport, path: Path, title: str = "") -> bytes:
    """The chart as a picture (.png, .svg or .pdf by the name's suffix): bars on a log axis, the marks apart."""
    import matplotlib

    from gradflow.render.plot import figure_bytes

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bounds = scale(health)
    lo, hi = bounds or (-1, 1)
    n = len(health.layers)
    fig, ax = plt.subplots(figsize=(max(6.4, 0.35 * n + 2), 4.8))
    colours = {"ok": "tab:blue", "vanishing": "tab:orange", "exploding": "tab:red"}
    xs, floor = list(range(n)), 10.0 ** lo / 4
    for status, colour in colours.items():
        pts = [(i, x.grad_norm or 0.0) for i, x in enumerate(health.layers) if x.status == status]
        if pts:  # bars rise from the axis's floor: a log axis has no 0
            ax.bar([i for i, _ in pts], [v - floor for _, v in pts], color=colour, bottom=floor, label=status)
    _marks(ax, health, lo, hi)
    ax.set_yscale("log")
    ax.set_ylim(floor, 10.0 ** hi * 4)
    ax.set_xticks(xs, [visible(x.name) for x in health.layers], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("gradient norm (log scale)")
    ax.set_xlabel("layer, in forward order")
    ax.set_title(visible(title) or "gradient norm per layer")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return figure_bytes(fig, path)


def _marks(ax, health: HealthReport, lo: int, hi: int) -> None:
    """Zero and None at the bottom of the axis, nan/inf at the top: a log axis has no place for them."""
    styles = {"zero": ("x", "tab:olive", 10.0 ** lo / 2, "exactly zero"),
              "none": ("o", "grey", 10.0 ** lo / 2, "None (no gradient)"),
              "nonfinite": ("^", "tab:red", 10.0 ** hi * 2, "nan / inf")}
    for status, (marker, colour, y, label) in styles.items():
        xs = [i for i, x in enumerate(health.layers) if x.status == status]
        if xs:
            ax.scatter(xs, [y] * len(xs), marker=marker, color=colour, label=label, zorder=3,
                       facecolors="none" if marker == "o" else colour)
