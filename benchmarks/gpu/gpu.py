"""A GPU sitting, in commands that each fit the GPU machine's limits: the GPU tests, the README's main job, the speed
table, the main job's learning run and the limit study, most valuable first (docs/gpu.md: the plan, in order, and
how each command is called).

    bash benchmarks/gpu/gpu.sh OUT --plan check                                  # a sitting's first command
    bash benchmarks/gpu/gpu.sh OUT --plan headline --resume docs/gpu/<sitting>   # a later one, from the folder committed
    bash benchmarks/gpu/gpu.sh OUT --plan leanrl --resume docs/gpu/<sitting>     # LeanRL beside ours (docs/vs_leanrl.md)
    python -m benchmarks.gpu --plans                                         # the plans: parts, sizes and budgets
    python -m benchmarks.gpu --summary FOLDER                                # FOLDER/speed.md again from speed.json

On the GPU machine benchmarks/gpu/gpu.sh installs the offline bundle (benchmarks/gpu/bundle.sh) and runs this. OUT is the
folder whose files come back ($OUT there): the machine returns at most 8 files, at most 2 folders down, from a folder
emptied before each command, and starts bare after a short idle time. So a command writes into OUT only what it
changed, whole: with --resume DIR (the sitting's folder under docs/gpu/, committed after the last command came back and
travelled with the tree) it starts each file it changes from DIR's copy, and the files that come back replace DIR's
(docs/gpu.md). A command writes at most 7 files, one folder down at most (limits/): sitting.log (what ran, how long,
what was left for the next command), machine.json (every machine of the sitting, and every command: its machine and
commit) and the files of its parts; benchmarks/gpu/gpu.sh adds console.log (everything printed).

The plan (--plan; its flags can be given one by one) picks the parts, in this order:
- tests: `pytest -m gpu -n <cores>`, each test at most --test-timeout seconds (pytest-timeout's --timeout),
  in a process group of its own; before the budget's end (keeping the time the next parts are expected to need) it
  gets a SIGINT, on which pytest writes its junit file with what has finished, and --grace seconds later the group is
  killed, the test runs with it (junit.xml, pytest.log). The children get SIGINT's default back where this command
  was started with SIGINT ignored (start_group);
- main: the README's main job (`sac_continuous_action_torchcompile.py --compile --cudagraphs`) for --main-steps steps:
  does it run, log and reach its fps (main_job.json);
- speed: rounds of the --pairs in the --modes, a pair's modes back to back in one round on one machine, until each pair
  has --rounds rounds that measured these modes (speed.json, every round with its machine; speed.md, the table, from
  every round so far). A round starts only if its runs' expected time fits in what is left (Sitting.expected: the
  pair's own last runs, else the other pairs' on this GPU, else FIRST_GUESS); a round that a run leaves unfinished at
  the budget's end is not recorded;
- leanrl: rounds as the speed part's of our `--compile --cudagraphs` beside LeanRL's own optimized script in its
  `--compile --cudagraphs` and eager modes (LEANRL_PAIRS), LeanRL fixed only to run and carried in the bundle's
  leanrl/ (benchmarks/gpu/bundle.sh --leanrl; benchmarks/vs_leanrl/fixes.py), its fps read from the speed values it
  logs to a stand-in for wandb (leanrl.json: every run, LeanRL's logged values, its commit and fixes; leanrl.md);
- before: rounds of our `--compile --cudagraphs` beside the same at the commit of the bundle's before/
  (benchmarks/gpu/bundle.sh --before COMMIT: that commit's leanrl/ and leanrl_utils/) (before.json, before.md);
- levers: rounds as the speed part's of each lever (LEVERS: PPO Atari's `--async-envs`) beside the mode it changes one
  thing of, into levers.json and levers.md (the lever over that mode, each round's ratio, and the verdict);
- learn: the main job learning HalfCheetah-v4 for --learn-steps, then the eager script for as long, stopped with a
  Ctrl-C (which keeps its logs) unless it ended first (learning.json: both runs' raw scalars);
- limits: the GPU limit study (benchmarks/gpu/limits.py) into OUT/limits, in what is left of the budget, of
  --limits-pairs in --limits-modes (default: the study's own).
Our SAC and TD3 compile their updates with an inductor setting of their own on CUDA with torch before 2.12
(harness.inductor_options); the scripts that do not (LeanRL's, ours at an earlier commit) get it by its environment
variable where ours take it (inductor_env): the same compiler on both sides.
A part, a round or a run that would not fit is left for the next command, and sitting.log says so; a command with the
same plan and --resume takes it up. The budget counts from benchmarks/gpu/gpu.sh's start (LEANRL_SITTING_START): the
bundle's install and every process's imports count. --tiny runs the same plan at sizes a CPU runs in seconds, without
--compile (tiny_flags; tests/test_gpu_sitting.py rehearses every command of docs/gpu.md and docs/vs_leanrl.md so, and
the atari_split and before plans, with CUDA hidden and no git). A mistake in the flags stops a command in one line, exit
code 2; OUT breaking the machine's limits, exit code 1.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import error_line, REPO, command_line
from benchmarks.sps import kill_group, run_once, verdict
from benchmarks.vs_leanrl.vs_leanrl import fixes_applied, standin_speeds, window_fps
from leanrl_utils.events import read_run
from leanrl_utils.machine import commit, describe_machine, machine_id

# the speed table's pairs: task, steps and flags (those of benchmarks/speed/speed.sh, with budgets sized for a GPU)
PAIRS = {
    "sac": ("sac_continuous_action", "HalfCheetah-v4", 7000, "--learning-starts 5000 --measure-after 50"),
    "td3": ("td3_continuous_action", "HalfCheetah-v4", 8000, "--learning-starts 5000 --measure-after 50"),
    "ppo_continuous": ("ppo_continuous_action", "HalfCheetah-v4", 8192, ""),
    "ppo_atari": ("ppo_atari_envpool", "Breakout-v5", 16384, ""),
    "dqn": ("dqn", "CartPole-v1", 40000, ""),
    "dqn_atari": ("dqn_atari_envpool", "Breakout-v5", 12000, "--learning-starts 8000 --buffer-size 100000"),
}
# --tiny: the same pairs at sizes a CPU runs in seconds, each logging its fps after its warm-up
TINY_PAIRS = {
    "sac": ("sac_continuous_action", "Pendulum-v1", 320, "--learning-starts 200 --measure-after 20"),
    "td3": ("td3_continuous_action", "Pendulum-v1", 320, "--learning-starts 200 --measure-after 20"),
    "ppo_continuous": ("ppo_continuous_action", "Pendulum-v1", 768,
                       "--num-steps 256 --num-minibatches 4 --update-epochs 1"),
    "ppo_atari": ("ppo_atari_envpool", "Breakout-v5", 192, "--num-envs 2 --num-steps 32 --num-minibatches 2 "
                  "--update-epochs 1"),
    "dqn": ("dqn", "CartPole-v1", 700, "--learning-starts 200 --measure-after 5"),
    "dqn_atari": ("dqn_atari_envpool", "Breakout-v5", 600, "--learning-starts 300 --buffer-size 1000 --measure-after 5"),
}
# mode -> its label in the table, the script's suffix, its flags (the keys of benchmarks/gpu/limits.py's, and "none")
MODES = {
    "eager": ("eager", "", []),
    "none": ("no flag", "_torchcompile", []),
    "compile": ("--compile", "_torchcompile", ["--compile"]),
    "cudagraphs": ("--cudagraphs", "_torchcompile", ["--cudagraphs"]),
    "compile+cudagraphs": ("--compile --cudagraphs", "_torchcompile", ["--compile", "--cudagraphs"]),
    "jax": ("JAX", "_jax", []),
    # beside ours: LeanRL's optimized script, from the bundle's leanrl/ (the leanrl part), its eager mode being that
    # script without a flag; and ours at the commit of the bundle's before/ (the before part)
    "leanrl": ("LeanRL `--compile --cudagraphs`", "_torchcompile", ["--compile", "--cudagraphs"]),
    "leanrl_eager": ("LeanRL eager", "_torchcompile", []),
    "before": ("the earlier commit's `--compile --cudagraphs`", "_torchcompile", ["--compile", "--cudagraphs"]),
    # a lever of issue 60 alone: PPO Atari's envs in two halves, each stepping while the policy acts on the other
    "async": ("--compile --cudagraphs --async-envs", "_torchcompile", ["--compile", "--cudagraphs", "--async-envs"]),
}
# the levers part: each lever's mode -> the mode it changes one thing of (run beside it, back to back, each round),
# and the pairs whose scripts have it
LEVERS = {"async": "compile+cudagraphs"}
LEVER_PAIRS = {"async": ["ppo_atari"]}
# seconds a run is expected to take on the GPU machine, from its process's start to its end, until the sitting has
# timed such runs there (Sitting.expected): guessed from the speed runs' sizes, LeanRL's published fps and the first
# trial's GPU test run (every mode of every pair compiling at once); the first sitting's times replace them
FIRST_GUESS = {"eager": 20.0, "none": 25.0, "cudagraphs": 30.0, "jax": 30.0, "compile": 55.0,
               "compile+cudagraphs": 60.0, "leanrl": 60.0, "leanrl_eager": 40.0, "before": 60.0, "async": 60.0}
TINY_GUESS = {"eager": 10.0, "none": 12.0, "cudagraphs": 12.0, "jax": 20.0, "compile": 12.0,
              "compile+cudagraphs": 12.0, "leanrl": 15.0, "leanrl_eager": 15.0, "before": 12.0, "async": 12.0}
MAIN_JOB = ["sac_continuous_action_torchcompile", "--compile", "--cudagraphs"]
MAIN_TASK: list[str] = []  # the README's main job runs on its default task
LEARN_TASK = ["--env-id", "HalfCheetah-v4"]  # that task, said for the learning run and its eager twin
TINY_TASK = ["--env-id", "Pendulum-v1", "--learning-starts", "200"]  # the main job and learning run under --tiny
# the limit study's windows under --tiny (its tests' sizes)
TINY_LIMITS = ["--tiny", "--seconds", "0.5", "--plain-seconds", "0.3", "--env-steps", "500", "--env-repeats", "2"]
MARGIN = 5.0  # seconds kept at the budget's end, to write the files
# LeanRL's published fps on one H100 (docs/quoted.md, its README at commit 8dbb633), beside the table
LEANRL_H100 = {"sac": (130, 255, 725), "td3": (247, 272, 936), "ppo_continuous": (683, 908, 1774),
               "ppo_atari": (3728, 3841, 6809)}

# the leanrl part: our `--compile --cudagraphs` beside LeanRL's own optimized script (github.com/pytorch-labs/LeanRL,
# fixed only to run by benchmarks/vs_leanrl/fixes.py) in its `--compile --cudagraphs` and eager modes, same task and
# steps, each side's fps read from its own logs. LeanRL logs its speed at some steps only, counted from its burn-in:
# the steps are the fewest that give it a window past that (continuous PPO: its first log, 10 iterations in; Atari PPO:
# its second, the first window holding the burn-in), and ours match. As PAIRS; PPO Atari first, the pair LeanRL is
# known for
LEANRL_PAIRS = {
    "ppo_atari": ("ppo_atari_envpool", "Breakout-v5", 20480, PAIRS["ppo_atari"][3]),
    "sac": ("sac_continuous_action", "HalfCheetah-v4", 8000, PAIRS["sac"][3]),
    "td3": ("td3_continuous_action", "HalfCheetah-v4", 8000, PAIRS["td3"][3]),
    "ppo_continuous": ("ppo_continuous_action", "HalfCheetah-v4", 20480, PAIRS["ppo_continuous"][3]),
}
TINY_LEANRL_PAIRS = {
    "ppo_atari": ("ppo_atari_envpool", "Breakout-v5", 1280, TINY_PAIRS["ppo_atari"][3]),
    "sac": ("sac_continuous_action", "Pendulum-v1", 500, TINY_PAIRS["sac"][3]),
    "td3": ("td3_continuous_action", "Pendulum-v1", 500, TINY_PAIRS["td3"][3]),
    "ppo_continuous": ("ppo_continuous_action", "Pendulum-v1", 2560, TINY_PAIRS["ppo_continuous"][3]),
}
# where LeanRL's speed values are read (benchmarks.vs_leanrl.vs_leanrl.window_fps): S0, the step its cumulative speed counts from
# (its learning start plus its 3 burn-in steps; continuous PPO's third iteration; None for Atari PPO, which logs the
# speed of its last 10 iterations), and the window's first step (None: S0)
LEANRL_READ = {"ppo_atari": (None, None), "sac": (5003, 6000), "td3": (5003, 6000), "ppo_continuous": (4096, None)}
TINY_LEANRL_READ = {"ppo_atari": (None, None), "sac": (203, 300), "td3": (203, 300), "ppo_continuous": (512, None)}
OURS_ALONE = ["--measure-after"]  # our flags that LeanRL's scripts lack: the others are the same on both sides
BUNDLE = REPO / ".whl"  # the carried bundle (benchmarks/gpu/bundle.sh): its leanrl/ and before/ serve two parts

HEADLINE = dict(pairs="sac,td3,ppo_continuous,ppo_atari", modes="eager,compile+cudagraphs,jax")
# each plan is one command (docs/gpu.md gives them in order, with the run's time limit): its parts, what they run, and
# its budget in seconds; the first two make a sitting's first 12 minutes, each later one a sitting of its own
PLANS = {
    "check": dict(parts="tests,main", budget=280.0),
    "headline": dict(parts="speed", **HEADLINE, rounds=1, budget=410.0),
    "modes": dict(parts="speed", pairs=HEADLINE["pairs"], modes="eager,none,compile,cudagraphs", rounds=1,
                  budget=540.0),
    "dqn": dict(parts="speed", pairs="dqn,dqn_atari", modes="eager,compile+cudagraphs,jax,none,compile,cudagraphs",
                rounds=1, budget=540.0),
    "rounds": dict(parts="speed", **HEADLINE, rounds=3, budget=540.0),
    "learn": dict(parts="learn", budget=540.0),
    "limits": dict(parts="limits", budget=540.0),
    # issue 60's: LeanRL beside ours (the bundle built with --leanrl), a sitting's first command; the limit study of
    # PPO Atari alone, its second; two commits of ours side by side (the bundle built with --before), a later one
    "leanrl": dict(parts="leanrl", pairs=",".join(LEANRL_PAIRS), rounds=1, budget=530.0),
    "atari_split": dict(parts="limits", limits_pairs="ppo_atari", limits_modes="compile+cudagraphs,eager,jax",
                        budget=180.0),
    "before": dict(parts="before", pairs="sac,td3", rounds=1, budget=240.0),
    # PPO Atari's levers, each beside the mode it changes, in interleaved rounds (about 60 s a run)
    "levers": dict(parts="levers", pairs="ppo_atari", modes="compile+cudagraphs,async", rounds=3, budget=420.0),
}
BESIDE = ["leanrl", "leanrl_eager", "before", *LEVERS]  # others' scripts, and the levers: not by default
DEFAULTS = dict(parts="tests,main,speed", pairs=",".join(PAIRS), modes=",".join(m for m in MODES if m not in BESIDE),
                rounds=1, budget=540.0)
PARTS = ["tests", "main", "speed", "leanrl", "before", "levers", "learn", "limits"]


def config(pair: str, mode: str, tiny: bool = False) -> str:
    """The configuration of benchmarks.sps for a pair's mode: the script and its flags (under --tiny without
    --compile: see TINY_FLAGS)."""
    _, suffix, flags = MODES[mode]
    return shlex.join([(TINY_PAIRS if tiny else PAIRS)[pair][0] + suffix, *tiny_flags(flags, tiny)])


def tiny_flags(flags: list[str], tiny: bool) -> list[str]:
    """Under --tiny, --compile is left out of every run: compiling takes tens of seconds on a CPU, a cold cache more,
    which the rehearsal's budgets cannot hold (and on a loaded machine would hold only by chance); what the sitting
    does around a run (its clock, its files, its stops) is the same. The compiled code is CI's other tests' concern."""
    return [f for f in flags if not (tiny and f == "--compile")]


class Sitting:
    """One command: its folder, its clock, its machine and its log."""

    def __init__(self, out: Path, budget: float, resume: Path | None = None, start: float | None = None,
                 tiny: bool = False):
        self.out, self.resume, self.tiny = out, resume, tiny
        self.started = start if start is not None else time.time()
        # the budget counts from `start` (benchmarks/gpu/gpu.sh's, on the wall clock); kept on the monotonic clock
        self.deadline = time.monotonic() + budget - max(0.0, time.time() - self.started)
        out.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}  # headless MuJoCo needs no GL here
        self.machine, self.gpu = machine_id(), "unknown"
        self.pairs, self.guess = (TINY_PAIRS, TINY_GUESS) if tiny else (PAIRS, FIRST_GUESS)
        self.leanrl_site: Path | None = None  # where torchrl is installed for LeanRL's runs (the leanrl part)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def file(self, name: str) -> Path:
        """OUT/name, started from the resumed folder's copy where OUT has none yet: a file this command changes is
        written whole into OUT, and only such files are."""
        path = self.out / name
        if not path.exists() and self.resume is not None and (self.resume / name).is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.resume / name, path)
        return path

    def log(self, line: str) -> None:
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        print(stamped, file=sys.stderr, flush=True)
        with open(self.file("sitting.log"), "a") as f:
            f.write(stamped + "\n")

    def expected(self, data: dict, pair: str, mode: str) -> float:
        """A run's expected seconds: the pair's last run in this mode on this GPU, else on any; for a pair not timed
        yet, the median of the other pairs' runs in this mode on this GPU; else the guess."""
        def walls(pairs, same_gpu):
            return [r["runs"][mode]["wall"] for p in pairs for r in data["pairs"].get(p, {}).get("rounds", [])
                    if "wall" in r["runs"].get(mode, {}) and (r.get("gpu") == self.gpu or not same_gpu)]
        for same_gpu in (True, False):
            if own := walls([pair], same_gpu):
                return own[-1]
        if others := walls([p for p in data["pairs"] if p != pair], True):
            return statistics.median(others)
        return self.guess[mode]


