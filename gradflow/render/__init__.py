"""Rendering results as rich tables, text, graphs and plots. Never evaluates."""
