"""Serving one policy to many actors over torch.distributed.rpc: batched or not, eager or compiled.

    python -m benchmarks.rpc_serving --world-size 4,8,16 --batch true,false --policy mlp --compile false,true
    python -m benchmarks.rpc_serving --policy dummy --world-size 10,20      # the shape of PyTorch's benchmark

The shape of PyTorch's RL benchmark for torch.distributed.rpc (benchmarks/distributed/rpc/rl in its
repository): on 127.0.0.1, rank 0 is the coordinator, rank 1 the agent that holds the policy, ranks 2 to
world size - 1 the observers. For each episode the coordinator starts every observer; an observer sends
its state to the agent (`rpc_sync`), waits for the action, steps its environment, and so on for
`--steps` steps. With `--batch true` the agent answers the observers together: its request handler is an
`@rpc.functions.async_execution` function that returns a future; the last request of a batch (one per
observer) runs the policy on all the states at once and completes every waiting future. With
`--batch false` each request runs the policy on its own state.

Policies, built from the optimized scripts' classes as the scripts build them: `mlp`, continuous PPO's
actor-critic (HalfCheetah sizes; a sampled action per request); `atari-cnn`, Atari PPO's Nature CNN
(uint8 frames, channels-last); `dummy`, PyTorch's benchmark policy (a 10x20x10 state, Linear layers,
softmax over the batch dimension, a sampled action), for comparison with its figures. `--compile`
compiles the policy; `--cudagraphs` (CUDA) replays it as a CUDA graph. `--observer-env real` steps a
real environment in each observer (HalfCheetah-v4 through the PPO script's wrappers, or envpool's
Breakout-v5); `random` sends random states, as PyTorch's benchmark does.

Metrics, as PyTorch's benchmark defines them, at p50/p75/p90/p95 over all steps of all episodes after
`--warmup-episodes` (compilation, first calls): agent latency, from the first request of a batch to its
actions (batched, this includes waiting for the other observers' requests; without batching it is one
request's policy call); agent throughput, the batch size over that latency; observer latency, one
request's round trip as the observer sees it; observer throughput, one over that latency. Two more
split the agent latency: policy time, the policy call alone (the forward pass and the actions' copy to
the host), and waiting for the batch, from the first request of a batch to the last one's arrival (0
without batching). Writes report.json, report.md and metrics.png into --out.

torch.distributed.rpc is in maintenance mode upstream (kept working, no new features): fine for a
single-machine serving study, not a foundation for new distributed systems.
"""

import argparse
import itertools
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from benchmarks.common import built, free_port, load_script, one_line, provenance, save, shell

PERCENTILES = (50, 75, 90, 95)
METRICS = ("agent latency (seconds)", "agent throughput", "observer latency (seconds)", "observer throughput")
# ours, splitting the agent latency: the policy call alone, and the wait for the batch's last request
SPLIT = ("policy time (seconds)", "waiting for the batch (seconds)")


# ---------------------------------------------------------------------------------------------------
# Policies
# ---------------------------------------------------------------------------------------------------
class DummyPolicy(nn.Module):
    """PyTorch's benchmark policy: Flatten, Linear(2000, 10), 5 x Linear(10, 10), softmax over dim 0."""

    def __init__(self, state_size=(10, 20, 10), nlayers=5, out_features=10):
        super().__init__()
        self.model = nn.Sequential(nn.Flatten(1, -1), nn.Linear(int(np.prod(state_size)), out_features),
                                   *[nn.Linear(out_features, out_features) for _ in range(nlayers)])

    def forward(self, x):
        return F.softmax(self.model(x), dim=0)


