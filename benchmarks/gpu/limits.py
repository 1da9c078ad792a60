"""The GPU limit study: where a step's time goes on a GPU machine, how busy the GPU is, and how far each pair and
mode is from a hard bound and an attainable reference (a part of the GPU sitting, whose page is docs/gpu.md).

    python -m benchmarks.gpu.limits --out docs/gpu/<sitting>/limits      # ~8 min: the first rows in priority order
    python -m benchmarks.gpu.limits --out docs/gpu/<sitting>/limits      # again: the rows the budget left out
    python -m benchmarks.gpu.limits --out DIR --pairs sac,td3 --modes compile+cudagraphs,eager --budget 300
    python -m benchmarks.gpu.limits --rerender DIR                      (results.md and busy.png from results.json)

On the GPU machine, with the offline bundle installed as benchmarks/gpu/gpu.sh installs it (its folder on PYTHONPATH,
MUJOCO_GL unset). One row is one pair in one mode (eager, --compile, --cudagraphs, --compile --cudagraphs, the JAX
twin), run as a user runs it (the GPU speed table's task and flags: benchmarks/gpu/gpu.py's PAIRS) in its own process,
through a launcher that runs the script with runpy and watches its `charts/SPS` points: the scripts carry no timers.
From the first point on (the warm-up is over), three windows, each from one point to a later one:
- plain, at least --plain-seconds, no instrument in the process: the run's own fps; and NVML's GPU utilization, read
  every 50 ms by nvidia-smi in a process of its own where it is found (what wandb's GPU-utilization plots show);
- arming: the instruments start (torch.profiler's first start takes a second or more); nothing is measured;
- profiled, at least --seconds and two intervals between points, with two instruments:
  - a sampler thread in the script's process reads the main thread's stack --rate times a second
    (sys._current_frames) and weighs each sample by the time since the one before. A sample counts for what
    benchmarks/limits/limits.py's classifier says main() was doing (environment, acting, environment + acting, storage,
    update, logging, other; GAE told apart from the update and the rollout's storage, where that classifier puts it:
    a sample inside a function of the script named for it, or on a line of main() that calls one), or, where the
    main thread was then inside a CUDA call seen by the profiler, for "waiting for the GPU" (a synchronize, or a copy
    call before its device copy began) or "host-device copies" (the rest of a copy call). A JAX twin waits inside
    JAX, not in CUDA calls of its own: on a GPU its samples count as waiting where the host reads an array's value
    (in JAX's ArrayImpl._value, or on a line of main() that reads one with np.asarray, int, float, device_get or
    block_until_ready), but for the environment's line; asynchronous dispatch puts each jitted call's GPU time on
    the next such read. While it samples, Python's switch interval is
    --switch-interval (0.5 ms): a thread that asks for the interpreter gets it within that (at the default 5 ms a
    sample would land wherever the main thread next let go of it, not where it was when asked);
  - torch.profiler with CUDA activity only (CUPTI: kernels, copies, memsets, CUDA runtime and driver calls; no CPU
    operator events): per step, the kernels and their time, the host-to-device and device-to-host copies (count,
    time, bytes), the main thread's launches, synchronizations and copy calls; the GPU's busy fraction (the union of
    kernel, copy and memset intervals) over the window and per --bin-ms bin (busy.png); and the compiled or graphed
    pieces (every function torch.compile or jax.jit compiles, every tensordict CudaGraphModule), each call timed on
    the host and matched to its kernels by CUPTI's correlation ids: per piece its calls per environment step, its
    best host time, its best GPU busy time and its best latency (from its start on the host to the end of its last
    kernel) per call. Kineto keeps at most 128 MB of CUPTI records (a few hundred thousand kernels): where its record
    stops before the window ends, the GPU's figures come from the window up to the last point before it stopped
    (results.json says where). For the JAX twins a kernel is matched to the last call of a piece that began before
    its launch (XLA may launch from its own threads, after the call returned): an approximation.
  Their cost to the run is the profiled window's fps against the plain window's, given per row with the sampler's
  own CPU time.
Then the run is ended (os._exit; its TensorBoard logs are not needed). The DQN pairs explore at random with a
probability that falls over a fraction of the run, and a random step runs no network: their runs are long, so their
exploration is set to end at the start of learning, as in the steady state of a training run.

Per pair and mode, as benchmarks/limits/limits.py defines them for the CPU:
- the hard bound, per pair: the environment alone at its best rate (the eager script's own factory on this machine's
  CPU, random actions, the best of --env-repeats runs of --env-steps steps: limits.environment_alone) plus the least
  GPU work per step that any measured mode of the pair needed for its pieces (each piece's best GPU busy time per
  call x its calls per step; without a GPU, its best host time): what nothing that steps this environment and runs
  this work on this GPU can beat, as long as the two do not overlap;
- the attainable reference, per mode with pieces: the environment alone plus each piece's best latency per call x its
  calls per step, in the same run and window: the run if nothing but its pieces, each at its best, and the
  environment cost time. None for the eager scripts (no pieces), for JAX's Atari PPO twin (its environment runs
  inside its jitted rollout), for a row with a piece whose kernels were not matched, and for the JAX twins without
  a GPU (their host times are dispatches). A run measured above either is given no percentage of it.
The percentages are the profiled window's fps over each: fps and pieces from the same window and instruments.

The sitting: rows run in priority order, modes in groups separated by '/', each group over every pair before the next;
by default one group, so a pair's rows run one after the other (--compile --cudagraphs, eager, the JAX twin,
--compile), PPO Atari's first, then SAC's, TD3's, continuous PPO's, DQN Atari's and DQN's. The budget counts from the
start; a row starts only if its expected time (EXPECTED, plus ENV_EXPECTED where the pair's environment has not been
measured yet) fits in what is left, and one that runs past the budget is stopped: both are left to the next command,
which reads results.json back and runs only the rows it lacks (a row that failed keeps its error and is not run again
unless --retry-failed), and sitting.log says so. Every row and environment-alone measurement records the machine it
ran on (leanrl_utils.machine.machine_id: a lent GPU machine is a fresh one each command, unless kept warm): a pair's
bound adds up its rows and its environment, so they must share a machine, and a pair that a command adds rows to,
measured so far on another machine, is measured again, whole. Expected time per row on the GPU machine (16-core Xeon,
an H100 or H200), from its process's start to its end: eager 30 s, --cudagraphs 40 s, JAX 50 s, --compile 70 s,
--compile --cudagraphs 75 s, and 10 s per pair for the environment alone: a row's own work measured on a 2-core CPU
(start-up, windows, the profiler's processing), the first GPU sitting's fps, and compile times guessed from `pytest -m
gpu -n 16` there (150 s for the whole GPU suite); revise them from the first sitting's sitting.log, which gives every
row's time. A pair is 10 + 75 + 30 + 50 + 70 = 235 s: a 540-second command of the GPU sitting (benchmarks/gpu/gpu.py's plan
limits) covers two pairs, and the study three such commands. --tiny runs the CPU-sized tasks of benchmarks/gpu/gpu.py
(TINY_EXPECTED): the sitting's rehearsal.

Outputs in --out, four files: results.json (each row's figures and busy series, the bounds, references and
percentages derived from them, the commands, the machine), results.md (the tables), busy.png (the GPU's busy fraction
over each row's profiled window: a panel per pair, a line per mode) and sitting.log. Without CUDA it runs end to end on
the CPU, and the GPU's columns say "no GPU": tests/test_gpu_limits.py does so at tiny sizes.
"""

