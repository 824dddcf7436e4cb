"""The FSDP2 parts of `gradflow ddp`'s report (no torch): what FSDP does with this layout, the fix, and what
FSDP's own step did on every rank (gradflow/ddp/fsdp_child.py).

FSDP2 reduce-scatters, per unit, the gradients its parameters got on that rank. So a parameter with no gradient
on any rank costs nothing but its memory (grad None, no error: unlike DDP, FSDP says nothing); one with a gradient
on some ranks only makes the ranks' collectives differ: a unit whose forward some ranks skip never pairs its
all-gather (the ranks wait until the timeout), and a unit that runs everywhere sends reduce-scatters of different
sizes (gloo aborts the process, or the ranks wait).
"""
from __future__ import annotations

import re

from gradflow.ddp.merge import PEER_GONE, _names, divergent_fix, fixes, fold_names, who

SET_UNUSED = "set_reduce_scatter_unused_params(True)"


def unit_of(units: list[dict]) -> dict[str, str]:
    return {p: u["unit"] for u in units for p in u["params"]}


def show(unit: str) -> str:
    return f"`{unit}`" if unit else "the root module"


def skipped_unit(group: dict, units: list[dict], ranks: list[dict]) -> str | None:
    """The unit of a divergent group whose forward some of the ranks without its gradient never ran."""
    unit = unit_of(units).get(group["params"][0])
    run_on = {v["rank"]: set(v.get("units_run", [])) for v in ranks}
    if unit is not None and any(unit not in run_on.get(r, set()) for r in group["none_on"]):
        return unit
    return None


def would(unused: list[dict], divergent: list[dict], units: list[dict], ranks: list[dict]) -> list[list[str]]:
    """[what, what FSDP does with it], one row per problem of the layout."""
    rows = []
    for g in divergent:
        names, unit = _names(fold_names(g["params"])), skipped_unit(g, units, ranks)
        on, off = who(g["gradient_on"]), who(g["none_on"])
        if unit is not None:
            what = (f"{on} all-gather{'s' * (len(g['gradient_on']) == 1)} {show(unit)} in the forward and {off} "
                    f"never do{'es' * (len(g['none_on']) == 1)}")
        else:
            what = (f"the reduce-scatter of {show(unit_of(units).get(g['params'][0], ''))} carries their gradients "
                    f"on {on} and not on {off}")
        rows.append([f"{names} (divergent)", f"{what}: the ranks' collectives no longer pair up; gloo aborts a "
                     "rank that receives a message of the wrong size, else every rank waits until the timeout, "
                     "and neither names the module"])
    if unused:
        names = _names(fold_names([p["name"] for p in unused]))
        rows.append([f"{names} (unused)", "runs silently: they keep grad None on every rank (FSDP raises "
                     "nothing, unlike DDP) and the optimizer skips them"])
    for u in units:
        if u["frozen"] and len(u["frozen"]) < len(u["params"]):
            rows.append([f"{show(u['unit'])} (mixed)", f"frozen {_names(fold_names(u['frozen']))} and trainable "
                         "parameters in one fully_shard unit: FSDP2 accepts it (torch 2.13); the frozen ones keep "
                         "grad None and are left out of the reduce-scatter, but are all-gathered with the unit in "
                         "every forward"])
    if not rows:
        rows.append(["every parameter", "runs: every parameter gets a gradient on every rank"])
    return rows


def fsdp_fixes(unused: list[dict], divergent: list[dict], units: list[dict], ranks: list[dict]) -> list[str]:
    out = fixes(unused, [])
    for g in divergent:
        text = divergent_fix(g)
        if skipped_unit(g, units, ranks) is None:
            text += f"; or call model.{SET_UNUSED} (FSDP then reduce-scatters zeros for them)"
        out.append(text)
    return out


def gloo_text(message: str) -> str:
    """gloo's message without its source path, sizes, addresses and advice: what happened, the same every run."""
    text = re.sub(r"^\[[^\]]*\] ", "", message.strip())
    text = re.sub(r"op\.preamble\.length <= op\.nbytes\. \d+ vs \d+\. ", "", text)
    text = re.sub(r" \[[^\]]*\]:\d+:", ":", text)
    return text.split(" This is typically caused")[0].split(" Is there a distributed")[0]


def outcome(p: dict) -> str:
    """ok, hung (gradflow stopped it), aborted (a signal), timed out (gloo's timeout), peer lost, raised."""
    said = p.get("message") or ""
    if p.get("ok"):
        return "ok"
    if p.get("hung") or p.get("aborted"):
        return "hung" if p.get("hung") else "aborted"
    if "Timed out" in said:
        return "timed out"
    return "peer lost" if any(w in said for w in PEER_GONE) else "raised"


def step_said(probes: list[dict]) -> list[dict]:
    """Per rank: what FSDP's own step did."""
    return [{"rank": r, "outcome": outcome(p), "ok": bool(p.get("ok")), "stage": p.get("stage"),
             "signal": p.get("aborted"), "said": gloo_text(p.get("message") or ""),
             "grad_none": p.get("grad_none", []), "units_run": p.get("units_run", [])} for r, p in enumerate(probes)]


def finish(doc: dict, settings: dict, ranks: list[dict], probes: list[dict] | None) -> dict:
    """`merge`'s document, its DDP parts replaced by FSDP's."""
    units = settings.get("units", [])
    unused, divergent = doc["unused"], doc["divergent"]
    doc.update(ddp_would=None, torch=None, find_unused_forced_by=None,
               fsdp={"units": units, "would": would(unused, divergent, units, ranks),
                     "step": None if probes is None else step_said(probes)},
               fix=fsdp_fixes(unused, divergent, units, ranks))
    for r, v in zip(doc["ranks"], ranks):
        r["units_run"] = v.get("units_run", [])
    return doc
