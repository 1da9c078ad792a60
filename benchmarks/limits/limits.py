"""Where each step's time goes, and how far each pair is from what this machine can do.

    python -m benchmarks.limits --out docs/limits                      # every pair: eager, --compile, JAX
    python -m benchmarks.limits --pairs sac,dqn --modes eager,compile --seconds 10

The split: each script runs as a user runs it (the speed table's task and flags), and once its warm-up is
over (its progress bar shows fps, which it does from the first `charts/SPS` on), py-spy samples it from
outside for `--seconds`, or longer where the run logs its fps less often (the window holds four points).
A sample of the main thread counts for:
- environment: any frame in gymnasium, envpool or MuJoCo (the wrappers included);
- logging: TensorBoard, tqdm, wandb, the harness's writer and progress bar, episode bookkeeping, explained variance;
- storage: the replay buffer (writes and sampling), the rollout's writes;
- acting: the policy's forward pass and its transfers (what runs between the observation and the action);
- environment + acting: JAX's Atari twin steps envpool inside its jitted rollout, the two in one call;
- update: everything under the training block (losses, backward, optimizer steps, target updates, GAE);
- other: the rest of the loop (Python between the pieces).
Which line of the script's main() a sample is on decides acting, storage and update (the statement's
text and the blocks around it: see `classify`), so the scripts carry no timers. The fps during the window
comes from the run's own `charts/SPS` points inside the window (the run is stopped with a Ctrl-C, which
keeps its logs); the split times one step: the shares of the samples x that run's seconds per step. With
--speed, the speed table's fps (measured without a profiler, in the same sitting) are given beside it,
with their percentage of the hard bound. py-spy samples the
main thread whether it computes or waits; the JAX twins run with synchronous dispatch while sampled, so
that each jitted call's time lands on its own line.

Two figures per pair and mode, beside the split:
- the hard bound, which nothing can beat: the environment alone at its best measured rate (the script's own
  environment factory, the same number of envs, random actions, the best of a few runs) plus the networks'
  FLOPs per step at this CPU's theoretical float32 peak: cores x FLOPs per cycle x clock, the clock
  measured by a chain of dependent integer additions (one a cycle) on one core, the FLOPs per cycle from
  the CPU's vector units (its flags). The FLOPs are counted (torch.utils.flop_counter.FlopCounterMode) on
  the script as it runs, acting and updating: the eager script for the eager mode, the optimized script
  for --compile (the same arithmetic, compiled or not), and the optimized script's count for the JAX
  twin, which computes the same gradients (only those of the weights each step updates). The best
  measured matmul (torch's and XLA's) and the Nature CNN's convolutions (eager and compiled) are timed
  with the scripts' thread count and must stay under the peak: a measurement above it means the peak is
  wrong, and the study stops;
- the attainable reference: each compiled piece of the mode (a torch.compile'd or jax.jit'ted function,
  per kind of call) timed at its real shapes in the same run, inside the window (its best time per call
  times its calls per environment step there), plus the environment alone; the run's own fps is then a
  percentage of it, every figure from one run. This carries the per-call floor that FLOPs do
  not (continuous PPO and DQN do microseconds of math per step); what runs outside the compiled pieces
  (Python, copies, logging) is left out, so a mode can approach it but not the hard bound's margin.
  Defined for --compile and the JAX twins whose environment runs outside their pieces. A run measured above
  its reference shows that the reference is none: results.md then says so and gives no percentage.
Writes results.md, results.json and split.png into --out; `--replot FOLDER` redraws a folder's split.png
from its results.json; `--rerender FOLDER` rewrites a folder's
results.md from its results.json.
"""

import argparse
import ast
import collections
import contextlib
import io
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import REPO, header, load_script, write_results
from leanrl_utils.scripts import PAIRS

# the speed table's task and flags per pair (benchmarks/speed/speed.sh runs the same)
TASKS = {
    "sac": ["--env-id", "HalfCheetah-v4", "--learning-starts", "5000"],
    "td3": ["--env-id", "HalfCheetah-v4", "--learning-starts", "5000"],
    "ppo_continuous": ["--env-id", "HalfCheetah-v4"],
    "ppo_atari": ["--env-id", "Breakout-v5"],
    "dqn": ["--env-id", "CartPole-v1"],
    "dqn_atari": ["--env-id", "Breakout-v5", "--learning-starts", "8000", "--buffer-size", "100000"],
}
MODES = {"eager": ("", []), "compile": ("_torchcompile", ["--compile"]), "jax": ("_jax", [])}
CATEGORIES = ["environment", "acting", "environment + acting", "storage", "update", "logging", "other"]

