"""Where a step's time goes (docs/limits.md): limits.py (`python -m benchmarks.limits`), and its parts step.py
(`python -m benchmarks.limits.step`) and matmul.py (`python -m benchmarks.limits.matmul`)."""
