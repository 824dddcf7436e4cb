"""The one evaluator: a lowered graph and its values -> torch -> backward -> an Explanation."""
