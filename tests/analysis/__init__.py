"""Tests of the analysis package: scoring, statistics, report, export, view, plan."""
