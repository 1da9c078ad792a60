"""PPO Atari over processes with torchrun (docs/torchrun.md): torchrun.py, `python -m benchmarks.torchrun`."""
