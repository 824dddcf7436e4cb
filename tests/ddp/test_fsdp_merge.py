"""The FSDP parts of the report, from hand-written rank verdicts (no torch, no ranks)."""
from gradflow.ddp.fsdp_merge import gloo_text, outcome, would

UNITS = [{"unit": "", "params": ["head.weight", "enc.weight", "enc.bias"], "frozen": ["enc.weight"], "numel": 9},
         {"unit": "aux", "params": ["aux.weight"], "frozen": [], "numel": 4}]


def group(name):
    return {"params": [name], "gradient_on": [0], "none_on": [1], "branch": None}


def test_gloo_messages_lose_paths_sizes_addresses_and_advice():
    said = ("[enforce fail at /__w/pytorch/gloo/pair.cc:456] op.preamble.length <= op.nbytes. 416 vs 34. Received "
            "data size doesn't match expected size. Is there a distributed collective mismatch in your code?")
    assert gloo_text(said) == "Received data size doesn't match expected size."
    assert gloo_text("[/x/pair.cc:537] Read error [127.0.0.1]:24244: Connection reset by peer. This is typically "
                     "caused by a remote worker hanging") == "Read error: Connection reset by peer."


def test_outcomes():
    assert outcome({"ok": True}) == "ok"
    assert outcome({"ok": False, "aborted": "SIGABRT"}) == "aborted"
    assert outcome({"ok": False, "hung": True}) == "hung"
    assert outcome({"ok": False, "message": "Timed out waiting 5000ms for send operation to complete"}) == "timed out"
    assert outcome({"ok": False, "message": "Read error: Connection reset by peer"}) == "peer lost"


def test_a_unit_some_ranks_skip_is_an_all_gather_a_unit_all_run_a_reduce_scatter():
    ranks = [{"rank": 0, "units_run": ["", "aux"]}, {"rank": 1, "units_run": [""]}]
    rows = dict(would([], [group("aux.weight")], UNITS, ranks))
    assert rows["aux.weight (divergent)"].startswith("rank 0 all-gathers `aux` in the forward and rank 1 never")
    ranks[1]["units_run"] = ["", "aux"]
    rows = dict(would([], [group("head.weight")], UNITS, ranks))
    assert rows["head.weight (divergent)"].startswith("the reduce-scatter of the root module carries")
    assert "FSDP2 accepts it" in rows["the root module (mixed)"]