ENV_LIBS = ("gymnasium/", "envpool/", "mujoco/")
# the harness (leanrl_utils/harness.py) is the scripts' writer and progress bar, in the loop
LOG_LIBS = ("torch/utils/tensorboard", "tensorboard/", "tqdm/", "wandb/", "leanrl_utils/harness.py")
LOG_FUNCTIONS = re.compile(r"^(EpisodeStats\.|NoWriter\.|gather$)")
STORAGE_FUNCTIONS = re.compile(r"^(ReplayBuffer\.|FrameBuffer\.|Buffer\.)")
# the leaf statement of main() a sample is on: first match wins
LEAF_RULES = [
    ("logging", r"writer\.add|harness\.log_losses|progress\.(log|tick|update|close)|explained_var|np\.var|y_pred"
                r"|\bkept\b|print\(|episode_stats|\bgames\b|device_get"),
    ("environment", r"\benvs?\.(step|reset)\("),
    # the JAX DQN twins' jitted update also writes the staged steps into the buffer: the call is the update
    ("update", r"= update\(|\brun_update\("),
    ("environment + acting", r"= rollout\("),  # JAX's Atari twin: envpool's XLA step and the policy, one jitted scan
    ("storage", r"\brb\.(add|start)\(|rb = (buffer_add|write_steps|start)\(|staged\.|rollout\[|\w+\[step\] = "),
    ("acting", r"get_action|\bpolicy\(|\bactor\(|greedy_action|q_network\(|\bact\(|action_space\.sample|epsilon|"
               r"random\.random|\bq_values\("),
]
# the blocks around it
UPDATE_BLOCK = (r"global_step > args\.learning_starts|for epoch in|for start in range\(0|% args\.train_frequency == 0|"
                r"% args\.target_network_frequency == 0|% args\.policy_frequency == 0")
LOGGING_BLOCK = r"% 100 == 0|\"episode\" in info|for game_step|if \"final_info\""
UPDATE_LEAF = r"gae\(|compute_gae|advantages|param_groups|\blr\b|learning_rate|anneal|\bfrac\b|optimizer|update\w*\("


# main()'s closures whose lines are read as main()'s own: the rollout's loop, moved into a function of its own
INLINED = ("collect",)


class Main:
    """A script's main(): for each of its lines, the statements that hold it, outermost first (the lines of an
    INLINED closure: its own statements')."""

    def __init__(self, path: Path):
        source = path.read_text()
        self.lines = source.splitlines()
        main = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "main")
        self.paths: dict[int, list[ast.stmt]] = {}
        self._walk(main.body, [])

    def _walk(self, statements, parents):
        for st in statements:
            path = parents + [st]
            for line in range(st.lineno, st.end_lineno + 1):
                self.paths[line] = path
            if isinstance(st, ast.FunctionDef) and st.name in INLINED:
                self._walk(st.body, [])
            if isinstance(st, (ast.FunctionDef, ast.ClassDef)):
                continue  # a closure's own lines are reached through its frame, not main's
            for name in ("body", "orelse", "finalbody"):
                inner = [s for s in getattr(st, name, []) or [] if isinstance(s, ast.stmt)]
                self._walk(inner, path)

    def text(self, st: ast.stmt) -> str:
        """A statement's text; for a block (a closure's too), its header only."""
        blocks = (ast.If, ast.For, ast.While, ast.With, ast.FunctionDef, ast.ClassDef)
        end = st.body[0].lineno - 1 if isinstance(st, blocks) else st.end_lineno
        return " ".join(line.strip() for line in self.lines[st.lineno - 1:end])


def line_of(frame: str) -> int | None:
    """A sampled frame's line, from its name 'qualname (file:line)'; None where the frame had no line: Python 3.11+
    gives a frame's f_lineno as None while it runs an instruction that belongs to no line."""
    found = re.search(r":(\d+)\)$", frame)
    return int(found.group(1)) if found else None


