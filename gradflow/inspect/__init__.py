"""Real PyTorch code: the tracer, source lines, reasons, the report, its table and picture; a whole script's
backward() calls, each with its table and its eval program."""
