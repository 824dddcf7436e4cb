"""Values: value text (numbers, lists, constructors, files, sweeps), coercion, and building tensors."""
