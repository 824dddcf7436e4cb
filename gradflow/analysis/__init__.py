"""What an evaluation means: the Explanation model, node status and reasons, flows, smoothness. Torch-free."""
