"""Blinded parsing and scoring, statistics, decision rules and reports (built by later issues).

The package exists so the distribution's top-level layout is fixed from the start; it exports
nothing yet.
"""

__all__: list[str] = []
