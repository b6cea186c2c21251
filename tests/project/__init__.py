"""The house: structure, public API, the CLI as a whole, shared vectors, benchmarks."""
