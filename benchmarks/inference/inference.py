"""Policy inference: eager against torch.compile's backends and modes and CUDA graphs, per batch size and dtype.

    python -m benchmarks.inference --out docs/inference                 # the full sweep on this machine
    python -m benchmarks.inference --policies sac,td3 --batch-sizes 1,64 --arms eager,inductor

Times the acting step of each script's policy, built from the script's own classes as the optimized
scripts build them (a detached copy of the weights run by a "meta" shell):
- atari: PPO Atari's Nature CNN, `Agent.get_action_and_value` (logits, sampled action, log-prob,
  entropy, value) on uint8 frames, in the channels-last layout the script runs it in;
- ppo_mlp: continuous PPO's actor-critic, `Agent.get_action_and_value` (HalfCheetah sizes);
- sac: SAC's actor with its tanh-Gaussian sampling, `Actor.get_action` (HalfCheetah sizes);
- td3: TD3's deterministic actor, `Actor.forward` (HalfCheetah sizes);
- dqn: DQN's greedy action, `QNetwork.greedy_action(obs)` (CartPole; ε-greedy decides on the host first);
- dqn_module: the same action through the module call, `QNetwork(obs).argmax(-1)`, which the script
  does not use (at batch 1 the module machinery costs more than the math).

Arms: eager; `torch.compile` with every backend of `torch._dynamo.list_backends()` (inductor in each
mode: default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs; the others with their
default), plus onnxrt and openvino when their packages are installed
(requirements/requirements-inference.txt); tensordict's `CudaGraphModule` alone and over the
inductor-compiled policy. An arm that fails (a missing package, a CUDA-only arm on a CPU, an op a
backend does not support) is a row with its one-line error, and the sweep goes on.

Per configuration (policy, batch size, dtype: float32, and bf16 autocast where the device runs bf16
natively): each arm's compile time (its first call), a check that its outputs equal eager's for the
same seed (on the CPU, compiled code draws eager's random numbers, as the scripts make it do; on a
GPU only the outputs that draw no random number are compared), then the arms take turns for
`--rounds` rounds. Each call is timed by wall clock with a device synchronize, so host overhead
counts. Reported: p50/p90/p99 latency over all calls, calls/s and samples/s (from the mean latency),
and the speed-up over eager (eager's p50 over the arm's).

Writes results.json (every row, the machine, the command), results.md and speedup.png into --out.
"""

import argparse
import importlib.util
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tensordict import from_module
from tensordict.nn import CudaGraphModule

from benchmarks.common import built, device_sync, dynamo_counts, interleaved, load_script, NoCompiling, one_line, percentile, provenance, \
    save, shell

MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
POLICIES = ["atari", "ppo_mlp", "sac", "td3", "dqn", "dqn_module"]
BATCH_SIZES = [1, 8, 64, 256, 1024]


@dataclass
class Policy:
    """A policy's acting step and an input batch for it."""

    fn: object
    inputs: torch.Tensor
    random_outputs: tuple = ()  # indices of outputs that depend on random draws


def detached(module_cls, env, device):
    """A network as the scripts build it, and the copy that acts: its weights, detached, in a meta shell."""
    net = built(module_cls, env, device=device)
    acting = shell(module_cls, env)
    from_module(net).data.to_module(acting, preserve_module_state=False)
    return net, acting


def build(name: str, batch: int, device: torch.device) -> Policy:
    g = torch.Generator(device=device).manual_seed(0)
    if name == "atari":
        m = load_script("ppo_atari_envpool_torchcompile")
        envs = m.make_envs(m.Args(env_id="Breakout-v5"), num_envs=1)
        agent, acting = detached(m.Agent, envs, device)
        agent.to(memory_format=torch.channels_last)  # as the script runs it
        frames = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8, device=device, generator=g)
        return Policy(acting.get_action_and_value, frames, random_outputs=(0, 1))
    if name == "ppo_mlp":
        m = load_script("ppo_continuous_action_torchcompile")
        envs = m.make_envs(m.Args(env_id="HalfCheetah-v4"), "", num_envs=1)
        _, acting = detached(m.Agent, envs, device)
        obs = torch.randn(batch, envs.single_observation_space.shape[0], device=device, generator=g)
        return Policy(acting.get_action_and_value, obs, random_outputs=(0, 1))
    if name in ("sac", "td3"):
        m = load_script(f"{name}_continuous_action_torchcompile")
        env = m.make_env("HalfCheetah-v4", seed=0)
        _, acting = detached(m.Actor, env, device)
        obs = torch.randn(batch, env.observation_space.shape[0], device=device, generator=g)
        return Policy(acting.get_action if name == "sac" else acting, obs, random_outputs=(0, 1) if name == "sac" else ())
    if name in ("dqn", "dqn_module"):
        m = load_script("dqn_torchcompile")
        env = m.make_env("CartPole-v1", seed=0)
        _, acting = detached(m.QNetwork, env, device)
        obs = torch.randn(batch, env.observation_space.shape[0], device=device, generator=g)
        return Policy(acting.greedy_action if name == "dqn" else (lambda x: acting(x).argmax(-1)), obs)
    raise ValueError(name)


