"""How PPO Atari scales over processes (torchrun), and what bounds it.

    python -m benchmarks.torchrun --ranks 1,2 --rounds 3            # the README's CPU figures
    python -m benchmarks.torchrun --ranks 1,2,4 --modes eager,compile  # on a GPU: ranks share it

For each number of ranks and each mode (the eager multi-process script, the optimized one with
--compile), the script runs under torchrun on loopback with `--num-envs` envs per rank, and its
`charts/SPS` (the steps of all ranks per second, after the warm-up) is read back; the configurations
take turns for `--rounds` rounds and the table gives the median. Scaling efficiency: fps with N ranks
over N times fps with one rank, for the same mode (so --ranks must include 1 for it).

Then the three candidates for what bounds the scaling, each measured alone with the same processes:
- the environments: envpool's Breakout stepped with random actions, one process per rank at once;
- the all-reduce: one gloo all-reduce of the agent's 1.7M gradients (6.7 MB), averaged over 20;
- the update: one minibatch update of the agent (forward, backward, Adam), per rank at once.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

from benchmarks.common import free_port, load_script, write_results
from leanrl_utils.events import read_scalars

REPO = Path(__file__).resolve().parents[2]
SCRIPT = {"eager": "ppo_atari_envpool_multigpu", "compile": "ppo_atari_envpool_multigpu_torchcompile"}


def run(ranks: int, mode: str, opts) -> float:
    """charts/SPS of one torchrun run."""
    script = REPO / "leanrl" / f"{SCRIPT[mode]}.py"
    batch = ranks * opts.num_envs * opts.num_steps
    args = ["--env-id", opts.env_id, "--num-envs", str(opts.num_envs), "--num-steps", str(opts.num_steps),
            "--total-timesteps", str(batch * opts.iterations)] + (["--compile"] if mode == "compile" else [])
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={ranks}",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", str(script), *args]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=opts.timeout,
                              env={**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // ranks))})
        if proc.returncode != 0:
            raise SystemExit(f"torchrun: {ranks} ranks, {mode}: failed:\n{proc.stderr[-2000:]}")
        return read_scalars(next(Path(tmp).glob("runs/*")))["charts/SPS"][-1][1]


def pieces_worker(rank, world, port, opts, queue):
    """One process of the alone-measurements: env steps, all-reduce, update."""
    import envpool
    import numpy as np
    import torch.distributed as dist

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    m = load_script("ppo_atari_envpool_torchcompile")
    envs = envpool.make(opts.env_id, env_type="gymnasium", num_envs=opts.num_envs, episodic_life=True,
                        reward_clip=True, seed=1 + rank)
    agent = m.Agent(envs).to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5, fused=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    # environments: random actions, all processes at once
    envs.reset()
    rng = np.random.default_rng(rank)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(opts.env_steps):
        envs.step(rng.integers(0, envs.single_action_space.n, size=opts.num_envs))
    results["env steps/s (all ranks)"] = opts.env_steps * opts.num_envs * world / (time.perf_counter() - start)
    # the all-reduce of the flattened gradients
    flat = torch.randn(sum(p.numel() for p in agent.parameters()))
    dist.barrier()
    start = time.perf_counter()
    for _ in range(20):
        dist.all_reduce(flat)
    results["all-reduce (ms)"] = (time.perf_counter() - start) / 20 * 1e3
    # one minibatch update, every process at once
    mb = opts.num_envs * opts.num_steps // 4
    frames = torch.randint(0, 256, (mb, 4, 84, 84), dtype=torch.uint8)
    actions = torch.randint(0, envs.single_action_space.n, (mb,))
    times = []
    for i in range(6):
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        _, logprob, entropy, value = agent.get_action_and_value(frames, actions)
        (logprob.mean() + entropy.mean() + value.mean()).backward()
        optimizer.step()
        if i:
            times.append(time.perf_counter() - start)
    results["update (ms)"] = statistics.median(times) * 1e3
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def pieces(ranks: int, opts) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=pieces_worker, args=(r, ranks, port, opts, queue)) for r in range(ranks)]
    for p in procs:
        p.start()
    result = queue.get()
    for p in procs:
        p.join(timeout=60)
    return result


def main():
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--modes", default="eager,compile")
    parser.add_argument("--env-id", default="Breakout-v5")
    parser.add_argument("--num-envs", type=int, default=8, help="envs per rank")
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=6, help="PPO iterations per run (the first is the warm-up)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--env-steps", type=int, default=256, help="steps of the environments-alone measurement")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", type=Path, default=None, help="also write results.md and results.json here")
    opts = parser.parse_args()
    ranks = [int(r) for r in opts.ranks.split(",")]
    modes = [m for m in opts.modes.split(",") if m]
    if bad := [m for m in modes if m not in SCRIPT]:
        parser.error(f"--modes: unknown {bad}; choose among {list(SCRIPT)}")
    if opts.iterations < 2 or min(ranks) < 1:
        parser.error("--iterations must be at least 2 (the first is the warm-up), --ranks at least 1")

    fps = {(r, m): [] for r in ranks for m in modes}
    for rnd in range(opts.rounds):
        for r in ranks:
            for m in modes:
                fps[r, m].append(run(r, m, opts))
                print(f"round {rnd + 1}: {r} ranks, {m}: {fps[r, m][-1]:.0f} fps", file=sys.stderr)
    lines = [f"{opts.rounds} rounds, {opts.env_id}, {opts.num_envs} envs per rank, {opts.iterations} iterations per run",
             "", "| ranks | mode | fps, all ranks (median) | min-max | scaling efficiency |", "|---|---|---|---|---|"]
    for m in modes:
        one = statistics.median(fps[1, m]) if 1 in ranks else None  # efficiency: against 1 rank, when measured
        for r in ranks:
            med = statistics.median(fps[r, m])
            efficiency = "n/a (no 1-rank run)" if one is None else f"{med / (r * one):.2f}"
            lines.append(f"| {r} | {m} | {med:.0f} | {min(fps[r, m]):.0f}-{max(fps[r, m]):.0f} | {efficiency} |")
    lines += ["", "| ranks | env steps/s, all ranks | all-reduce of the gradients (ms) | one minibatch update (ms) |",
              "|---|---|---|---|"]
    alone = {r: pieces(r, opts) for r in ranks}
    for r, p in alone.items():
        lines.append(f"| {r} | {p['env steps/s (all ranks)']:.0f} | {p['all-reduce (ms)']:.1f} | {p['update (ms)']:.1f} |")
    write_results(opts.out, "\n".join(lines), {"fps": {f"{r} {m}": v for (r, m), v in fps.items()},
                                               "pieces": {str(r): p for r, p in alone.items()}})


if __name__ == "__main__":
    main()