def classify(frames: list[str], script_file: str, main: Main) -> str:
    """The category of one sample (its frames, outermost first, as py-spy writes them: 'name (file:line)')."""
    at = next((i for i, f in enumerate(frames) if f.startswith("main (") and script_file in f), None)
    while at is not None and at + 1 < len(frames) and script_file in frames[at + 1] \
            and frames[at + 1].split(" (")[0] in INLINED:
        at += 1  # an INLINED closure's line decides, as main()'s would
    # the frames main() called (the harness's run() calls main() itself: an outer frame says nothing)
    for frame in frames if at is None else frames[at + 1:]:
        where = frame.rsplit("(", 1)[-1]
        if any(lib in where for lib in ENV_LIBS):
            return "environment"
        if any(lib in where for lib in LOG_LIBS):
            return "logging"
    if at is None:
        return "other"
    for frame in frames[at + 1:]:
        name = frame.split(" (")[0]
        if script_file in frame and LOG_FUNCTIONS.match(name):
            return "logging"
        if script_file in frame and STORAGE_FUNCTIONS.match(name):
            return "storage"
    path = main.paths.get(line_of(frames[at]), [])
    if not path:
        return "other"
    leaf, blocks = main.text(path[-1]), [main.text(p) for p in path[:-1]]
    in_update = any(re.search(UPDATE_BLOCK, b) for b in blocks)
    for category, pattern in LEAF_RULES:
        if re.search(pattern, leaf):
            return "update" if category == "acting" and in_update else category
    for block in reversed(blocks):
        if re.search(LOGGING_BLOCK, block):
            return "logging"
        if re.search(UPDATE_BLOCK, block):
            return "update"
    return "update" if re.search(UPDATE_LEAF, leaf) else "other"


# Runs a script as __main__, the way profile() samples it:
# - with JAX, dispatch is made synchronous on the CPU, so that a jitted call's time is spent on the line that
#   calls it (asynchronous, it would land on whichever later line waits);
# - torch.compile (or jax.jit) is replaced by a wrapper that times every call of every function it compiles,
#   per kind of call (its flags: positional booleans and keyword arguments that are not tensors, SAC's update
#   with or without the actor step), JAX's calls waited for; each call's start (wall clock, as TensorBoard's
#   event times) and duration go to a JSON file at exit (the scripts exit through atexit on a Ctrl-C).
LAUNCHER = """
import atexit, json, runpy, signal, sys, time
# a Ctrl-C raises KeyboardInterrupt even where this was started with SIGINT ignored (a background job)
signal.signal(signal.SIGINT, signal.default_int_handler)
out, script = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[2:]
calls = {}


def kind(args, kwargs):
    plain = [repr(a) for a in args if isinstance(a, bool)]  # a positional int is data (a step's index)
    plain += [f"{k}={v!r}" for k, v in sorted(kwargs.items()) if isinstance(v, (bool, int, str))]
    return f"({', '.join(plain)})" if plain else ""


def timed(compiled, name, wait):
    def call(*args, **kwargs):
        wall, start = time.time(), time.perf_counter()
        result = compiled(*args, **kwargs)
        wait(result)
        calls.setdefault(name + kind(args, kwargs), []).append((wall, time.perf_counter() - start))
        return result
    return call


if script.endswith("_jax.py"):
    import jax
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    jit = jax.jit

    def timed_jit(fun=None, **options):
        if fun is None:
            return lambda f: timed_jit(f, **options)
        return timed(jit(fun, **options), getattr(fun, "__qualname__", repr(fun)), jax.block_until_ready)
    jax.jit = timed_jit
else:
    import torch
    compile_ = torch.compile

    def timed_compile(fn=None, **options):
        if fn is None:
            return lambda f: timed_compile(f, **options)
        return timed(compile_(fn, **options), getattr(fn, "__qualname__", repr(fn)), lambda result: None)
    torch.compile = timed_compile
atexit.register(lambda: open(out, "w").write(json.dumps(calls)))
runpy.run_path(script, run_name="__main__")
"""


def steps_per_point(pair: str) -> int:
    """Steps between two charts/SPS points of a pair's scripts: an iteration for PPO, 100 steps otherwise."""
    if pair.startswith("ppo"):
        args = load_script(PAIRS[pair]).Args()
        return args.num_envs * args.num_steps
    return 100


