"""Sweep plots: L and dL/d(leaf) against the swept variable.

Terminal plots use plotille; pictures (.png/.svg/.pdf) use matplotlib (the optional
`plot` extra). Non-finite points are dropped before anything reaches a plotter.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gradflow.display import visible
from gradflow.errors import ValueInputError
from gradflow.values.text import format_number

if TYPE_CHECKING:  # annotations only: checking a --plot path (inspect's too) stays free of torch
    from gradflow.studies.sweeps import SweepResult

PICTURE_SUFFIXES = (".png", ".svg", ".pdf")


@dataclass
class Series:
    label: str
    xs: list[float]
    ys: list[float]
    dropped: int  # points left out because the value was nan/inf (or no gradient arrived)


def series(result: SweepResult) -> list[Series]:
    """L, then dL/d(leaf) for every chosen leaf whose gradient is a single number."""
    out = [_finite("L", result.values, result.outputs())]
    for leaf in result.wrt:
        ys = result.grads(leaf)
        if all(y is None or isinstance(y, (int, float)) for y in ys):
            out.append(_finite(f"dL/d{leaf}", result.values, ys))
    return out


def _finite(label: str, xs: list[float], ys: list) -> Series:
    keep = [(x, float(y)) for x, y in zip(xs, ys) if isinstance(y, (int, float)) and math.isfinite(y)]
    return Series(label, [x for x, _ in keep], [y for _, y in keep], len(xs) - len(keep))


def dropped_note(s: Series, total: int) -> str | None:
    if not s.dropped:
        return None
    if not s.ys:
        return f"{s.label}: nothing to plot, all {total} points are nan/inf or have no gradient"
    return f"{s.label}: dropped {s.dropped} of {total} points (nan/inf or no gradient)"


def terminal(s: Series, var: str, width: int = 60, height: int = 12, color: bool = False) -> str:
    import plotille

    fig = plotille.Figure()
    fig.width, fig.height, fig.with_colors = width, height, color
    fig.x_label, fig.y_label = var, s.label
    fig.x_ticks_fkt = lambda lo, hi: format_number(lo)
    fig.y_ticks_fkt = lambda lo, hi: format_number((lo + hi) / 2)
    if min(s.xs) < max(s.xs):
        fig.set_x_limits(min(s.xs), max(s.xs))
    if len(s.xs) == 1:
        fig.scatter(s.xs, s.ys, label=s.label)
    else:
        fig.plot(s.xs, s.ys, label=s.label)
    return f"{s.label} against {var}\n{fig.show()}"


def check_picture_path(path: str, terminal: str = "plain --plot draws in the terminal") -> Path:
    """Before evaluating: a known picture suffix and an installed matplotlib (`terminal`: the hint's other way)."""
    p = Path(path)
    if p.suffix.lower() not in PICTURE_SUFFIXES:
        raise ValueInputError("usage", f"--plot {path}: cannot tell the picture format from the name",
                              hint=f"end the file name with .png, .svg or .pdf; {terminal}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueInputError("missing_extra", f"--plot {path} needs matplotlib, which is not installed",
                              hint=f"pip install 'gradflow[plot]' ({terminal})") from None
    return p


def picture(result: SweepResult, all_series: list[Series], path: Path) -> bytes:
    """The picture as bytes, in the format the name's suffix says (the caller writes the file)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(all_series), 1, sharex=True, squeeze=False,
                             figsize=(6.4, 2.4 * len(all_series) + 0.6))
    for ax, s in zip(axes[:, 0], all_series):
        ax.plot(s.xs, s.ys, marker="." if len(s.xs) < 60 else None)
        ax.set_ylabel(s.label)
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel(result.var)
    fig.suptitle(visible(result.source.strip()))  # a comment in the program may hold anything
    return figure_bytes(fig, path)


def figure_bytes(fig, path: Path) -> bytes:
    """A matplotlib figure as bytes in the format `path`'s suffix names; the figure is closed."""
    import io

    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=path.suffix.lower().lstrip("."))
    finally:
        plt.close(fig)
    return buffer.getvalue()
