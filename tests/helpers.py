"""Shared test helpers: run a script of leanrl/ in a folder of its own, read what it logged; and what several
test files share (the pairs' short runs, learning tasks and hand-made data, the GPU runs, the script contract's
table), written once here: no test file imports another."""

import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import forkserver
import numpy as np

from leanrl_utils.events import read_scalars
from leanrl_utils.scripts import SCRIPT_DIR, load_script  # noqa: F401  (load_script: for the tests)

REPO = SCRIPT_DIR.parent
# The CPU suite runs on the CPU on every machine, a GPU machine included: its checks (the --cudagraphs
# fallback warning, compiled code drawing eager's random numbers) are the CPU's. conftest.py hides CUDA from
# the test processes before torch looks, keeping the user's setting in LEANRL_TEST_CUDA_VISIBLE_DEVICES;
# the runs started with ENV see no CUDA either, and the GPU tests start theirs with GPU_ENV.
ENV = {
    **os.environ,
    "CUDA_VISIBLE_DEVICES": "",
    "PYTHONUNBUFFERED": "1",
    "WANDB_MODE": "offline",
    "PYTHONWARNINGS": "ignore",
    # compiled kernels are cached on disk: later compiles of the same graphs in this run are faster
    "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
}
# Under pytest-xdist (`pytest -n N`), N tests run at once: each run gets its share of the cores (its
# OMP_NUM_THREADS, pinned by conftest.py for every run). Tests compare runs made with the same setting.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    # the JAX twins: XLA's CPU backend sizes its thread pool by the cores, not by OMP_NUM_THREADS
    # (XLA has no flag for a thread count: single-threaded Eigen is the one it offers)
    ENV["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()


GPU_ENV = {k: v for k, v in ENV.items() if k != "CUDA_VISIBLE_DEVICES"}
if os.environ.get("LEANRL_TEST_CUDA_VISIBLE_DEVICES", "<unset>") != "<unset>":
    GPU_ENV["CUDA_VISIBLE_DEVICES"] = os.environ["LEANRL_TEST_CUDA_VISIBLE_DEVICES"]


@functools.cache
def cuda_device_count() -> int:
    """The CUDA devices that the GPU tests' runs see (asked in a process of their own: this one has CUDA
    hidden); 0 without asking for a CPU build of torch."""
    import torch

    if torch.version.cuda is None:
        return 0
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    out = subprocess.run([sys.executable, "-c", code], env=GPU_ENV, capture_output=True, text=True, timeout=300)
    return int(out.stdout.strip() or 0)


@dataclass
class Run:
    """A finished script run: exit code, output, and the scalars of its TensorBoard run folder."""

    returncode: int
    stdout: str
    stderr: str
    cwd: Path
    _scalars: dict | None = field(default=None, repr=False)

    @property
    def run_dir(self) -> Path:
        dirs = sorted((self.cwd / "runs").glob("*"))
        assert len(dirs) == 1, f"expected one run folder in {self.cwd / 'runs'}, found {dirs}\n{self.stderr[-3000:]}"
        return dirs[0]

    @property
    def scalars(self) -> dict[str, list[tuple[int, float]]]:
        if self._scalars is None:
            self._scalars = read_scalars(self.run_dir)
        return self._scalars

    def values(self, tag: str) -> list[float]:
        return [v for _, v in self.scalars.get(tag, [])]

    def check(self) -> "Run":
        assert self.returncode == 0, f"exit code {self.returncode}\n{self.stderr[-4000:]}"
        return self


def with_flag(args: list[str], flag: str, value: str) -> list[str]:
    """`args` with `flag` set to `value` (replaced if present, appended if not)."""
    args = list(args)
    if flag in args:
        args[args.index(flag) + 1] = value
        return args
    return args + [flag, value]


def script_cmd(script: str, *args: str) -> list[str]:
    return [sys.executable, str(SCRIPT_DIR / f"{script}.py"), *args]


def run_script(script: str, *args: str, cwd: Path, timeout: float = 900) -> Run:
    """`python leanrl/<script>.py args` in `cwd`, with ENV: forked from a process that has made the script's imports
    already (forkserver.py: what the run sees is what a new interpreter would), a subprocess where none can."""
    cwd.mkdir(parents=True, exist_ok=True)
    proc = forkserver.run(script_cmd(script, *args), cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, cwd)


def run_in_process(script: str, *args: str, cwd: Path) -> Run:
    """What `python leanrl/<script>.py args` does, run in this process: for the checks that stop before
    any work (--help, bad input), a fraction of a second instead of a new interpreter's seconds."""
    import contextlib
    import io
    import traceback

    from leanrl_utils import harness

    module = load_script(script)
    cwd.mkdir(parents=True, exist_ok=True)
    out, err, code, here, argv = io.StringIO(), io.StringIO(), 0, os.getcwd(), sys.argv
    # the writers the run opens, closed here, in its folder: in a process of its own they close at its exit; in
    # this one, left open, their thread would write to the relative runs/... after the test's folder is gone
    writers, make_writer = [], harness.make_writer
    harness.make_writer = lambda *a, **k: writers.append(make_writer(*a, **k)) or writers[-1]
    try:
        os.chdir(cwd)
        sys.argv = [str(SCRIPT_DIR / f"{script}.py"), *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                harness.run(module.main, module.Args, module.check_args, list(args))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        harness.make_writer = make_writer
        for writer in writers:
            writer.close()
        os.chdir(here)
        sys.argv = argv
    return Run(code, out.getvalue(), err.getvalue(), cwd)


_WITH_CTRL_C = """
import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def interrupt_script(script: str, *args: str, cwd: Path, after_step: int, timeout: float = 300,
                     sig: int = signal.SIGINT) -> Run:
    """Start a run, send SIGINT (or `sig`) once its progress bar has passed `after_step`, wait for it to exit."""
    cwd.mkdir(parents=True, exist_ok=True)
    # a shell without job control starts background jobs with SIGINT ignored, and a Python started so
    # never raises KeyboardInterrupt: the child puts Python's own handler back first, as in a terminal
    # (set in the child rather than by a preexec_fn: forking a test process that has loaded JAX, whose
    # threads are running, can deadlock the child)
    cmd = script_cmd(script, *args)
    proc = forkserver.popen([sys.executable, "-c", _WITH_CTRL_C, *cmd[1:]], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, imports_of=[_WITH_CTRL_C, cmd[1]])
    try:
        return _interrupt(proc, cwd, after_step, timeout, sig)
    finally:
        if proc.poll() is None:  # a failed check leaves no run behind
            proc.kill()
            proc.wait()


def _interrupt(proc: subprocess.Popen, cwd: Path, after_step: int, timeout: float, sig: int = signal.SIGINT) -> Run:
    stderr: list[str] = []
    reached = threading.Event()

    def read_stderr():
        for chunk in iter(lambda: proc.stderr.read(256), ""):
            stderr.append(chunk)
            steps = [int(m) for m in re.findall(r"(\d+)/\d+ \[", "".join(stderr)[-2000:])]
            if steps and max(steps) >= after_step:
                reached.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while not reached.is_set() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert reached.is_set(), f"the run never reached step {after_step}:\n{''.join(stderr)[-3000:]}"
    proc.send_signal(sig)
    proc.wait(timeout=120)
    reader.join(timeout=30)  # stderr is read to its end by the reader thread alone
    return Run(proc.returncode, proc.stdout.read(), "".join(stderr), cwd)


# Runs a script as __main__ with F.relu patched to raise KeyboardInterrupt when called from a function
# of the given name: a Ctrl-C that lands at a chosen point instead of wherever a signal happens to land.
_CTRL_C_INSIDE = """
import runpy, sys
import torch.nn.functional as F

relu, target = F.relu, sys.argv.pop(1)


def relu_or_ctrl_c(*args, **kwargs):
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == target:
            raise KeyboardInterrupt
        frame = frame.f_back
    return relu(*args, **kwargs)


F.relu = relu_or_ctrl_c
sys.argv.pop(0)
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def ctrl_c_inside(function: str, script: str, *args: str, cwd: Path, timeout: float = 300) -> Run:
    """Run a script and press Ctrl-C (deterministically) at its first ReLU inside `function`."""
    cwd.mkdir(parents=True, exist_ok=True)
    script_path = str(SCRIPT_DIR / f"{script}.py")
    cmd = [sys.executable, "-c", _CTRL_C_INSIDE, function, *script_cmd(script, *args)[1:]]
    proc = forkserver.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout,
                          imports_of=[_CTRL_C_INSIDE, script_path])
    return Run(proc.returncode, proc.stdout, proc.stderr, cwd)


# Runs a script as __main__ and, once its loop is at step `at` or past it (harness.Progress.tick, called at the top of
# each iteration right after the checkpoint's safe point), kills it with SIGKILL ("kill"), presses Ctrl-C ("ctrl-c",
# twice with "ctrl-c-twice"), or, when its `write`-th checkpoint is half written, kills it ("kill-in-write"): a stop
# at a chosen step instead of wherever a signal happens to land. With "check", nothing stops: once --resume has put
# the run's state back, every object and loop value is encoded again and compared with the checkpoint's, and a line
# says whether all are equal.
_AT_STEP = """
import io, os, runpy, signal, sys
import torch
from leanrl_utils import checkpoints, harness

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (see interrupt_script)
action, at = sys.argv[1], int(sys.argv[2])
sys.argv = sys.argv[3:]
tick, done, writes = harness.Progress.tick, [], []


def tick_and_stop(self, step):
    tick(self, step)
    if step >= at and not done:
        done.append(step)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action.startswith("ctrl-c"):
            signal.raise_signal(signal.SIGINT)
        if action == "ctrl-c-twice":
            signal.raise_signal(signal.SIGINT)


save = torch.save


def save_half_then_die(obj, f, *args, **kwargs):  # torch.save, as checkpoints.write calls it: the at-th dies
    writes.append(f)
    if len(writes) < at:
        return save(obj, f, *args, **kwargs)
    data = io.BytesIO()
    save(obj, data, *args, **kwargs)
    f.write(data.getvalue()[: len(data.getvalue()) // 2])
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)


resume = harness.Checkpoint.resume


def resume_and_compare(self, step, *values):
    saved = harness._resume
    out = resume(self, step, *values)
    if saved is not None:
        now = {name: checkpoints.encode(obj) for name, obj in self.objects.items()}
        same = checkpoints.same(now, saved["objects"]) and checkpoints.same(
            [checkpoints.encode(v) for v in out[1:]], saved["values"])
        print(f"restored state equals the checkpoint's: {same}", file=sys.stderr, flush=True)
    return out


if action == "kill-in-write":
    torch.save = save_half_then_die
elif action == "check":
    harness.Checkpoint.resume = resume_and_compare
else:
    harness.Progress.tick = tick_and_stop
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def stop_at_step(action: str, script: str, *args: str, cwd: Path, at: int, timeout: float = 600) -> Run:
    """Run a script and stop it at step `at` (see _AT_STEP: "kill", "ctrl-c", "ctrl-c-twice", "kill-in-write", where
    `at` counts checkpoints, or "check")."""
    cwd.mkdir(parents=True, exist_ok=True)
    script_path = str(SCRIPT_DIR / f"{script}.py")
    cmd = [sys.executable, "-c", _AT_STEP, action, str(at), *script_cmd(script, *args)[1:]]
    proc = forkserver.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout,
                          imports_of=[_AT_STEP, script_path])
    return Run(proc.returncode, proc.stdout, proc.stderr, cwd)


def resumed_step(run: Run) -> int:
    """The step a resumed run went on from (its "resumed runs/... at step N" line)."""
    found = re.findall(r"resumed runs/\S+ at step (\d+)", run.stderr)
    assert len(found) == 1, run.stderr[-3000:]
    return int(found[0])


# What every pair's flag-combination test runs: the eager script, then the optimized one in each mode
MODES = [(), ("--compile",), ("--cudagraphs",), ("--compile", "--cudagraphs")]
CUDAGRAPHS_WARNING = "--cudagraphs needs a CUDA device"
PPO_LOSSES = ["losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/old_approx_kl",
              "losses/approx_kl", "losses/clipfrac", "losses/explained_variance", "charts/learning_rate"]


def learns_and_plays_back(script_args, learn_args, *, cwd: Path, threshold: float, last: int = 5,
                          from_step: int | None = None, eval_threshold: float | None = None,
                          eval_episodes: int = 5, reload: bool = True) -> Run:
    """A learning check: the run (saving its model, playing the trained policy for `eval_episodes` episodes)
    averages above `threshold` over its last `last` episodes, or over every episode from `from_step` on; its
    trained policy, played by --save-model, averages above `eval_threshold` (`threshold` unless given); and so
    does its checkpoint, loaded into the eager script's network (evals.evaluate: a JAX twin's parameters
    converted, a critic stacked or not) and played as long, unless `reload` is off: a policy saved, converted or
    loaded wrong scores as a random one."""
    from leanrl_utils import evals

    run = run_script(*script_args, *learn_args, "--save-model", "--eval-episodes", str(eval_episodes), cwd=cwd).check()
    returns = run.scalars["charts/episodic_return"]
    trained = [v for s, v in returns if s >= from_step] if from_step is not None else [v for _, v in returns][-last:]
    assert trained and sum(trained) / len(trained) > threshold, f"training's last episodes: {trained}"
    evaluated = run.values("eval/episodic_return")
    bar = threshold if eval_threshold is None else eval_threshold
    assert len(evaluated) == eval_episodes and sum(evaluated) / eval_episodes > bar, \
        f"evaluation: {evaluated}, training: {trained}"
    if reload:
        reloaded = evals.evaluate(str(next(run.run_dir.glob("*.pt"))), eval_episodes=eval_episodes, seed=1)
        assert len(reloaded) == eval_episodes and sum(reloaded) / eval_episodes > bar, \
            f"the checkpoint, loaded back: {reloaded}, the trained policy: {evaluated}"
    return run


def flag_configs(eager: str, fast: str) -> list[tuple[str, ...]]:
    return [(eager,)] + [(fast, *mode) for mode in MODES]


def tier(config: tuple[str, ...]) -> tuple:
    """The marks of a flag combination's run: one of the two flags alone is left to the full suite (slow). The quick
    tier runs each script with no flag and with both, whose runs go through the code of each."""
    import pytest

    return (pytest.mark.slow,) if sum(flag in config for flag in ("--compile", "--cudagraphs")) == 1 else ()


def check_flag_run(run: Run, config: tuple[str, ...], tags: list[str], logs: int) -> None:
    """A short run of one flag combination: exits 0, logs fps > 0 and each tag `logs` times; on a
    CPU, --cudagraphs says once that it falls back, then runs."""
    run.check()
    assert run.values("charts/SPS") and min(run.values("charts/SPS")) > 0
    for tag in tags:
        assert len(run.values(tag)) == logs, f"{tag}: {run.scalars.get(tag)}"
    assert run.stderr.count(CUDAGRAPHS_WARNING) == ("--cudagraphs" in config)


def wandb_history(path: Path) -> dict[str, list]:
    """The values an offline wandb run file holds, per key: {key: [values, in logging order]}."""
    from leanrl_utils.events import wandb_history as calls

    history = {}
    for row in calls(path):
        for key, value in row.items():
            history.setdefault(key, []).append(value)
    return history


class RunCache:
    """Runs shared by several tests: each (script, args) runs once per test session, with `runner` (run_script,
    or another launcher with its signature: torchrun, a GPU launcher), in a folder of its own under `root`.

    Under pytest-xdist the session's test processes share `root` (conftest.py's `cached_run` puts it in the
    session's base temp, which every worker's is in): the first process to ask for a run makes it, holding a
    lock on it (fcntl.flock, released when its file closes or its process dies); a process that asks meanwhile
    waits for it, then reads what it left: its exit code and output (a JSON file beside its folder, with how
    long the run took) and its folder. Only the run itself is under the lock, so no process holds one while it waits for another. A run
    whose maker stopped before it ended (a test's time limit, a worker that died) is run again by the next
    to ask. A finished run's files are made read-only: the tests share them, and one that would change them
    works on a copy. `name` keeps apart the runs of launchers that share a root."""

    def __init__(self, root: Path, runner=None, name: str | None = None):
        self.root, self.runs, self.runner = Path(root), {}, runner or run_script
        self.name = name or getattr(self.runner, "__qualname__", repr(self.runner))
        self.root.mkdir(parents=True, exist_ok=True)

    def __call__(self, script: str, *args: str) -> Run:
        key = (script, *args)
        if key not in self.runs:
            self.runs[key] = self._shared(key)
        return self.runs[key]

    def _shared(self, key: tuple[str, ...]) -> Run:
        import fcntl
        import hashlib
        import json
        import shutil

        label = hashlib.sha1(repr((self.name, key)).encode()).hexdigest()[:16]
        cwd, result = self.root / label, self.root / f"{label}.json"
        with open(self.root / f"{label}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if result.exists():
                done = json.loads(result.read_text())
                return Run(done["returncode"], done["stdout"], done["stderr"], cwd)
            if cwd.exists():  # left by a maker that stopped before the run ended
                shutil.rmtree(cwd)
            started = time.monotonic()
            run = self.runner(key[0], *key[1:], cwd=cwd)
            seconds = round(time.monotonic() - started, 2)
            for path in cwd.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    path.chmod(path.stat().st_mode & ~0o222)
            written = result.with_suffix(".part")
            written.write_text(json.dumps({"runner": self.name, "args": list(key), "returncode": run.returncode,
                                           "seconds": seconds, "stdout": run.stdout, "stderr": run.stderr}))
            written.replace(result)
            return run


def log_differences(a: Run, b: Run, tags: list[str], rtol: float, atol: float = 1e-6,
                    upto_step: int | None = None) -> list[str]:
    """The values logged under `tags` (up to `upto_step`) that differ between two runs beyond the tolerance,
    once it is checked that both runs logged every tag, at the same steps."""
    assert tags, "no tags to compare: an empty comparison agrees on nothing"
    differences = []
    for tag in tags:
        xs = [(s, v) for s, v in a.scalars.get(tag, []) if upto_step is None or s <= upto_step]
        ys = [(s, v) for s, v in b.scalars.get(tag, []) if upto_step is None or s <= upto_step]
        assert xs, f"{tag}: nothing logged"
        assert [s for s, _ in xs] == [s for s, _ in ys], f"{tag}: logged at different steps"
        differences += [f"{tag} at step {step}: {x} vs {y} (rtol {rtol})"
                        for (step, x), (_, y) in zip(xs, ys) if not abs(x - y) <= atol + rtol * abs(y)]
    return differences


def assert_close_logs(a: Run, b: Run, tags: list[str], rtol: float, atol: float = 1e-6, upto_step: int | None = None):
    """Every value logged under `tags` (up to `upto_step`) agrees between two runs."""
    differences = log_differences(a, b, tags, rtol, atol, upto_step)
    assert not differences, f"{len(differences)} values differ, the first: {differences[0]}"


DETERMINISTIC_SKIP = ("charts/SPS", "charts/warmup_time")
# logged by every run whatever it computes (one point at step 0, value 0: its wall time marks the start)
NOT_COMPUTED = DETERMINISTIC_SKIP + ("charts/start",)


def assert_identical_logs(a: Run, b: Run, tags: list[str] = (), only_in_b: tuple[str, ...] = ()):
    """Two runs logged exactly the same numbers (timings aside): the same tags, each with the same points.
    Two runs that logged nothing, or only their timings and start, agree on nothing: each must have logged
    something it computed, and each of `tags` (the values the caller cares about) at least once. `only_in_b`:
    tags that `b` logs (each at least once) and `a` does not, left out of the comparison (the evaluation of a
    run made with SAVED)."""
    compared = sorted(t for t in a.scalars if t not in DETERMINISTIC_SKIP)
    assert compared == sorted(t for t in b.scalars if t not in DETERMINISTIC_SKIP + tuple(only_in_b)), \
        f"the two runs logged different tags: {sorted(a.scalars)} vs {sorted(b.scalars)}"
    assert all(b.scalars.get(tag) for tag in only_in_b), f"{list(only_in_b)} not all logged: {sorted(b.scalars)}"
    assert set(compared) - set(NOT_COMPUTED), f"no computed value logged, only {sorted(a.scalars)}"
    missing = [tag for tag in tags if not a.scalars.get(tag)]
    assert not missing, f"not logged: {missing} (logged: {sorted(a.scalars)})"
    for tag in compared:
        assert a.scalars[tag] == b.scalars[tag], f"{tag} differs between two runs of the same seed"


# --- The pairs' short runs, learning tasks and hand-made data: written once here, for the pair's own test
# file and for those that hold other scripts to the same runs (the JAX twins' tests, test_gpu.py,
# test_contract.py). Each name carries its pair's; the test files import it under their own short name.

# test_dqn.py, test_jax_dqn.py, test_gpu.py: the DQN pairs
# 1000 updates' worth of CartPole: 100 updates from step 500 (one every 10 steps), losses logged at
# every 100th step from 600 to 1400 (9 times), target copies every 200 steps, dozens of episodes
DQN_SHORT = ("--env-id", "CartPole-v1", "--total-timesteps", "1500", "--learning-starts", "500",
             "--target-network-frequency", "200", "--seed", "3")
DQN_GREEDY = DQN_SHORT + ("--start-e", "0", "--end-e", "0")
DQN_LOSSES = ["losses/td_loss", "losses/q_values", "charts/epsilon"]
# CartPole-v1: a random policy lasts 22 steps on average (std 12; over 100 groups of 50 episodes,
# at most 25.4 on average); after 25000 steps of learning, the episodes of the last 5000 steps last
# more than 75 steps on average (measured: 94 to 283 over 8 runs, seeds 1-4 of both scripts).
DQN_LEARN = ("--env-id", "CartPole-v1", "--total-timesteps", "30000", "--learning-starts", "5000")
DQN_THRESHOLD = 75
# the saved network, played back for 5 episodes: a random policy averages 22 +- 5 over 5 episodes; the
# final network of a DQN run wavers (measured 73 and more), so the bar is lower than training's
DQN_EVAL_THRESHOLD = 50
# Breakout: 300 updates' worth of steps from step 400 (one every 4 steps), losses logged at every 100th
# step from 500 to 1100 (7 times), a 1000-slot buffer that wraps around, a few games
DQN_ATARI = ("--env-id", "Breakout-v5", "--total-timesteps", "1200", "--learning-starts", "400", "--buffer-size",
             "1000", "--target-network-frequency", "200", "--seed", "3")
DQN_ATARI_GREEDY = DQN_ATARI + ("--start-e", "0", "--end-e", "0")


def assert_frame_buffer_returns_what_a_naive_buffer_returns(replay_buffer):
    """Play Breakout at random (lost lives, finished games, games truncated at 150 steps) into a 128-slot
    frame buffer (`replay_buffer`: a DQN Atari script's ReplayBuffer class, or one with its interface),
    wrapping around it five times, and record each transition with its full stacks as a naive buffer would.
    Every transition the frame buffer holds, and every one it samples, is exactly the naive one: its stacks
    never straddle a game boundary or the write head; it holds no reset step; and it holds every transition
    whose frames are still there."""
    import envpool
    import torch

    capacity, steps = 128, 700
    envs = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=1, episodic_life=True, reward_clip=True,
                        seed=3, max_episode_steps=150)
    rb = replay_buffer(capacity, (84, 84), torch.device("cpu"), seed=0)
    obs, info = envs.reset()
    rb.write_obs(obs[0], game_start=True)  # the first observation, as main() writes it
    naive, obs_done, rng, ends = [], False, np.random.default_rng(0), {"life": 0, "game": 0, "truncated": 0}
    for _ in range(steps):
        action = rng.integers(0, envs.single_action_space.n, size=1)
        next_obs, reward, terminated, truncated, info = envs.step(action)
        rb.add(action[0], reward[0], terminated[0], truncated[0], next_obs, info)
        # (observation, action, reward, next observation, done); None for envpool's reset steps
        naive.append(None if obs_done else (obs[0], int(action[0]), float(reward[0]), next_obs[0], float(terminated[0])))
        ends["truncated" if truncated[0] else "game" if info["lives"][0] == 0 else "life"] += bool(terminated[0] or truncated[0])
        obs_done, obs = bool(terminated[0] or truncated[0]), next_obs
    assert min(ends.values()) >= 2, ends  # the trace holds every kind of end

    def held(slots):
        slots = torch.as_tensor(slots)
        return list(zip(rb.stacks(slots).cpu().numpy(), rb.actions[slots].tolist(), rb.rewards[slots].tolist(),
                        rb.stacks((slots + 1) % capacity).cpu().numpy(), rb.dones[slots].tolist()))

    # slot s % capacity holds step s's observation; the last 128 observations are steps 573..700
    valid = [s for s in range(steps - capacity + 1, steps + 1) if rb.valid[s % capacity]]
    assert all(naive[s] is not None for s in valid), "a reset step is held as a transition"
    full_history = [s for s in range(steps - capacity + 4, steps) if naive[s] is not None]
    assert set(full_history) <= set(valid), "a transition whose frames are all there is missing"
    for s, got in zip(valid, held([s % capacity for s in valid])):
        assert_same_transition(got, naive[s])
    batch = rb.sample(256)
    keys = ("observations", "actions", "rewards", "next_observations", "dones")
    in_window = {naive[s][0].tobytes() + naive[s][3].tobytes() + bytes([naive[s][1]]): naive[s] for s in valid}
    for i in range(256):
        got = tuple(batch[k][i] for k in keys)
        key = got[0].cpu().numpy().tobytes() + got[3].cpu().numpy().tobytes() + bytes([int(got[1])])
        assert key in in_window, "a sampled transition is not one of the buffer's"
        assert_same_transition((got[0].cpu().numpy(), int(got[1]), float(got[2]), got[3].cpu().numpy(), float(got[4])),
                               in_window[key])


def assert_same_transition(got, expected):
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[3], expected[3])
    assert got[1:3] + got[4:] == expected[1:3] + expected[4:]


# test_offpolicy.py, test_jax_offpolicy.py, test_gpu.py: the off-policy pairs (SAC, TD3)
# 400 updates on Pendulum: losses logged at steps 300, 400, 500; three episodes of 200 steps
OFF_POLICY_SHORT = ("--env-id", "Pendulum-v1", "--total-timesteps", "600", "--learning-starts", "200", "--seed", "3")
OFF_POLICY_Q_LOSSES = ["losses/qf1_values", "losses/qf2_values", "losses/qf1_loss", "losses/qf2_loss",
                       "losses/qf_loss", "losses/actor_loss"]
OFF_POLICY_TAGS = {
    "sac": OFF_POLICY_Q_LOSSES + ["losses/alpha", "losses/alpha_loss"],
    "td3": OFF_POLICY_Q_LOSSES,
}


def off_policy_eager(pair: str) -> str:
    return f"{pair}_continuous_action"


def off_policy_fast(pair: str) -> str:
    return f"{pair}_continuous_action_torchcompile"


# Pendulum-v1: a random policy scores -1256 per episode on average (std 296; over 40 groups of 5
# episodes the best group mean was -1057). A policy that swings the pendulum up and holds it
# scores above -400, so a mean above -400 over the last 5 episodes means the agent learned the task.
OFF_POLICY_LEARN = {
    "sac": ("--env-id", "Pendulum-v1", "--total-timesteps", "5000", "--learning-starts", "1000"),
    # TD3 learns slower: its last 5 episodes averaged -1017 to -1071 at step 5000 and -153 to -155 at 8000
    # (eager, --compile and the JAX twin, seed 1: docs/learning/td3_pendulum_check/)
    "td3": ("--env-id", "Pendulum-v1", "--total-timesteps", "8000", "--learning-starts", "1000"),
}
OFF_POLICY_THRESHOLD = -400


def register_inverted_pendulum_short() -> None:
    """InvertedPendulum-v4 terminates when the pole leans more than 0.2 rad (observation 1) and, registered
    here with a 7-step time limit, is truncated after 7 steps: random actions (the first steps of a run)
    give both ends. Registered once per process, by each test file whose buffer tests play it."""
    import gymnasium as gym

    if "InvertedPendulumShort-v4" not in gym.registry:
        gym.register("InvertedPendulumShort-v4",
                     entry_point="gymnasium.envs.mujoco.inverted_pendulum_v4:InvertedPendulumEnv", max_episode_steps=7)


# test_ppo_atari.py, test_jax_ppo.py, test_gpu.py: the Atari PPO pair
# 4 iterations of 2 envs x 64 steps on Breakout: losses logged 4 times, fps from the second on, and
# two games end (at steps 342 and 398, returns 1 and 2)
PPO_ATARI_SHORT = ("--env-id", "Breakout-v5", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512",
                   "--num-minibatches", "2", "--update-epochs", "2", "--seed", "7")


def envpool_step(reward, terminated, truncated, lives, elapsed):
    """One envpool step of two envs, as the scripts see it: flags, and the info they read."""
    info = {"reward": np.array(reward, float), "lives": np.array(lives), "elapsed_step": np.array(elapsed)}
    return info, np.array(terminated, bool), np.array(truncated, bool)


# A hand-made trace of two envs (episodic life: a lost life ends an episode for the agent, and
# envpool's next step is a reset with reward 0; the game goes on until its last life is lost).
PPO_ATARI_TRACE = [  # (unclipped rewards, terminated, truncated, lives, elapsed steps) per env
    envpool_step([5, 0], [0, 0], [0, 0], [3, 3], [1, 1]),
    envpool_step([0, 0], [1, 0], [0, 0], [2, 3], [2, 2]),  # env 0 loses a life
    envpool_step([0, 0], [0, 0], [0, 0], [2, 3], [2, 3]),  # env 0's reset step: the game goes on
    envpool_step([10, 25], [0, 0], [0, 0], [2, 3], [3, 4]),
    envpool_step([0, 0], [1, 0], [0, 0], [0, 3], [4, 5]),  # env 0 loses its last life: game over, 5 + 10
    envpool_step([0, 0], [0, 1], [0, 0], [3, 0], [0, 6]),  # env 1 loses its last (only) life: 25
    envpool_step([7, 0], [0, 0], [0, 0], [3, 3], [1, 0]),
    envpool_step([3, 0], [0, 0], [1, 0], [3, 3], [2, 1]),  # env 0's new game is truncated: 7 + 3
]
PPO_ATARI_EXPECTED = [[], [], [], [], [(0, 15.0, 4)], [(1, 25.0, 6)], [], [(0, 10.0, 2)]]


# test_ppo_continuous.py, test_jax_ppo.py, test_gpu.py: the continuous PPO pair
# 4 iterations of 256 steps on Pendulum (episodes of exactly 200 steps): losses logged 4 times,
# fps from the second iteration on, 5 episodes
PPO_CONTINUOUS_SHORT = ("--env-id", "Pendulum-v1", "--total-timesteps", "1024", "--num-steps", "256",
                        "--num-minibatches", "4", "--update-epochs", "2", "--seed", "5")
# InvertedPendulum-v4: a random policy balances for 6 steps on average (return 6.2, std 3.6; over 100
# groups of 5 episodes the best group mean was 11). The maximum is 1000 (the episode's time limit);
# a mean above 500 over the last 5 episodes means PPO learned to balance the pole.
PPO_CONTINUOUS_LEARN = ("--env-id", "InvertedPendulum-v4", "--total-timesteps", "28672")
PPO_CONTINUOUS_THRESHOLD = 500


def reference_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """GAE from its definition, in float64: A_t = sum_k (gamma lam)^k delta_{t+k}, the sum and the
    bootstrap cut where an episode ends (dones[t + 1], or next_done after the last step)."""
    T, N = rewards.shape
    ends = np.concatenate([dones[1:], next_done[None]]).astype(bool)  # ends[t]: step t ends an episode
    next_values = np.concatenate([values[1:], next_value[None]])
    delta = rewards + gamma * next_values * (~ends) - values
    adv = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            for k in range(T - t):
                adv[t, n] += (gamma * lam) ** k * delta[t + k, n]
                if ends[t + k, n]:
                    break
    return adv


def gae_data(seed=0, T=40, N=3):
    """Hand-made rollout: random rewards and values, episodes ended by terminations and by
    truncations (CleanRL's PPO, like these scripts, treats both as done), one cut on the last step."""
    rng = np.random.default_rng(seed)
    rewards, values = rng.normal(size=(T, N)), rng.normal(size=(T, N))
    dones = np.zeros((T, N))
    dones[[3, 17, 18, 30], 0] = 1  # env 0: a termination, two steps in a row, a truncation
    dones[[10], 1] = 1  # env 1: one episode boundary
    next_value, next_done = rng.normal(size=N), np.array([0.0, 0.0, 1.0])  # env 2 ends on the last step
    return rewards, values, dones, next_value, next_done


# test_gpu.py, and test_contract.py's CPU check that its comparison catches frozen inputs: the GPU runs
def longer(args, total: int, **flags) -> tuple[str, ...]:
    """A CPU test's short run, made long enough that every graph replays at least twice: a function called
    once per iteration (PPO's GAE) or per target update (DQN) is captured at its 4th call under --compile."""
    args = with_flag(args, "--total-timesteps", str(total))
    for flag, value in flags.items():
        args = with_flag(args, "--" + flag.replace("_", "-"), str(value))
    return tuple(args)


GPU_RUNS = {  # eager script, optimized script, run, tags compared, the last step compared, graphs the script makes
    # SAC and TD3: the update with the delayed actor step and the update without it, and the acting step
    "sac": ("sac_continuous_action", "sac_continuous_action_torchcompile", OFF_POLICY_SHORT, OFF_POLICY_TAGS["sac"],
            300, 3),
    "td3": ("td3_continuous_action", "td3_continuous_action_torchcompile", OFF_POLICY_SHORT, OFF_POLICY_TAGS["td3"],
            300, 3),
    # 8 iterations (the CPU test's 4 would capture GAE at its last call); compared over the first 4
    "ppo_continuous": ("ppo_continuous_action", "ppo_continuous_action_torchcompile",
                       longer(PPO_CONTINUOUS_SHORT, 2048), PPO_LOSSES, 1024, 3),
    "ppo_atari": ("ppo_atari_envpool", "ppo_atari_envpool_torchcompile", longer(PPO_ATARI_SHORT, 1024), PPO_LOSSES,
                  512, 3),
    # DQN greedy (ε = 0): every step runs the acting graph; 7 target updates instead of 5 and 3
    "dqn": ("dqn", "dqn_torchcompile", longer(DQN_GREEDY, 2000), ["losses/td_loss", "losses/q_values"], 1500, 3),
    "dqn_atari": ("dqn_atari_envpool", "dqn_atari_envpool_torchcompile",
                  longer(DQN_ATARI_GREEDY, 1200, target_network_frequency=100), ["losses/td_loss", "losses/q_values"],
                  None, 3),
}
# GPU kernels round differently from one another (vmapped against separate matmuls, fused optimizer
# steps, other reduction orders), and training amplifies it: over the first 100 off-policy updates,
# and over the first 4 PPO iterations, every logged value agrees within 1%.
GPU_TOL = dict(rtol=1e-2, atol=1e-4)


# --- The script contract's table (test_contract.py), shared by test_devices.py and test_mistakes.py: every
# script's short run, an action space it refuses, bad sizes, and what a refusal looks like

@dataclass
class Spec:
    short: list[str]  # flags of a short CPU run that logs losses, fps and episodes
    wrong_space: tuple[str, str]  # (env id the script cannot handle, word the message must hold)
    bad_sizes: list[tuple[str, str]]  # (flag, value) pairs that must be refused
    interrupt_after: int  # a step by which something has been logged


OFF_POLICY_SPEC = dict(
    short=["--env-id", "Pendulum-v1", "--total-timesteps", "600", "--learning-starts", "200"],
    wrong_space=("CartPole-v1", "continuous"),
    interrupt_after=700,
)
PPO_SPEC = dict(
    short=["--env-id", "Pendulum-v1", "--total-timesteps", "1024", "--num-steps", "256", "--num-minibatches", "4",
           "--update-epochs", "2"],
    wrong_space=("CartPole-v1", "continuous"),
    interrupt_after=600,
)
ATARI_SPEC = dict(
    short=["--env-id", "Breakout-v5", "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "256",
           "--num-minibatches", "2", "--update-epochs", "1"],
    wrong_space=("CartPole-v1", "Atari"),
    interrupt_after=800,
)
DQN_SPEC = dict(
    short=["--env-id", "CartPole-v1", "--total-timesteps", "1200", "--learning-starts", "500"],
    wrong_space=("Pendulum-v1", "discrete"),
    interrupt_after=900,
)
DQN_ATARI_SPEC = dict(
    short=["--env-id", "Breakout-v5", "--total-timesteps", "600", "--learning-starts", "300", "--buffer-size", "1000"],
    wrong_space=("CartPole-v1", "Atari"),
    interrupt_after=700,
)
SPECS = {
    "dqn_atari_envpool": Spec(**DQN_ATARI_SPEC, bad_sizes=[("--buffer-size", "16"), ("--end-e", "-0.1")]),
    "dqn_atari_envpool_torchcompile": Spec(**DQN_ATARI_SPEC,
                                           bad_sizes=[("--train-frequency", "0"), ("--gamma", "1.5")]),
    "dqn": Spec(**DQN_SPEC, bad_sizes=[("--buffer-size", "64"), ("--learning-rate", "0"), ("--start-e", "1.5")]),
    "dqn_torchcompile": Spec(**DQN_SPEC, bad_sizes=[("--batch-size", "0"), ("--train-frequency", "0"),
                                                    ("--total-timesteps", "500")]),
    "sac_continuous_action": Spec(
        **OFF_POLICY_SPEC, bad_sizes=[("--batch-size", "0"), ("--q-lr", "0"), ("--policy-lr", "-0.001"),
                                    ("--total-timesteps", "100")]),
    "sac_continuous_action_torchcompile": Spec(
        **OFF_POLICY_SPEC, bad_sizes=[("--batch-size", "-1"), ("--q-lr", "0"), ("--buffer-size", "0")]),
    "td3_continuous_action": Spec(
        **OFF_POLICY_SPEC, bad_sizes=[("--batch-size", "0"), ("--learning-rate", "0"), ("--total-timesteps", "100")]),
    "td3_continuous_action_torchcompile": Spec(
        **OFF_POLICY_SPEC,
        bad_sizes=[("--batch-size", "-5"), ("--learning-rate", "-1e-4"), ("--policy-frequency", "0")]),
    "ppo_continuous_action": Spec(
        **PPO_SPEC, bad_sizes=[("--num-minibatches", "3"), ("--total-timesteps", "100"), ("--learning-rate", "0")]),
    "ppo_continuous_action_torchcompile": Spec(
        **PPO_SPEC, bad_sizes=[("--num-minibatches", "5"), ("--total-timesteps", "255"), ("--num-envs", "0")]),
    "ppo_atari_envpool_multigpu": Spec(
        **ATARI_SPEC, bad_sizes=[("--dist-timeout", "0"), ("--total-timesteps", "63"), ("--num-minibatches", "3")]),
    "ppo_atari_envpool_multigpu_torchcompile": Spec(
        **ATARI_SPEC, bad_sizes=[("--num-envs", "0"), ("--gae-lambda", "1.5")]),
    "ppo_atari_envpool": Spec(
        **ATARI_SPEC, bad_sizes=[("--num-minibatches", "3"), ("--total-timesteps", "63"), ("--learning-rate", "0")]),
    "ppo_atari_envpool_torchcompile": Spec(
        **ATARI_SPEC, bad_sizes=[("--num-minibatches", "7"), ("--num-steps", "0"), ("--update-epochs", "0")]),
    # the JAX twins: the eager script's flags, refused the same way
    "dqn_jax": Spec(**DQN_SPEC, bad_sizes=[("--buffer-size", "64"), ("--learning-rate", "0"), ("--start-e", "1.5")]),
    "dqn_atari_envpool_jax": Spec(**DQN_ATARI_SPEC, bad_sizes=[("--buffer-size", "16"), ("--end-e", "-0.1")]),
    "sac_continuous_action_jax": Spec(
        **OFF_POLICY_SPEC, bad_sizes=[("--batch-size", "0"), ("--q-lr", "0"), ("--total-timesteps", "100")]),
    "td3_continuous_action_jax": Spec(
        **OFF_POLICY_SPEC, bad_sizes=[("--batch-size", "0"), ("--learning-rate", "0"), ("--policy-frequency", "0")]),
    "ppo_continuous_action_jax": Spec(
        **PPO_SPEC, bad_sizes=[("--num-minibatches", "3"), ("--total-timesteps", "100"), ("--learning-rate", "0")]),
    "ppo_atari_envpool_jax": Spec(
        **ATARI_SPEC, bad_sizes=[("--num-minibatches", "3"), ("--total-timesteps", "63"), ("--learning-rate", "0")]),
}
CHECKED = sorted(SPECS)
# Each script's short run as its family's tests make it (their flag-combination run without a flag); the multi-GPU
# scripts, which have no such single-process run, the table's.
FAMILY_SHORT = {"sac_continuous_action": OFF_POLICY_SHORT, "td3_continuous_action": OFF_POLICY_SHORT,
                "ppo_continuous_action": PPO_CONTINUOUS_SHORT, "ppo_atari_envpool": PPO_ATARI_SHORT,
                "dqn": DQN_SHORT, "dqn_atari_envpool": DQN_ATARI}
# What the contract's checks of a script read (test_contract.py): its short run made again, saving its model,
# playing it back for 2 episodes (eval/episodic_return, logged after training) and tracking offline. The same-seed
# tests compare it with the short run (assert_same_numbers_twice): one run serves both.
SAVED = ("--save-model", "--eval-episodes", "2", "--track")
EVALUATION = ("eval/episodic_return",)


def short_run(script: str) -> tuple[str, ...]:
    return FAMILY_SHORT.get(script.removesuffix("_torchcompile").removesuffix("_jax"), tuple(SPECS[script].short))


def saved_run(cached_run, script: str) -> Run:
    """The script's short run with SAVED, shared by the contract's checks and the same-seed test."""
    return cached_run(script, *short_run(script), *SAVED)


def assert_same_numbers_twice(cached_run, script: str, short, tags: list[str]) -> None:
    """A seed gives the same numbers twice: the short run (the flag-combination run) and the same run with SAVED
    (the contract's, `saved_run`) log exactly the same values, timings aside; saving the model, playing it back
    after training and tracking offline change none of them. The second run logs its evaluation too."""
    assert tuple(short) == short_run(script), f"{script}: its family's short run is {short_run(script)}"
    assert_identical_logs(cached_run(script, *short).check(), saved_run(cached_run, script).check(), tags,
                          only_in_b=EVALUATION)
ONE_LINE_ERROR = re.compile(r"^\S+: error: .+\n?$")


def assert_user_error(run, flag: str):
    assert run.returncode not in (0, 1), f"expected a usage error exit code, got {run.returncode}"
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    last = run.stderr.strip().splitlines()[-1]
    assert ONE_LINE_ERROR.match(last), f"not a one-line error: {run.stderr[-2000:]!r}"
    assert flag in last, f"the message does not name {flag}: {last}"
    assert not (run.cwd / "runs").exists(), "a run folder was written before the input was checked"


# --- tolerances from measurement: tests/measure_tolerances.py runs each comparison below on several seeds (and CPU
# kernels), and writes the largest honest difference of each to tests/tolerances.json (table: tests/tolerances.md)

class Comparison(NamedTuple):
    """Two runs that draw the same random numbers: `compared` against `reference` ((script, flags...) each), both with
    the flags `run`, on the logged `tags`. Up to step `upto` (the first updates) their rounding is compared tightly:
    MULTIPLE times the largest measured. After it, training amplifies rounding, by how much depends on the CPU (the CI
    machine's compiled DQN Atari losses, exploring, ended 35% apart where this machine's were within 1e-4), so the
    whole run is held to `whole` (what it is there for: the same learning curve), or MULTIPLE times the largest
    measured where that is looser."""
    reference: tuple
    compared: tuple
    run: tuple
    tags: list
    upto: int
    whole: dict
    floor: float = 0.0  # the first updates' relative tolerance at the least (REL_FLOOR where lower)


PPO_CONTINUOUS_CLIPPING = PPO_CONTINUOUS_SHORT + ("--clip-coef", "0.002")
RETURN, GAMES = ["charts/episodic_return"], ["charts/episodic_return", "charts/episodic_length"]
CURVE = dict(rtol=5e-2, atol=5e-3)  # an off-policy run's 400 updates: the same curve, within 5%
CLOSE = dict(rtol=1e-4, atol=1e-6)  # a few dozen updates (DQN's, PPO's) that amplify little
CONVS = dict(rtol=1e-2, atol=1e-6)  # DQN Atari's convolutions, greedy over 175 updates
# oneDNN chooses its convolution kernels by the CPU (AVX2, AVX-512, AMX), more kinds than the two measured here, and
# the CI machine's compiled DQN Atari losses drifted apart far more than this machine's: its first updates allow 1e-4
CONV_FLOOR = 1e-4
COMPARISONS = {
    "sac twin": Comparison(("sac_continuous_action",), ("sac_continuous_action_torchcompile",), OFF_POLICY_SHORT,
                           OFF_POLICY_TAGS["sac"], 300, CURVE),
    "sac compile": Comparison(("sac_continuous_action_torchcompile",), ("sac_continuous_action_torchcompile",
                                                                        "--compile"), OFF_POLICY_SHORT,
                              OFF_POLICY_TAGS["sac"], 300, CURVE),
    "td3 twin": Comparison(("td3_continuous_action",), ("td3_continuous_action_torchcompile",), OFF_POLICY_SHORT,
                           OFF_POLICY_TAGS["td3"], 300, CURVE),
    "td3 compile": Comparison(("td3_continuous_action_torchcompile",), ("td3_continuous_action_torchcompile",
                                                                        "--compile"), OFF_POLICY_SHORT,
                              OFF_POLICY_TAGS["td3"], 300, CURVE),
    "dqn twin": Comparison(("dqn",), ("dqn_torchcompile",), DQN_SHORT, DQN_LOSSES + RETURN, 700, CLOSE),
    "dqn twin greedy": Comparison(("dqn",), ("dqn_torchcompile",), DQN_GREEDY, DQN_LOSSES + RETURN, 700, CLOSE),
    "dqn compile": Comparison(("dqn_torchcompile",), ("dqn_torchcompile", "--compile"), DQN_SHORT,
                              DQN_LOSSES + RETURN, 700, CLOSE),
    "ppo_continuous twin": Comparison(("ppo_continuous_action",), ("ppo_continuous_action_torchcompile",),
                                      PPO_CONTINUOUS_SHORT, PPO_LOSSES + RETURN, 256, CLOSE),
    # a clip coefficient that clips most ratios and value changes: both losses' clipped branches compared
    "ppo_continuous twin clipping": Comparison(("ppo_continuous_action",), ("ppo_continuous_action_torchcompile",),
                                               PPO_CONTINUOUS_CLIPPING, PPO_LOSSES + RETURN, 256, CLOSE),
    "ppo_continuous compile": Comparison(("ppo_continuous_action_torchcompile",),
                                         ("ppo_continuous_action_torchcompile", "--compile"), PPO_CONTINUOUS_SHORT,
                                         PPO_LOSSES + RETURN, 256, CLOSE),
    "ppo_atari twin": Comparison(("ppo_atari_envpool",), ("ppo_atari_envpool_torchcompile",), PPO_ATARI_SHORT,
                                 PPO_LOSSES + GAMES, 128, CLOSE),
    "ppo_atari compile": Comparison(("ppo_atari_envpool_torchcompile",), ("ppo_atari_envpool_torchcompile",
                                                                          "--compile"), PPO_ATARI_SHORT,
                                    PPO_LOSSES + GAMES, 128, CLOSE),
    "ppo_atari async": Comparison(("ppo_atari_envpool_torchcompile",), ("ppo_atari_envpool_torchcompile",
                                                                        "--async-envs"), PPO_ATARI_SHORT, PPO_LOSSES,
                                  128, CLOSE),
    "dqn_atari twin greedy": Comparison(("dqn_atari_envpool",), ("dqn_atari_envpool_torchcompile",), DQN_ATARI_GREEDY,
                                        DQN_LOSSES, 500, CONVS, CONV_FLOOR),
    "dqn_atari compile greedy": Comparison(("dqn_atari_envpool_torchcompile",), ("dqn_atari_envpool_torchcompile",
                                                                                 "--compile"), DQN_ATARI_GREEDY,
                                           DQN_LOSSES, 500, CONVS, CONV_FLOOR),
}
# The first updates allow MULTIPLE times the largest difference measured over the seeds and CPU kernels, and no less
# than the FLOORs (a comparison measured exactly equal still meets another CPU's rounding); a value below SMALL in
# size is compared by its absolute difference.
MULTIPLE, REL_FLOOR, ABS_FLOOR, SMALL = 10, 1e-6, 1e-8, 1e-3
TOLERANCES = Path(__file__).with_name("tolerances.json")


def measured(name: str, window: str) -> dict:
    """The tolerance of comparison `name` in `window` ("first": up to its step; "whole": the whole run), from
    tests/tolerances.json: keyword arguments of assert_close_logs."""
    found = [m for key, m in json.loads(TOLERANCES.read_text())["measurements"].items() if key.split(" | ")[0] == name]
    assert found, f"{name}: not measured in {TOLERANCES.name} (python tests/measure_tolerances.py --only '{name}')"
    windows = ["first"] if window == "first" else ["first", "rest"]
    rel = MULTIPLE * max(m[w]["rel"] for m in found for w in windows)
    tol = dict(rtol=max(REL_FLOOR, COMPARISONS[name].floor, rel),
               atol=max(ABS_FLOOR, MULTIPLE * max(m[w]["abs"] for m in found for w in windows)))
    if window == "first":
        return tol | dict(upto_step=COMPARISONS[name].upto)
    whole = COMPARISONS[name].whole
    return dict(rtol=max(tol["rtol"], whole["rtol"]), atol=max(tol["atol"], whole["atol"]))


def assert_as_measured(compared: Run, reference: Run, name: str, tags: list[str] | None = None):
    """Comparison `name`: its first updates within MULTIPLE times their measured rounding, the whole run within what
    it is there for (Comparison.whole) or MULTIPLE times the largest measured, the looser."""
    tags = tags or COMPARISONS[name].tags
    first = measured(name, "first")  # on the tags logged by then (a game may end later)
    assert_close_logs(compared, reference, [t for t in tags if any(step <= first["upto_step"] for step, _ in
                                                                   reference.scalars.get(t, []))], **first)
    assert_close_logs(compared, reference, tags, **measured(name, "whole"))
