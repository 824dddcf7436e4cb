"""The ranks' verdicts and torch's own DDP run, merged into `gradflow ddp`'s report (a JSON-able dict; no torch).

A parameter that requires grad and gets none on every rank is *unused* (DDP with find_unused_parameters=False
raises at the next iteration); one that gets a gradient on some ranks only is *divergent* (the ranks that used it
wait in backward for an all-reduce the others never start). Frozen parameters are not DDP's concern.
"""
from __future__ import annotations

from collections import Counter

from gradflow.ddp.branch import definition_line, enclosing_branch, split_line

SCHEMA = 1
CLASSES = ("unused", "divergent")
EXPECTED = "Expected to have finished reduction in the prior iteration"
PEER_GONE = ("by peer", "Broken pipe", "Connection refused", "Connection closed")  # gloo, once a peer freed the group:
#   "Connection closed by peer", "Read error ...: Connection reset by peer", "Write error ...: Broken pipe"


def _names(items: list[str], n: int = 4) -> str:
    shown = ", ".join(items[:n])
    return shown + (f" (+{len(items) - n} more)" if len(items) > n else "")


def fold(params: list[dict]) -> list[dict]:
    """Rows for people: a module's parameters with the same status, reason and line become one `module.*` row."""
    groups: dict[tuple, list[dict]] = {}
    for p in params:
        module = p["name"].rpartition(".")[0]
        groups.setdefault((module, p["status"], p.get("reason"), p.get("line"), p.get("line_is")), []).append(p)
    rows = []
    for (module, status, reason, line, line_is), items in groups.items():
        name = f"{module}.*" if len(items) > 1 and module else items[0]["name"]
        rows.append({"name": name, "params": [p["name"] for p in items], "status": status, "reason": reason,
                     "line": line, "line_is": line_is, "numel": sum(p["numel"] for p in items)})
    return rows


