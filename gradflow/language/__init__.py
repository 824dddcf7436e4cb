"""The language: grammar, parser, syntax tree, lowering to a graph, the op table, graph edits. Torch-free."""