import argparse
import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

# mode -> (its label in the GPU speed table, the script's suffix, flags)
MODES = {
    "eager": ("eager", "", []),
    "compile": ("--compile", "_torchcompile", ["--compile"]),
    "cudagraphs": ("--cudagraphs", "_torchcompile", ["--cudagraphs"]),
    "compile+cudagraphs": ("--compile --cudagraphs", "_torchcompile", ["--compile", "--cudagraphs"]),
    "jax": ("JAX", "_jax", []),
}
DEFAULT_PAIRS = "ppo_atari,sac,td3,ppo_continuous,dqn_atari,dqn"
DEFAULT_MODES = "compile+cudagraphs,eager,jax,compile"  # one group: a pair's rows one after the other
# seconds a row is expected to take on the GPU machine, from its start to its end (see the docstring)
EXPECTED = {"eager": 30.0, "cudagraphs": 40.0, "jax": 50.0, "compile": 70.0, "compile+cudagraphs": 75.0}
ENV_EXPECTED = 10.0  # the environment alone, --env-repeats x --env-steps
# --tiny (the CPU rehearsal of the GPU sitting, benchmarks/gpu/gpu.py): rows of CPU-sized runs
TINY_EXPECTED = {"eager": 10.0, "cudagraphs": 12.0, "jax": 15.0, "compile": 15.0, "compile+cudagraphs": 15.0}
TINY_ENV_EXPECTED = 5.0
OUT_OF_BUDGET = "ran out of the budget"
WAITING, COPIES, GAE = "waiting for the GPU", "host-device copies", "GAE"
# the scripts' GAE functions (compute_gae; gae, gae_chunk, gae_deltas), by name and called on a line of main()
GAE_FUNCTION, GAE_CALL = re.compile(r"^(compute_gae|gae\w*)$"), re.compile(r"(?<![\w.])(compute_gae|gae\w*)\(")
# device events by kind; the CUDA runtime and driver calls by what they do
DEV_KINDS = ["kernel", "HtoD", "DtoH", "DtoD", "memset", "other copy"]
API_KINDS = ["launch", "synchronize", "copy", "other"]
LINE_COLORS = {"eager": "tab:gray", "compile": "tab:blue", "cudagraphs": "tab:green", "compile+cudagraphs": "tab:red",
               "jax": "tab:purple"}
DERIVED = ("reference_fps", "bound_fps", "pct_of_bound", "pct_of_reference")  # a row's figures that derive() sets


def split_categories() -> list[str]:
    from benchmarks.limits.limits import CATEGORIES

    update = CATEGORIES.index("update")
    return [*CATEGORIES[:update + 1], GAE, *CATEGORIES[update + 1:], COPIES, WAITING]


def category(frames: list[str], script_file: str, main) -> str:
    """A sample's category: benchmarks/limits/limits.py's classifier's, but GAE where the sample is inside one of the script's
    GAE functions (called from main()) or on a line of main() that calls one."""
    from benchmarks.limits.limits import classify, line_of

    at = next((i for i, f in enumerate(frames) if f.startswith("main (") and script_file in f), None)
    if at is not None:
        if any(script_file in f and GAE_FUNCTION.match(f.split(" (")[0].rsplit(".", 1)[-1]) for f in frames[at + 1:]):
            return GAE
        path = main.paths.get(line_of(frames[at]), [])
        if path and GAE_CALL.search(main.text(path[-1])):
            return GAE
    return classify(frames, script_file, main)


def task(pair: str, total: int, tiny: bool = False) -> tuple[str, list[str]]:
    """A pair's eager script and its run's flags: the GPU speed table's task (benchmarks/gpu/gpu.py; with `tiny`, its
    CPU-sized one), `total` steps long; the DQN pairs' exploration ending at the start of learning (see the
    docstring)."""
    from benchmarks.gpu import gpu
    from leanrl_utils.scripts import load_script

    eager, env_id, _, flags = (gpu.TINY_PAIRS if tiny else gpu.PAIRS)[pair]
    args = ["--env-id", env_id, *shlex.split(flags), "--total-timesteps", str(total)]
    if pair.startswith("dqn"):
        given = args[args.index("--learning-starts") + 1] if "--learning-starts" in args else None
        starts = int(given) if given is not None else load_script(eager).Args().learning_starts
        args += ["--exploration-fraction", repr(max(starts, 1) / total)]
    return eager, args


# ==================================================================================================
# The launcher: in the script's process
# ==================================================================================================
def kind(args, kwargs) -> str:
    """A call's kind: its flags (positional booleans, keyword arguments that are not data), as limits.py names it."""
    plain = [repr(a) for a in args if isinstance(a, bool)]
    plain += [f"{k}={v!r}" for k, v in sorted(kwargs.items()) if isinstance(v, (bool, int, str))]
    return f"({', '.join(plain)})" if plain else ""


def describe(fn) -> str:
    """A function's name; a partial's with its bound flags (SAC's update, per kind of step)."""
    if isinstance(fn, functools.partial):
        return describe(fn.func) + kind(fn.args, fn.keywords)
    return getattr(fn, "__qualname__", None) or getattr(type(fn), "__qualname__", repr(fn))


class Sampler(threading.Thread):
    """Samples one thread's stack `rate` times a second: (time.time_ns(), the stack's index). Stacks are kept as
    (code, line) tuples, innermost first, and named 'qualname (file:line)', outermost first, by frames()."""

    def __init__(self, ident: int, rate: float):
        super().__init__(name="gpu_limits sampler", daemon=True)
        self.target, self.period = ident, 1.0 / rate
        self.samples: list[tuple[int, int]] = []
        self.stacks: dict[tuple, int] = {}
        self.stopping = threading.Event()
        self.late = self.cpu = 0.0

    def run(self):
        cpu0, current = time.thread_time(), sys._current_frames
        while not self.stopping.is_set():
            asked = time.perf_counter()
            time.sleep(self.period)  # the interpreter is let go while asleep, and taken back before it returns
            self.late += time.perf_counter() - asked - self.period
            now = time.time_ns()
            frame, stack = current().get(self.target), []
            while frame is not None:
                stack.append((frame.f_code, frame.f_lineno))
                frame = frame.f_back
            self.samples.append((now, self.stacks.setdefault(tuple(stack), len(self.stacks))))
        self.cpu = time.thread_time() - cpu0

    def frames(self) -> list[list[str]]:
        named = [[]] * len(self.stacks)
        for stack, index in self.stacks.items():
            named[index] = [f"{getattr(code, 'co_qualname', code.co_name)} ({code.co_filename}:{line})"
                            for code, line in reversed(stack)]
        return named


def device_arrays(events) -> tuple[np.ndarray, np.ndarray]:
    """torch.profiler's kineto events as two integer arrays. Device events (kernels, copies, memsets): start and end
    (ns, on time.time_ns()'s clock), kind (DEV_KINDS), correlation id, bytes (0 where not given). The others (CUDA
    runtime and driver calls): start, end, kind (API_KINDS), correlation id, the calling thread's system id."""
    dev, api = [], []
    for e in events:
        name, start = e.name(), e.start_ns()
        end, corr = start + e.duration_ns(), e.correlation_id()
        if str(e.device_type()).endswith("CUDA"):
            if name.startswith("Memcpy"):
                k = 1 if "HtoD" in name else 2 if "DtoH" in name else 3 if "DtoD" in name else 5
            else:
                k = 4 if name.startswith("Memset") else 0
            meta = (e.metadata_json() or "") if k and hasattr(e, "metadata_json") else ""
            found = re.search(r'"bytes":\s*(\d+)', meta)
            dev.append((start, end, k, corr, int(found.group(1)) if found else 0))
        else:
            k = 1 if "ynchronize" in name else 2 if "emcpy" in name else 0 if "aunch" in name else 3
            api.append((start, end, k, corr, e.device_resource_id()))
    return np.array(dev, dtype=np.int64).reshape(-1, 5), np.array(api, dtype=np.int64).reshape(-1, 5)


