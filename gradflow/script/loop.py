"""A training loop seen through its backward() calls: one small digest per call, what changed, and the summary.

`LoopWatch.see(call)` turns a `BackwardCall` into a `Step`: the loss, how many parameters (named leaves that
require grad) got gradient, the largest and smallest of their gradient norms, and what changed since the
previous backward made at the same line (a GAN's two backward() lines are two loops, each compared with
itself):
- a named tensor whose status changed (gradient reached it; none did; requires_grad=False, a cut counted as
  such, since the steps gradflow does not record cannot tell a cut from a tensor that never required grad);
- a gradient that became non-finite;
- a parameter's gradient norm that vanished (exactly zero, or 100× under its own running level) or exploded
  (100× over it). The running level is an exponential average of log10 norms, so a slow decay over training
  is not an event and a jump from one step to the next is.

Nothing is kept per step: per parameter, a running level and a trend of at most `TREND` buckets (pairs are
merged as the loop grows, so a bucket covers more steps); status changes beyond `KEPT_CHANGES` are counted.
A 10,000-step loop holds what a 100-step one holds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from gradflow.report.norms import grad_norms
from gradflow.script.recorder import BackwardCall, Named
from gradflow.values.jsonable import fresh

TREND = 24  # sparkline characters at most, per parameter
JUMP = 2.0  # log10: a norm 100× away from its running level is an event
LEVEL_AFTER = 3  # norms seen before a jump can count as one
EMA = 0.2  # weight of a new log10 norm in the running level
KEPT_CHANGES = 40  # status changes listed in the summary; later ones are counted
FEW = 8  # elements: a gradient this small crosses zero on its own (a bias of one); only exact zero is an event
FIRST_LINES = 10  # backward() calls shown as a line each before the lines fold to 1-2-...-9 × 10^k


@dataclass
class Step:
    """The digest of one backward() call: what its line shows, and what changed."""

    index: int
    line: str | None
    code: str
    loss_name: str | None
    loss: float | None
    got: int  # parameters that got gradient
    params: int  # parameters (named leaves that require grad)
    largest: tuple[str, float] | None
    smallest: tuple[str, float] | None
    changes: list[str] = field(default_factory=list)
    first: bool = False  # the first call made at its line

    def to_dict(self) -> dict:
        pick = (lambda p: None if p is None else {"name": p[0], "norm": fresh(p[1])})
        return {"call": self.index, "line": self.line, "loss": fresh(self.loss), "got_grad": self.got,
                "params": self.params, "largest": pick(self.largest), "smallest": pick(self.smallest),
                "changes": self.changes}


class Trend:
    """A parameter's gradient norms over the loop: a running level (for jumps) and bucket means (for the chart)."""

    def __init__(self) -> None:
        self.level: float | None = None
        self.seen = 0
        self.first: float | None = None
        self.last: float | None = None
        self.buckets: list[list[float]] = []  # [sum of log10 norms, count]
        self.span = 1  # norms per full bucket
        self.was: float | None = None  # the running level before the latest norm

    def add(self, norm: float, few: bool = False) -> str | None:
        """Take one norm; say 'vanished' or 'exploded' when it jumps away from the running level. For `few`
        elements (a bias of one), only an exact zero is an event: such a gradient crosses zero on its own."""
        self.first = norm if self.first is None else self.first
        self.last = norm
        if not math.isfinite(norm):
            return None
        event = None
        log = math.log10(norm) if norm > 0 else None
        self.was = self.level
        if self.level is not None and self.seen >= LEVEL_AFTER:
            if log is None or (log < self.level - JUMP and not few):
                event = "vanished"
            elif log > self.level + JUMP and not few:
                event = "exploded"
        if log is not None:
            self.level = log if self.level is None else (1 - EMA) * self.level + EMA * log
            self._bucket(log)
        self.seen += 1
        return event

    def _bucket(self, log: float) -> None:
        if self.buckets and self.buckets[-1][1] < self.span:
            self.buckets[-1][0] += log
            self.buckets[-1][1] += 1
        else:
            self.buckets.append([log, 1])
        if len(self.buckets) > TREND:  # fold pairs: half as many buckets, each over twice the steps
            pairs = zip(self.buckets[0::2], self.buckets[1::2])
            odd = [self.buckets[-1]] if len(self.buckets) % 2 else []
            self.buckets = [[a[0] + b[0], a[1] + b[1]] for a, b in pairs] + odd
            self.span *= 2

    def chart(self) -> str:
        """The bucket means as a sparkline, lowest to highest of this parameter's own range."""
        means = [s / n for s, n in self.buckets]
        if not means:
            return ""
        low, high = min(means), max(means)
        bars = "▁▂▃▄▅▆▇█"
        if high - low < 1e-9:
            return bars[3] * len(means)
        return "".join(bars[min(7, int((m - low) / (high - low) * 8))] for m in means)


