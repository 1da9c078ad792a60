"""benchmarks/vs_leanrl.py without LeanRL (not installed here): it reads LeanRL's fps back from an offline
Weights & Biases run file, and refuses a folder that is not a LeanRL checkout."""

import subprocess
import sys

from helpers import ENV, REPO


def test_speeds_read_back_from_an_offline_wandb_run(tmp_path):
    """A run that logs `speed` at some steps (and other keys at others) gives back exactly those (step, speed)
    pairs, in order, through the blocks of the file (enough logs to span more than one 32 KiB block)."""
    code = f"""
import glob, wandb
from pathlib import Path
from benchmarks.vs_leanrl import logged_speeds
run = wandb.init(mode="offline", dir={str(tmp_path)!r}, project="t", settings=wandb.Settings(silent=True))
for step in range(0, 3000, 10):  # one call per step, as LeanRL logs
    wandb.log({{"losses/x": step * 0.5, "pad": "y" * 40, **({{"speed": 1000.0 + step}} if step % 100 == 0 else {{}})}},
              step=step)
run.finish()
rows = logged_speeds(Path(glob.glob({str(tmp_path)!r} + "/wandb/offline-run-*/run-*.wandb")[0]))
expected = [(s, 1000.0 + s) for s in range(0, 3000, 100)]
assert rows == expected, [r for r in rows if r not in expected] + [r for r in expected if r not in rows]
print("ok", len(rows), Path(glob.glob({str(tmp_path)!r} + "/wandb/offline-run-*/run-*.wandb")[0]).stat().st_size)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**ENV, "WANDB_MODE": "offline"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("ok 30"), proc.stderr[-3000:]
    assert int(proc.stdout.split()[2]) > 32768, proc.stdout  # the records crossed a block boundary


def test_not_a_leanrl_checkout_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.vs_leanrl", "--leanrl", str(tmp_path)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not a LeanRL checkout" in proc.stderr.strip().splitlines()[-1], proc.stderr
