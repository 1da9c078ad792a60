"""Where each step's time goes, and how far each pair is from what this machine can do.

    python benchmarks/limits.py --out docs/limits                      # every pair: eager, --compile, JAX
    python benchmarks/limits.py --pairs sac,dqn --modes eager,compile --seconds 10

The split: each script runs as a user runs it (the speed table's task and flags), and once its warm-up is
over (its progress bar shows fps, which it does from the first `charts/SPS` on), py-spy samples it from
outside for `--seconds`. A sample of the main thread counts for:
- environment: any frame in gymnasium, envpool or MuJoCo (the wrappers included);
- logging: TensorBoard, tqdm, wandb, the scripts' Speed and episode bookkeeping, explained variance;
- storage: the replay buffer (writes and sampling), the rollout's writes;
- acting: the policy's forward pass and its transfers (what runs between the observation and the action);
- environment + acting: JAX's Atari twin steps envpool inside its jitted rollout, the two in one call;
- update: everything under the training block (losses, backward, optimizer steps, target updates, GAE);
- other: the rest of the loop (Python between the pieces).
Which line of the script's main() a sample is on decides acting, storage and update (the statement's
text and the blocks around it: see `classify`), so the scripts carry no timers. The fps during the window
comes from the progress bar; with --speed, the speed table's fps (measured without a profiler) are used
instead, for the time of a step and the percentage of the limit. The split times one step: the shares of
the samples x seconds per step. py-spy samples the
main thread whether it computes or waits; the JAX twins run with synchronous dispatch while sampled, so
that each jitted call's time lands on its own line.

The bound: what the work of a step costs on this machine at best.
- environment alone: the script's own environment factory, the same number of envs, random actions;
- the networks' work: the FLOPs of a step (torch.utils.flop_counter.FlopCounterMode over the eager script,
  run in this process: the difference between two runs that differ by a known number of steps in steady
  state, so acting and updating both count), at the machine's measured FLOP/s for that kind of work: the
  best float32 matmul for the MLPs (torch's or XLA's, whichever is faster here), the Nature CNN's
  convolutions (forward and backward, channels-last, PPO's minibatch, eager or compiled, the faster) for
  Atari, default threads;
- the limit: 1 / (environment seconds per step + FLOPs per step / FLOP/s). Each mode's fps is given as a
  percentage of it.
Writes results.md, results.json and split.png into --out.
"""

import argparse
import ast
import collections
import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import REPO, load_script, write_results  # noqa: E402
from benchmarks.presets import PAIRS  # noqa: E402

