"""Does envpool's async API (send/recv on half of the envs) speed up the Atari rollout?

The Atari PPO scripts step all envs at once (`envs.step`), then run the policy on all
frames. With `batch_size < num_envs`, `recv` returns the first envs that finish while the
others still simulate, so the policy's forward pass for one half can overlap the other
half's emulation. This measures the rollout alone (the optimized script's agent and acting
step, random weights, no update), both ways, in alternating rounds:

    python -m benchmarks.optimizations.envpool_async --env-id Breakout-v5 --num-envs 8 --steps 2048 --rounds 5
"""

import argparse
import statistics
import time
from pathlib import Path

import envpool
import numpy as np
import torch

from benchmarks.common import load_script, write_results

ATARI = load_script("ppo_atari_envpool_torchcompile")


@torch.inference_mode()
def act(agent, obs: np.ndarray) -> np.ndarray:
    """The optimized script's acting step: uint8 frames in, a sampled action per env out."""
    return agent.get_action_and_value(torch.from_numpy(obs))[0].numpy()


def make(env_id: str, num_envs: int, batch_size: int):
    return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, batch_size=batch_size,
                        episodic_life=True, reward_clip=True, seed=1)


def sync_rollout(env_id: str, num_envs: int, steps: int, net) -> float:
    """Environment steps per second of step-all-then-act, as the scripts do."""
    envs = make(env_id, num_envs, num_envs)
    obs, _ = envs.reset()
    start = time.perf_counter()
    for _ in range(steps // num_envs):
        obs = envs.step(act(net, obs))[0]
    sps = steps // num_envs * num_envs / (time.perf_counter() - start)
    envs.close()
    return sps


def async_rollout(env_id: str, num_envs: int, steps: int, net) -> float:
    """Environment steps per second when the policy acts on each half while the other half simulates."""
    half = num_envs // 2
    envs = make(env_id, num_envs, half)
    envs.async_reset()
    start = time.perf_counter()
    for _ in range(steps // half):
        obs, _, _, _, info = envs.recv()
        envs.send(act(net, obs), info["env_id"])
    sps = steps // half * half / (time.perf_counter() - start)
    envs.close()
    return sps


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="Breakout-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2048, help="environment steps per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="also write results.md and results.json here")
    args = parser.parse_args()
    if args.num_envs < 2 or args.num_envs % 2:
        parser.error("--num-envs must be even and at least 2")

    torch.manual_seed(0)
    net = ATARI.Agent(make(args.env_id, 1, 1)).to(memory_format=torch.channels_last)  # as the script builds it
    results = {"sync (step all, then act)": [], "async (two halves)": []}
    for _ in range(args.rounds):  # alternate, so that the machine's drift falls on both
        results["sync (step all, then act)"].append(sync_rollout(args.env_id, args.num_envs, args.steps, net))
        results["async (two halves)"].append(async_rollout(args.env_id, args.num_envs, args.steps, net))
    sync = results["sync (step all, then act)"]
    lines = [f"| rollout ({args.env_id}, {args.num_envs} envs, {torch.get_num_threads()} torch threads) "
             "| median fps | min-max | ratio to sync (median of the rounds' ratios) |", "|---|---|---|---|"]
    for name, values in results.items():
        ratio = statistics.median(v / s for v, s in zip(values, sync))
        lines.append(f"| {name} | {statistics.median(values):.0f} | {min(values):.0f}-{max(values):.0f} | {ratio:.2f}x |")
    write_results(args.out, "\n".join(lines), {"fps": results})


if __name__ == "__main__":
    main()
