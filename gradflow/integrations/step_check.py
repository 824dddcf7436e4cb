"""Which parameters got no gradient in a training step the framework runs, and why: the framework-free core of
gradflow's training callbacks.

    check = StepCheck(fail_on="default")
    check.begin(model)          # before the step's first forward (the framework's step-begin event)
    ...the framework's forward and loss.backward()...
    found = check.end(model, step)   # after backward, before optimizer.step(): a Finding, or None

The first step runs under a `StepTrace`: gradflow's trace, which also sees the framework call `loss.backward()`
(a tensor method, so torch hands it to the trace's mode) and explains that loss just before the backward runs
(inspect's report: requires_grad, never used, cut, its output left out of the loss, with the user's line). The
verdicts are then checked against what backward really left in `.grad`, which is the truth (gradient
accumulation sums several backwards; only the first is explained).

The next `check_steps` steps are checked cheaply, without a trace (which trainable parameters have `.grad` None);
a step whose set differs from the first is reported. After those, `done` is True and the framework adapter
detaches the callback, so later steps run exactly as without it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from gradflow.errors import GradflowError
from gradflow.report.build import build_report
from gradflow.report.fail_on import Failure, GateError, failures, gate_error, parse_classes
from gradflow.report.inspect_report import InspectReport, ParamReport
from gradflow.report.param_table import STATUS, rows
from gradflow.tracer.trace import Trace

try:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor
except ImportError:  # a torch without FSDP2 (or without torch.distributed): no model is sharded
    FSDPModule = DTensor = ()  # type: ignore[assignment,misc]

CHECK_STEPS = 3  # steps after the first whose set of parameters without gradient is compared with the first's
LORA_ZERO = ("exactly zero at this step because its lora_B partner is still all zeros (peft starts it there): "
             "it gets gradient once lora_B has moved, not a dead parameter")
DIVERGENT = ("no gradient from this rank's own backward ({why}); its .grad after the step is the gradient sync's, "
             "from {ranks}: the step's path differs between ranks")
NOT_TRACED = "no gradient after backward (gradflow could not trace this step: {why})"


class StepTrace(Trace):
    """gradflow's trace of one training step, which explains the first loss that `.backward()` is called on,
    before that backward runs (the graph is kept for it: explain uses torch.autograd.grad and leaves `.grad`
    alone)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__(explain=build_report)
        self.report: InspectReport | None = None
        self.error: str | None = None  # why there is no report
        self.unsharded = Unsharded(model)

    def __exit__(self, exc_type, exc, tb):
        self.unsharded.close()
        return super().__exit__(exc_type, exc, tb)

    def on_torch_function(self, func, args, kwargs: dict):
        if func is torch.Tensor.backward and args and self.report is None and self.error is None:
            self._explain_first(args[0])
            return func(*args, **kwargs)
        return super().on_torch_function(func, args, kwargs)

    def _explain_first(self, loss) -> None:
        self._recording = False  # explain runs inside the trace's mode, which torch holds off while it runs
        try:
            self.report = self.explain(loss, params=self.unsharded.params())
        except GradflowError as err:
            self.error = err.message
        finally:
            self._recording = True


def is_unit(module: torch.nn.Module) -> bool:
    """A module the user sharded with FSDP2's `fully_shard` (a function: mypy keeps it an nn.Module)."""
    return isinstance(module, FSDPModule)


class Unsharded:
    """The tensors an FSDP2 (`fully_shard`) model's forward really used, by FQN.

    Under FSDP2 the registered parameters are DTensor shards; each unit's forward all-gathers them and runs on
    unsharded copies (registered in their place until the unit reshards). A forward pre-hook that runs after
    FSDP's own (which is prepended) sees those copies: explaining the loss with them names every verdict by its
    FQN and full shape; a unit never run keeps its shards, which no op used. A model without units: no hooks."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.seen: dict[str, torch.Tensor] = {}
        self.handles = [m.register_forward_pre_hook(self._hook(name)) for name, m in model.named_modules()
                        if is_unit(m)]

    def _hook(self, unit: str):
        prefix = f"{unit}." if unit else ""

        def pre(module, args):
            for name, p in module.named_parameters():
                if not isinstance(p, DTensor):  # this unit's own, just all-gathered (nested units' are shards)
                    self.seen[prefix + name] = p
        return pre

    def params(self):
        """What to explain the loss with: the module, or by FQN the unsharded tensors the forward used."""
        if not self.handles:
            return self.model
        return {n: self.seen.get(n, p) for n, p in self.model.named_parameters()}

    def close(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


@dataclass
class Finding:
    """What one checked step showed: every parameter's report (`params`), the problems among them, the gate."""

    step: int
    params: list[ParamReport]
    first: bool  # the traced step (False: a later step whose set of parameters without gradient changed)
    failures: list[Failure] = field(default_factory=list)
    note: str | None = None  # why the step could not be traced, or what changed
    own: dict[str, str] = field(default_factory=dict)  # trainable, no gradient from this rank's own first
    #                                                      backward: name -> why
    rank: int = 0
    divergent: dict[str, list[int]] = field(default_factory=dict)  # name -> ranks whose own backward gave none
    ranks_own: list[dict[str, str]] = field(default_factory=list)  # every rank's `own`, in rank order

    @property
    def missing(self) -> list[ParamReport]:
        """Trainable parameters that got no gradient."""
        return [p for p in self.params if p.requires_grad and p.grad is None]

    @property
    def frozen(self) -> list[ParamReport]:
        return [p for p in self.params if not p.requires_grad]

    def to_dict(self) -> dict:
        return {"step": self.step, "first": self.first, "note": self.note, "rank": self.rank,
                "params": [p.to_dict() for p in self.params], "failures": [f.to_dict() for f in self.failures],
                "divergent": self.divergent}


