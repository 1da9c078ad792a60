"""Policy inference, eager against compiled (docs/inference.md): inference.py, `python -m benchmarks.inference`."""