@dataclass
class Change:
    step: int
    text: str


class LoopWatch:
    """Everything the loop's lines and summary need, updated at each backward() call."""

    def __init__(self) -> None:
        self.calls = 0
        self.sites: dict[str, dict[str, str]] = {}  # backward line -> name -> status at its last call
        self.finite: dict[str, set[str]] = {}  # backward line -> names whose gradient was non-finite there
        self.trends: dict[str, Trend] = {}  # parameter name -> its trend
        self.changes: list[Change] = []
        self.more_changes = 0
        self.lines: dict[str, tuple[int, str]] = {}  # backward line -> (calls made there, its code)

    def see(self, call: BackwardCall) -> Step:
        self.calls += 1
        site = call.line or "?"
        made, _ = self.lines.get(site, (0, call.code))
        self.lines[site] = (made + 1, call.code)
        params = [n for n in call.named if n.tensor.is_leaf and n.tensor.requires_grad]
        got = [n for n in params if n.grad is not None]
        norms = dict(zip([n.name for n in got], grad_norms([_normable(n.grad) for n in got]))) if got else {}
        few = {n.name for n in got if n.grad.numel() < FEW}
        step = Step(call.index, call.line, call.code, call.root_names[0] if call.root_names else None,
                    _loss(call), len(got), len(params), *_extremes(norms))
        step.first = made == 0
        step.changes += self._statuses(site, call.named, call.index)
        step.changes += self._nonfinite(site, norms, call.index)
        for name, norm in norms.items():
            trend = self.trends.setdefault(name, Trend())
            event = trend.add(norm, name in few)
            if event is not None:
                text = f"{name}: gradient norm {event} to {norm:.3g} (it ran at about {10 ** (trend.was or 0):.3g})"
                step.changes.append(text)
                self._keep(index=call.index, text=text)
        return step

    def _keep(self, index: int, text: str) -> None:
        if len(self.changes) < KEPT_CHANGES:
            self.changes.append(Change(index, text))
        else:
            self.more_changes += 1

    def _statuses(self, site: str, named: list[Named], index: int) -> list[str]:
        now = {n.name: _coarse(n.status) for n in named}
        before = self.sites.get(site)
        self.sites[site] = now
        if before is None:
            return []
        why = {n.name: f" ({n.reason})" for n in named if n.reason and now[n.name] == "off"}  # the freeze's line
        why.update({n.name: f" ({n.unfrozen})" for n in named
                    if n.unfrozen and now[n.name] != "off" and before.get(n.name) == "off"})
        out = [f"{name}: {WORDS[before[name]]} → {WORDS[s]}{why.get(name, '')}" for name, s in now.items()
               if name in before and before[name] != s]
        for text in out:
            self._keep(index, text)
        return out

    def _nonfinite(self, site: str, norms: dict[str, float], index: int) -> list[str]:
        bad = {name for name, v in norms.items() if not math.isfinite(v)}
        was = self.finite.get(site, set())
        self.finite[site] = bad
        out = [f"{name}: gradient is not finite ({norms[name]})" for name in sorted(bad - was)]
        for text in out:
            self._keep(index, text)
        return out


WORDS = {"live": "gradient reached it", "none": "no gradient reached it", "off": "requires_grad=False"}


def _normable(g):
    """The tensor whose 2-norm is g's: a sparse gradient's (an Embedding(sparse=True)'s) stored values."""
    if g.is_sparse:
        return g.coalesce().values()
    return g if g.layout == torch.strided else g.to_dense()


def _coarse(status: str) -> str:
    return "off" if status == "cut" else status


def _loss(call: BackwardCall) -> float | None:
    root = call.roots[0] if call.roots else None
    if root is None or root.numel() != 1 or root.is_complex():
        return None
    return float(root.detach())


def _extremes(norms: dict[str, float]) -> tuple:
    finite = {k: v for k, v in norms.items() if not math.isnan(v)}
    if not finite:
        return None, None
    big = max(finite, key=lambda k: finite[k])
    small = min(finite, key=lambda k: finite[k])
    return (big, finite[big]), (small, finite[small])


def shows_line(index: int, every: int | None) -> bool:
    """Is backward `index` a line of its own? With --every N, every N-th; else the first FIRST_LINES, then
    20, 30, ..., 100, 200, ..., 1000, 2000, ...: about nine lines per tenfold of steps, so 10,000 steps
    read in ~40 lines (the changes and the summary carry the rest)."""
    if every is not None:
        return index % every == 0 or index == 1
    if index <= FIRST_LINES:
        return True
    tens = 10 ** (len(str(index)) - 1)
    return index % tens == 0