# the speed table's task and flags per pair (benchmarks/speed.sh runs the same)
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
LOG_LIBS = ("torch/utils/tensorboard", "tensorboard/", "tqdm/", "wandb/")
LOG_FUNCTIONS = re.compile(r"^(Speed\.|make_writer|EpisodeStats\.|NoWriter\.|gather$)")
STORAGE_FUNCTIONS = re.compile(r"^(ReplayBuffer\.|FrameBuffer\.|Buffer\.)")
# the leaf statement of main() a sample is on: first match wins
LEAF_RULES = [
    ("logging", r"writer\.add|speed\.(log|tick)|pbar\.|set_postfix|explained_var|np\.var|y_pred|\bkept\b|print\(|"
                r"episode_stats|\bgames\b|device_get"),
    ("environment", r"\benvs?\.(step|reset)\("),
    # the JAX DQN twins' jitted update also writes the staged steps into the buffer: the call is the update
    ("update", r"= update\("),
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


class Main:
    """A script's main(): for each of its lines, the statements that hold it, outermost first."""

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
            if isinstance(st, (ast.FunctionDef, ast.ClassDef)):
                continue  # a closure's own lines are reached through its frame, not main's
            for name in ("body", "orelse", "finalbody"):
                inner = [s for s in getattr(st, name, []) or [] if isinstance(s, ast.stmt)]
                self._walk(inner, path)

    def text(self, st: ast.stmt) -> str:
        """A statement's text; for a block, its header only."""
        end = st.body[0].lineno - 1 if isinstance(st, (ast.If, ast.For, ast.While, ast.With)) else st.end_lineno
        return " ".join(line.strip() for line in self.lines[st.lineno - 1:end])


def classify(frames: list[str], script_file: str, main: Main) -> str:
    """The category of one sample (its frames, outermost first, as py-spy writes them: 'name (file:line)')."""
    for frame in frames:
        where = frame.rsplit("(", 1)[-1]
        if any(lib in where for lib in ENV_LIBS):
            return "environment"
        if any(lib in where for lib in LOG_LIBS):
            return "logging"
    at = next((i for i, f in enumerate(frames) if f.startswith("main (") and script_file in f), None)
    if at is None:
        return "other"
    for frame in frames[at + 1:]:
        name = frame.split(" (")[0]
        if script_file in frame and LOG_FUNCTIONS.match(name):
            return "logging"
        if script_file in frame and STORAGE_FUNCTIONS.match(name):
            return "storage"
    path = main.paths.get(int(re.search(r":(\d+)\)$", frames[at]).group(1)), [])
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


# Runs a script as __main__; with JAX, dispatch is made synchronous on the CPU, so that a jitted call's
# time is spent on the line that calls it (asynchronous, it would land on whichever later line waits).
SYNCHRONOUS = """
import runpy, sys
if sys.argv[1].endswith("_jax.py"):
    import jax
    jax.config.update("jax_cpu_enable_async_dispatch", False)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def profile(script: str, args: list[str], seconds: float, rate: int, timeout: float) -> dict:
    """Run a script until its warm-up is over, sample it with py-spy for `seconds`, stop it. Returns the
    fraction of main-thread samples per category, the samples, and the fps over the window."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([sys.executable, "-c", SYNCHRONOUS, str(REPO / "leanrl" / f"{script}.py"), *args],
                                cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        err: list[str] = []
        threading.Thread(target=lambda: err.extend(iter(lambda: proc.stderr.read(256), "")), daemon=True).start()

        def step() -> int:
            steps = re.findall(r"(\d+)/\d+ \[", "".join(err)[-4000:])
            return int(steps[-1]) if steps else 0

        try:
            deadline = time.monotonic() + timeout
            while "fps=" not in "".join(err)[-4000:]:  # the first charts/SPS: the warm-up is over
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"limits: {script} {' '.join(args)}: never reached its steady state:\n"
                                     + "".join(err)[-2000:])
                time.sleep(0.2)
            raw = Path(tmp) / "raw.txt"
            first, start = step(), time.perf_counter()
            # --idle: a main thread that waits (for envpool's threads, for XLA's) is sampled too
            # --nonblocking: the run is not paused for each sample (the split's shares are what matters)
            spy = subprocess.run(["py-spy", "record", "--pid", str(proc.pid), "--duration", str(int(seconds)), "--idle",
                                  "--nonblocking",
                                  "--rate", str(rate), "--format", "raw", "--output", str(raw)],
                                 capture_output=True, text=True)
            last, elapsed = step(), time.perf_counter() - start
            if spy.returncode != 0 or not raw.exists():
                raise SystemExit(f"limits: py-spy failed on {script}: {spy.stderr[-1000:]}")
            if proc.poll() is not None:
                raise SystemExit(f"limits: {script} ended during its window: give it more --total-timesteps")
            text = raw.read_text()
        finally:
            proc.kill()
            proc.wait()
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
    return {"fractions": {c: counts[c] / total for c in CATEGORIES}, "samples": total,
            "fps": (last - first) / elapsed, "heaviest lines": {k: n / total for k, n in lines.most_common(8)}}


# --------------------------------------------------------------------------------------------------
# The bound
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


def flops_per_step(pair: str) -> tuple[float, int]:
    """FLOPs of the networks per environment step in steady state (acting and updating), counted over the
    eager script's own main(): two runs, one `extra` steps longer, both past the start of learning."""
    from torch.utils.flop_counter import FlopCounterMode

    m = load_script(PAIRS[pair])
    base = dict(env_id=TASKS[pair][1])
    if pair in ("sac", "td3", "dqn", "dqn_atari"):
        starts, extra = 1000, 2000 if pair == "dqn" else 500  # DQN updates every 10 steps: more steps
        base |= dict(learning_starts=starts, buffer_size=10_000, total_timesteps=starts + extra)
    else:
        a = m.Args(env_id=base["env_id"])
        extra = a.num_envs * a.num_steps  # one iteration more
        base["total_timesteps"] = 2 * extra
    counts = []
    for total in (base["total_timesteps"], base["total_timesteps"] + extra):
        with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp), contextlib.redirect_stderr(io.StringIO()), \
                contextlib.redirect_stdout(io.StringIO()), FlopCounterMode(display=False) as counter:
            m.main(m.Args(**(base | dict(total_timesteps=total))))
        counts.append(counter.get_total_flops())
    return (counts[1] - counts[0]) / extra, extra