def profile(script: str, args: list[str], seconds: float, rate: int, timeout: float, steps_per_point: int = 100) -> dict:
    """Run a script until its warm-up is over, sample it with py-spy for `seconds`, stop it with a Ctrl-C (it
    keeps its logs). Returns, all from that one run: the fraction of main-thread samples per category, the
    samples, the fps over the window (its own charts/SPS points) and its compiled pieces in the window."""
    from leanrl_utils.events import read_run

    with tempfile.TemporaryDirectory() as tmp:
        calls_file = Path(tmp) / "calls.json"
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(calls_file), str(REPO / "leanrl" / f"{script}.py"),
                                 *args], cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        err: list[str] = []
        threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(256), "")), daemon=True).start()
        try:
            deadline = time.monotonic() + timeout
            while "fps=" not in "".join(err)[-4000:]:  # the first charts/SPS: the warm-up is over
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"limits: {script} {' '.join(args)}: never reached its steady state:\n"
                                     + "".join(err)[-2000:])
                time.sleep(0.2)
            # the window holds several of the run's own fps points: a run that logs once an iteration (PPO)
            # logs every `steps_per_point` steps, which at its fps can be more than the seconds asked for
            shown = float(re.findall(r"fps=(\d+)", "".join(err))[-1])
            seconds = max(seconds, 4 * steps_per_point / max(shown, 1.0) + 1)
            raw = Path(tmp) / "raw.txt"
            start = time.time()
            # --idle: a main thread that waits (for envpool's threads, for XLA's) is sampled too
            # --nonblocking: the run is not paused for each sample (the split's shares are what matters)
            spy = subprocess.run(["py-spy", "record", "--pid", str(proc.pid), "--duration", str(int(seconds)), "--idle",
                                  "--nonblocking",
                                  "--rate", str(rate), "--format", "raw", "--output", str(raw)],
                                 capture_output=True, text=True)
            end = time.time()
            if spy.returncode != 0 or not raw.exists():
                raise SystemExit(f"limits: py-spy failed on {script}: {spy.stderr[-1000:]}")
            if proc.poll() is not None:
                raise SystemExit(f"limits: {script} ended during its window: give it more --total-timesteps")
            text = raw.read_text()
            proc.send_signal(signal.SIGINT)  # the script closes its writer and the launcher writes its calls
            proc.wait(timeout=120)
            runs = list(Path(tmp, "runs").iterdir())
            sps = read_run(runs[0]).scalars.get("charts/SPS", []) if len(runs) == 1 else []
            calls = json.loads(calls_file.read_text()) if calls_file.exists() else {}
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    fps, (first, last) = window_fps(sps, start, end)
    main, counts, lines = Main(REPO / "leanrl" / f"{script}.py"), collections.Counter(), collections.Counter()
    for line in text.splitlines():
        stack, n = line.rsplit(" ", 1)
        frames = stack.split(";")
        if frames[0].startswith("<module> ("):  # the main thread (the writer's and tqdm's threads wait)
            category = classify(frames, f"{script}.py", main)
            counts[category] += int(n)
            at = next((f for f in frames if f.startswith("main (") and f"{script}.py" in f), frames[-1])
            lines[f"{category}: {at.split(':')[-1].rstrip(')')}: "
                  f"{main.lines[int(at.split(':')[-1].rstrip(')')) - 1].strip()[:80] if at.startswith('main (') else at}"] += int(n)
    total = sum(counts.values())
    return {"fractions": {c: counts[c] / total for c in CATEGORIES}, "samples": total, "fps": fps,
            "window_steps": last[0] - first[0], "pieces": pieces_in_window(calls, first, last),
            "heaviest lines": {k: n / total for k, n in lines.most_common(8)}}


# --------------------------------------------------------------------------------------------------
# The hard bound
# --------------------------------------------------------------------------------------------------
def environment_alone(pair: str, steps: int) -> float:
    """Environment steps per second: the eager script's own environment, random actions."""
    m = load_script(PAIRS[pair])
    args = m.Args(env_id=TASKS[pair][1])
    if pair in ("sac", "td3", "dqn"):
        env = m.make_env(args.env_id, seed=1)
        env.reset(seed=1)
        start = time.perf_counter()
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        return steps / (time.perf_counter() - start)
    envs = m.make_envs(args, "", num_envs=args.num_envs) if pair == "ppo_continuous" else m.make_envs(args)
    envs.reset(seed=1) if pair == "ppo_continuous" else envs.reset()
    n = envs.num_envs if hasattr(envs, "num_envs") else len(envs.all_env_ids)
    action_space = envs.action_space if pair == "ppo_continuous" else None
    start = time.perf_counter()
    for _ in range(steps // n):
        if action_space is not None:
            envs.step(action_space.sample())
        else:
            envs.step(np.random.randint(0, envs.single_action_space.n, size=n))
    return steps // n * n / (time.perf_counter() - start)


def short_runs(pair: str) -> tuple[dict, list[int], int]:
    """Two runs of a pair's script that differ by `extra` steps, both past the start of learning: the
    difference of what they do is `extra` steps of steady state (acting and updating)."""
    base = dict(env_id=TASKS[pair][1])
    if pair in ("sac", "td3", "dqn", "dqn_atari"):
        starts, extra = 1000, 2000 if pair == "dqn" else 500  # DQN updates every 10 steps: more steps
        base |= dict(learning_starts=starts, buffer_size=10_000)
        return base, [starts + extra, starts + 2 * extra], extra
    a = load_script(PAIRS[pair]).Args(env_id=base["env_id"])
    extra = a.num_envs * a.num_steps  # one iteration more
    return base, [2 * extra, 3 * extra], extra


def flops_per_step(pair: str, script: str) -> float:
    """FLOPs of the networks per environment step in steady state (acting and updating), counted over the
    script's own main() as it runs (the optimized script without --compile runs the same arithmetic)."""
    from torch.utils.flop_counter import FlopCounterMode

    m = load_script(script)
    base, totals, extra = short_runs(pair)
    counts = []
    for total in totals:
        with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp), contextlib.redirect_stderr(io.StringIO()), \
                contextlib.redirect_stdout(io.StringIO()), FlopCounterMode(display=False) as counter:
            m.main(m.Args(**(base | dict(total_timesteps=total))))
        counts.append(counter.get_total_flops())
    return (counts[1] - counts[0]) / extra


