"""What a checkpoint costs (docs/checkpoints.md): checkpoints.py (`python -m benchmarks.checkpoints`)."""
