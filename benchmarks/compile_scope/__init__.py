"""Where to put torch.compile (docs/compile_scope.md): compile_scope.py, `python -m benchmarks.compile_scope`."""
