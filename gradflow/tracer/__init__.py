"""Recording a real PyTorch forward: the Trace (trace.py), what it records (records.py), the module calls and
torch calls it sees, gradient contexts and reentrant checkpoints, per-use gradient hooks, values that leave torch,
the user's source lines, and freeing long graphs afterwards."""
