"""`gradflow ddp`'s own errors: a rank died, hung or timed out (exit 7); --fail-on's GateError is inspect's
(report/fail_on.py)."""
from __future__ import annotations

from gradflow.errors import ExitCode, GradflowError


class DistributedError(GradflowError):
    """A rank died, hung or timed out; the other ranks were stopped (exit 7)."""

    exit_code = ExitCode.DISTRIBUTED
