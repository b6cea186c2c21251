"""Tests of the ledger package: store, envelopes, Merkle, notes, service, witness."""
