"""Explaining a trace: which parameter got a gradient and why not (reasons, truth, naming, norms), the report's
types and how it is built, its table and picture, layer health, mixed precision, --fail-on, optimizer coverage,
and `gradflow.watch` over a training loop."""
