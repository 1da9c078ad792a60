"""A run that survives (issue 65): stopped at any moment, it goes on with --resume exactly where it stopped.

- Exactness: for SAC, TD3, continuous PPO and DQN, each script of the family (the eager script, the optimized one
  without and with --compile, the JAX twin), a run killed with SIGKILL between two of its checkpoints and resumed
  in a new process logs exactly what the unbroken run logs (timings aside), TensorBoard's purge dropping what the
  killed run logged after its checkpoint. The checkpoint it goes on from falls between two delayed actor steps
  (SAC, TD3: step 333, odd, where the actor steps at even ones), between two updates and two target copies (DQN:
  999), at an iteration's start (PPO: 512, where its checkpoints fall).
- Ctrl-C: a checkpoint at the next step, the command that goes on printed last, and that command going on.
- Faults: a run killed again and again (at random moments, and once half way through writing a checkpoint) ends
  with the unbroken run's logs, and its checkpoint is always readable.
- envpool (PPO and DQN on Atari): their games cannot be saved; a resumed run's networks, optimizer, buffer and
  loop values equal the checkpoint's, and it logs from the checkpoint's step on, each step once.
- Bad input: each refused in one line naming the problem, before any work, nothing written over.
"""

import random
import shlex
import signal
import time

import pytest
from helpers import (DQN_ATARI, DQN_SHORT, OFF_POLICY_SHORT, PPO_ATARI_SHORT, PPO_CONTINUOUS_SHORT, Run,
                     assert_identical_logs, assert_user_error, resumed_step, run_in_process, run_script, stop_at_step)

from leanrl_utils import checkpoints

# family: (its short run, the scripts by mode, --checkpoint-every, the step the run is killed at (or past), the step
# it goes on from)
FAMILIES = {
    "sac": (OFF_POLICY_SHORT, "sac_continuous_action", 333, 450, 333),
    "td3": (OFF_POLICY_SHORT, "td3_continuous_action", 333, 450, 333),
    "dqn": (DQN_SHORT, "dqn", 333, 1100, 999),
    "ppo_continuous": (PPO_CONTINUOUS_SHORT, "ppo_continuous_action", 500, 600, 512),
}
MODES = {"eager": ("", ()), "none": ("_torchcompile", ()), "compile": ("_torchcompile", ("--compile",)),
         "jax": ("_jax", ())}
# the quick tier resumes one script of two families; the full suite every script of every family
QUICK = {("sac", "eager"), ("ppo_continuous", "none")}
CASES = [pytest.param(family, mode, marks=() if (family, mode) in QUICK else pytest.mark.slow, id=f"{family}-{mode}")
         for family in FAMILIES for mode in MODES]


