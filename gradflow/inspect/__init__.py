"""Real PyTorch code: the tracer, source lines, reasons, the report, its table and picture."""
