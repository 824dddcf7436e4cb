"""`python -m gradflow.cli.fsdp_probe ARGS_JSON`: one rank of FSDP's own training step, started by that rank of
`gradflow ddp` (gradflow/ddp/fsdp_child.py watches it). FUNCTION is called afresh here, so the model is the
user's own, sharded by their own `fully_shard`, and one real step runs on it under the group's timeout."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    from gradflow.cli.ddp_rank import call_function
    from gradflow.cli.inspect_command import load_function
    from gradflow.cli.user_code import contained
    from gradflow.ddp import fsdp, fsdp_child
    from gradflow.ddp.rank import loss_of

    a = json.loads(argv[1])
    path, where = Path(a["path"]), ["joining the group"]

    def say(text: str) -> None:
        where[0] = text
        fsdp_child.say_at(text)

    store = fsdp_child.join(a["rank"], a["world"], a["timeout"], a["join_floor"])
    try:
        with contained(str(path.resolve().parent)):
            say(f"running {a['name']}()")
            model, step = call_function(load_function(path, a["name"]), a["name"], a["rank"], a["world"])
            outcome = fsdp.real_step(model, step, loss_of, say)
    except Exception as err:  # a collective that timed out, a peer gone: what FSDP does is the point
        lines = str(err).strip().splitlines() or [type(err).__name__]
        outcome = {"ok": False, "stage": where[0], "hung": False, "aborted": None, "message": lines[0]}
    fsdp_child.finish(store, a["rank"], a["world"], outcome)


if __name__ == "__main__":
    main(sys.argv)
