"""Tests of the independent verifier: archives, ledgers, re-derivations, conformance."""