def start_group(cmd: list[str], cwd, env: dict, **kwargs) -> subprocess.Popen:
    """A child in a process group of its own: the sitting can end it with everything it started. Where this process
    ignores SIGINT (a shell without job control starts a background command so, and a child inherits it: Python then
    installs no Ctrl-C handler, and pytest would not write its junit file on the sitting's SIGINT), the child gets
    SIGINT's default back."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        kwargs["preexec_fn"] = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    return subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True, **kwargs)


def stop_gracefully(proc: subprocess.Popen, at: float, grace: float) -> str:
    """Wait for `proc` until the monotonic time `at`; then a SIGINT to its process group, as a Ctrl-C in a terminal
    (pytest writes its junit file on it; its xdist workers stop their tests, which end their runs), and `grace` seconds
    later SIGKILL to the group. The group is swept in any case. How it ended, in words."""
    try:
        proc.wait(timeout=max(0.0, at - time.monotonic()))
        how = "finished"
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
            how = "stopped at its time limit by a SIGINT"
        except subprocess.TimeoutExpired:
            how = f"killed: still running {grace:.0f} s after its SIGINT"
    kill_group(proc)  # the rest of its group (pytest's workers and the runs they started), if anything is left
    return how


def machine(sitting: Sitting, plan: str | None) -> None:
    """machine.json: every machine of the sitting (GPU, driver, CPU, versions) and every command (its machine, the
    commit its tree was at, its plan and day)."""
    path = sitting.file("machine.json")
    data = json.loads(path.read_text()) if path.exists() else {"machines": {}, "commands": []}
    info = describe_machine()
    try:
        query = "name,driver_version,memory.total,power.limit"
        smi = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
        info["nvidia-smi"] = dict(zip(query.split(","), (x.strip() for x in smi.split(","))))
    except (OSError, subprocess.TimeoutExpired):
        info["nvidia-smi"] = "not found"
    try:
        import torch

        info["torch cuda"] = torch.version.cuda
    except ImportError:
        pass
    sitting.gpu = info["gpu"]
    data["machines"].setdefault(sitting.machine, info)
    data["commands"].append({"command": command_line(), "plan": plan, "machine": sitting.machine,
                             "commit": commit(REPO), "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())})
    path.write_text(json.dumps(data, indent=1) + "\n")


def tests(sitting: Sitting, workers: int, per_test: float, reserve: float, grace: float) -> None:
    """`pytest -m gpu`, stopped gracefully `reserve` seconds before the budget's end (the later parts' time)."""
    junit = sitting.out / "junit.xml"
    stop_at = sitting.deadline - reserve - grace - MARGIN
    if stop_at - time.monotonic() < min(30.0, per_test):
        sitting.log(f"tests: left for the next command, {sitting.left():.0f} s left and {reserve:.0f} s of it kept "
                    "for the next parts")
        return
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q", "-rfE",
           f"--junitxml={junit}"] + (["-n", str(workers)] if workers > 1 else [])
    sitting.log(f"tests: {shlex.join(cmd[1:]).replace(str(sitting.out) + '/', 'OUT/')}, each test at most "
                f"{per_test:.0f} s, stopped {stop_at - time.monotonic():.0f} s from now at the latest, on "
                f"{sitting.machine}")
    start = time.monotonic()
    with open(sitting.file("pytest.log"), "w") as log:
        log.write(f"machine: {sitting.machine}\n")
        log.flush()
        proc = start_group(cmd + [f"--timeout={per_test:g}"], REPO, sitting.env, stdout=log, stderr=subprocess.STDOUT)
        how = stop_gracefully(proc, stop_at, grace)
    lines = [line for line in (sitting.out / "pytest.log").read_text().splitlines() if line.strip()]
    sitting.log(f"tests: {how}, exit {proc.returncode}: {lines[-1] if lines else 'no output'} "
                f"({time.monotonic() - start:.0f} s); junit.xml {'written' if junit.exists() else 'NOT WRITTEN'}")


def main_job_expected(sitting: Sitting) -> float:
    """The main job's expected seconds: a compiled run's guess on the GPU; under --tiny (no compiling) a CPU's start-up
    and a few hundred updates, on a CPU that CI's other tests load (measured there: up to half a minute)."""
    return 40.0 if sitting.tiny else sitting.guess["compile+cudagraphs"]