def build_policy(name: str, device: torch.device, greedy: bool = False):
    """(act: states -> actions, state shape, state dtype, a function that makes an observer's env or None).
    `greedy` acts with the distribution's mode instead of a sample (the batching test compares actions)."""
    from tensordict import from_module

    if name == "dummy":
        policy = DummyPolicy().to(device)

        def act(states):
            probs = policy(states)
            return probs.argmax(-1) if greedy else torch.multinomial(probs, 1).view(-1)
        return act, (10, 20, 10), torch.float32, None
    if name == "mlp":
        m = load_script("ppo_continuous_action_torchcompile")
        envs = m.make_envs(m.Args(env_id="HalfCheetah-v4"), "", num_envs=1)
        agent, acting = built(m.Agent, envs, device=device), shell(m.Agent, envs)
        from_module(agent).data.to_module(acting, preserve_module_state=False)
        act = acting.actor_mean if greedy else (lambda states: acting.get_action_and_value(states)[0])
        return act, envs.single_observation_space.shape, torch.float32, \
            lambda seed: m.make_envs(m.Args(env_id="HalfCheetah-v4", seed=seed), "", num_envs=1)
    if name == "atari-cnn":
        m = load_script("ppo_atari_envpool_torchcompile")
        envs = m.make_envs(m.Args(env_id="Breakout-v5"), num_envs=1)
        agent, acting = built(m.Agent, envs, device=device), shell(m.Agent, envs)
        agent.to(memory_format=torch.channels_last)
        from_module(agent).data.to_module(acting, preserve_module_state=False)

        def act(states):
            if greedy:
                return acting.actor(acting.network(m.Agent.frames(states))).argmax(-1)
            return acting.get_action_and_value(states)[0]
        return act, envs.single_observation_space.shape, torch.uint8, \
            lambda seed: m.make_envs(m.Args(env_id="Breakout-v5"), num_envs=1, seed=seed)
    raise ValueError(name)


# ---------------------------------------------------------------------------------------------------
# The agent: the policy, and the two ways of answering requests
# ---------------------------------------------------------------------------------------------------
class Server:
    """The agent's policy server. `request` (batched) waits until every observer has sent its state, then
    acts on all of them with one forward pass; `act_one` acts on one state. Both record the agent's
    latency and throughput as PyTorch's benchmark does."""

    def __init__(self, policy: str, observers: int, device: str, compile: bool, cudagraphs: bool, greedy=False):
        self.device = torch.device(device)
        act, shape, dtype, _ = build_policy(policy, self.device, greedy)
        if compile:
            act = torch.compile(act)
            # Compile here, before any request: unbatched requests arrive on several RPC threads at once,
            # and Dynamo compiling one function from several threads fails its own guards until it hits
            # its recompile limit and falls back to eager for good (seen with 14 observers).
            for batch in {1, observers}:
                act(torch.zeros((batch, *shape), dtype=dtype, device=self.device))
        if cudagraphs and self.device.type == "cuda":
            from tensordict.nn import CudaGraphModule

            act = CudaGraphModule(act, warmup=3 if compile else 2)
        self.act, self.observers = act, observers
        self.states = torch.zeros((observers, *shape), dtype=dtype, device=self.device)
        self.lock, self.pending, self.future, self.batch_start = threading.Lock(), 0, torch.futures.Future(), None
        self.latencies, self.throughputs, self.policy_times, self.waits, self.sizes = [], [], [], [], []

    def record(self, start: float, called: float, done: float, size: int) -> None:
        """One policy call on `size` states from `called` to `done`, its first request at `start` (under the lock)."""
        self.latencies.append(done - start)
        self.throughputs.append(size / (done - start))
        self.policy_times.append(done - called)
        self.waits.append(called - start)
        self.sizes.append(size)

    def request(self, index: int, state: torch.Tensor) -> torch.futures.Future:
        """Batched: store the state; the last request of the batch runs the policy and completes every
        waiting future. Returns this observer's future action."""
        with self.lock:
            if self.pending == 0:
                self.batch_start = time.perf_counter()
            self.states[index].copy_(state)
            mine = self.future.then(lambda fut: fut.wait()[index])
            self.pending += 1
            if self.pending == self.observers:
                called = time.perf_counter()
                actions = self.act(self.states).cpu()
                self.record(self.batch_start, called, time.perf_counter(), self.observers)
                answered, self.future, self.pending = self.future, torch.futures.Future(), 0
                answered.set_result(actions)
        return mine

    def act_one(self, state: torch.Tensor) -> torch.Tensor:
        start = time.perf_counter()
        action = self.act(state.to(self.device)[None]).cpu()[0]
        done = time.perf_counter()
        with self.lock:
            self.record(start, start, done, 1)
        return action

    def take_metrics(self) -> dict[str, list]:
        """What was recorded since the last call, by name: per policy call, the agent latency and throughput,
        the policy time, the wait, and the number of states."""
        with self.lock:
            names = ("latencies", "throughputs", "policy_times", "waits", "sizes")
            metrics = {name: getattr(self, name) for name in names}
            for name in names:
                setattr(self, name, [])
        return metrics


