"""`gradflow ddp --fail-on CLASSES --allow PATTERN`: inspect's gate (gradflow/report/fail_on.py), on every rank.

Each rank's verdicts are an inspect JSON document in small (`rank.verdicts`), so inspect's classes are
applied per rank with `gate.failures`; a parameter failing on any rank fails, and its line names the rank(s).
Two classes keep DDP's meaning, decided over all ranks (as DDP sees them):

- `unused`: requires grad and gets no gradient on any rank, whatever the reason (a cut, an output left out
  of the loss...): what DDP's error calls "parameters that were not used in producing loss";
- `divergent` (ddp only): gets a gradient on some ranks only. On the other ranks it is not also `cut`,
  `unreached` or `untraced`: those ranks' reasons are part of the divergence.

Torch-free: the rank that merges the report computes it; the launcher only prints it.
"""
from __future__ import annotations

from gradflow.ddp.merge import who
from gradflow.report.fail_on import CLASSES, Failure, allowed, failures, gate_error, parse_classes, rows_of

EXTRA = {"divergent": "gets a gradient on some ranks only (ddp)"}
PER_RANK_NO_GRAD = ("cut", "unreached", "untraced")  # on a divergent parameter: part of the divergence
DDP_OWN = ("unused", "divergent")


def classes(fail_on) -> tuple[str, ...]:
    """--fail-on: inspect's classes, `default`, `all` (which includes `divergent`) and `divergent`."""
    return parse_classes(fail_on, EXTRA)


def gate(ranks: list[dict], merged: dict, fail_on, allow=()) -> dict:
    """The `gate` object of the JSON document (shaped like inspect's; each failure also names its `ranks`).

    `ranks`: every rank's verdicts (`{"rank", "params": [...]}`); `merged`: the merged report (its `unused`
    and `divergent`)."""
    wanted = classes(fail_on)
    allow = list(allow)
    rows = {r.name: r for v in ranks for r in rows_of(v)}  # a parameter's names (aliases) are the same everywhere
    divergent = {n for g in merged["divergent"] for n in g["params"]}
    found: dict[tuple[str, str, str], dict] = {}  # (name, class, reason) -> failure, its ranks gathered

    def add(f: Failure, rs: list[int]) -> None:
        item = found.setdefault((f.name, f.kind, f.reason), {**f.to_dict(), "ranks": []})
        item["ranks"] = sorted({*item["ranks"], *rs})

    inspect_classes = tuple(c for c in wanted if c in CLASSES and c not in DDP_OWN)
    for v in ranks if inspect_classes else ():  # (failures() refuses an empty list of classes)
        for f in failures(v, inspect_classes, allow):
            if not (f.kind in PER_RANK_NO_GRAD and f.name in divergent):
                add(f, [v["rank"]])
    if "unused" in wanted:
        for u in merged["unused"]:
            if allowed(rows[u["name"]], allow):
                continue
            for v in ranks:  # each rank's own reason (a cut on one, never called on another)
                p = next((p for p in v["params"] if p["name"] == u["name"]), u)
                line = p.get("line") or u.get("line")
                add(Failure(u["name"], "unused", p.get("reason") or "gets no gradient on any rank", line), [v["rank"]])
    if "divergent" in wanted:
        for g in merged["divergent"]:
            branch = g.get("branch")
            tail = f"; the branch that differs: {branch['line']} `{branch['code']}`" if branch else ""
            for name in g["params"]:
                if not allowed(rows[name], allow):
                    text = f"gets a gradient on {who(g['gradient_on'])} and none on {who(g['none_on'])}{tail}"
                    add(Failure(name, "divergent", text, branch["line"] if branch else None), g["none_on"])
    names = {n: i for i, n in enumerate(rows)}  # the model's order, then the order of --fail-on (as inspect's)
    out = sorted(found.values(), key=lambda f: (names.get(f["name"], len(names)), wanted.index(f["class"]),
                                                f["ranks"]))
    unmatched = [pat for pat in allow if not any(allowed(r, [pat]) for r in rows.values())]
    return {"fail_on": list(wanted), "allow": allow, "passed": not out, "failures": out,
            "unmatched_allow": unmatched}


def error(document: dict, world_size: int):
    """The GateError to print after the report (None if the gate passed): one line per failure, with its
    rank(s) (`every rank` when all)."""
    if document["passed"]:
        return None
    found = []
    for f in document["failures"]:
        where = "" if f["class"] == "divergent" else \
            ("every rank: " if len(f["ranks"]) == world_size > 1 else f"{who(f['ranks'])}: ")
        found.append(Failure(f["name"], f["class"], where + f["reason"], f["line"]))
    return gate_error(found, document["fail_on"], EXTRA)