# A chain of dependent integer additions of a register: each waits for the one before, one a cycle on any
# x86 core, so that additions per second are cycles per second (the clock the core runs at, boost included).
# The added value is a register, not a constant: recent Intel cores fold a chain of additions of a constant
# while renaming (several a cycle; it read 19 GHz on such a core), which no core does with a register.
CLOCK_PROBE = r"""
#include <stdio.h>
#include <time.h>
int main(void) {
    const long n = 100000000L;
    long x = 0, one = 1;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++)
        __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                         "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0" : "+r"(x) : "r"(one));
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%f\n", 8.0 * n / ((b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec)));
    return x == 0;
}
"""


def cpu_fields() -> dict:
    try:
        text = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def theoretical_peak() -> dict:
    """This CPU's float32 peak, cores x FLOPs per cycle x clock, and how each factor was found."""
    fields = cpu_fields()
    flags, vendor = fields.get("flags", "").split(), fields.get("vendor_id", "")
    # fused multiply-adds per cycle x float32 lanes x 2 FLOPs: two FMA units per core on the x86 server
    # cores of the last decade; 512-bit wide on AVX-512 parts (Intel's, AMD's Zen 5), 256-bit on Zen 4
    # (family 25, which runs AVX-512 in two halves) and on every AVX2 core. Where the width is unsure the
    # wider count is taken: a peak set too high loosens the bound, one set too low breaks it.
    zen4 = vendor == "AuthenticAMD" and fields.get("cpu family") == "25"
    if "avx512f" in flags and not zen4:
        per_cycle, why = 2 * 16 * 2, "AVX-512: two 512-bit FMA units, 16 float32 lanes each"
    elif "fma" in flags and "avx2" in flags:
        per_cycle, why = 2 * 8 * 2, "two 256-bit FMA units, 8 float32 lanes each (AVX2/FMA3; Zen 4's AVX-512 too)"
    else:
        per_cycle, why = 2 * 4 * 2, "two 128-bit units, 4 float32 lanes each (no FMA/AVX2 found)"
    clock, clock_how = None, ""
    if shutil.which("gcc") and platform.machine() in ("x86_64", "AMD64"):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "clock.c").write_text(CLOCK_PROBE)
            built = subprocess.run(["gcc", "-O2", "-o", f"{tmp}/clock", f"{tmp}/clock.c"], capture_output=True)
            if built.returncode == 0:
                clock = max(float(subprocess.run([f"{tmp}/clock"], capture_output=True, text=True).stdout)
                            for _ in range(5))
                clock_how = "measured: dependent additions of a register on one core, the best of 5 runs"
    if clock is None:
        clock = float(fields.get("cpu MHz", "nan")) * 1e6
        clock_how = "/proc/cpuinfo's cpu MHz (no compiler to measure it)"
    cores = os.cpu_count()
    return {"flops": cores * per_cycle * clock, "cores": cores, "flops_per_cycle": per_cycle, "clock_hz": clock,
            "per_cycle_why": why, "clock_how": clock_how}


def measured_rates(threads: int) -> dict:
    """FLOP/s measured here in float32 with the scripts' `threads`, the best of a few shapes: square matmuls
    of 256, 1024 and 2048 through torch ('matmul') and through XLA ('matmul_xla', 0 without JAX), and the
    Nature CNN's three convolutions forward and backward on PPO's 256-frame minibatch in the channels-last
    layout, eager and compiled ('conv'). torch.utils.benchmark times them (with `threads`: its Timer runs
    one thread unless told) and FlopCounterMode counts them. A check of the peak, which none may pass."""
    from torch.utils.benchmark import Timer
    from torch.utils.flop_counter import FlopCounterMode

    rates = {"matmul": 0.0, "matmul_xla": 0.0, "conv": 0.0}
    for n in (256, 1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        seconds = Timer("a @ b", globals={"a": a, "b": b}, num_threads=threads).blocked_autorange(min_run_time=1).median
        rates["matmul"] = max(rates["matmul"], 2 * n**3 / seconds)
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        jax = None
    if jax is not None:
        for n in (256, 1024, 2048):
            a, f = jnp.ones((n, n)), jax.jit(lambda x: x @ x)
            f(a).block_until_ready()
            timer = Timer("f(a).block_until_ready()", globals={"f": f, "a": a}, num_threads=threads)
            seconds = timer.blocked_autorange(min_run_time=1).median
            rates["matmul_xla"] = max(rates["matmul_xla"], 2 * n**3 / seconds)
    convs = torch.nn.Sequential(torch.nn.Conv2d(4, 32, 8, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 4, stride=2),
                                torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, stride=1)).to(memory_format=torch.channels_last)
    x = torch.randn(256, 4, 84, 84).contiguous(memory_format=torch.channels_last)

    def forward_backward():
        convs.zero_grad(set_to_none=True)
        convs(x).sum().backward()
    with FlopCounterMode(display=False) as counter:
        forward_backward()
    compiled = torch.compile(forward_backward)
    compiled(), compiled()  # compile before timing
    for fn in (forward_backward, compiled):
        seconds = Timer("fn()", globals={"fn": fn}, num_threads=threads).blocked_autorange(min_run_time=1).median
        rates["conv"] = max(rates["conv"], counter.get_total_flops() / seconds)
    return rates


