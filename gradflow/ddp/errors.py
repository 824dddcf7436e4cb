"""`gradflow ddp`'s own errors: a rank died, hung or timed out (exit 7); a --fail-on class matched (exit 6)."""
from __future__ import annotations

from gradflow.errors import ExitCode, GradflowError


class DistributedError(GradflowError):
    """A rank died, hung or timed out; the other ranks were stopped (exit 7)."""

    exit_code = ExitCode.DISTRIBUTED


class GateError(GradflowError):
    """`--fail-on` matched: the report stands, the exit code says so (exit 6)."""

    exit_code = ExitCode.GATE
