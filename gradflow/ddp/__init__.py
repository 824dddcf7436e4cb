"""`gradflow ddp`: inspect's per-parameter verdicts on every rank of a real torch.distributed group, compared
across ranks, next to what torch's own DistributedDataParallel does with the same step.

launch.py starts the ranks (no torch), rank.py is one rank's work (torch), merge.py turns the ranks' verdicts
into the report (no torch), branch.py finds the branch that differs (no torch), table.py prints it (rich)."""
