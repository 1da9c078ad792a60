"""Against LeanRL (docs/vs_leanrl.md): vs_leanrl.py (`python -m benchmarks.vs_leanrl`), LeanRL's scripts fixed only to
run (fixes.py: `python -m benchmarks.vs_leanrl.fixes`) and the stand-in for wandb put on their path (wandb.py)."""