def killed_and_resumed(script: str, args, every: int, kill_at: int, cwd) -> tuple[Run, Run]:
    """The run killed with SIGKILL once its loop is past `kill_at`, then resumed in a new process."""
    killed = stop_at_step("kill", script, *args, "--checkpoint-every", str(every), cwd=cwd, at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    resumed = run_script(script, "--resume", f"runs/{killed.run_dir.name}", cwd=cwd).check()
    return killed, resumed


@pytest.mark.parametrize("family, mode", CASES)
def test_a_killed_run_goes_on_number_for_number(family, mode, cached_run, tmp_path):
    short, eager, every, kill_at, expected = FAMILIES[family]
    suffix, flags = MODES[mode]
    script = eager + suffix
    unbroken = cached_run(script, *flags, *short).check()
    _, resumed = killed_and_resumed(script, (*flags, *short), every, kill_at, tmp_path)
    assert resumed_step(resumed) == expected
    # the folder as TensorBoard reads it: the killed run's points after its checkpoint dropped, the resumed run's
    assert_identical_logs(unbroken, Run(0, "", "", tmp_path))


def test_ctrl_c_saves_at_the_next_step_and_says_how_to_go_on(cached_run, tmp_path):
    """A Ctrl-C (pressed here at step 1100 of DQN's short run, between two updates) writes a checkpoint at the next
    step and stops (exit code 130); the last line is the command that goes on, which, run as printed, ends the run
    with the unbroken run's logs. A second Ctrl-C stops at once: the last checkpoint written (here at step 999) is
    named, with the same command."""
    unbroken = cached_run("dqn", *DQN_SHORT).check()
    stopped = stop_at_step("ctrl-c", "dqn", *DQN_SHORT, "--checkpoint-every", "333", cwd=tmp_path / "once", at=1100)
    assert stopped.returncode == 130 and "Traceback" not in stopped.stderr, stopped.stderr[-3000:]
    lines = stopped.stderr.rstrip("\n").split("\n")
    assert lines[-2].startswith("stopped at step 1101, its whole state saved in runs/"), lines[-2:]
    command = shlex.split(lines[-1])
    assert command[0] == "python" and command[1].endswith("leanrl/dqn.py") and command[2:] == [
        "--resume", f"runs/{stopped.run_dir.name}"], lines[-1]
    resumed = run_script("dqn", *command[2:], cwd=tmp_path / "once").check()
    assert resumed_step(resumed) == 1101
    assert_identical_logs(unbroken, Run(0, "", "", tmp_path / "once"))

    twice = stop_at_step("ctrl-c-twice", "dqn", *DQN_SHORT, "--checkpoint-every", "333", cwd=tmp_path / "twice",
                         at=1100)
    assert twice.returncode == 130 and "Traceback" not in twice.stderr, twice.stderr[-3000:]
    lines = twice.stderr.rstrip("\n").split("\n")
    assert lines[-3:-1] == ["interrupted; what was logged is kept in runs/", "its checkpoint of step 999 goes on with:"]
    assert lines[-1].endswith(f"dqn.py --resume runs/{twice.run_dir.name}")


@pytest.mark.slow
def test_a_run_killed_again_and_again_ends_as_the_unbroken_run(cached_run, tmp_path):
    """DQN's short run with a checkpoint every 100 steps, killed with SIGKILL at random moments (seeded: up to 6 kills,
    each within a leg's first seconds, each leg resumed from the checkpoint the last left) and once half way through
    writing a checkpoint: after every kill the checkpoint file reads back whole, and the last leg ends the run
    with the unbroken run's logs."""
    from helpers import ENV, SCRIPT_DIR
    import subprocess
    import sys

    unbroken = cached_run("dqn", *DQN_SHORT).check()
    rng, args, kills = random.Random(65), (*DQN_SHORT, "--checkpoint-every", "100"), 0
    # a kill in the middle of the 3rd checkpoint's write: the 2nd (step 200) is what goes on
    half = stop_at_step("kill-in-write", "dqn", *args, cwd=tmp_path, at=3)
    assert half.returncode == -signal.SIGKILL and (half.run_dir / "checkpoint.pt.partial").exists()
    assert checkpoints.read(str(half.run_dir / "checkpoint.pt"))["step"] == 200
    folder = half.run_dir
    steps = [200]
    while True:
        cmd = [sys.executable, str(SCRIPT_DIR / "dqn.py"), "--resume", f"runs/{folder.name}"]
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if kills < 6:
            time.sleep(rng.uniform(1.0, 2.5))  # the interpreter's start, the imports, then some steps
        if proc.poll() is None and kills < 6:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        err = proc.communicate(timeout=300)[1]
        saved = checkpoints.read(str(folder / "checkpoint.pt"))  # never left unreadable
        steps.append(saved["step"])
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, err[-3000:]
        if saved["done"]:  # on a fast machine a leg can end its run and be killed on its way out: it ended
            break
    assert kills >= 3 and saved["done"] and saved["step"] == 1500, (kills, steps)
    assert_identical_logs(unbroken, Run(0, "", "", tmp_path))


# envpool's families: their games restart; the rest of the state is the checkpoint's
ENVPOOL = {
    "ppo_atari_envpool": (PPO_ATARI_SHORT, 256, 300, 256),
    "ppo_atari_envpool_torchcompile": (PPO_ATARI_SHORT, 256, 300, 256),
    "ppo_atari_envpool_jax": (PPO_ATARI_SHORT, 256, 300, 256),
    "dqn_atari_envpool": (DQN_ATARI, 333, 800, 666),
    "dqn_atari_envpool_torchcompile": (DQN_ATARI, 333, 800, 666),
    "dqn_atari_envpool_jax": (DQN_ATARI, 333, 800, 666),
}


@pytest.mark.parametrize("script", [pytest.param(s, marks=() if s == "dqn_atari_envpool" else pytest.mark.slow)
                                    for s in ENVPOOL])
def test_an_envpool_run_goes_on_from_its_checkpoint(script, tmp_path):
    """Killed between two checkpoints and resumed: the networks, optimizer, buffer and loop values put back equal
    the checkpoint's, the run says that its games start anew, and the folder holds each logged step once: the
    killed run's up to the checkpoint, the resumed run's from there to the end."""
    short, every, kill_at, expected = ENVPOOL[script]
    killed = stop_at_step("kill", script, *short, "--checkpoint-every", str(every), cwd=tmp_path, at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    before = killed.scalars
    resumed = stop_at_step("check", script, "--resume", f"runs/{killed.run_dir.name}", cwd=tmp_path, at=0)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "restored state equals the checkpoint's: True" in resumed.stderr
    assert resumed_step(resumed) == expected and "envpool cannot save its games: they start anew" in resumed.stderr
    after = Run(0, "", "", tmp_path).scalars
    total = int(short[short.index("--total-timesteps") + 1])
    for tag in ("losses/value_loss", "losses/td_loss"):
        if tag in after:
            steps = [s for s, _ in after[tag]]
            # each step once, up to the last one a whole run logs (PPO: its last iteration's; DQN: every 100th)
            assert steps == sorted(set(steps)) and steps[-1] == (total if "ppo" in script else (total - 1) // 100 * 100)
            assert [p for p in after[tag] if p[0] <= expected] == [p for p in before[tag] if p[0] <= expected]


# --- bad input: one line each, before any work, nothing written over

def a_checkpoint(tmp_path) -> str:
    """A short DQN run with a checkpoint at its end (in tmp_path/runs/): its folder's name."""
    run = run_script("dqn", *DQN_SHORT, "--total-timesteps", "700", "--checkpoint-every", "600", cwd=tmp_path).check()
    return run.run_dir.name


def test_resume_refuses_what_it_cannot_go_on_from(tmp_path):
    name = a_checkpoint(tmp_path)
    folder = tmp_path / "runs" / name
    saved = (folder / "checkpoint.pt").read_bytes()

    def refused(*argv, script="dqn", says):
        run = run_in_process(script, *argv, cwd=tmp_path)
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
        last = run.stderr.strip().splitlines()[-1]
        assert len(run.stderr.strip().splitlines()) == 1 and says in last, last
        assert (folder / "checkpoint.pt").read_bytes() == saved  # nothing written over
        return last

    refused("--resume", "runs/nothing", says="--resume runs/nothing: no such run folder")
    (tmp_path / "runs" / "empty").mkdir()
    refused("--resume", "empty", says="checkpoint.pt does not exist: the run stopped before its first checkpoint")
    refused("--resume", name, script="sac_continuous_action",
            says="its checkpoint was written by dqn.py, not sac_continuous_action.py")
    refused("--resume", name, script="dqn_torchcompile", says="written by dqn.py, not dqn_torchcompile.py")
    refused("--resume", name, "--learning-rate", "0.01", "--seed", "4",
            says="flags that differ from the run's: --seed 4 (the run's: 3), --learning-rate 0.01 (the run's: 0.00025)")
    refused("--resume", name, says="the run is at step 700 (it ended there); --total-timesteps 700 must be larger")
    refused("--resume", name, "--total-timesteps", "600", says="--total-timesteps 600 must be larger")
    # a larger budget goes on with a finished run; a flag given with the run's value is no difference
    assert run_in_process("dqn", "--resume", name, "--total-timesteps", "800", "--seed", "3", cwd=tmp_path).returncode == 0
    saved = (folder / "checkpoint.pt").read_bytes()
    # a checkpoint cut short (a disk that lost its end), and a file of another kind, are refused as such
    other = tmp_path / "runs" / "other"
    other.mkdir()
    (other / "checkpoint.pt").write_bytes(saved[: len(saved) // 2])
    refused("--resume", "other", says="checkpoint.pt cannot be read as a checkpoint")
    import torch

    torch.save({"algo": "dqn", "args": {}, "q_network": {}}, other / "checkpoint.pt")  # a --save-model file
    refused("--resume", "other", says="not a checkpoint of this project's scripts")


@pytest.mark.parametrize("script", ["sac_continuous_action", "sac_continuous_action_torchcompile", "td3_continuous_action",
                                    "dqn", "dqn_atari_envpool"])
def test_a_buffer_larger_than_memory_is_refused_with_its_size(script, tmp_path):
    """--buffer-size 10000000000 asks for more memory than any machine here has: one line giving the bytes the
    buffer needs and the memory the machine has, before any run folder is written."""
    from helpers import SPECS

    run = run_in_process(script, *SPECS[script].short, "--buffer-size", "10000000000", cwd=tmp_path)
    assert_user_error(run, "--buffer-size")
    assert "the buffer needs" in run.stderr and "GB available of" in run.stderr


@pytest.mark.slow
def test_track_goes_on_with_the_same_weights_and_biases_run(tmp_path):
    """--track (offline here): the resumed run logs to the W&B run it started (its id kept in the run's folder)."""
    run = run_script("dqn", *DQN_SHORT, "--total-timesteps", "700", "--checkpoint-every", "600", "--track",
                     cwd=tmp_path).check()
    run_id = (run.run_dir / "wandb_id").read_text().strip()
    run_script("dqn", "--resume", run.run_dir.name, "--total-timesteps", "800", "--track", cwd=tmp_path).check()
    folders = sorted(p.name for p in (tmp_path / "wandb").glob("offline-run-*"))
    assert len(folders) == 2 and all(name.endswith(f"-{run_id}") for name in folders), (run_id, folders)