class StepCheck:
    """The state between a framework's step events (see the module's docstring)."""

    def __init__(self, fail_on=(), allow=(), check_steps: int = CHECK_STEPS):
        self.fail_on = parse_classes(fail_on) if fail_on else ()
        self.allow = [allow] if isinstance(allow, str) else list(allow)
        self.check_steps = check_steps
        self.findings: list[Finding] = []
        self.steps = 0  # steps checked
        self._trace: StepTrace | None = None
        self._last: set[str] | None = None  # the trainable parameters without gradient at the last check

    @property
    def done(self) -> bool:
        return self.steps > self.check_steps

    def begin(self, model: torch.nn.Module) -> None:
        if self.steps == 0 and self._trace is None:
            self._trace = StepTrace(model)
            self._trace.__enter__()

    def stop(self) -> None:
        """Leave the trace if it is still on (the step raised, or training ended before an optimizer step)."""
        t, self._trace = self._trace, None
        if t is not None:
            t.__exit__(None, None, None)

    def end(self, model: torch.nn.Module, step: int) -> Finding | None:
        """After backward, before optimizer.step(): the first step's finding, or a later step's when its set of
        trainable parameters without gradient changed (else None)."""
        self.steps += 1
        if self._last is None:
            t = self._trace
            self.stop()
            found: Finding | None = first_finding(model, t, step)
        else:
            found = changed_finding(model, self._last, step)
        if found is None:
            return None
        if found.first:
            compare_ranks(found)
        self._last = {p.name for p in found.missing} if found.first else missing_now(model)
        if self.fail_on:
            found.failures = failures(InspectReport(None, found.params), self.fail_on, self.allow)
        self.findings.append(found)
        return found

    def gate(self, found: Finding) -> None:
        """Raise GateError (exit code 6 at the command line) when some parameter fell in a `fail_on` class."""
        if not found.failures:
            return
        said = gate_error(found.failures, self.fail_on)  # inspect's summary, spelled for Python
        example = found.failures[0].name
        pattern = f"{example.rsplit('.', 1)[0]}.*" if "." in example else example
        err = GateError("gate", f"step {found.step}: " + said.message.replace("--fail-on ", "fail_on=", 1),
                        hint=f"fix them, or allow the intended ones: allow=[{pattern!r}] (globs on parameter names)")
        err.detail = said.detail
        raise err


def missing_now(model: torch.nn.Module) -> set[str]:
    """The trainable parameters whose `.grad` is None: the cheap check of the steps after the first."""
    return {n for n, p in model.named_parameters() if p.requires_grad and p.grad is None}


def _plain(name: str, t: torch.Tensor, status: str, reason: str | None) -> ParamReport:
    return ParamReport(name, list(t.shape), t.numel(), bool(t.requires_grad), status, reason, grad=t.grad)


def _untraced(name: str, t: torch.Tensor, why: str) -> ParamReport:
    """A parameter of a step gradflow could not explain: what `.grad` says, and why there is no more."""
    if not t.requires_grad:
        return _plain(name, t, "frozen", "frozen: requires_grad is False")
    if t.grad is not None:
        return _plain(name, t, "live", None)
    return _plain(name, t, "untraced", NOT_TRACED.format(why=why))


def first_finding(model: torch.nn.Module, t: StepTrace | None, step: int) -> Finding:
    """The traced step: inspect's report of its first backward, each verdict checked against `.grad`."""
    truth = dict(model.named_parameters())
    report = t.report if t is not None else None
    if report is None:
        why = (t.error if t is not None else None) or "the step called no loss.backward() gradflow could see"
        return Finding(step, [_untraced(n, p, why) for n, p in truth.items()], True, note=why)
    report.show_library_lines()
    params = [p for p in report.params if p.name in truth]
    own = {p.name: p.why or p.status for p in params if p.requires_grad and p.grad is None}
    for p in params:
        _agree(p, truth[p.name], truth)
    return Finding(step, params, True, own=own)


def compare_ranks(found: Finding) -> None:
    """Under torchrun (DDP, FSDP2) every rank checks its own step; which parameters got a gradient from some
    ranks' own backward and none from the others' is what no rank sees alone (after the step, the gradient sync
    has given every rank the same `.grad`). So at the first checked step every rank's set is gathered over the
    default process group (every rank reaches that point together: each optimizer step follows a synchronised
    backward); on the ranks whose own backward gave none, the reason says where `.grad` came from."""
    found.rank, world = rank_and_world()
    found.ranks_own = gather_reasons(found.own)
    found.divergent = divergent([sorted(own) for own in found.ranks_own])
    for p in found.params:
        none_on = found.divergent.get(p.name, [])
        if found.rank in none_on:
            with_one = [r for r in range(world) if r not in none_on]
            p.reason = DIVERGENT.format(why=found.own[p.name], ranks=_ranks(with_one))