# RPC entry points: the agent's Server lives in its process, reached through an RRef.
@rpc.functions.async_execution
def request_batched(server_rref, index, state):
    return server_rref.local_value().request(index, state)


def request_one(server_rref, index, state):
    return server_rref.local_value().act_one(state)


def take_metrics(server_rref):
    return server_rref.local_value().take_metrics()


class Observer:
    """One actor: its environment (random states, or a real env), and its loop of requests."""

    def __init__(self, index: int, policy: str, observer_env: str, batch: bool, crash_at: int, seed: int):
        _, self.shape, self.dtype, make_env = build_policy(policy, torch.device("cpu"))
        self.env = make_env(seed + index) if observer_env == "real" and make_env is not None else None
        self.index, self.batch, self.crash_at, self.steps_done = index, batch, crash_at, 0
        self.generator = torch.Generator().manual_seed(seed + index)

    def random_state(self):
        if self.dtype == torch.uint8:
            return torch.randint(0, 256, self.shape, dtype=torch.uint8, generator=self.generator)
        return torch.rand(self.shape, generator=self.generator)

    def run_episode(self, server_rref, steps: int):
        state = torch.as_tensor(self.env.reset(seed=self.index)[0][0]) if self.env is not None else self.random_state()
        latencies = []
        call = request_batched if self.batch else request_one
        for _ in range(steps):
            self.steps_done += 1
            if self.steps_done == self.crash_at:  # --crash-observer-at: this observer dies abruptly
                os._exit(1)
            start = time.perf_counter()
            action = rpc.rpc_sync(server_rref.owner(), call, args=(server_rref, self.index, state))
            latencies.append(time.perf_counter() - start)
            if self.env is not None:
                state = torch.as_tensor(self.env.step(action[None].numpy())[0][0])
            else:
                state = self.random_state()
        return latencies


def observer_episode(observer_rref, server_rref, steps):
    return observer_rref.local_value().run_episode(server_rref, steps)


def percentiles(values):
    return {f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES}


def coordinate(opts, config, observers: int):
    """Rank 0: create the server on the agent and an Observer on each observer rank, run the episodes,
    and return the metrics."""
    server = rpc.remote("agent", Server, args=(opts.policy_name, observers, opts.device, config["compile"],
                                                opts.cudagraphs))
    obs_rrefs = [rpc.remote(f"observer{i}", Observer, args=(i, opts.policy_name, opts.observer_env, config["batch"],
                                                              opts.crash_observer_at if i == 0 else 0, opts.seed))
                 for i in range(observers)]
    agent, obs_lat = {}, []
    for episode in range(opts.warmup_episodes + opts.episodes):
        futures = [rpc.rpc_async(o.owner(), observer_episode, args=(o, server, opts.steps)) for o in obs_rrefs]
        latencies = torch.futures.wait_all(futures)
        recorded = rpc.rpc_sync("agent", take_metrics, args=(server,))
        if episode >= opts.warmup_episodes:
            for name, values in recorded.items():
                agent.setdefault(name, []).extend(values)
            obs_lat += [t for one in latencies for t in one]
    return {"agent latency (seconds)": percentiles(agent["latencies"]), "agent throughput": percentiles(agent["throughputs"]),
            "observer latency (seconds)": percentiles(obs_lat),
            "observer throughput": percentiles([1 / t for t in obs_lat]),
            "policy time (seconds)": percentiles(agent["policy_times"]),
            "waiting for the batch (seconds)": percentiles(agent["waits"]),
            "requests": len(obs_lat), "batches": len(agent["latencies"]), "batch sizes": sorted(set(agent["sizes"]))}


