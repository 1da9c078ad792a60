"""benchmarks/limits/step.py: the running script's own calls timed where its loop makes them, against the same
calls alone. Its arithmetic on a made-up clock (a step is cut at its environment step, every interval lands in the
step that holds its start, the steps that held an alone block are left out), and one tiny run of SAC's twin
without --compile (no compiling in the quick tier) whose pieces add up to its steps."""

import json
import subprocess
import sys
from types import SimpleNamespace

from helpers import REPO

from benchmarks.limits.step import PIECES, Clock, reduce


def test_a_step_is_cut_at_its_environment_step_and_its_pieces_add_up():
    clock = Clock()
    # 6 steps of 10 ms, each: act 1 ms before the env step of 2 ms, an update of 5 ms; the env step starts a step
    for i in range(6):
        t = i * 10.0
        clock.steps.append(t)
        clock.events += [("env", t, t + 2), ("store", t + 2, t + 2.5), ("update", t + 3, t + 8), ("act", t + 9, t + 10)]
    clock.blocked.add(3)  # step 3 held an alone block: it and the step after it are no loop steps
    opts = SimpleNamespace(blocks=1, block_steps=4)
    record = reduce(clock, 0, opts)
    assert record["loop_steps"] == 3  # steps 0, 1, 2 (3 and 4 left out; 5 has no next start)
    block = record["loop_blocks"][0]
    assert block["wall"] == 10.0 and block["env"] == 2.0 and block["update"] == 5.0 and block["act"] == 1.0
    assert block["rest"] == 10.0 - 2.0 - 0.5 - 5.0 - 1.0  # what no piece holds
    assert sum(block[p] for p in PIECES) == block["wall"]


def test_a_tiny_run_of_sac_s_twin_splits_its_steps(tmp_path):
    """The study end to end, tiny: every piece measured in the loop and alone, the step's wall-clock the sum of its
    pieces in the loop, the candidates timed for each variant the loop ran (SAC's policy step and not)."""
    cmd = [sys.executable, "-m", "benchmarks.limits.step", "--out", str(tmp_path), "--pairs", "sac", "--modes",
           "plain", "--env-id", "Pendulum-v1", "--learning-starts", "100", "--blocks", "2", "--block-steps", "20",
           "--calls", "3", "--measure-after", "2"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())["results"]["sac plain"]
    assert len(results["loop_blocks"]) == 2 and len(results["alone_blocks"]) == 2
    s = results["summary"]
    assert all(s["in_loop"][p] > 0 for p in ["env", "act", "store", "sample", "update", "log"]), s["in_loop"]
    assert abs(sum(s["in_loop"][p] for p in PIECES) - s["in_loop"]["wall"]) < 0.2 * s["in_loop"]["wall"]
    assert set(s["update_candidates"]) == {"policy_step=False,target_step=True", "policy_step=True,target_step=True"}
    assert all(t > 0 for v in s["update_candidates"].values() for t in v.values())
    assert "| sac | plain | **step** |" in (tmp_path / "results.md").read_text()