def available_arms(device: torch.device, extra: list[str] = ()) -> list[tuple[str, str | None]]:
    """(backend, mode) pairs: eager, every listed backend (inductor in each mode), onnxrt and openvino
    when installed, `extra` backends, and tensordict's CudaGraphModule alone and over inductor."""
    import torch._dynamo

    backends = list(torch._dynamo.list_backends()) + [b for b in extra if b]
    for extra, package in (("onnxrt", "onnxruntime"), ("openvino", "openvino")):
        if extra not in backends and importlib.util.find_spec(package) is not None:
            backends.append(extra)  # installed: its row says whether torch.compile knows it
    arms = [("eager", None)]
    for backend in sorted(backends):
        arms += [("inductor", mode) for mode in MODES] if backend == "inductor" else [(backend, None)]
    return arms + [("CudaGraphModule", None), ("CudaGraphModule", "inductor")]


def arm_name(backend: str, mode: str | None) -> str:
    if backend == "CudaGraphModule":
        return "CudaGraphModule" + (" + inductor" if mode else "")
    return backend if mode in (None, "default") and backend != "inductor" else f"{backend} {mode or 'default'}"


def make_arm(policy: Policy, backend: str, mode: str | None, device: torch.device):
    """A function of no argument that runs one acting step with the arm, and returns its outputs."""
    fn, x = policy.fn, policy.inputs
    if backend == "eager":
        return lambda: fn(x)
    if backend == "CudaGraphModule":
        if device.type != "cuda":
            raise RuntimeError("CudaGraphModule needs a CUDA device")
        graphed = CudaGraphModule(torch.compile(fn) if mode else fn, warmup=3 if mode else 2)
        return lambda: graphed(x)
    compiled = torch.compile(fn, backend=backend, mode=None if backend != "inductor" else mode)
    if mode == "reduce-overhead":  # its CUDA graphs reuse their output buffers: mark each new step
        def call():
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(x)
        return call
    return lambda: compiled(x)


@dataclass
class Row:
    policy: str
    batch: int
    dtype: str
    arm: str
    status: str = "ok"
    error: str = ""
    compile_s: float = math.nan
    graphs: int = 0
    matches_eager: str = ""
    calls: int = 0
    p50_ms: float = math.nan
    p90_ms: float = math.nan
    p99_ms: float = math.nan
    calls_per_s: float = math.nan
    samples_per_s: float = math.nan
    speedup: float = math.nan
    times: list = field(default_factory=list, repr=False)


def flat(out) -> list[torch.Tensor]:
    return [t for t in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(t, torch.Tensor)]


def compare(out, ref, policy: Policy, backend: str, device: torch.device, dtype: str) -> str:
    """Whether an arm's outputs equal eager's (same seed): 'yes', or what differs. Random draws compare
    only where the arm draws eager's numbers: inductor with `fallback_random`, on the CPU."""
    same_draws = device.type == "cpu" and backend in ("eager", "inductor")
    skip = () if same_draws else policy.random_outputs
    rtol, atol = (2e-2, 2e-2) if dtype == "bf16" else (1e-3, 1e-4)
    for i, (a, b) in enumerate(zip(flat(out), flat(ref))):
        if i in skip:
            continue
        a, b = a.detach().float().cpu(), b.detach().float().cpu()
        if a.shape != b.shape or not torch.allclose(a, b, rtol=rtol, atol=atol):
            diff = (a - b).abs().max().item() if a.shape == b.shape else "shape"
            return f"no (output {i}, max difference {diff})"
    return "yes" if not skip else "yes (outputs that draw no random number)"


