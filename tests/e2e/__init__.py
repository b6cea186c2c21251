"""Whole pipelines: the shipped templates, the demo, the README's blocks, docs' studies."""