def peak_flops(kind: str) -> float:
    """FLOP/s of this machine for a kind of work, in float32 with the default threads, the best of a few
    shapes: square matmuls of 256, 1024 and 2048 through torch ('matmul') and through XLA ('matmul_xla', the
    JAX twins' backend; 0 without JAX), or the Nature CNN's three convolutions forward and backward on PPO's
    256-frame minibatch in the channels-last layout, eager and compiled ('conv'). torch.utils.benchmark times
    torch's work and FlopCounterMode counts it."""
    from torch.utils.benchmark import Timer
    from torch.utils.flop_counter import FlopCounterMode

    if kind == "matmul_xla":
        try:
            import jax
            import jax.numpy as jnp
        except ImportError:
            return 0.0
        best = 0.0
        for n in (256, 1024, 2048):
            a, f = jnp.ones((n, n)), jax.jit(lambda x: x @ x)
            f(a).block_until_ready()
            seconds = Timer("f(a).block_until_ready()", globals={"f": f, "a": a}).blocked_autorange(min_run_time=1).median
            best = max(best, 2 * n**3 / seconds)
        return best
    if kind == "matmul":
        work = []
        for n in (256, 1024, 2048):
            a, b = torch.randn(n, n), torch.randn(n, n)
            work.append(lambda a=a, b=b: a @ b)
    else:
        convs = torch.nn.Sequential(torch.nn.Conv2d(4, 32, 8, stride=4), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 4, stride=2),
                                    torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, stride=1)).to(memory_format=torch.channels_last)
        x = torch.randn(256, 4, 84, 84).contiguous(memory_format=torch.channels_last)

        def forward_backward():
            convs.zero_grad(set_to_none=True)
            convs(x).sum().backward()
        # eager (oneDNN's kernels as called op by op) and compiled (inductor's oneDNN convolutions with
        # prepacked weights and fused activations, what the optimized Atari scripts run): the same FLOPs
        compiled = torch.compile(forward_backward)
        compiled(), compiled()  # compile before timing
        work = [forward_backward, compiled]
    best = 0.0
    for fn in work:
        with FlopCounterMode(display=False) as counter:
            (forward_backward if kind == "conv" else fn)()  # compiled code runs past the counter: count eager's
        seconds = Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=1).median
        best = max(best, counter.get_total_flops() / seconds)
    return best


def speed_table_fps(folder: Path, pair: str, script: str, flags: list[str]) -> float:
    """The median fps of a configuration in a pair's sps.py results (folder/<pair>/results.json)."""
    import statistics

    runs = json.loads((folder / pair / "results.json").read_text())["runs"]
    return statistics.median(r["sps"] for r in runs[" ".join([script, *flags])])


