"""Smoke tests of the benchmark commands whose figures the README quotes: each runs at a tiny size
and prints the table it is read for, so that a refactor cannot silently break one."""

import subprocess
import sys

from helpers import ENV, REPO


def bench(*args, timeout=600):
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def table_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("|") and not line.startswith("|---")]


def test_sps_benchmark():
    out = bench("benchmarks/sps.py", "--rounds", "1", "--steps", "256", "--env-id", "Pendulum-v1",
                "--args=--num-steps 64 --num-minibatches 2 --update-epochs 1",
                "ppo_continuous_action", "ppo_continuous_action_torchcompile")
    rows = table_rows(out)
    assert [r[0] for r in rows[1:]] == ["`ppo_continuous_action`", "`ppo_continuous_action_torchcompile`"], out
    assert float(rows[1][1]) > 0 and rows[1][3] == "1.00x"


def test_envpool_async_benchmark():
    rows = table_rows(bench("benchmarks/envpool_async.py", "--steps", "32", "--rounds", "1", "--num-envs", "2"))
    assert [r[0] for r in rows[1:]] == ["sync (step all, then act)", "async (two halves)"]
    assert all(float(r[1]) > 0 for r in rows[1:])
