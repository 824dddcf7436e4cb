"""`gradflow ddp`: inspect's per-parameter verdicts on every rank of a real torch.distributed group, compared
across ranks, next to what torch's own DistributedDataParallel (or, for a model sharded with FSDP2's
fully_shard, FSDP's own step) does with the same step.

launch.py starts the ranks (no torch), rank.py is one rank's work (torch), merge.py turns the ranks' verdicts
into the report (no torch), branch.py finds the branch that differs (no torch), report_text.py prints it (rich);
fsdp.py (torch), fsdp_child.py (FSDP's real step in a watched child) and fsdp_merge.py (no torch) are FSDP2's."""
