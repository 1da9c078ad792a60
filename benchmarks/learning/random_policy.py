"""A random policy's score on an Atari game, counted as the scripts count games (their EpisodeStats: whole
games, unclipped rewards), and the spread of its means over groups of games: the baseline that an Atari
learning test's threshold must clear.

    python -m benchmarks.learning.random_policy --env-id Seaquest-v5 --games 400
"""

import argparse

import numpy as np

from leanrl_utils.scripts import load_script


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="Seaquest-v5")
    parser.add_argument("--games", type=int, default=400)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    module = load_script("ppo_atari_envpool")
    envs = module.make_envs(module.Args(env_id=args.env_id), num_envs=args.num_envs, seed=args.seed)
    stats, rng, games = module.EpisodeStats(args.num_envs), np.random.default_rng(args.seed), []
    envs.reset()
    while len(games) < args.games:
        _, _, terminated, truncated, info = envs.step(rng.integers(0, envs.single_action_space.n, args.num_envs))
        games += [r for _, r, _ in stats.update(info, terminated, truncated)]
    games = np.array(games[: args.games])
    print(f"random policy, {args.env_id}, {args.games} games (seed {args.seed}): mean {games.mean():.1f}, "
          f"std {games.std():.1f}, min {games.min():.0f}, max {games.max():.0f}")
    for size in (5, 10, 12):
        means = games[: len(games) // size * size].reshape(-1, size).mean(axis=1)
        print(f"means of {len(means)} groups of {size} games: max {means.max():.1f}, min {means.min():.1f}")


if __name__ == "__main__":
    main()