def run_config(name: str, batch: int, dtype: str, arms, device, opts) -> list[Row]:
    """The arms of one configuration. Each compiles its own graph at its first call (dynamo guards on the
    backend and mode, so arms compiling the same function do not share a graph): an arm that compiles
    with dynamo and made no graph fails, and so does the timing if any arm compiles during it."""
    torch._dynamo.reset()  # each configuration compiles afresh: its compile time is its own
    policy = build(name, batch, device)
    sync = device_sync(device)
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if dtype == "bf16" else None

    def under_dtype(fn):
        if autocast is None:
            return fn
        def call():
            with autocast():
                return fn()
        return call

    def seeded(fn):
        torch.manual_seed(0)
        out = fn()
        sync()
        return [t.clone() for t in flat(out)]

    rows, runnable = [], {}
    reference = seeded(under_dtype(make_arm(policy, "eager", None, device)))
    for backend, mode in arms:
        row = Row(name, batch, dtype, arm_name(backend, mode))
        rows.append(row)
        try:
            fn = under_dtype(make_arm(policy, backend, mode, device))
            graphs, start = dynamo_counts()[0], time.perf_counter()
            fn()
            sync()
            row.compile_s, row.graphs = time.perf_counter() - start, dynamo_counts()[0] - graphs
            if row.graphs == 0 and backend not in ("eager", "CudaGraphModule"):
                raise RuntimeError("its first call compiled no graph")
            for _ in range(3):  # warm-up: allocator, recompiles on a second call, CUDA-graph capture
                fn()
            sync()
            row.matches_eager = compare(seeded(fn), reference, policy, backend, device, dtype)
            runnable[row.arm] = (row, fn)
        except Exception as err:  # a failing arm is a row, not a crash
            row.status, row.error = "failed", one_line(err)
            print(f"  {row.arm}: failed: {row.error}", file=sys.stderr)
    with NoCompiling():
        times = interleaved({arm: fn for arm, (_, fn) in runnable.items()}, opts.rounds, opts.round_time,
                            min_calls=max(1, opts.min_calls // opts.rounds), sync=sync)
    for arm, (row, _) in runnable.items():
        ts = times[arm]
        row.times, row.calls = ts, len(ts)
        row.p50_ms, row.p90_ms, row.p99_ms = (percentile(ts, q) * 1e3 for q in (50, 90, 99))
        row.calls_per_s = 1.0 / statistics.mean(ts)
        row.samples_per_s = batch * row.calls_per_s
    eager = next(r for r in rows if r.arm == "eager")
    for row in rows:
        if row.status == "ok":
            row.speedup = eager.p50_ms / row.p50_ms
    return rows


def markdown(rows: list[Row], machine: dict, command: str) -> str:
    lines = ["# Policy inference: eager against compiled", "",
             "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()), "",
             f"Command: `{command}`", "",
             "Cells: p50 latency per call (ms) and, in brackets, the speed-up over eager (eager's p50 over the "
             "arm's). A cell `failed` is an arm that does not run here (see the errors below). `≠` marks an arm whose "
             "outputs differ from eager's. Every row's p90, p99, calls/s, samples/s, compile time and number of "
             "calls are in results.json.", ""]
    for name in dict.fromkeys(r.policy for r in rows):
        for dtype in dict.fromkeys(r.dtype for r in rows if r.policy == name):
            sub = [r for r in rows if r.policy == name and r.dtype == dtype]
            batches = sorted({r.batch for r in sub})
            lines += [f"## {name}, {dtype}", "", "| arm | compile (s) | " + " | ".join(f"batch {b}" for b in batches) + " |",
                      "|---|---|" + "---|" * len(batches)]
            for arm in dict.fromkeys(r.arm for r in sub):
                cells, compile_s = [], []
                for b in batches:
                    r = next((r for r in sub if r.arm == arm and r.batch == b), None)
                    if r is None:
                        cells.append("")
                    elif r.status != "ok":
                        cells.append("failed")
                    else:
                        mark = "" if r.matches_eager.startswith("yes") else " ≠"
                        cells.append(f"{r.p50_ms:.3g} ({r.speedup:.2f}x){mark}")
                        compile_s.append(r.compile_s)
                span = f"{min(compile_s):.1f}-{max(compile_s):.1f}" if compile_s else ""
                lines.append(f"| {arm} | {span} | " + " | ".join(cells) + " |")
            lines.append("")
    errors = {}
    for r in rows:
        if r.status != "ok":
            errors.setdefault((r.arm, r.error), []).append(f"{r.policy} {r.dtype} batch {r.batch}")
    if errors:
        lines += ["## Arms that failed", ""]
        lines += [f"- {arm}: `{err}` ({len(where)} configurations)" for (arm, err), where in errors.items()]
        lines.append("")
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(r.policy for r in rows))
    fig, axes = plt.subplots(1, len(policies), figsize=(3.4 * len(policies) + 1, 3.6), squeeze=False)
    for ax, name in zip(axes[0], policies):
        for dtype, style in (("float32", "-"), ("bf16", "--")):
            for arm in dict.fromkeys(r.arm for r in rows if r.arm != "eager"):
                pts = sorted((r.batch, r.speedup) for r in rows
                             if r.policy == name and r.dtype == dtype and r.arm == arm and r.status == "ok")
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", ms=3, label=f"{arm}{'' if dtype == 'float32' else ' bf16'}")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("batch size", fontsize=7)
        ax.set_ylabel("speed-up over eager (p50)", fontsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=6, loc="lower center", ncol=4)
    fig.tight_layout(rect=(0, 0.18, 1, 1))
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--batch-sizes", default=",".join(map(str, BATCH_SIZES)))
    parser.add_argument("--dtypes", default="float32,bf16", help="bf16 runs under autocast, where the device runs it natively")
    parser.add_argument("--arms", default="", help="only the arms whose names contain one of these (comma-separated)")
    parser.add_argument("--extra-backends", default="", help="more torch.compile backends to try, by name (comma-separated)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-time", type=float, default=0.2, help="seconds of calls per arm and round")
    parser.add_argument("--min-calls", type=int, default=200, help="calls per arm at least, over all rounds")
    parser.add_argument("--out", type=Path, default=Path("results/inference"))
    opts = parser.parse_args()
    policies = [p for p in opts.policies.split(",") if p]
    if unknown := [p for p in policies if p not in POLICIES]:
        parser.error(f"--policies: unknown {unknown}; choose among {POLICIES}")
    try:
        batches = [int(b) for b in opts.batch_sizes.split(",")]
    except ValueError:
        parser.error(f"--batch-sizes: not a list of integers: {opts.batch_sizes!r}")
    if opts.rounds < 1 or opts.min_calls < 1 or min(batches) < 1:
        parser.error("--rounds, --min-calls and the batch sizes must be at least 1")
    device = torch.device(opts.device)
    dtypes = [d for d in opts.dtypes.split(",") if d]
    native_bf16 = torch.cuda.is_bf16_supported() if device.type == "cuda" else torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if "bf16" in dtypes and not native_bf16:
        print(f"bf16: skipped, {device.type} here has no native bf16 (CPU: AVX512-BF16 or AMX)", file=sys.stderr)
        dtypes.remove("bf16")
    arms = [a for a in available_arms(device, opts.extra_backends.split(","))
            if not opts.arms or any(f in arm_name(*a) for f in opts.arms.split(","))]
    if device.type == "cpu":
        torch._inductor.config.fallback_random = True  # compiled code draws eager's random numbers, as in the scripts
    # every arm compiles from scratch: no kernel from an earlier arm or run is reused from inductor's disk
    # caches, so that the compile times are a first run's
    torch._inductor.config.fx_graph_cache = False
    torch._inductor.config.autotune_local_cache = False
    torch._functorch.config.enable_autograd_cache = False
    # the arms of a configuration compile the same function, one graph each, all kept for the timing: room
    # for all of them (past dynamo's default of 8 per function, a compile falls back to eager for good)
    torch._dynamo.config.recompile_limit = 64

    rows = []
    for name in policies:
        for batch in batches:
            for dtype in dtypes:
                print(f"{name}, batch {batch}, {dtype}", file=sys.stderr)
                rows += run_config(name, batch, dtype, arms, device, opts)
    machine, command = provenance()
    save(opts.out, markdown(rows, machine, command),
         {"machine": machine, "command": command,
          "rows": [{k: v for k, v in asdict(r).items() if k != "times"} for r in rows]})
    plot(rows, opts.out / "speedup.png")
    print(opts.out / "results.md")


if __name__ == "__main__":
    main()