def hard_bound(env_sps: float, flops: float, peak: float) -> float:
    """Steps per second at best: the environment alone plus the networks' FLOPs at the peak."""
    return 1 / (1 / env_sps + flops / peak)


# --------------------------------------------------------------------------------------------------
# The attainable reference
# --------------------------------------------------------------------------------------------------
def window_fps(sps_events: list[tuple[int, float, float]], start: float, end: float) -> tuple[float, tuple]:
    """fps over a window of wall-clock time, from a run's `charts/SPS` events (step, wall time, value): the
    steps between the first and the last event inside the window over the time between them. Returns the fps
    and the (first, last) events' (step, wall time)."""
    inside = [(step, wall) for step, wall, _ in sps_events if start <= wall <= end]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        raise SystemExit(f"limits: fewer than two charts/SPS points in the window ({len(inside)}): give it more --seconds")
    (s0, w0), (s1, w1) = inside[0], inside[-1]
    return (s1 - s0) / (w1 - w0), ((s0, w0), (s1, w1))


def pieces_in_window(calls: dict, first: tuple, last: tuple) -> dict:
    """Each compiled piece's calls per environment step (the calls that started between two charts/SPS
    points, over the steps between them) and its best time per call (its fastest call in that window)."""
    (s0, w0), (s1, w1) = first, last
    pieces = {}
    for name, timed in calls.items():
        inside = [seconds for wall, seconds in timed if w0 < wall <= w1]
        if inside:
            pieces[name] = {"calls_per_step": len(inside) / (s1 - s0), "best_s": min(inside)}
    return pieces


def attainable(env_sps: float, pieces: dict) -> float:
    """Steps per second if every compiled piece ran at its best time and nothing else cost anything but
    the environment alone."""
    return 1 / (1 / env_sps + sum(p["calls_per_step"] * p["best_s"] for p in pieces.values()))


def speed_table_fps(folder: Path, pair: str, script: str, flags: list[str]) -> float:
    """The median fps of a configuration in a pair's sps.py results (folder/<pair>/results.json)."""
    import statistics

    runs = json.loads((folder / pair / "results.json").read_text())["runs"]
    return statistics.median(r["sps"] for r in runs[" ".join([script, *flags])])


