"""Resource limits, in one place. Checked before anything is allocated (torch-free)."""
from __future__ import annotations

MAX_ELEMENTS = 10_000_000  # elements in one tensor value (constructor, .npy/.pt file)
MAX_SWEEP_POINTS = 100_000  # points in one START:STOP:COUNT sweep