def nvml_readings(lines: list[str]) -> list[tuple[int, float]]:
    """nvidia-smi's lines ('2026/12/01 10:00:00.123, 57') as (time.time_ns(), utilization in %)."""
    import datetime

    readings = []
    for line in lines:
        try:
            stamp, value = (x.strip() for x in line.split(","))
            when = datetime.datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()  # local time, as time.time()
            readings.append((int(when * 1e9), float(value)))
        except ValueError:
            continue
    return readings


class Probe:
    """What the launcher installs in the script's process: the pieces' timers, the charts/SPS hook that runs the
    windows, the instruments. At the end it writes raw.json and raw.npz into the folder it was given, and ends the
    process."""

    def __init__(self, config: dict, script: str):
        self.config, self.script, self.out = config, script, Path(config["raw"])
        self.points: list[tuple[int, int]] = []
        self.marks: dict[str, int] = {}
        self.calls: dict[str, list[tuple[int, int]]] = {}
        self.recording, self.depth = False, 0
        self.info: dict = {"process_start_ns": time.time_ns(), "main_tid": threading.get_native_id()}
        self.sampler = self.profiler = self.nvml = None
        self.nvml_lines: list[str] = []
        self.switch = sys.getswitchinterval()

    # -- the pieces ---------------------------------------------------------------------------------
    def record(self, name: str, fn, args, kwargs):
        """Call fn; time the call where it is a piece's outermost call and the instruments are on."""
        self.depth += 1
        if self.depth > 1 or not self.recording:
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
        start = time.time_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            self.calls.setdefault(name + kind(args, kwargs), []).append((start, time.time_ns()))
            self.depth -= 1

    def timed(self, fn, name: str):
        def call(*args, **kwargs):
            return self.record(name, fn, args, kwargs)
        call.__qualname__ = name
        return call

    def install(self) -> None:
        import torch
        from torch.utils.tensorboard import SummaryWriter

        if self.script.endswith("_jax.py"):
            import jax

            jit = jax.jit

            def timed_jit(fun=None, **options):
                if fun is None:
                    return lambda f: timed_jit(f, **options)
                return self.timed(jit(fun, **options), describe(fun))
            jax.jit = timed_jit
        else:
            compile_ = torch.compile

            def timed_compile(fn=None, **options):
                if fn is None:
                    return lambda f: timed_compile(f, **options)
                return self.timed(compile_(fn, **options), describe(fn))
            torch.compile = timed_compile
            try:
                from tensordict.nn import CudaGraphModule
            except ImportError:
                CudaGraphModule = None
            if CudaGraphModule is not None:
                graph_call = CudaGraphModule.__call__

                def timed_graph(module, *args, **kwargs):
                    return self.record(describe(module.module), functools.partial(graph_call, module), args, kwargs)
                CudaGraphModule.__call__ = timed_graph

        add_scalar = SummaryWriter.add_scalar

        def watched(writer, tag, value, global_step=None, *args, **kwargs):
            now = time.time_ns()
            result = add_scalar(writer, tag, value, global_step, *args, **kwargs)
            if tag == "charts/SPS":
                self.point(int(global_step), now)
            return result
        SummaryWriter.add_scalar = watched

    # -- the windows --------------------------------------------------------------------------------
    def point(self, step: int, now: int) -> None:
        self.points.append((step, now))
        i, c, marks = len(self.points) - 1, self.config, self.marks
        if "plain" not in marks:
            marks["plain"] = i
            self.start_nvml()
        elif "arming" not in marks:
            if now - self.points[marks["plain"]][1] >= c["plain_seconds"] * 1e9:
                marks["arming"] = i
                self.start_instruments()
        elif "window" not in marks:
            marks["window"] = i
        elif now - self.points[marks["window"]][1] >= c["seconds"] * 1e9 and i - marks["window"] >= 2:
            marks["end"] = i
            self.finish()

    def start_nvml(self) -> None:
        if not self.config.get("nvml") or shutil.which("nvidia-smi") is None:
            return
        try:
            self.nvml = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,utilization.gpu",
                                          "--format=csv,noheader,nounits", "-lms", "50", "-i", "0"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return
        lines = iter(self.nvml.stdout.readline, "")
        threading.Thread(target=lambda: self.nvml_lines.extend(lines), daemon=True).start()

    def gpu_absent(self) -> str | None:
        """Why this run's GPU is not profiled (None: it is)."""
        if self.script.endswith("_jax.py"):
            import jax

            backend = self.info["jax_backend"] = jax.default_backend()
            return None if backend == "gpu" else f"no GPU (JAX runs on {backend})"
        import torch

        if not torch.cuda.is_available():
            return "no GPU"
        return None if torch.cuda.is_initialized() else "no GPU (the run is on the CPU)"

    def start_instruments(self) -> None:
        self.recording = True
        self.info["profiler"] = self.gpu_absent()
        if self.info["profiler"] is None and not self.config.get("profile", True):
            self.info["profiler"] = "not profiled: " + self.config["why_not"]
        if self.info["profiler"] is None:
            try:
                from torch.profiler import ProfilerActivity, profile

                started = time.perf_counter()
                self.profiler = profile(activities=[ProfilerActivity.CUDA])
                self.profiler.start()
                self.info["profiler_start_s"] = time.perf_counter() - started
            except Exception as failure:  # the row goes on without the GPU's figures, and says why
                self.profiler, self.info["profiler"] = None, f"torch.profiler failed to start: {failure!r}"[:300]
        self.info["instruments_start_ns"] = time.time_ns()
        sys.setswitchinterval(self.config["switch_interval"])
        self.sampler = Sampler(threading.main_thread().ident, self.config["rate"])
        self.sampler.start()

    def finish(self, error: str | None = None) -> None:
        self.recording = False
        dev = api = np.zeros((0, 5), dtype=np.int64)
        sampler = self.sampler
        if sampler is not None:
            sampler.stopping.set()
            sampler.join()
            sys.setswitchinterval(self.switch)
            self.info |= {"sampler_cpu_s": sampler.cpu,
                          "sampler_late_ms": 1e3 * sampler.late / max(1, len(sampler.samples))}
        self.info["instruments_stop_ns"] = time.time_ns()
        if self.profiler is not None:
            started = time.perf_counter()
            try:
                self.profiler.stop()
                dev, api = device_arrays(self.profiler.profiler.kineto_results.events())
            except Exception as failure:
                self.info["profiler"] = f"torch.profiler failed: {failure!r}"[:300]
            self.info["profiler_stop_s"] = time.perf_counter() - started
        if self.nvml is not None:
            self.nvml.terminate()
            self.nvml.wait()
        raw = {"script": self.script, "points": self.points, "marks": self.marks, "info": self.info, "error": error,
               "calls": self.calls, "nvml": nvml_readings(self.nvml_lines),
               "samples": sampler.samples if sampler else [], "stacks": sampler.frames() if sampler else []}
        np.savez(self.out / "raw.npz", dev=dev, api=api)
        (self.out / "raw.json").write_text(json.dumps(raw))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def launch() -> None:
    """`python -c LAUNCH CONFIG SCRIPT ARGS...`: SCRIPT run as __main__, the probe installed."""
    import runpy

    config, script = json.loads(sys.argv[1]), sys.argv[2]
    sys.argv = sys.argv[2:]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    probe = Probe(config, script)
    probe.install()
    error = "the run ended before its profiled window did: give it more --total-timesteps"
    try:
        runpy.run_path(script, run_name="__main__")
    except BaseException as failure:  # a crash of the script: its row says so
        error = f"the run stopped: {failure!r}"[:500]
    probe.finish(error)


