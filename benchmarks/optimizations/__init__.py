"""Which optimization buys what (docs/optimizations.md), in parts: parts.py, envpool_async.py, same_run.py and diff.py,
each `python -m benchmarks.optimizations.<part>`."""
