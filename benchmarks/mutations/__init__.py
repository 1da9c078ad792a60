"""Planted bugs the tests must catch (docs/mutations.md): mutations.py (`python -m benchmarks.mutations`)."""