def worker(rank, world_size, port, opts, config, queue):
    torch.set_num_threads(1)  # many processes on few cores: one thread each
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}", rpc_timeout=opts.rpc_timeout,
                                              num_worker_threads=max(16, 2 * world_size))
    name = "coordinator" if rank == 0 else "agent" if rank == 1 else f"observer{rank - 2}"
    rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)
    if rank == 0:
        try:
            queue.put(("ok", coordinate(opts, config, world_size - 2)))
        except Exception as err:  # an observer died, a request timed out: say so, and stop everyone
            queue.put(("error", one_line(err, limit=300)))
            rpc.shutdown(graceful=False)
            return
    rpc.shutdown()


def run_config(opts, config) -> dict:
    """Start the world for one configuration, wait for the coordinator's metrics, stop everyone."""
    world = config["world_size"]
    ctx = mp.get_context("spawn")
    queue, port = ctx.SimpleQueue(), free_port()
    procs = [ctx.Process(target=worker, args=(rank, world, port, opts, config, queue), daemon=True)
             for rank in range(world)]
    for p in procs:
        p.start()
    deadline, result = time.monotonic() + opts.timeout, None
    while result is None:
        if not queue.empty():
            result = queue.get()
        elif time.monotonic() > deadline:
            result = ("error", f"no result within --timeout {opts.timeout} s")
        elif procs[0].exitcode is not None:  # the coordinator ended without a word
            result = ("error", f"the coordinator exited with code {procs[0].exitcode}")
        else:
            time.sleep(0.2)
    for p in procs:
        p.join(timeout=10 if result[0] == "ok" else 1)
        if p.is_alive():
            p.kill()
    if result[0] == "error":
        raise SystemExit(f"rpc_serving: error: {config_name(config)}: {result[1]}")
    return {**config, "policy": opts.policy_name, "observer_env": opts.observer_env, "metrics": result[1]}


def config_name(config) -> str:
    return (f"world size {config['world_size']}, {'batched' if config['batch'] else 'one request at a time'}, "
            f"{'compiled' if config['compile'] else 'eager'}")


def table(results: list[dict]) -> str:
    head = ["| world size | batch | compile | " + " | ".join(f"{m} p{p}" for m in METRICS + SPLIT for p in PERCENTILES)
            + " |", "|---|---|---|" + "---|" * (len(METRICS + SPLIT) * len(PERCENTILES))]
    rows = []
    for r in results:
        cells = []
        for m in METRICS + SPLIT:
            for p in PERCENTILES:
                v = r["metrics"][m][f"p{p}"]
                cells.append(f"{v * 1e3:.3f} ms" if "(seconds)" in m else f"{v:.0f}")
        rows.append(f"| {r['world_size']} | {r['batch']} | {r['compile']} | " + " | ".join(cells) + " |")
    return "\n".join(head + rows)


def report_text(command: str, machine: dict, results: list[dict]) -> str:
    """report.md's text: the command, the machine, the table."""
    return (f"# Policy serving over torch.distributed.rpc\n\nCommand: `{command}`\n\nMachine: "
            + ", ".join(f"{k} {v}" for k, v in machine.items()) + f"\n\n{table(results)}\n")


def printed(results: list[dict]) -> str:
    """The layout of PyTorch's benchmark report: per configuration, each metric's p50, p75, p90, p95."""
    width = 8 * len(PERCENTILES)
    lines = ["x_axis_name : world_size",
             " " * 34 + "".join(f"{m:<{width}}" for m in METRICS),
             " " * 34 + "".join(f"{'p' + str(p):<8}" for _ in METRICS for p in PERCENTILES)]
    for r in results:
        label = f"world_size {r['world_size']:<3} {'batch' if r['batch'] else 'no batch'} {'compiled' if r['compile'] else 'eager'}"
        cells = []
        for m in METRICS:
            for p in PERCENTILES:
                v = r["metrics"][m][f"p{p}"]
                cells.append(f"{v:<8.4f}" if "latency" in m else f"{v:<8.0f}")
        lines.append(f"{label:<34}" + "".join(cells))
    return "\n".join(lines)