def rank_and_world() -> tuple[int, int]:
    """(this rank, the world size); (0, 1) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_reasons(own: dict[str, str]) -> list[dict[str, str]]:
    """Every rank's `own` (name -> why it got no gradient), in rank order (one outside a process group)."""
    _, world = rank_and_world()
    if world < 2:
        return [own]
    every: list = [None] * world
    dist.all_gather_object(every, own)
    return every


def divergent(every: list[list[str]]) -> dict[str, list[int]]:
    """name -> the ranks whose own backward gave it no gradient, for names some other rank's did."""
    sets = [set(names) for names in every]
    out: dict[str, list[int]] = {}
    for name in sorted(set().union(*sets)):
        none_on = [r for r, s in enumerate(sets) if name in s]
        if len(none_on) < len(sets):
            out[name] = none_on
    return out


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _agree(p: ParamReport, real: torch.Tensor, truth: dict) -> None:
    """Make the verdict say what backward left in `.grad` (the first backward was explained; the optimizer steps
    on the sum of all of the step's backwards), and a fresh LoRA's zero gradient what it is."""
    if p.grad is None and real.grad is not None and p.requires_grad:
        p.status, p.reason, p.cuts = "live", ("no gradient from the step's first backward, but one from a later "
                                              "one (gradient accumulation)"), []
        p.grad, p.grad_norm = real.grad, None
    elif p.grad is not None and real.grad is None:
        p.status, p.reason, p.grad = "unreached", "the traced backward gave it a gradient, but .grad is None " \
            "when the optimizer steps (set to None after backward?)", None
    partner = truth.get(p.name.replace("lora_A", "lora_B")) if "lora_A" in p.name else None
    if p.status == "zero" and partner is not None and not bool(partner.detach().any()):
        p.status, p.reason = "live", LORA_ZERO


def changed_finding(model: torch.nn.Module, before: set[str], step: int) -> Finding | None:
    """A later step, untraced: the trainable parameters whose getting a gradient changed since the last check."""
    now = missing_now(model)
    if now == before:
        return None
    params = []
    for n, p in model.named_parameters():
        if n in now and n not in before:
            params.append(_plain(n, p, "unused", f"no gradient at step {step}, though it got one before: the "
                                 "step's path depends on its batch (this step was not traced)"))
        elif n in before and n not in now:
            params.append(_plain(n, p, "live", f"gets a gradient from step {step} on, though none before"))
    return Finding(step, params, False, note=f"the set of parameters without gradient changed at step {step}")


def describe(found: Finding) -> str:
    """The log message: one headline, then a row per parameter (or per module's parameters) with a problem, then
    (under a process group) the parameters whose getting a gradient differs between the ranks."""
    trainable = [p for p in found.params if p.requires_grad]
    if found.first:
        missing = found.missing
        head = (f"gradflow: step {found.step}: {len(missing)} of {len(trainable)} trainable parameter tensors got "
                f"no gradient" if missing else
                f"gradflow: step {found.step}: every trainable parameter got a gradient ({len(trainable)} tensors)")
        if found.frozen:
            head += f"; {len(found.frozen)} frozen"
        if found.divergent:
            head += f"; {len(found.divergent)} differ between ranks"
    else:
        head = f"gradflow: step {found.step}: {found.note}"
    return "\n".join([head, *_table(found), *_rank_lines(found)])


def _table(found: Finding) -> list[str]:
    shown = rows(InspectReport(None, found.params), depth=2, only_problems=found.first) if found.params else []
    if not shown:
        return []
    labels = [f"{STATUS[r.first.status][0]} {r.label}" for r in shown]
    counts = [f"{len(r.params)} tensors" if len(r.params) > 1 else "×".join(map(str, r.first.shape)) or "scalar"
              for r in shown]
    wide, count_wide = max(map(len, labels)), max(map(len, counts))
    return [f"  {label:<{wide}}  {count:>{count_wide}}  {r.first.why or r.first.status}"
            for label, count, r in zip(labels, counts, shown)]


def _rank_lines(found: Finding) -> list[str]:
    if not found.divergent:
        return []
    wide = max(map(len, found.divergent))
    return ["  differs between ranks (each rank's own backward; the gradient sync then fills .grad in on every "
            "rank):", *(f"    {name:<{wide}}  no gradient on {_ranks(none_on)}: {found.ranks_own[none_on[0]][name]}"
                        for name, none_on in found.divergent.items())]


class Checked:
    """What both callbacks hold (mixed in before the framework's Callback class): the check and its findings."""

    def __init__(self, fail_on=(), allow=(), check_steps: int = CHECK_STEPS):
        self.check = StepCheck(fail_on, allow, check_steps)

    @property
    def findings(self) -> list[Finding]:
        """What each reported step showed."""
        return self.check.findings