LAUNCH = "from benchmarks.gpu.limits import launch; launch()"  # run with the repository on PYTHONPATH (run_row)


# ==================================================================================================
# The analysis: in the sitting's process
# ==================================================================================================
def merged(intervals: np.ndarray) -> np.ndarray:
    """The union of (start, end) intervals as sorted, disjoint intervals."""
    if len(intervals) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    iv = intervals[np.argsort(intervals[:, 0], kind="stable")]
    ends = np.maximum.accumulate(iv[:, 1])
    new = np.ones(len(iv), dtype=bool)
    new[1:] = iv[1:, 0] > ends[:-1]
    last = np.append(np.flatnonzero(new)[1:] - 1, len(iv) - 1)
    return np.stack([iv[new, 0], ends[last]], axis=1)


def inside(union: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Whether each time lies inside one of the sorted, disjoint intervals."""
    if len(union) == 0:
        return np.zeros(len(t), dtype=bool)
    k = np.searchsorted(union[:, 0], t, side="right") - 1
    return (k >= 0) & (t < union[np.maximum(k, 0), 1])


def covered_until(union: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The length of the sorted, disjoint intervals that lies before each x."""
    if len(union) == 0:
        return np.zeros(len(x))
    before = np.concatenate([[0.0], np.cumsum((union[:, 1] - union[:, 0]).astype(float))])
    k = np.searchsorted(union[:, 0], x, side="right")  # the intervals begun by x
    last = np.maximum(k - 1, 0)
    partial = np.where(k > 0, np.minimum(x, union[last, 1]) - union[last, 0], 0)
    return before[last] + np.maximum(partial, 0)


def busy_series(intervals: np.ndarray, start: int, end: int, bin_ns: int) -> np.ndarray:
    """The fraction of each bin of [start, end) that at least one interval covers (whole bins only)."""
    edges = start + bin_ns * np.arange(int((end - start) // bin_ns) + 1)
    return np.diff(covered_until(merged(intervals), edges)) / bin_ns


def sample_weights(times: np.ndarray, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """The samples in (start, end] and their weights: the time since the sample before (or since the start)."""
    keep = (times > start) & (times <= end)
    t = times[keep]
    return keep, (t - np.concatenate([[start], t[:-1]])).astype(float)


def split_shares(times: np.ndarray, categories: list[str], start: int, end: int, waiting: np.ndarray,
                 copying: np.ndarray, names: list[str]) -> tuple[dict, int]:
    """The shares of [start, end] per category, from time-weighted samples: a sample taken while the main thread was
    inside a waiting (a copying) CUDA call counts for WAITING (COPIES), else for its stack's category. They sum to 1."""
    keep, weights = sample_weights(times, start, end)
    t, cats = times[keep], np.array(categories, dtype=object)[keep]
    cats[inside(copying, t)] = COPIES
    cats[inside(waiting, t)] = WAITING
    total = weights.sum()
    return {c: float(weights[cats == c].sum() / total) if total else 0.0 for c in names}, int(keep.sum())


def attribute(calls: dict, dev: np.ndarray, api: np.ndarray, start: int, end: int, steps: int,
              until_next: bool) -> dict:
    """Each piece's calls per step and best times per call, over its calls that began in (start, end]. A device event
    belongs to the call in which the CUDA call that launched it (its correlation id) began: between the call's start
    and its end, or (until_next: JAX, which may launch from its own threads after the call returned) before the next
    call of any piece began."""
    flat = sorted((s, e, name) for name, spans in calls.items() for s, e in spans)
    if not flat:
        return {}
    starts = np.array([s for s, _, _ in flat], dtype=np.int64)
    ends = np.array([e for _, e, _ in flat], dtype=np.int64)
    owner = np.full(len(dev), -1)
    if len(dev) and len(api):
        order = np.argsort(api[:, 3], kind="stable")
        corr, launched = api[order, 3], api[order, 0]
        j = np.clip(np.searchsorted(corr, dev[:, 3]), 0, len(corr) - 1)
        at = launched[j]
        k = np.searchsorted(starts, at, side="right") - 1
        ok = (corr[j] == dev[:, 3]) & (dev[:, 3] > 0) & (k >= 0)
        if not until_next:
            ok &= at <= ends[np.maximum(k, 0)]
        owner = np.where(ok, k, -1)
    work: dict[int, list] = {}
    for index in np.flatnonzero(owner >= 0):
        work.setdefault(int(owner[index]), []).append(dev[index, :2])
    pieces = {}
    for k, (s, e, name) in enumerate(flat):
        if not start < s <= end:
            continue
        p = pieces.setdefault(name, {"calls": 0, "host": [], "latency": [], "gpu": []})
        p["calls"] += 1
        p["host"].append(e - s)
        if k in work:
            iv = np.array(work[k])
            last = int(iv[:, 1].max())
            p["gpu"].append(float(covered_until(merged(iv), np.array([last]))[0]))
            p["latency"].append(max(e, last) - s)
        else:
            p["latency"].append(e - s)
    return {name: {"calls_per_step": p["calls"] / steps, "best_host_s": min(p["host"]) / 1e9,
                   "best_latency_s": min(p["latency"]) / 1e9, "best_gpu_s": min(p["gpu"]) / 1e9 if p["gpu"] else None,
                   "calls_with_kernels": len(p["gpu"])}
            for name, p in pieces.items()}


def main_thread_intervals(api: np.ndarray, dev: np.ndarray, tid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                              bool]:
    """The main thread's CUDA calls; when it waited for the GPU (its synchronizations, and each copy call until its
    device copy began) and when it copied (the rest of each copy call); whether the thread's id was found (else the
    thread that launched the most stands for it)."""
    calls, found = api[api[:, 4] == tid], True
    if not len(calls):
        found = False
        tids, counts = np.unique(api[api[:, 2] == 0, 4], return_counts=True)
        calls = api[api[:, 4] == tids[np.argmax(counts)]] if len(tids) else calls
    syncs, copies = calls[calls[:, 2] == 1][:, :2], calls[calls[:, 2] == 2]
    copied = dev[:, 2] > 0
    device_start = dict(zip(dev[copied, 3].tolist(), dev[copied, 0].tolist()))
    split_at = np.array([min(max(device_start.get(c, s), s), e) for s, e, c in copies[:, [0, 1, 3]].tolist()],
                        dtype=np.int64).reshape(-1)
    waiting = merged(np.concatenate([syncs, np.stack([copies[:, 0], split_at], axis=1)]))
    return calls, waiting, merged(np.stack([split_at, copies[:, 1]], axis=1)), found


# JAX hands a jitted call's result back at once and waits where the host reads it: in ArrayImpl._value (int(), float(),
# .item(), np.asarray() through __array__, jax.device_get), or inside C++ (np.asarray of an array, block_until_ready)
JAX_WAITS = re.compile(r"^(ArrayImpl\._value|(.*\.)?block_until_ready|(.*\.)?_?device_get) \(.*jax/_src/")
READS = re.compile(r"np\.asarray\(|np\.array\(|device_get\(|block_until_ready|\bint\(|\bfloat\(|\.item\(\)")


def jax_waits(frames: list[str], script_file: str, main) -> bool:
    """Whether a JAX twin's sample is the host waiting for a result: inside JAX's read of an array's value, or on a
    line of main() that reads one, with no Python frame below it (the wait is in C++)."""
    from benchmarks.limits.limits import line_of

    if any(JAX_WAITS.match(f) for f in frames):
        return True
    if not frames or not frames[-1].startswith("main (") or script_file not in frames[-1]:
        return False
    path = main.paths.get(line_of(frames[-1]), [])
    return bool(path) and bool(READS.search(main.text(path[-1])))


def analyse(raw: dict, dev: np.ndarray, api: np.ndarray, pair: str, mode: str, bin_ms: float) -> dict:
    """One row's figures from what its launcher wrote."""
    from benchmarks.limits.limits import Main

    names = split_categories()
    points, marks, info = raw["points"], raw["marks"], raw["info"]
    steps_at = np.array([s for s, _ in points], dtype=np.int64)
    time_at = np.array([t for _, t in points], dtype=np.int64)
    p0, p1, w0, w1 = marks["plain"], marks["arming"], marks["window"], marks["end"]

    def fps(a, b):
        return float((steps_at[b] - steps_at[a]) / ((time_at[b] - time_at[a]) / 1e9))
    start, end, steps = int(time_at[w0]), int(time_at[w1]), int(steps_at[w1] - steps_at[w0])
    row = {"pair": pair, "mode": mode, "script": Path(raw["script"]).stem, "fps_plain": fps(p0, p1), "fps": fps(w0, w1),
           "window": {"start_ns": start, "end_ns": end, "steps": steps, "seconds": (end - start) / 1e9,
                      "plain_steps": int(steps_at[p1] - steps_at[p0]),
                      "plain_seconds": (time_at[p1] - time_at[p0]) / 1e9},
           "first_point_s": (time_at[0] - info["process_start_ns"]) / 1e9}

    profiled = info.get("profiler") is None and info.get("profiler_start_s") is not None
    row["gpu"] = "profiled" if profiled else info.get("profiler") or "no GPU"
    if profiled and not len(dev):
        row["gpu"] = "profiled, but no kernel or copy was recorded"
    elif profiled:  # the profiler's clock is time.time_ns()'s (kineto puts CUPTI's on the Unix clock): checked
        lo, hi = info["instruments_start_ns"] - 2e9, info["instruments_stop_ns"] + 2e9
        begun = np.concatenate([api[:, 0], dev[:, 0]])
        aligned = float(np.mean((begun >= lo) & (begun <= hi)))
        row["clocks_aligned"] = aligned >= 0.95
        if not row["clocks_aligned"]:
            row["gpu"] = f"profiled, but {100 * (1 - aligned):.0f}% of its events lie outside the instruments' time"
    on_gpu = row["gpu"] == "profiled"

    # the split
    waiting = copying = np.zeros((0, 2), dtype=np.int64)
    main_calls = api[:0]
    if on_gpu:
        main_calls, waiting, copying, row["main_thread_calls_found"] = main_thread_intervals(api, dev, info["main_tid"])
    main = Main(Path(raw["script"]))
    script_file = Path(raw["script"]).name
    stack_cats = [category(frames, script_file, main) for frames in raw["stacks"]]
    split_cats = list(stack_cats)
    if info.get("jax_backend") == "gpu":  # a JAX twin on a GPU: its waits are in JAX, not in CUDA calls of its own
        split_cats = [WAITING if c not in ("environment", "environment + acting")
                      and jax_waits(frames, script_file, main) else c for frames, c in zip(raw["stacks"], stack_cats)]
    samples = np.array(raw["samples"], dtype=np.int64).reshape(-1, 2)
    shares, n = split_shares(samples[:, 0], [split_cats[i] for i in samples[:, 1]], start, end, waiting, copying, names)
    row |= {"shares": shares, "samples": n, "ms_per_step": {c: 1e3 * s / row["fps"] for c, s in shares.items()}}
    row["heaviest_lines"] = heaviest_lines(raw, samples, split_cats, main, script_file, start, end)

    # the device: over the profiled window, or its first part where the profiler's record stops early (up to the
    # last point before it stopped)
    d1 = w1
    if on_gpu:
        last = int(dev[:, 0].max())
        if last < end - max(50_000_000, 0.05 * (end - start)):
            before = [j for j in range(w0 + 1, w1 + 1) if time_at[j] <= last]
            if before:
                d1 = before[-1]
                row["device_window_truncated_at_s"] = (time_at[d1] - start) / 1e9
            else:
                row["gpu"] = f"profiled, but its record stopped {(last - start) / 1e9:.2f} s into the window"
                on_gpu = False
    dstart, dend, dsteps = start, int(time_at[d1]), int(steps_at[d1] - steps_at[w0])
    if on_gpu:
        row["device"] = device_figures(dev, api, main_calls, dstart, dend, dsteps, bin_ms)
    row["pieces"] = attribute(raw["calls"], dev if on_gpu else dev[:0], api if on_gpu else api[:0], dstart, dend,
                              dsteps, until_next=mode == "jax")

    readings = np.array(raw.get("nvml") or [], dtype=float).reshape(-1, 2)  # nvidia-smi, in a process of its own

    def mean_utilization(a, b):
        sel = readings[(readings[:, 0] >= a) & (readings[:, 0] <= b), 1]
        return float(sel.mean()) / 100 if len(sel) else None
    row["nvml_utilization"] = {"plain": mean_utilization(time_at[p0], time_at[p1]),
                               "profiled": mean_utilization(start, end)}
    row["instruments"] = {"cost": 1 - row["fps"] / row["fps_plain"],
                          "sampler_cpu_share": info.get("sampler_cpu_s", 0) / row["window"]["seconds"],
                          **{k: info.get(k) for k in ("sampler_late_ms", "profiler_start_s", "profiler_stop_s")}}
    return row


def heaviest_lines(raw: dict, samples: np.ndarray, stack_cats: list[str], main, script_file: str, start: int,
                   end: int, top: int = 8) -> dict:
    """The lines of main() that the most sampled time was on (category: line: its text), as shares of the window."""
    from benchmarks.limits.limits import line_of

    labels = []
    for frames, category in zip(raw["stacks"], stack_cats):
        at = next((f for f in frames if f.startswith("main (") and script_file in f), None)
        line = None if at is None else line_of(at)
        if line is None:
            labels.append(f"{category}: {(at or frames[-1]) if frames else '?'}")
            continue
        labels.append(f"{category}: {line}: {main.lines[line - 1].strip()[:80]}")
    keep, weights = sample_weights(samples[:, 0], start, end)
    totals: dict[str, float] = {}
    for index, weight in zip(samples[keep, 1], weights):
        totals[labels[index]] = totals.get(labels[index], 0.0) + weight
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in sorted(totals.items(), key=lambda kv: -kv[1])[:top]}


def device_figures(dev: np.ndarray, api: np.ndarray, main_calls: np.ndarray, start: int, end: int, steps: int,
                   bin_ms: float) -> dict:
    """The GPU's figures over [start, end]: its busy fraction and series, per step the device events by kind and the
    main thread's CUDA calls by kind (events are clipped to the window)."""
    clip = dev[(dev[:, 1] > start) & (dev[:, 0] < end)]
    clipped = np.stack([np.maximum(clip[:, 0], start), np.minimum(clip[:, 1], end)], axis=1)
    per_step = {}
    for k, name in enumerate(DEV_KINDS):
        sel = clipped[clip[:, 2] == k]
        per_step[name] = {"count": len(sel) / steps, "ms": float((sel[:, 1] - sel[:, 0]).sum()) / 1e6 / steps,
                          "bytes": float(clip[clip[:, 2] == k, 4].sum()) / steps}
    inwin = main_calls[(main_calls[:, 0] >= start) & (main_calls[:, 0] < end)]
    calls = {}
    for k, name in enumerate(API_KINDS):
        sel = inwin[inwin[:, 2] == k]
        calls[name] = {"count": len(sel) / steps, "ms": float((sel[:, 1] - sel[:, 0]).sum()) / 1e6 / steps}
    busy = float(covered_until(merged(clipped), np.array([end]))[0])
    return {"busy": busy / (end - start), "busy_ms_per_step": busy / 1e6 / steps, "per_step": per_step,
            "main_thread_calls_per_step": calls, "bin_ms": bin_ms,
            "series": [round(float(x), 4) for x in busy_series(clipped, start, end, int(bin_ms * 1e6))],
            "steps": steps, "seconds": (end - start) / 1e9, "events": int(len(dev)), "cuda_calls": int(len(api))}


# ==================================================================================================
# The bound, the reference, the percentages: derived from every row whenever results.json is written
# ==================================================================================================
def reference_inputs(row: dict) -> tuple[float | None, float | None]:
    """A row's pieces' seconds per step at their best latency (the reference's) and at their least work (the
    bound's: GPU busy time, or host time where no GPU ran them). None where the row defines none (see the docstring)."""
    pieces = row.get("pieces") or {}
    if not pieces or row["mode"] == "eager" or row["shares"].get("environment + acting", 0) > 0:
        return None, None
    on_gpu = row["gpu"] == "profiled"
    if (row["mode"] == "jax" and not on_gpu) or (on_gpu and any(p["best_gpu_s"] is None for p in pieces.values())):
        return None, None
    latency = sum(p["calls_per_step"] * p["best_latency_s"] for p in pieces.values())
    work = sum(p["calls_per_step"] * p["best_gpu_s" if on_gpu else "best_host_s"] for p in pieces.values())
    return latency, work


def derive(data: dict) -> None:
    """Per pair the hard bound; per row the attainable reference, the bound, and the fps as a percentage of each."""
    bounds = {}
    for pair, env_sps in data["env_sps"].items():
        floors = [reference_inputs(r)[1] for r in data["rows"].values() if r["pair"] == pair and "error" not in r]
        floors = [f for f in floors if f is not None]
        least = min(floors) if floors else None
        bounds[pair] = {"env_sps": env_sps, "pieces_s_per_step": least,
                        "bound_fps": 1 / (1 / env_sps + least) if least is not None else None}
    data["bounds"] = bounds
    for row in data["rows"].values():
        if "error" in row:
            continue
        latency, _ = reference_inputs(row)
        env_sps = data["env_sps"].get(row["pair"])
        row["reference_fps"] = 1 / (1 / env_sps + latency) if latency is not None and env_sps else None
        row["bound_fps"] = bounds.get(row["pair"], {}).get("bound_fps")
        for key in ("bound", "reference"):
            of = row[f"{key}_fps"]
            row[f"pct_of_{key}"] = 100 * row["fps"] / of if of and row["fps"] <= of else None


# ==================================================================================================
# results.md, busy.png
# ==================================================================================================
def ordered_rows(data: dict) -> list[dict]:
    """The measured rows, by pair (the default order) and mode (MODES' order)."""
    pairs = list(dict.fromkeys([*DEFAULT_PAIRS.split(","), *(r["pair"] for r in data["rows"].values())]))
    return sorted((r for r in data["rows"].values() if "error" not in r),
                  key=lambda r: (pairs.index(r["pair"]), list(MODES).index(r["mode"])))


def render(data: dict) -> str:
    def f(x, digits=0):
        return "n/a" if x is None else f"{x:.{digits}f}"

    def pct(row, key):
        of = row.get(f"{key}_fps")
        if of is None:
            return "n/a"
        share = row.get(f"pct_of_{key}")
        return f"{share:.0f}%" if share is not None else f"ran above it ({of:.0f}): none"

    names, rows = split_categories(), ordered_rows(data)
    lines = ["Commands:", ""] + [f"- `{c['command']}` ({c['date']} UTC)" for c in data["commands"]]
    lines += ["", "Machine: " + ", ".join(f"{k} {v}" for k, v in data["machine"].items()), "",
              "fps: the run's own charts/SPS points over the plain window (no instrument) and the profiled window "
              "(the sampler and torch.profiler); the percentages are the profiled window's fps over each figure.", "",
              "| pair | environment alone, best (steps/s) | pieces' least work (ms/step) | hard bound (fps) |",
              "|---|---|---|---|"]
    for pair, b in data["bounds"].items():
        least = None if b["pieces_s_per_step"] is None else 1e3 * b["pieces_s_per_step"]
        lines.append(f"| {pair} | {b['env_sps']:.0f} | {f(least, 3)} | {f(b['bound_fps'])} |")
    lines += ["", "| pair | mode | fps (plain) | fps (profiled) | instruments' cost | hard bound (fps) | "
              "% of hard bound | attainable reference (fps) | % of reference | GPU busy (profiled) | "
              "NVML utilization (plain) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        busy = f"{100 * r['device']['busy']:.0f}%" if "device" in r else r["gpu"]
        nvml = r["nvml_utilization"]["plain"]
        lines.append(f"| {r['pair']} | {MODES[r['mode']][0]} | {r['fps_plain']:.0f} | {r['fps']:.0f} | "
                     f"{100 * r['instruments']['cost']:.0f}% | {f(r['bound_fps'])} | {pct(r, 'bound')} | "
                     f"{f(r['reference_fps'])} | {pct(r, 'reference')} | {busy} | "
                     f"{'n/a' if nvml is None else f'{100 * nvml:.0f}%'} |")
    lines += ["", "Where a step's time goes, ms per step (each category's share of the sampled time x the profiled "
              "window's seconds per step; the shares sum to 1):", "",
              "| pair | mode | " + " | ".join(names) + " | step (ms) | samples |",
              "|---|---|" + "---|" * (len(names) + 2)]
    for r in rows:
        ms = " | ".join(f"{r['ms_per_step'][c]:.3f}" for c in names)
        lines.append(f"| {r['pair']} | {MODES[r['mode']][0]} | {ms} | {1e3 / r['fps']:.3f} | {r['samples']} |")
    lines += ["", "The GPU per step, in the profiled window: kernels; copies (count, ms, KB); the main thread's CUDA "
              "calls (count, ms):", "",
              "| pair | mode | kernels | kernel ms | GPU busy ms | HtoD | DtoH | launches | synchronize | copy calls |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "device" not in r:
            lines.append(f"| {r['pair']} | {MODES[r['mode']][0]} | " + " | ".join([r["gpu"]] * 8) + " |")
            continue
        d, c = r["device"]["per_step"], r["device"]["main_thread_calls_per_step"]
        copy = {k: f"{d[k]['count']:.2f}, {d[k]['ms']:.3f}, {d[k]['bytes'] / 1e3:.1f}" for k in ("HtoD", "DtoH")}
        call = {k: f"{c[k]['count']:.2f}, {c[k]['ms']:.3f}" for k in ("launch", "synchronize", "copy")}
        lines.append(f"| {r['pair']} | {MODES[r['mode']][0]} | {d['kernel']['count']:.1f} | {d['kernel']['ms']:.3f} | "
                     f"{r['device']['busy_ms_per_step']:.3f} | {copy['HtoD']} | {copy['DtoH']} | {call['launch']} | "
                     f"{call['synchronize']} | {call['copy']} |")
    lines += ["", "The compiled and graphed pieces in the profiled window, best per call (latency: from the call's "
              "start on the host to the end of its last kernel):", "",
              "| pair | mode | piece | calls per step | host (ms) | GPU busy (ms) | latency (ms) | "
              "latency, ms per step |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for name, p in r["pieces"].items():
            gpu = "no kernels" if p["best_gpu_s"] is None else f"{1e3 * p['best_gpu_s']:.3f}"
            lines.append(f"| {r['pair']} | {MODES[r['mode']][0]} | `{name}` | {p['calls_per_step']:.4f} | "
                         f"{1e3 * p['best_host_s']:.3f} | {gpu} | {1e3 * p['best_latency_s']:.3f} | "
                         f"{1e3 * p['best_latency_s'] * p['calls_per_step']:.3f} |")
    lines += ["", "The instruments: the sampler's CPU time as a share of the profiled window, how late it woke on "
              "average; torch.profiler's start and stop (outside the windows); the first fps point after the "
              "process's start; the whole row:", "",
              "| pair | mode | sampler CPU | sampler late (ms) | profiler start (s) | profiler stop (s) | "
              "first fps point (s) | row (s) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        i = r["instruments"]
        lines.append(f"| {r['pair']} | {MODES[r['mode']][0]} | {100 * i['sampler_cpu_share']:.1f}% | "
                     f"{f(i['sampler_late_ms'], 2)} | {f(i['profiler_start_s'], 1)} | {f(i['profiler_stop_s'], 1)} | "
                     f"{r['first_point_s']:.1f} | {r.get('wall_s', 0):.0f} |")
    failed = [r for r in data["rows"].values() if "error" in r]
    if failed:
        lines += ["", "Rows that failed:", ""]
        lines += [f"- {r['pair']} {MODES[r['mode']][0]}: {r['error'].splitlines()[0][:200]}" for r in failed]
    return "\n".join(lines)


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = list(dict.fromkeys([*DEFAULT_PAIRS.split(","), *(r["pair"] for r in data["rows"].values())]))
    cols = 3
    fig, axes = plt.subplots(-(-len(pairs) // cols), cols, figsize=(12, 6.5), squeeze=False, sharey=True)
    for ax, pair in zip(axes.flat, pairs):
        ax.set_title(pair, fontsize=9)
        ax.set_ylim(0, 1.05)
        drawn = False
        for r in ordered_rows(data):
            if r["pair"] != pair or "device" not in r:
                continue
            series, width = np.array(r["device"]["series"]), 5  # 50 ms averages of the 10 ms bins, for the eye
            smooth = np.convolve(series, np.ones(width) / width, mode="valid") if len(series) >= width else series
            ax.plot(np.arange(len(smooth)) * r["device"]["bin_ms"] / 1e3, smooth, color=LINE_COLORS[r["mode"]],
                    linewidth=1)
            drawn = True
        if not drawn:
            ran = any(r["pair"] == pair and "error" not in r for r in data["rows"].values())
            ax.text(0.5, 0.5, "no GPU" if ran else "not run", ha="center", va="center", transform=ax.transAxes,
                    color="gray")
        ax.set_xlabel("seconds into the profiled window", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(pairs):]:
        ax.set_visible(False)
    for row_axes in axes:
        row_axes[0].set_ylabel("GPU busy fraction", fontsize=7)
    ran = {r["mode"] for r in data["rows"].values()}
    handles = [plt.Line2D([], [], color=LINE_COLORS[m], label=MODES[m][0]) for m in MODES if m in ran]
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(0.865, 0.5), fontsize=8, title="mode",
               title_fontsize=8)
    fig.suptitle("The GPU's busy fraction (kernels, copies and memsets, as CUPTI records them) in each run's profiled "
                 "window: 10 ms bins, averaged over 50 ms", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.86, 0.96))
    fig.savefig(path, dpi=80, bbox_inches="tight")  # the legend, outside the panels, included
    plt.close(fig)


# ==================================================================================================
# The sitting
# ==================================================================================================
class Log:
    def __init__(self, path: Path):
        self.path = path

    def __call__(self, line: str) -> None:
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        print(stamped, file=sys.stderr, flush=True)
        with open(self.path, "a") as f:
            f.write(stamped + "\n")


def machine() -> dict:
    from leanrl_utils.machine import commit, describe_machine

    info = describe_machine()
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader",
                              "-i", "0"], capture_output=True, text=True, timeout=30).stdout.strip()
        info["nvidia-smi"] = smi or "no output"
    except (OSError, subprocess.TimeoutExpired):
        info["nvidia-smi"] = "not found"
    info["commit"] = commit(REPO)  # without git on the GPU machine: LEANRL_COMMIT, set by benchmarks/gpu/gpu.sh
    return info


def plan(pairs: list[str], modes: str) -> list[tuple[str, str]]:
    """The rows in priority order: each group of modes ('/'-separated) over every pair before the next group."""
    return [(pair, mode) for group in modes.split("/") for pair in pairs for mode in group.split(",") if mode]


def run_row(pair: str, mode: str, opts, timeout: float, env: dict, why_not_profiled: str | None = None) -> dict:
    """One row: its run under the launcher, stopped at the budget's end; its figures, or its error (with `crashed`
    where the process died of a signal: a fault below Python, such as CUPTI's)."""
    eager, args = task(pair, opts.total_timesteps, opts.tiny)
    suffix, flags = MODES[mode][1], MODES[mode][2]
    script = REPO / "leanrl" / f"{eager}{suffix}.py"
    failed = {"pair": pair, "mode": mode}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        config = {"raw": tmp, "plain_seconds": opts.plain_seconds, "seconds": opts.seconds, "rate": opts.rate,
                  "switch_interval": opts.switch_interval, "nvml": True, "profile": why_not_profiled is None,
                  "why_not": why_not_profiled}
        cmd = [sys.executable, "-c", LAUNCH, json.dumps(config), str(script), *args, *flags]
        with open(Path(tmp) / "stderr.txt", "w") as err:
            # the launcher imports this module from the repository, whatever the run's folder
            env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))}
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                    start_new_session=True)
            try:
                proc.wait(timeout=max(1.0, timeout))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return failed | {"error": OUT_OF_BUDGET, "wall_s": time.monotonic() - started}
        wall = time.monotonic() - started
        tail = (Path(tmp) / "stderr.txt").read_text(errors="replace").replace("\r", "\n")[-3000:]
        if not (Path(tmp) / "raw.json").exists():
            return failed | {"error": f"exit {proc.returncode}, no measurement:\n{tail}", "wall_s": wall,
                             "crashed": proc.returncode < 0}
        raw = json.loads((Path(tmp) / "raw.json").read_text())
        with np.load(Path(tmp) / "raw.npz") as arrays:
            dev, api = arrays["dev"], arrays["api"]
    if "end" not in raw["marks"]:
        return failed | {"error": f"{raw['error']}\n{tail}", "wall_s": wall}
    try:
        row = analyse(raw, dev, api, pair, mode, opts.bin_ms)
    except Exception:  # a fault of this study's analysis: the row says where, the sitting goes on
        return failed | {"error": f"the analysis failed:\n{traceback.format_exc()[-3000:]}", "wall_s": wall}
    return row | {"wall_s": wall, "command": shlex.join(["python", str(script.relative_to(REPO)), *args, *flags])}


def save(out: Path, data: dict, log=print, picture: bool = True) -> None:
    """results.json, results.md and (with `picture`) busy.png."""
    derive(data)
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    try:  # a fault here must not end the sitting: --rerender writes them again from results.json
        (out / "results.md").write_text(render(data) + "\n")
        if picture:
            plot(data, out / "busy.png")
    except Exception:
        log(f"results.md or busy.png failed (--rerender {out} writes them again):\n{traceback.format_exc()[-2000:]}")


def sitting(opts, env: dict | None = None) -> dict:
    from benchmarks.common import command_line
    from benchmarks.limits.limits import environment_alone
    from leanrl_utils.machine import machine_id

    deadline = time.monotonic() + opts.budget
    out = opts.out
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "sitting.log")
    env = env if env is not None else {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    path = out / "results.json"
    data = json.loads(path.read_text()) if path.exists() else {"commands": [], "env_sps": {}, "rows": {}}
    me = machine_id()
    data["commands"].append({"command": command_line(), "machine": me,
                             "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())})
    data["machine"] = machine()
    data.setdefault("env_machine", {})
    log(f"sitting: {data['commands'][-1]['command']}")
    expected_row, expected_env = (TINY_EXPECTED, TINY_ENV_EXPECTED) if opts.tiny else (EXPECTED, ENV_EXPECTED)
    rows = plan(opts.pairs.split(","), opts.modes)

    def wanted(key: str) -> bool:  # not measured (or failed) by an earlier command of this sitting
        old = data["rows"].get(key)
        return old is None or ("error" in old and (old["error"] == OUT_OF_BUDGET or opts.retry_failed))
    # a pair's rows and its environment alone, measured on one machine: the bound adds them up. A pair that this
    # command adds rows to, measured so far on another machine, is measured again here, whole
    for pair in dict.fromkeys(p for p, _ in rows):
        if not any(wanted(f"{p} {m}") for p, m in rows if p == pair):
            continue
        machines = {r.get("machine") for r in data["rows"].values() if r["pair"] == pair}
        machines |= {data["env_machine"][pair]} if pair in data["env_machine"] else set()
        if machines - {me}:
            log(f"{pair}: its rows so far ran on another machine; all of them run again on this one")
            data["rows"] = {k: r for k, r in data["rows"].items() if r["pair"] != pair}
            data["env_sps"].pop(pair, None)
            data["env_machine"].pop(pair, None)
    for pair, mode in rows:
        key = f"{pair} {mode}"
        if not wanted(key):
            continue
        expected = expected_row[mode] + (expected_env if pair not in data["env_sps"] else 0)
        left = deadline - time.monotonic()
        if left < expected:
            log(f"{key}: left out, {left:.0f} s left, ~{expected:.0f} s needed")
            continue
        if pair not in data["env_sps"]:
            t0 = time.monotonic()
            try:
                data["env_sps"][pair] = max(environment_alone(pair, opts.env_steps) for _ in range(opts.env_repeats))
                data["env_machine"][pair] = me
                log(f"{pair}: the environment alone, {data['env_sps'][pair]:.0f} steps/s "
                    f"({time.monotonic() - t0:.0f} s)")
            except Exception as failure:  # no bound for this pair; its rows still run
                log(f"{pair}: the environment alone failed: {failure!r}"[:300])
        log(f"{key}: ...")
        row = data["rows"][key] = run_row(pair, mode, opts, deadline - time.monotonic(), env) | {"machine": me}
        if row.get("crashed") and deadline - time.monotonic() >= expected_row[mode]:
            # the run died of a signal: once more without the profiler, for its fps and its split at least
            log(f"{key}: the run died ({row['error'].splitlines()[0]}); once more without torch.profiler")
            why = f"the run died with it ({row['error'].splitlines()[0]})"
            row = data["rows"][key] = run_row(pair, mode, opts, deadline - time.monotonic(), env, why) | {"machine": me}
        if "error" in row:
            log(f"{key}: failed after {row['wall_s']:.0f} s: {row['error'].splitlines()[0]}")
        else:
            log(f"{key}: {row['fps_plain']:.0f} fps plain, {row['fps']:.0f} profiled, GPU {row['gpu']}, "
                f"{row['wall_s']:.0f} s")
        save(out, data, log, picture=False)  # after each row: a command stopped from outside keeps what it measured
    save(out, data, log)
    log(f"sitting: done, {deadline - time.monotonic():.0f} s of the budget left")
    return data


def main(argv: list[str] | None = None, env: dict | None = None) -> None:
    from benchmarks.gpu.gpu import PAIRS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="the study's folder in a GPU sitting: docs/gpu/<sitting>/limits")
    parser.add_argument("--pairs", default=DEFAULT_PAIRS, help=f"of {', '.join(PAIRS)}")
    parser.add_argument("--modes", default=DEFAULT_MODES,
                        help=f"of {', '.join(MODES)}; groups separated by '/', each over every pair before the next")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for the whole command")
    parser.add_argument("--seconds", type=float, default=3.0, help="the profiled window, at least (2 intervals too)")
    parser.add_argument("--plain-seconds", type=float, default=2.0, help="the window without instruments, at least")
    parser.add_argument("--rate", type=float, default=200.0, help="the sampler's samples per second")
    parser.add_argument("--switch-interval", type=float, default=0.0005, help="Python's switch interval while sampling")
    parser.add_argument("--bin-ms", type=float, default=10.0, help="the busy-fraction series' bins")
    parser.add_argument("--env-steps", type=int, default=5000, help="steps of each environment-alone measurement")
    parser.add_argument("--env-repeats", type=int, default=3, help="environment-alone measurements per pair (the best)")
    parser.add_argument("--total-timesteps", type=int, default=100_000_000, help="the runs' length: more than needed")
    parser.add_argument("--retry-failed", action="store_true", help="run again the rows that failed")
    parser.add_argument("--tiny", action="store_true", help="the GPU sitting's CPU rehearsal: its CPU-sized tasks")
    parser.add_argument("--rerender", type=Path, default=None, metavar="FOLDER",
                        help="rewrite FOLDER's results.md and busy.png from its results.json, and nothing else")
    opts = parser.parse_args(argv)
    if opts.rerender:
        save(opts.rerender, json.loads((opts.rerender / "results.json").read_text()))
        return
    if opts.out is None:
        parser.error("give --out (or --rerender FOLDER)")
    modes = [m for group in opts.modes.split("/") for m in group.split(",") if m]
    if bad := [p for p in opts.pairs.split(",") if p not in PAIRS] + [m for m in modes if m not in MODES]:
        parser.error(f"unknown pair or mode {bad}; pairs: {', '.join(PAIRS)}; modes: {', '.join(MODES)}")
    sitting(opts, env)


if __name__ == "__main__":
    main()
