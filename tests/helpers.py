"""Shared test helpers: run a script of leanrl/ in a folder of its own, read what it logged."""

import functools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from leanrl_utils.events import read_scalars  # noqa: E402
from leanrl_utils.scripts import SCRIPT_DIR, load_script  # noqa: E402, F401  (load_script: for the tests)

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
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(script_cmd(script, *args), cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, cwd)


def run_in_process(script: str, *args: str, cwd: Path) -> Run:
    """What `python leanrl/<script>.py args` does, run in this process: for the checks that stop before
    any work (--help, bad input), a fraction of a second instead of a new interpreter's seconds."""
    import contextlib
    import io
    import traceback

    import tyro

    module = load_script(script)
    cwd.mkdir(parents=True, exist_ok=True)
    out, err, code, here, argv = io.StringIO(), io.StringIO(), 0, os.getcwd(), sys.argv
    try:
        os.chdir(cwd)
        sys.argv = [str(SCRIPT_DIR / f"{script}.py"), *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                module.main(tyro.cli(module.Args, args=list(args)))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(here)
        sys.argv = argv
    return Run(code, out.getvalue(), err.getvalue(), cwd)


_WITH_CTRL_C = """
import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def interrupt_script(script: str, *args: str, cwd: Path, after_step: int, timeout: float = 300) -> Run:
    """Start a run, send SIGINT once its progress bar has passed `after_step`, wait for it to exit."""
    cwd.mkdir(parents=True, exist_ok=True)
    # a shell without job control starts background jobs with SIGINT ignored, and a Python started so
    # never raises KeyboardInterrupt: the child puts Python's own handler back first, as in a terminal
    # (set in the child rather than by a preexec_fn: forking a test process that has loaded JAX, whose
    # threads are running, can deadlock the child)
    proc = subprocess.Popen([sys.executable, "-c", _WITH_CTRL_C, *script_cmd(script, *args)[1:]], cwd=cwd, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        return _interrupt(proc, cwd, after_step, timeout)
    finally:
        if proc.poll() is None:  # a failed check leaves no run behind
            proc.kill()
            proc.wait()


def _interrupt(proc: subprocess.Popen, cwd: Path, after_step: int, timeout: float) -> Run:
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
    proc.send_signal(signal.SIGINT)
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
    cmd = [sys.executable, "-c", _CTRL_C_INSIDE, function, *script_cmd(script, *args)[1:]]
    proc = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, cwd)


# What every pair's flag-combination test runs: the eager script, then the optimized one in each mode
MODES = [(), ("--compile",), ("--cudagraphs",), ("--compile", "--cudagraphs")]
CUDAGRAPHS_WARNING = "--cudagraphs needs a CUDA device"
PPO_LOSSES = ["losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/old_approx_kl",
              "losses/approx_kl", "losses/clipfrac", "losses/explained_variance", "charts/learning_rate"]


def learns_and_plays_back(script_args, learn_args, *, cwd: Path, threshold: float, last: int = 5,
                          from_step: int | None = None, eval_threshold: float | None = None,
                          eval_episodes: int = 5) -> Run:
    """A learning check: the run (saving its model, playing it back for `eval_episodes` episodes) averages
    above `threshold` over its last `last` episodes, or over every episode from `from_step` on; and its
    saved policy, played back, averages above `eval_threshold` (`threshold` unless given): a policy saved
    or loaded wrong scores as a random one."""
    run = run_script(*script_args, *learn_args, "--save-model", "--eval-episodes", str(eval_episodes), cwd=cwd).check()
    returns = run.scalars["charts/episodic_return"]
    trained = [v for s, v in returns if s >= from_step] if from_step is not None else [v for _, v in returns][-last:]
    assert trained and sum(trained) / len(trained) > threshold, f"training's last episodes: {trained}"
    evaluated = run.values("eval/episodic_return")
    bar = threshold if eval_threshold is None else eval_threshold
    assert len(evaluated) == eval_episodes and sum(evaluated) / eval_episodes > bar, \
        f"evaluation: {evaluated}, training: {trained}"
    return run


def flag_configs(eager: str, fast: str) -> list[tuple[str, ...]]:
    return [(eager,)] + [(fast, *mode) for mode in MODES]


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
    """Runs shared by several tests: each (script, args) runs once, with `runner` (run_script, or another
    launcher with its signature: torchrun, a GPU launcher)."""

    def __init__(self, root: Path, runner=None):
        self.root, self.runs, self.runner = root, {}, runner or run_script

    def __call__(self, script: str, *args: str) -> Run:
        key = (script, *args)
        if key not in self.runs:
            self.runs[key] = self.runner(script, *args, cwd=self.root / f"run{len(self.runs)}")
        return self.runs[key]


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


def assert_identical_logs(a: Run, b: Run, tags: list[str] = ()):
    """Two runs logged exactly the same numbers (timings aside): the same tags, each with the same points.
    Two runs that logged nothing, or only their timings and start, agree on nothing: each must have logged
    something it computed, and each of `tags` (the values the caller cares about) at least once."""
    compared = sorted(t for t in a.scalars if t not in DETERMINISTIC_SKIP)
    assert compared == sorted(t for t in b.scalars if t not in DETERMINISTIC_SKIP), \
        f"the two runs logged different tags: {sorted(a.scalars)} vs {sorted(b.scalars)}"
    assert set(compared) - set(NOT_COMPUTED), f"no computed value logged, only {sorted(a.scalars)}"
    missing = [tag for tag in tags if not a.scalars.get(tag)]
    assert not missing, f"not logged: {missing} (logged: {sorted(a.scalars)})"
    for tag in compared:
        assert a.scalars[tag] == b.scalars[tag], f"{tag} differs between two runs of the same seed"