# --------------------------------------------------------------------------------------------------
def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = dict(zip(CATEGORIES, ["tab:green", "tab:blue", "tab:cyan", "tab:olive", "tab:orange", "tab:gray", "tab:red"]))
    pairs = list(dict.fromkeys(r["pair"] for r in rows))
    fig, axes = plt.subplots(1, len(pairs), figsize=(3.0 * len(pairs) + 1, 3.8), squeeze=False)
    for ax, pair in zip(axes[0], pairs):
        sub = [r for r in rows if r["pair"] == pair]
        bottom = np.zeros(len(sub))
        for c in CATEGORIES:
            ms = np.array([r["fractions"][c] * 1e3 / r["fps_unprofiled"] for r in sub])
            ax.bar(range(len(sub)), ms, bottom=bottom, color=colors[c], label=c)
            bottom += ms
        limit_ms = 1e3 / sub[0]["limit_fps"]
        ax.axhline(limit_ms, color="black", linestyle="--", linewidth=1, label="the bound")
        ax.set_xticks(range(len(sub)), [r["mode"] for r in sub], fontsize=7)
        ax.set_title(pair, fontsize=9)
        ax.set_ylabel("ms per environment step", fontsize=7)
    axes[0][-1].legend(fontsize=6)
    fig.suptitle("Where a step's time goes (py-spy samples of the running scripts), and the machine's bound",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default=",".join(TASKS))
    parser.add_argument("--modes", default="eager,compile,jax")
    parser.add_argument("--seconds", type=float, default=20, help="py-spy's window per run, after the warm-up")
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--env-steps", type=int, default=20_000, help="steps of the environment-alone measurement")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a run may take to reach its steady state")
    parser.add_argument("--speed", type=Path, default=None,
                        help="a folder of sps.py results per pair (docs/speed): its fps, measured without the profiler, "
                             "give the percentage of the limit; without it, the fps while profiled do")
    parser.add_argument("--out", type=Path, default=None)
    opts = parser.parse_args()
    pairs, modes = opts.pairs.split(","), opts.modes.split(",")
    if bad := [p for p in pairs if p not in TASKS] + [m for m in modes if m not in MODES]:
        parser.error(f"unknown pair or mode {bad}; pairs: {list(TASKS)}, modes: {list(MODES)}")
    if shutil.which("py-spy") is None:
        raise SystemExit("limits: py-spy is not installed (pip install py-spy)")

    peaks = {kind: peak_flops(kind) for kind in ("matmul", "matmul_xla", "conv")}
    rows, bounds = [], {}
    for pair in pairs:
        env_sps = environment_alone(pair, opts.env_steps)
        flops, _ = flops_per_step(pair)
        # the machine's best for the kind of work: the MLPs' matmuls through torch or XLA, whichever is faster
        peak = peaks["conv"] if "atari" in pair else max(peaks["matmul"], peaks["matmul_xla"])
        limit = 1 / (1 / env_sps + flops / peak)
        bounds[pair] = {"env_sps": env_sps, "flops_per_step": flops, "peak_flops": peak, "limit_fps": limit}
        for mode in modes:
            suffix, flags = MODES[mode]
            script = PAIRS[pair] + suffix
            if not (REPO / "leanrl" / f"{script}.py").exists():
                continue
            print(f"{pair} {mode} ...", file=sys.stderr)
            result = profile(script, [*TASKS[pair], "--total-timesteps", "10000000", *flags], opts.seconds, opts.rate,
                             opts.timeout)
            fps = speed_table_fps(opts.speed, pair, script, flags) if opts.speed else result["fps"]
            rows.append({"pair": pair, "mode": mode, "script": script, **result, "fps_unprofiled": fps,
                         "limit_fps": limit, "of_limit": fps / limit})
    lines = [f"Peak FLOP/s measured here (float32, {torch.get_num_threads()} threads, the best of a few shapes): matmul "
             f"through torch {peaks['matmul'] / 1e9:.0f} GFLOP/s, through XLA {peaks['matmul_xla'] / 1e9:.0f} GFLOP/s; "
             f"the Nature CNN's convolutions, forward and backward, eager or compiled (the faster), "
             f"{peaks['conv'] / 1e9:.0f} GFLOP/s. The limits take "
             "the best matmul for the MLP pairs and the convolutions for the Atari pairs.", "",
             "| pair | environment alone (steps/s) | network FLOPs per step | limit (fps) |", "|---|---|---|---|"]
    for pair, b in bounds.items():
        lines.append(f"| {pair} | {b['env_sps']:.0f} | {b['flops_per_step'] / 1e6:.2f} M | {b['limit_fps']:.0f} |")
    lines += ["", "| pair | mode | fps | % of the limit | fps while profiled | "
              + " | ".join(f"{c} (ms/step)" for c in CATEGORIES) + " | samples |",
              "|---|---|---|---|---|" + "---|" * (len(CATEGORIES) + 1)]
    for r in rows:
        ms = [f"{r['fractions'][c] * 1e3 / r['fps_unprofiled']:.3f}" for c in CATEGORIES]
        lines.append(f"| {r['pair']} | {r['mode']} | {r['fps_unprofiled']:.0f} | {100 * r['of_limit']:.0f}% | {r['fps']:.0f} | "
                     + " | ".join(ms) + f" | {r['samples']} |")
    write_results(opts.out, "\n".join(lines), {"peaks": peaks, "bounds": bounds, "rows": rows})
    if opts.out is not None and rows:
        plot(rows, opts.out / "split.png")


if __name__ == "__main__":
    main()