def main_job(sitting: Sitting, steps: int) -> None:
    task = TINY_TASK if sitting.tiny else MAIN_TASK
    cmd = [sys.executable, str(REPO / "leanrl" / f"{MAIN_JOB[0]}.py"), *tiny_flags(MAIN_JOB[1:], sitting.tiny), *task,
           "--total-timesteps", str(steps)]
    expected = main_job_expected(sitting)
    if sitting.left() - MARGIN < expected:  # (the tests part kept it)
        sitting.log(f"main: left for the next command, {sitting.left():.0f} s left, ~{expected:.0f} s needed")
        return
    sitting.log(f"main: {shlex.join(cmd[1:]).replace(str(REPO) + '/', '')}")
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_group(cmd, tmp, sitting.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _, stderr = proc.communicate(timeout=max(1.0, sitting.left() - MARGIN))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            sitting.log(f"main: cut short at the budget's end after {time.monotonic() - start:.0f} s: not recorded")
            return
        kill_group(proc)
        took = time.monotonic() - start
        runs = list(Path(tmp).glob("runs/*"))
        log = read_run(runs[0]) if runs else None
    result = {"command": shlex.join(["python", *cmd[1:]]).replace(str(REPO) + "/", ""), "machine": sitting.machine,
              "seconds": round(took, 1), "returncode": proc.returncode, "stderr_tail": stderr[-3000:]}
    if log is not None:
        result |= {"fps": log.values("charts/SPS")[-1:], "warmup_time": log.values("charts/warmup_time"),
                   "logged": {tag: len(points) for tag, points in sorted(log.scalars.items())}}
    sitting.file("main_job.json").write_text(json.dumps(result, indent=1) + "\n")
    sitting.log(f"main: exit {result['returncode']}, fps {result.get('fps')}, warm-up {result.get('warmup_time')}, "
                f"{took:.0f} s")


def speed(sitting: Sitting, pairs: list[str], modes: list[str], rounds: int) -> int:
    """The speed table: rounds of the pairs in these modes (measured_rounds), into speed.json and speed.md."""
    return measured_rounds(sitting, "speed", sitting.pairs, pairs, modes, rounds, speed_table)


def levers(sitting: Sitting, pairs: list[str], modes: list[str], rounds: int) -> int:
    """Each lever beside the mode it changes (LEVERS), in rounds as the speed part's (measured_rounds): levers.json and
    levers.md, the lever over its base in each round and the verdict."""
    return measured_rounds(sitting, "levers", sitting.pairs, pairs, modes, rounds, levers_table)


def measured_rounds(sitting: Sitting, part: str, table: dict, pairs: list[str], modes: list[str], rounds: int,
                    render, about: dict | None = None) -> int:
    """Rounds of the pairs (their task, steps and flags from `table`, as PAIRS) in these modes until each pair has
    `rounds` rounds that measured them all, resumed from <part>.json; a round runs a pair's modes back to back, on this
    machine, and is recorded only whole. `about` (what ran beside ours) is kept in the file's head, which it must match
    where the file has one. Writes <part>.json and <part>.md (`render` of the data). Returns the rounds left for a
    later command."""
    path = sitting.file(f"{part}.json")
    data = json.loads(path.read_text()) if path.exists() else {"pairs": {}}
    for key, value in (about or {}).items():
        if data.setdefault(key, value) != value:
            raise SystemExit(f"{part}: {path.name} holds rounds of another {key} ({data[key]}), not this bundle's "
                             f"({value}): give this sitting another folder")
    left, cut, skipped = 0, False, set()
    labels = ", ".join(MODES[m][0] for m in modes)
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(rounds):
            for pair in pairs:
                _, env_id, steps, flags = table[pair]
                entry = data["pairs"].setdefault(pair, {"env_id": env_id, "steps": steps, "args": flags, "rounds": []})
                done = [r for r in entry["rounds"] if set(modes) <= set(r["runs"])]
                if len(done) > rnd:  # measured by an earlier command of this sitting
                    continue
                if pair in skipped:  # its earlier round was left: so are the rest, said once
                    continue
                expected = sum(sitting.expected(data, pair, m) for m in modes)
                if cut or sitting.left() - MARGIN < expected:
                    skipped.add(pair)
                    left += rounds - len(done)
                    which = f"round {len(done) + 1}" if rounds - len(done) == 1 else f"rounds {len(done) + 1}-{rounds}"
                    sitting.log(f"{part}: {pair} {which} ({labels}): left for the next command, "
                                f"{max(0.0, sitting.left()):.0f} s left, ~{expected:.0f} s needed")
                    continue
                record = {"machine": sitting.machine, "gpu": sitting.gpu,
                          "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "runs": {}}
                for mode in modes:
                    try:
                        r = run_mode(sitting, table, pair, mode, Path(tmp), timeout=max(1.0, sitting.left() - MARGIN))
                        warmup = f"warm-up {r['warmup']:.1f} s, " if "warmup" in r else ""
                        sitting.log(f"{part}: {pair} round {len(done) + 1} {MODES[mode][0]}: {r['sps']:.1f} fps, "
                                    f"{warmup}{r['wall']:.0f} s")
                    except subprocess.TimeoutExpired:
                        cut = True
                        sitting.log(f"{part}: {pair} round {len(done) + 1} {MODES[mode][0]}: cut short at the "
                                    "budget's end; the round is not recorded")
                        break
                    except SystemExit as failure:
                        r = {"error": str(failure)[-1500:]}
                        sitting.log(f"{part}: {pair} {MODES[mode][0]}: failed: {error_line(str(failure))}")
                    record["runs"][mode] = r
                if cut:
                    left += 1
                    continue
                entry["rounds"].append(record)
                path.write_text(json.dumps(data, indent=1) + "\n")
    path.write_text(json.dumps(data, indent=1) + "\n")
    sitting.file(f"{part}.md").write_text(render(data) + "\n")
    return left


def run_mode(sitting: Sitting, table: dict, pair: str, mode: str, workdir: Path, timeout: float) -> dict:
    """One run of a pair in a mode: its fps (`sps`) and wall time; ours with their warm-up (benchmarks/sps.run_once),
    ours at the bundle's earlier commit (its before/: the scripts and package of that commit, first on the path), or
    LeanRL's (leanrl_run). A run past `timeout` raises subprocess.TimeoutExpired; a failed one, SystemExit."""
    _, env_id, steps, flags = table[pair]
    if mode in ("leanrl", "leanrl_eager"):
        return leanrl_run(sitting, table, pair, mode, workdir, timeout)
    folder, env = REPO / "leanrl", sitting.env
    if mode == "before":
        folder = BUNDLE / "before" / "leanrl"
        env = env | inductor_env(pair) | {"PYTHONPATH": os.pathsep.join(filter(None, [
            str(BUNDLE / "before"), env.get("PYTHONPATH")]))}
    return run_once(config(pair, mode, sitting.tiny), shlex.split(flags), steps, env_id, workdir, env=env,
                    timeout=timeout, folder=folder)


def inductor_env(pair: str) -> dict:
    """The inductor setting our SAC and TD3 take on this machine by themselves (harness.inductor_options: loop
    ordering after fusion off on CUDA with torch before 2.12, pytorch#176591), as the environment variable that gives
    it to a script that does not take it: ours at an earlier commit, LeanRL's. The same compiler on both sides."""
    import torch

    from leanrl_utils.harness import inductor_options

    if pair in ("sac", "td3") and torch.cuda.is_available() and inductor_options(torch.device("cuda")):
        return {"TORCHINDUCTOR_LOOP_ORDERING_AFTER_FUSION": "0"}
    return {}


def leanrl_run(sitting: Sitting, table: dict, pair: str, mode: str, workdir: Path, timeout: float) -> dict:
    """One run of LeanRL's optimized script from the bundle's leanrl/ (benchmarks/vs_leanrl/fixes.py), on the pair's
    task, steps and flags (but ours alone), with the stand-in for wandb and torchrl on its path: its fps over its
    window, from the speed values it logged (benchmarks.vs_leanrl.vs_leanrl.window_fps), and every value logged. Under --tiny
    without --compile (tiny_flags) and without --cudagraphs: LeanRL's `--cudagraphs` alone asks for a capturable Adam,
    which torch refuses for weights on the CPU."""
    eager, env_id, steps, flags = table[pair]
    s0, frm = (TINY_LEANRL_READ if sitting.tiny else LEANRL_READ)[pair]
    words = shlex.split(flags)
    for flag in OURS_ALONE:  # with its value
        while flag in words:
            del words[words.index(flag):words.index(flag) + 2]
    mode_flags = [] if sitting.tiny else MODES[mode][2]
    script = BUNDLE / "leanrl" / "leanrl" / f"{eager}{MODES[mode][1]}.py"
    args = ["--env-id", env_id, "--total-timesteps", str(steps), *words, *mode_flags]
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    log = run_dir / "wandb.jsonl"
    path = [str(BUNDLE / "leanrl"), str(sitting.leanrl_site), sitting.env.get("PYTHONPATH")]
    env = sitting.env | inductor_env(pair) | {"LEANRL_WANDB_LOG": str(log),
                                              "PYTHONPATH": os.pathsep.join(filter(None, path))}
    start = time.perf_counter()
    proc = start_group([sys.executable, str(script), *args], run_dir, env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        kill_group(proc)
        raise
    kill_group(proc)
    wall = time.perf_counter() - start
    command = shlex.join([*(f"{k}={v}" for k, v in inductor_env(pair).items()), "python",
                          str(script.relative_to(REPO)), *args])
    if proc.returncode != 0:
        raise SystemExit(f"{command} failed ({proc.returncode}):\n{stderr[-2000:]}")
    logged = standin_speeds(log)
    return {"sps": window_fps(logged, s0, frm), "wall": wall, "command": command, "logged_speed": logged}


def leanrl(sitting: Sitting, pairs: list[str], rounds: int) -> int:
    """Rounds of ours (`--compile --cudagraphs`) beside LeanRL's `--compile --cudagraphs` and eager modes
    (LEANRL_PAIRS), into leanrl.json and leanrl.md; LeanRL's commit and fixes in their head. torchrl (which LeanRL's
    SAC and TD3 import) is installed from the bundle's leanrl/ wheels, without its dependencies, first."""
    fixed = BUNDLE / "leanrl" / "FIXES.json"
    if not fixed.exists():
        raise SystemExit(f"leanrl: no LeanRL in the bundle ({fixed.parent.relative_to(REPO)}/): build it with "
                         "bash benchmarks/gpu/bundle.sh --leanrl CHECKOUT .whl")
    about = json.loads(fixed.read_text())
    wheels = sorted((BUNDLE / "leanrl").glob("*.whl"))
    about["on its path"] = sorted("-".join(w.name.split("-")[:2]) for w in wheels)  # name-version
    with tempfile.TemporaryDirectory(prefix="leanrl-site-") as site:
        sitting.leanrl_site = Path(site)
        if wheels:
            proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                                   "--no-compile", "--no-cache-dir", "--target", site, *map(str, wheels)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"leanrl: the wheels of {fixed.parent.relative_to(REPO)}/ did not install: "
                                 f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        sitting.log(f"leanrl: LeanRL {about['commit'][:7]} with {sum(map(len, about['fixes'].values()))} fixes "
                    f"(benchmarks/vs_leanrl/fixes.py); on its path: {', '.join(about['on its path']) or 'no more'}")
        table = TINY_LEANRL_PAIRS if sitting.tiny else LEANRL_PAIRS
        return measured_rounds(sitting, "leanrl", table, pairs, ["compile+cudagraphs", "leanrl", "leanrl_eager"],
                               rounds, leanrl_table, {"leanrl": about})


def before(sitting: Sitting, pairs: list[str], rounds: int) -> int:
    """Rounds of ours (`--compile --cudagraphs`) beside ours at the bundle's earlier commit (its before/, with the
    commit in before/COMMIT), into before.json and before.md."""
    marker = BUNDLE / "before" / "COMMIT"
    if not marker.exists():
        raise SystemExit(f"before: no earlier commit in the bundle ({marker.parent.relative_to(REPO)}/): build it "
                         "with bash benchmarks/gpu/bundle.sh --before COMMIT .whl")
    about = {"commit": marker.read_text().strip(), "now": commit(REPO)}
    sitting.log(f"before: ours at {about['now']} beside ours at {about['commit']}")
    return measured_rounds(sitting, "before", sitting.pairs, pairs, ["compile+cudagraphs", "before"], rounds,
                           before_table, {"before": about})


def fps_of(rounds: list[dict], mode: str) -> list[float | None]:
    """Each round's fps in a mode (None where it did not measure it)."""
    return [r["runs"].get(mode, {}).get("sps") for r in rounds]


def both(rounds: list[dict], a: str, b: str) -> list[tuple[float, float]]:
    """(fps in a, fps in b) of the rounds that measured both: each pair ran on one machine, back to back."""
    return [(x, y) for x, y in zip(fps_of(rounds, a), fps_of(rounds, b)) if x is not None and y is not None]


def fps_cell(rounds: list[dict], mode: str, reference: str | None = None) -> str:
    """The median fps of a mode over the rounds that measured it (and how many), with its median ratio to the
    reference mode's over the rounds that measured both; the first error where none measured it."""
    got = [x for x in fps_of(rounds, mode) if x is not None]
    if not got:
        errors = [error_line(r["runs"][mode]["error"])[:120] for r in rounds
                  if "error" in r["runs"].get(mode, {})]
        return f"failed: {errors[0]}" if errors else "not run"
    pairs = both(rounds, mode, reference) if reference not in (None, mode) else []
    ratio = f", {statistics.median(x / e for x, e in pairs):.2f}x {MODES[reference][0]}" if pairs else ""
    return f"{statistics.median(got):.1f} ({len(got)} round{'s' * (len(got) > 1)}{ratio})"


def against(rounds: list[dict], a: str, b: str) -> list[str]:
    """a over b, the median of the rounds' ratios, and the verdict by the tie rule ('' where no round has both)."""
    measured = both(rounds, a, b)
    if not measured:
        return ["", ""]
    return [f"{statistics.median(x / y for x, y in measured):.2f}x",
            verdict([x for x, _ in measured], [y for _, y in measured])]


def by_gpu(data: dict):
    """(pair, its entry, a GPU, the pair's rounds on that GPU), in the file's order."""
    for pair, entry in data["pairs"].items():
        for gpu in dict.fromkeys(r.get("gpu", "unknown") for r in entry["rounds"]):
            yield pair, entry, gpu, [r for r in entry["rounds"] if r.get("gpu", "unknown") == gpu]


def speed_table(data: dict) -> str:
    """Per pair and GPU, per mode: the median fps over the rounds that measured it (and how many), its median ratio to
    the eager script over those rounds (each round's ratio: both ran on one machine, back to back), `--compile
    --cudagraphs` against the JAX twin the same way (and the verdict by the tie rule), and LeanRL's published H100
    figures (eager, --compile, --compile --cudagraphs: docs/quoted.md)."""
    modes = [m for m in MODES if any(m in r["runs"] for e in data["pairs"].values() for r in e["rounds"])]
    best, twin = "compile+cudagraphs", "jax"
    head = ["pair", "GPU", *(f"`{MODES[m][0]}`" if m not in ("eager", "none", "jax") else MODES[m][0] for m in modes),
            f"`{MODES[best][0]}` / JAX", f"`{MODES[best][0]}` against JAX",
            "LeanRL, one H100: eager / `--compile` / `--compile --cudagraphs`"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for pair, entry, gpu, rounds in by_gpu(data):
        leanrl_h100 = " / ".join(str(x) for x in LEANRL_H100[pair]) if pair in LEANRL_H100 else ""
        lines.append(f"| {pair} ({entry['steps']} steps) | {gpu} | "
                     + " | ".join(fps_cell(rounds, m, "eager") for m in modes) + " | "
                     + " | ".join(against(rounds, best, twin)) + f" | {leanrl_h100} |")
    return "\n".join(lines)


def levers_table(data: dict) -> str:
    """Per pair and GPU, per lever measured: its median fps and its base mode's over the rounds (and how many), the
    lever over its base (the median of the rounds' ratios: both ran on one machine, back to back) and the verdict by
    the tie rule."""
    lines = ["| pair | GPU | lever | fps | the mode it changes | fps | lever / it | verdict |", "|---" * 8 + "|"]
    for pair, entry, gpu, rounds in by_gpu(data):
        for lever, base in LEVERS.items():
            if any(lever in r["runs"] for r in rounds):
                lines.append(f"| {pair} ({entry['steps']} steps) | {gpu} | `{MODES[lever][0]}` | "
                             f"{fps_cell(rounds, lever)} | `{MODES[base][0]}` | {fps_cell(rounds, base)} | "
                             + " | ".join(against(rounds, lever, base)) + " |")
    return "\n".join(lines)


def leanrl_table(data: dict) -> str:
    """Per pair and GPU: the median fps of ours (`--compile --cudagraphs`) and of LeanRL's two modes over the rounds
    (and how many), ours over LeanRL's `--compile --cudagraphs` (the median of the rounds' ratios, and the verdict by
    the tie rule), LeanRL's published figure for that mode on one H100 (docs/quoted.md) and LeanRL here over it."""
    ours, theirs = "compile+cudagraphs", "leanrl"
    about = data["leanrl"]
    lines = [f"LeanRL {about['commit'][:7]} (github.com/pytorch-labs/LeanRL), fixed only to run by "
             f"benchmarks/vs_leanrl/fixes.py; on its path: {', '.join(about['on its path']) or 'nothing more'}. "
             "Its fixes:", "", *(f"- {line}" for line in fixes_applied(about)), "",
             f"| pair | GPU | ours `{MODES[ours][0]}` | {MODES[theirs][0]} | {MODES['leanrl_eager'][0]} | "
             f"ours / {MODES[theirs][0]} | ours against it | LeanRL's published `--compile --cudagraphs`, one H100 | "
             "LeanRL here / published |", "|---" * 9 + "|"]
    for pair, entry, gpu, rounds in by_gpu(data):
        published = LEANRL_H100[pair][2]
        here = [x for x in fps_of(rounds, theirs) if x is not None]
        share = f"{statistics.median(here) / published:.2f}" if here else ""
        lines.append(f"| {pair} ({entry['steps']} steps) | {gpu} | "
                     + " | ".join(fps_cell(rounds, m) for m in (ours, theirs, "leanrl_eager")) + " | "
                     + " | ".join(against(rounds, ours, theirs)) + f" | {published} | {share} |")
    return "\n".join(lines)


def before_table(data: dict) -> str:
    """Per pair and GPU: the median fps of ours now and at the earlier commit (`--compile --cudagraphs`), and now over
    then (the median of the rounds' ratios, and the verdict by the tie rule)."""
    now, then = data["before"]["now"], data["before"]["commit"]
    lines = [f"| pair | GPU | `--compile --cudagraphs` at {now} | at {then} | {now} / {then} | {now} against {then} |",
             "|---" * 6 + "|"]
    for pair, entry, gpu, rounds in by_gpu(data):
        lines.append(f"| {pair} ({entry['steps']} steps) | {gpu} | "
                     + " | ".join(fps_cell(rounds, m) for m in ("compile+cudagraphs", "before")) + " | "
                     + " | ".join(against(rounds, "compile+cudagraphs", "before")) + " |")
    return "\n".join(lines)


def learn(sitting: Sitting, steps: int, eager_steps: int | None = None, stop_after: float | None = None) -> None:
    """The main job learning, then the eager script for as long (`stop_after`: the compiled run's wall-clock time,
    unless given), stopped with a Ctrl-C only if it is still running then: returns against wall-clock time, raw
    scalars. The Ctrl-C waits until the eager run has opened its writer (its main() is running, under the handler
    that keeps the logs): a Ctrl-C during its imports would end it with nothing logged."""
    task = TINY_TASK if sitting.tiny else LEARN_TASK
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {name: Path(tmp) / name for name in ("compiled", "eager")}
        for folder in folders.values():
            folder.mkdir()
        fast = [sys.executable, str(REPO / "leanrl" / f"{MAIN_JOB[0]}.py"), *tiny_flags(MAIN_JOB[1:], sitting.tiny),
                *task, "--total-timesteps", str(steps)]
        sitting.log(f"learn: {shlex.join(fast[1:]).replace(str(REPO) + '/', '')}")
        start = time.monotonic()
        proc = start_group(fast, folders["compiled"], sitting.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        try:  # at most half of what is left: the eager run gets as long
            _, err = proc.communicate(timeout=max(1.0, (sitting.left() - MARGIN) / 2))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            sitting.log(f"learn: cut short at the budget's end after {time.monotonic() - start:.0f} s: not recorded")
            return
        kill_group(proc)
        took = time.monotonic() - start
        result["compiled"] = _learning_record(fast, proc.returncode, err, took, folders["compiled"], stopped=False)
        eager = [sys.executable, str(REPO / "leanrl" / "sac_continuous_action.py"), *task,
                 "--total-timesteps", str(eager_steps or steps)]
        limit = took if stop_after is None else stop_after
        sitting.log(f"learn: {shlex.join(eager[1:]).replace(str(REPO) + '/', '')}, stopped by a Ctrl-C after "
                    f"{limit:.0f} s if still running")
        start = time.monotonic()
        proc = start_group(eager, folders["eager"], sitting.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
        end = min(start + limit, sitting.deadline - MARGIN)
        stopped = False
        try:
            _, err = proc.communicate(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            # still running: once its writer is open, a Ctrl-C; a run that ends meanwhile is not signalled
            while proc.poll() is None and not list(folders["eager"].glob("runs/*/events.*")) and \
                    time.monotonic() < sitting.deadline - MARGIN:
                time.sleep(0.1)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                stopped = True
            try:
                _, err = proc.communicate(timeout=max(1.0, sitting.deadline - MARGIN - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_group(proc)
                _, err = proc.communicate()
        kill_group(proc)
        result["eager"] = _learning_record(eager, proc.returncode, err, time.monotonic() - start, folders["eager"],
                                           stopped)
    sitting.file("learning.json").write_text(json.dumps(result) + "\n")
    sitting.log("learn: " + ", ".join(f"{k}: exit {v['returncode']}{' after its Ctrl-C' * v['stopped']}, "
                                      f"{v['last_step']} steps" for k, v in result.items()))


def _learning_record(cmd, returncode, stderr, took, cwd: Path, stopped: bool) -> dict:
    runs = list(cwd.glob("runs/*"))
    log = read_run(runs[0]) if runs else None
    scalars = {} if log is None else {tag: [[s, round(w, 3), v] for s, w, v in points] for tag, points in log.scalars.items()}
    steps = [s for points in scalars.values() for s, _, _ in points]
    return {"command": shlex.join(["python", *cmd[1:]]).replace(str(REPO) + "/", ""), "seconds": round(took, 1),
            "returncode": returncode, "stopped": stopped, "last_step": max(steps, default=0),
            "stderr_tail": (stderr or "")[-1500:], "scalars": scalars}


def limits(sitting: Sitting, pairs: str | None = None, modes: str | None = None) -> None:
    """The GPU limit study into OUT/limits, resumed from the resumed folder's limits/, in what is left: of these pairs
    and modes (None: the study's own defaults)."""
    out = sitting.out / "limits"
    for name in ("results.json", "sitting.log"):
        sitting.file(f"limits/{name}")
    budget = sitting.left() - 2 * MARGIN
    chosen = [*(["--pairs", pairs] if pairs else []), *(["--modes", modes] if modes else [])]
    cmd = [sys.executable, "-m", "benchmarks.gpu.limits", "--out", str(out), "--budget", f"{budget:.0f}", *chosen,
           *(TINY_LIMITS if sitting.tiny else [])]
    sitting.log(f"limits: python -m benchmarks.gpu.limits --budget {budget:.0f} {shlex.join(chosen)}".rstrip())
    start = time.monotonic()
    proc = start_group(cmd, REPO, sitting.env)
    try:
        proc.wait(timeout=max(1.0, sitting.left() - MARGIN))
        how = f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        how = "cut short at the budget's end (its rows so far are kept)"
    kill_group(proc)
    sitting.log(f"limits: {how} ({time.monotonic() - start:.0f} s)")


def check_out(out: Path) -> list[str]:
    """What in OUT the GPU machine would not bring back: more than 8 files, a file more than one folder down (the
    machine allows two; one keeps a margin), a name not of letters, digits, '.', '_' and '-'."""
    files = [p for p in out.rglob("*") if p.is_file()]
    wrong = [f"{len(files)} files, over 8"] if len(files) > 8 else []
    wrong += [f"{p.relative_to(out)}: more than one folder down" for p in files if len(p.relative_to(out).parts) > 2]
    wrong += [f"{p.relative_to(out)}: a name the machine refuses" for p in out.rglob("*")
              if not all(c.isascii() and (c.isalnum() or c in "._-") for c in p.name)]
    return wrong


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        print(f"benchmarks.gpu: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog=f"python -m {__package__}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="the folder that comes back from the GPU machine ($OUT)")
    parser.add_argument("--plan", choices=PLANS, help="one command of docs/gpu.md's plan: its parts, sizes, budget")
    parser.add_argument("--resume", type=Path, default=None, metavar="DIR",
                        help="the sitting's folder, committed after the last command: this command continues it")
    parser.add_argument("--parts", help=f"of {', '.join(PARTS)}, in this order (default: the plan's)")
    parser.add_argument("--budget", type=float, help="seconds for the whole command, from benchmarks/gpu/gpu.sh's start")
    parser.add_argument("--pairs", help="the speed table's pairs")
    parser.add_argument("--modes", help=f"the speed table's modes, of {', '.join(MODES)}")
    parser.add_argument("--rounds", type=int, help="rounds of each pair in these modes that the sitting should hold")
    parser.add_argument("--limits-pairs", help="the limit study's pairs (default: its own)")
    parser.add_argument("--limits-modes", help="the limit study's modes (default: its own)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="pytest-xdist workers for the tests")
    parser.add_argument("--test-timeout", type=float, help="seconds a GPU test may run (default 180; --tiny 8)")
    parser.add_argument("--grace", type=float, default=20.0, help="seconds pytest gets after its SIGINT")
    parser.add_argument("--main-steps", type=int, help="--total-timesteps of the main job's run (default 8000)")
    parser.add_argument("--learn-steps", type=int, help="--total-timesteps of the learning run (default 200000)")
    parser.add_argument("--tiny", action="store_true", help="CPU-sized runs: the rehearsal of a command")
    parser.add_argument("--plans", action="store_true", help="print the plans and stop")
    parser.add_argument("--summary", type=Path, default=None, metavar="FOLDER",
                        help="write FOLDER/speed.md from FOLDER/speed.json, and nothing else")
    opts = parser.parse_args(argv)
    if opts.plans:
        for name, plan in PLANS.items():
            print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in plan.items()))
        return
    if opts.summary:
        text = speed_table(json.loads((opts.summary / "speed.json").read_text()))
        (opts.summary / "speed.md").write_text(text + "\n")
        print(text)
        return
    if opts.out is None:
        parser.error("give --out (or --plans, or --summary FOLDER)")
    for key, value in (DEFAULTS | PLANS.get(opts.plan, {})).items():
        if getattr(opts, key) is None:
            setattr(opts, key, value)
    parts, pairs, modes = opts.parts.split(","), opts.pairs.split(","), opts.modes.split(",")
    if unknown := [p for p in parts if p not in PARTS]:
        parser.error(f"--parts: no such part {unknown[0]!r}; the parts are {', '.join(PARTS)}")
    if unknown := [p for p in pairs if p not in PAIRS]:
        parser.error(f"--pairs: no such pair {unknown[0]!r}; the pairs are {', '.join(PAIRS)}")
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"--modes: no such mode {unknown[0]!r}; the modes are {', '.join(MODES)}")
    for lever in [m for m in modes if m in LEVER_PAIRS]:
        if other := [p for p in pairs if p not in LEVER_PAIRS[lever]]:
            parser.error(f"--modes {lever} ({MODES[lever][0]}) is for {', '.join(LEVER_PAIRS[lever])} only, "
                         f"not {other[0]}")
    if "leanrl" in parts and (unknown := [p for p in pairs if p not in LEANRL_PAIRS]):
        parser.error(f"--pairs: the leanrl part has no pair {unknown[0]!r}; its pairs are {', '.join(LEANRL_PAIRS)}")
    if opts.resume is not None and not opts.resume.is_dir():
        parser.error(f"--resume {opts.resume}: no such folder")
    if opts.budget <= 0 or opts.rounds < 1:
        parser.error(f"--budget must be positive and --rounds at least 1 (given {opts.budget:g} and {opts.rounds})")
    start = float(os.environ.get("LEANRL_SITTING_START") or time.time())
    sitting = Sitting(opts.out, opts.budget, opts.resume, start, opts.tiny)
    sitting.log(f"sitting: {command_line()} (plan {opts.plan or 'none'}, {sitting.left():.0f} s of the budget left)")
    if opts.tiny:
        sitting.log("sitting: --tiny: CPU-sized runs, --compile left out of each (tiny_flags)")
    machine(sitting, opts.plan)
    per_test = opts.test_timeout or (8.0 if opts.tiny else 180.0)
    left = []
    for i, part in enumerate(parts):
        if sitting.left() <= MARGIN:
            sitting.log(f"{part}: left for the next command, the budget is spent")
            left.append(part)
            continue
        if part == "tests":  # the later parts' time is kept: the main job's guess, the others' whatever is left
            reserve = main_job_expected(sitting) + MARGIN if "main" in parts[i + 1:] else 0.0
            tests(sitting, opts.workers, per_test, reserve, opts.grace)
        elif part == "main":
            main_job(sitting, opts.main_steps or (320 if opts.tiny else 8000))
        elif part in ("speed", "levers"):
            if missing := (speed if part == "speed" else levers)(sitting, pairs, modes, opts.rounds):
                left.append(f"{part} ({missing} rounds)")
        elif part in ("leanrl", "before"):
            try:
                missing = (leanrl if part == "leanrl" else before)(sitting, pairs, opts.rounds)
            except SystemExit as failure:  # no such bundle, or a folder of other rounds: said, and the next part
                sitting.log(str(failure))
                continue
            if missing:
                left.append(f"{part} ({missing} rounds)")
        elif part == "learn":
            learn(sitting, opts.learn_steps or (400 if opts.tiny else 200_000))
        elif part == "limits":
            limits(sitting, opts.limits_pairs, opts.limits_modes)
    sitting.log(f"sitting: done, {sitting.left():.0f} s of the budget left" +
                (f"; left for the next command (the same plan, with --resume): {', '.join(left)}" if left else ""))
    if wrong := check_out(sitting.out):
        sitting.log("sitting: OUT breaks the GPU machine's limits: " + "; ".join(wrong))
        sys.exit(1)


if __name__ == "__main__":
    main()