def _by_name(ranks: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for v in ranks:
        for p in v["params"]:
            out.setdefault(p["name"], []).append({**p, "rank": v["rank"]})
    return out


def _with_definition(p: dict, source: str) -> dict:
    """A parameter never used in the forward has no line of use: show where its module is defined."""
    if p.get("line") or p["status"] != "unused":
        return p
    parts = p["name"].split(".")
    owners = [x for x in (parts[:-1] or parts) if not x.isdigit()]  # blocks.0.0.weight: `self.blocks = ...`
    found = definition_line(source, owners[-1]) if owners else None
    return {**p, "line": found, "line_is": "definition"} if found else p


def classify(ranks: list[dict], source: str) -> tuple[list[dict], list[dict]]:
    """(unused on every rank, divergent groups)."""
    world = len(ranks)
    unused: list[dict] = []
    groups: dict[tuple, list] = {}
    for per in _by_name(ranks).values():
        if not any(p["requires_grad"] for p in per):
            continue
        gets = tuple(p["rank"] for p in per if p["grad"])
        if not gets:
            unused.append(_with_definition(per[0], source))
        elif len(gets) < world:
            groups.setdefault(gets, []).append(per)
    divergent = [_divergent(gets, pers, ranks) for gets, pers in groups.items()]
    return unused, divergent


def _divergent(gets: tuple, pers: list[list[dict]], ranks: list[dict]) -> dict:
    none_on = [v["rank"] for v in ranks if v["rank"] not in gets]
    lines_with = set().union(*(set(v["lines"]) for v in ranks if v["rank"] in gets))
    lines_without = set().union(*(set(v["lines"]) for v in ranks if v["rank"] in none_on))
    uses = [line for per in pers for p in per if p["grad"] for line in p.get("uses", [])]
    differ = sorted(lines_with ^ lines_without, key=_line_key)
    branch = next(filter(None, map(enclosing_branch, dict.fromkeys([*uses, *differ]))), None)  # the first found
    why = {p["rank"]: {"status": p["status"], "reason": p["reason"], "line": p["line"]}
           for per in pers[:1] for p in per if not p["grad"]}
    return {"params": [per[0]["name"] for per in pers], "numel": sum(per[0]["numel"] for per in pers),
            "gradient_on": list(gets), "none_on": none_on, "why_not": [why[r] | {"rank": r} for r in sorted(why)],
            "branch": branch.to_dict() if branch else None, "lines_differ": differ[:10]}


def _line_key(line: str):
    at = split_line(line)
    return (at[0], at[1]) if at else (line, 0)


# ---- what DDP does with it ------------------------------------------------------------------------
def ddp_would(unused: list[dict], divergent: list[dict]) -> dict[str, str]:
    if not unused and not divergent:
        return {"find_unused_parameters=False": "runs: every parameter gets a gradient on every rank",
                "find_unused_parameters=True": "runs, but traverses the autograd graph every iteration for "
                                               "nothing (slower)",
                "static_graph=True": "runs"}
    nf, t, st = [], [], []
    if unused:
        never = [p for p in unused if p["status"] == "unused" and not p.get("uses")]
        nf.append("raises on every rank at the 2nd iteration's forward (\"Expected to have finished reduction in "
                  "the prior iteration...\") because of the unused parameters")
        t.append("runs (the unused parameters keep grad None), slower: the autograd graph is searched every "
                 "iteration")
        st.append("runs only if the unused set never changes and no forward output computed from them is left "
                  "out of the loss" if len(never) < len(unused) else "runs: the unused set is learned in the 1st "
                                                                         "iteration")
    if divergent:
        g = divergent[0]
        nf.append(f"{who(g['gradient_on'], 'blocks', 'block')} in the 1st backward, waiting for an all-reduce "
                  f"{who(g['none_on'], 'never starts', 'never start')}; "
                  f"{who(g['none_on'], 'raises', 'raise')} at the 2nd iteration, or all hang until the timeout")
        t.append(f"runs: on {who(g['none_on'])} the divergent parameters count as zero in the average gradient")
        st.append("raises (\"your training graph has changed\"): the ranks' graphs differ")
    return {"find_unused_parameters=False": "; ".join(nf), "find_unused_parameters=True": "; ".join(t),
            "static_graph=True": "; ".join(st)}


def who(rs: list[int], one: str = "", many: str = "") -> str:
    """`rank 1`, `ranks 1, 2`; with verbs: `rank 1 raises`, `ranks 1, 2 raise`."""
    verb = one if len(rs) == 1 else many
    return f"rank{'s' * (len(rs) != 1)} {', '.join(map(str, rs))}" + (f" {verb}" if verb else "")


# ---- the fix that keeps find_unused_parameters=False -------------------------------------------------
def fixes(unused: list[dict], divergent: list[dict]) -> list[str]:
    out = []
    never = [p["name"] for p in unused if p["status"] == "unused" and not p.get("uses")]
    if never:
        out.append(f"freeze or delete {_names(fold_names(never))}: never used in the forward "
                   f"(requires_grad_(False) on them, or remove the module)")
    for row in fold([p for p in unused if p["status"] == "cut"]):
        out.append(f"{row['name']}: {row['reason']}; remove that cut, or freeze them if they are meant to stay "
                   "fixed")
    left = [p for p in unused if p["status"] in ("unreached",) or (p["status"] == "unused" and p.get("uses"))]
    for line, names in _group_by_line(left).items():
        out.append(f"add the output of {_names(fold_names(names))} (computed at {line}) to the loss, or stop "
                   "computing it; to keep it from counting, add it times zero: loss = loss + 0.0 * out.sum()")
    return out + [divergent_fix(g) for g in divergent]


def divergent_fix(g: dict) -> str:
    """The fix of a divergent group: the same graph on every rank."""
    where = f"the branch at {g['branch']['line']} (`{g['branch']['code']}`)" if g["branch"] else \
        "the code that runs on some ranks only"
    return (f"make {where} rank-independent: run it on every rank and, where it must not count, add it times "
            f"zero (loss = loss + 0.0 * extra), so {_names(fold_names(g['params']))} get a gradient on "
            f"{who(g['none_on'])} too")


def fold_names(names: list[str]) -> list[str]:
    return [r["name"] for r in fold([{"name": n, "status": "", "numel": 0} for n in names])]


def _group_by_line(params: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in params:
        out.setdefault(p.get("line") or "an unknown line", []).append(p["name"])
    return out


# ---- torch's own run ---------------------------------------------------------------------------------
def torch_said(probes: list[dict]) -> list[dict]:
    """Per rank: what torch's DDP step did, with the parameters it names by index named."""
    anyone_raised = any(EXPECTED in (p.get("message") or "") for p in probes)
    out = []
    for r, p in enumerate(probes):
        msg = p.get("message") or ""
        blocked = anyone_raised and EXPECTED not in msg and "backward" in (p.get("stage") or "") \
            and any(word in msg for word in PEER_GONE)
        first = msg.strip().splitlines()[0] if msg.strip() else ""
        if EXPECTED in msg:
            first = first.split(". ")[0] + ". " + first.split(". ")[1] + "." if ". " in first else first
        out.append({"rank": r, "ok": p.get("ok", False), "iterations": p.get("iterations", 0),
                    "stage": p.get("stage"), "said": first, "blocked": blocked,
                    "unused": [n for names in p.get("unused", {}).values() for n in names], "message": msg})
    return out


def merge(target: str, source: str, settings: dict, ranks: list[dict], probes: list[dict] | None) -> dict:
    unused, divergent = classify(ranks, source)
    forced = [p["name"] for p in unused] + [n for g in divergent for n in g["params"]]
    found = [c for c, hit in zip(CLASSES, (unused, divergent)) if hit]
    return {"schema": SCHEMA, "target": target, "world_size": len(ranks), "ddp": settings,
            "ranks": [{"rank": v["rank"], "loss": v["loss"], "counts": dict(Counter(p["status"] for p in v["params"])),
                       "no_gradient": [_with_definition(p, source) for p in v["params"]
                                       if p["requires_grad"] and not p["grad"]],
                       "warnings": v["warnings"]} for v in ranks],
            "unused": unused, "divergent": divergent, "found": found,
            "ddp_would": ddp_would(unused, divergent),
            "find_unused_forced_by": forced if settings.get("find_unused_parameters") else None,
            "torch": None if probes is None else {"find_unused_parameters": False, "iterations": 2,
                                                  "ranks": torch_said(probes)},
            "fix": fixes(unused, divergent), "error": None}