def plot(results, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for ax, m in zip(axes, METRICS):
        for (batch, compiled), group in itertools.groupby(sorted(results, key=lambda r: (r["batch"], r["compile"], r["world_size"])),
                                                          key=lambda r: (r["batch"], r["compile"])):
            group = list(group)
            ax.plot([r["world_size"] for r in group], [r["metrics"][m]["p50"] for r in group], marker="o",
                    label=f"{'batched' if batch else 'per request'}, {'compiled' if compiled else 'eager'}")
        ax.set_title(m + " (p50)", fontsize=9)
        ax.set_xlabel("world size (observers + 2)", fontsize=8)
        if "latency" in m:
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def bools(text: str, flag: str) -> list[bool]:
    values = {"true": True, "false": False, "1": True, "0": False}
    try:
        return [values[v.strip().lower()] for v in text.split(",")]
    except KeyError:
        raise SystemExit(f"rpc_serving: error: {flag}: expected true/false values, got {text!r}")


def main():
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", default="4", help="processes: coordinator, agent and observers (a list: the x-axis)")
    parser.add_argument("--batch", default="true", help="true, false, or both: true,false")
    parser.add_argument("--policy", dest="policy_name", default="mlp", choices=["mlp", "atari-cnn", "dummy"])
    parser.add_argument("--compile", default="false", help="compile the policy: true, false, or both")
    parser.add_argument("--cudagraphs", action="store_true", help="replay the policy as a CUDA graph (CUDA only)")
    parser.add_argument("--observer-env", default="random", choices=["random", "real"])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--warmup-episodes", type=int, default=1, help="episodes left out of the metrics")
    parser.add_argument("--steps", type=int, default=100, help="steps of each observer per episode")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="the agent's device")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rpc-timeout", type=float, default=60.0, help="seconds before a request fails")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before a configuration is stopped")
    parser.add_argument("--crash-observer-at", type=int, default=0, help="testing: observer 0 dies at this step")
    parser.add_argument("--out", type=Path, default=Path("results/rpc_serving"))
    opts = parser.parse_args()
    if not rpc.is_available():
        raise SystemExit("rpc_serving: error: torch.distributed.rpc is not available in this build of torch")
    try:
        worlds = [int(w) for w in opts.world_size.split(",")]
    except ValueError:
        parser.error(f"--world-size: not a list of integers: {opts.world_size!r}")
    if min(worlds) < 3:
        parser.error("--world-size must be at least 3: a coordinator, an agent and one observer")
    if opts.episodes < 1 or opts.steps < 1 or opts.warmup_episodes < 0:
        parser.error("--episodes and --steps must be at least 1, --warmup-episodes at least 0")
    if opts.cudagraphs and torch.device(opts.device).type != "cuda":
        print("warning: --cudagraphs needs a CUDA device; running without CUDA graphs", file=sys.stderr)
    configs = [dict(world_size=w, batch=b, compile=c) for w, b, c in
               itertools.product(worlds, bools(opts.batch, "--batch"), bools(opts.compile, "--compile"))]
    results = []
    for config in configs:
        print(f"{config_name(config)} ...", file=sys.stderr)
        results.append(run_config(opts, config))
    machine, command = provenance()
    report = {"command": command, "machine": machine, "x_axis_name": "world_size", "policy": opts.policy_name,
              "observer_env": opts.observer_env, "episodes": opts.episodes, "steps": opts.steps, "benchmark_results": results}
    save(opts.out, report_text(command, machine, results), report, stem="report")
    plot(results, opts.out / "metrics.png")
    print(printed(results))


if __name__ == "__main__":
    main()