# --------------------------------------------------------------------------------------------------
def plot(rows: list[dict], path: Path) -> None:
    """split.png: a panel per pair, three to a row, the modes' stacked splits (ms per step) with the hard bound and
    the attainable reference marked; one legend for all, under the title, outside the data."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = dict(zip(CATEGORIES, ["tab:green", "tab:blue", "tab:cyan", "tab:olive", "tab:orange", "tab:gray", "tab:red"]))
    pairs = list(dict.fromkeys(r["pair"] for r in rows))
    cols = min(3, len(pairs))
    fig, axes = plt.subplots(math.ceil(len(pairs) / cols), cols, figsize=(max(7.0, 3.4 * cols + 0.6),
                                                                          3.0 * math.ceil(len(pairs) / cols) + 1.4),
                             squeeze=False)
    for ax in list(axes.flat)[len(pairs):]:
        ax.set_visible(False)
    for ax, pair in zip(axes.flat, pairs):
        sub = [r for r in rows if r["pair"] == pair]
        bottom = np.zeros(len(sub))
        for c in CATEGORIES:
            ms = np.array([r["fractions"][c] * 1e3 / r["fps"] for r in sub])
            ax.bar(range(len(sub)), ms, bottom=bottom, color=colors[c], label=c)
            bottom += ms
        ax.scatter(range(len(sub)), [1e3 / r["bound_fps"] for r in sub], color="black", marker="_", s=400, zorder=3,
                   label="hard bound")
        refs = [(i, 1e3 / r["reference_fps"]) for i, r in enumerate(sub) if r.get("reference_fps")]
        if refs:
            ax.scatter(*zip(*refs), color="black", marker="x", zorder=3, label="attainable reference")
        # stacked bars stick the axis to every segment's base, so the tallest bar would touch the frame
        tops = [*bottom, *(1e3 / r["bound_fps"] for r in sub), *(ms for _, ms in refs)]
        ax.set_ylim(0, 1.08 * max(tops))
        ax.set_xticks(range(len(sub)), [r["mode"] for r in sub], fontsize=7)
        ax.set_title(pair, fontsize=9)
        ax.set_ylabel("ms per environment step", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
    handles = {}
    for ax in axes.flat:  # every category and marker that some panel drew, once
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(list(handles.values()), list(handles), loc="upper center", ncol=min(len(handles), 5), fontsize=7,
               frameon=False, bbox_to_anchor=(0.5, 0.955))
    fig.suptitle("Where a step's time goes (py-spy samples of the running scripts), the hard bound and the "
                 "attainable reference", fontsize=9, y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    fig.savefig(path, dpi=80)
    plt.close(fig)


def exceeded(r: dict) -> bool:
    """A run measured above its attainable reference: the reference is then not one (its pieces were timed
    slower than they ran), and no percentage of it is given."""
    return bool(r.get("reference_fps")) and r["fps"] > r["reference_fps"]


def render(data: dict, speed: bool) -> str:
    """results.md's text from results.json's data (`speed`: the rows carry the speed table's fps)."""
    threads, peak, rates, envs, rows = (data[k] for k in ("threads", "peak", "measured_rates", "env_sps", "rows"))

    def pct(fps, of):
        return f"{100 * fps / of:.0f}%" if of else "n/a"

    def of_reference(fps, r):
        return "ran above it: no reference" if exceeded(r) else pct(fps, r["reference_fps"])

    lines = [f"Threads: {threads} (the scripts' count; every timed arm ran with it).", "",
             f"This CPU's float32 peak: {peak['cores']} cores x {peak['flops_per_cycle']} FLOPs per cycle "
             f"({peak['per_cycle_why']}) x {peak['clock_hz'] / 1e9:.2f} GHz ({peak['clock_how']}) = "
             f"{peak['flops'] / 1e9:.0f} GFLOP/s.", "",
             f"Measured ({threads} threads, the best of a few shapes): matmul through torch {rates['matmul'] / 1e9:.0f} "
             f"GFLOP/s ({pct(rates['matmul'], peak['flops'])} of the peak), through XLA {rates['matmul_xla'] / 1e9:.0f} "
             f"GFLOP/s ({pct(rates['matmul_xla'], peak['flops'])}); the Nature CNN's convolutions, forward and "
             f"backward, eager or compiled (the faster) {rates['conv'] / 1e9:.0f} GFLOP/s ({pct(rates['conv'], peak['flops'])}).",
             "", "| pair | environment alone, best (steps/s) |", "|---|---|"]
    lines += [f"| {pair} | {sps:.0f} |" for pair, sps in envs.items()]
    fps_cols = "| fps (speed table) | % of hard bound " if speed else ""
    lines += ["", "| pair | mode | network FLOPs per step (counted on) | hard bound (fps) | attainable reference (fps) "
              f"| fps (profiled run) | % of hard bound | % of reference {fps_cols}| "
              + " | ".join(f"{c} (ms/step)" for c in CATEGORIES) + " | samples |",
              "|---|---|---|---|---|---|---|---|" + ("---|---|" if speed else "") + "---|" * (len(CATEGORIES) + 1)]
    for r in rows:
        ms = [f"{r['fractions'][c] * 1e3 / r['fps']:.3f}" for c in CATEGORIES]  # the shares of the same run's step
        ref = "n/a" if not r["reference_fps"] else "not one" if exceeded(r) else f"{r['reference_fps']:.0f}"
        speed_cells = f"| {r['speed_table_fps']:.0f} | {pct(r['speed_table_fps'], r['bound_fps'])} " if speed else ""
        lines.append(f"| {r['pair']} | {r['mode']} | {r['flops_per_step'] / 1e6:.2f} M ({r['flops_counted_on']}) | "
                     f"{r['bound_fps']:.0f} | {ref} | {r['fps']:.0f} | {pct(r['fps'], r['bound_fps'])} | "
                     f"{of_reference(r['fps'], r)} {speed_cells}| " + " | ".join(ms) + f" | {r['samples']} |")
    lines += ["", "Compiled pieces in the profiled run's window (best time per call, calls per environment step):", "",
              "| pair | mode | piece | best (ms) | calls per step | ms per step |", "|---|---|---|---|---|---|"]
    for r in rows:
        for name, p in r["pieces"].items():
            lines.append(f"| {r['pair']} | {r['mode']} | `{name}` | {p['best_s'] * 1e3:.3f} | {p['calls_per_step']:.4f} | "
                         f"{p['best_s'] * 1e3 * p['calls_per_step']:.3f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default=",".join(TASKS))
    parser.add_argument("--modes", default="eager,compile,jax")
    parser.add_argument("--seconds", type=float, default=20, help="py-spy's window per run, after the warm-up")
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--env-steps", type=int, default=20_000, help="steps of each environment-alone measurement")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a run may take to reach its steady state")
    parser.add_argument("--speed", type=Path, default=None,
                        help="a folder of sps.py results per pair (docs/speed): the percentages are also given for "
                             "its fps, measured without a profiler")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rerender", type=Path, default=None, metavar="FOLDER",
                        help="rewrite FOLDER/results.md from its results.json (same command and machine) and stop")
    parser.add_argument("--replot", type=Path, default=None, metavar="FOLDER",
                        help="redraw FOLDER/split.png from its results.json, and nothing else")
    opts = parser.parse_args()
    if opts.replot:
        plot(json.loads((opts.replot / "results.json").read_text())["rows"], opts.replot / "split.png")
        return
    if opts.rerender:
        data = json.loads((opts.rerender / "results.json").read_text())
        text = render(data, any("speed_table_fps" in r for r in data["rows"]))
        (opts.rerender / "results.md").write_text(f"{header(data)}\n\n{text.strip()}\n")
        return
    pairs, modes = opts.pairs.split(","), opts.modes.split(",")
    if bad := [p for p in pairs if p not in TASKS] + [m for m in modes if m not in MODES]:
        parser.error(f"unknown pair or mode {bad}; pairs: {list(TASKS)}, modes: {list(MODES)}")
    if shutil.which("py-spy") is None:
        raise SystemExit("limits: py-spy is not installed (pip install -r requirements/requirements-all.txt)")

    threads = torch.get_num_threads()  # the scripts' count: every timed arm runs with it
    peak = theoretical_peak()
    rates = measured_rates(threads)
    if (best := max(rates.values())) > peak["flops"]:
        raise SystemExit(f"limits: a measured rate ({best / 1e9:.0f} GFLOP/s) beats the peak computed for this CPU "
                         f"({peak['flops'] / 1e9:.0f} GFLOP/s): the peak is wrong ({peak})")
    rows, envs = [], {}
    for pair in pairs:
        envs[pair] = max(environment_alone(pair, opts.env_steps) for _ in range(3))  # its best rate
        for mode in modes:
            suffix, flags = MODES[mode]
            script = PAIRS[pair] + suffix
            if not (REPO / "leanrl" / f"{script}.py").exists():
                continue
            print(f"{pair} {mode} ...", file=sys.stderr)
            # the JAX twin computes the optimized script's gradients (those of the weights each step updates)
            counted = PAIRS[pair] + ("" if mode == "eager" else "_torchcompile")
            flops = flops_per_step(pair, counted)
            result = profile(script, [*TASKS[pair], "--total-timesteps", "10000000", *flags], opts.seconds, opts.rate,
                             opts.timeout, steps_per_point(pair))
            # a reference needs the environment outside the pieces: JAX's Atari twin steps envpool inside its jitted
            # rollout, so its pieces hold the environment's time already
            pieces = result["pieces"] if result["fractions"]["environment + acting"] == 0 else {}
            row = {"pair": pair, "mode": mode, "script": script, **result, "flops_per_step": flops, "flops_counted_on": counted,
                   "env_sps": envs[pair], "bound_fps": hard_bound(envs[pair], flops, peak["flops"]),
                   "reference_fps": attainable(envs[pair], pieces) if pieces else None}
            if opts.speed:
                row["speed_table_fps"] = speed_table_fps(opts.speed, pair, script, flags)
            rows.append(row)
            for fps_key in ("fps", "speed_table_fps"):
                if row.get(fps_key, 0) > row["bound_fps"]:
                    raise SystemExit(f"limits: {pair} {mode} ran at {row[fps_key]:.0f} fps, above its hard bound "
                                     f"({row['bound_fps']:.0f}): the bound is wrong")

    data = {"threads": threads, "peak": peak, "measured_rates": rates, "env_sps": envs, "rows": rows}
    write_results(opts.out, render(data, bool(opts.speed)), data)
    if opts.out is not None and rows:
        plot(rows, opts.out / "split.png")


if __name__ == "__main__":
    main()
