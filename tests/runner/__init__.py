"""Tests of the runner package: study spec, lock, items, runs, backends, model steps."""
