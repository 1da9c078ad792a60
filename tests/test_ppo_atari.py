"""The Atari PPO pair on envpool: every flag combination runs and logs, the optimized script's
numbers match its eager twin's and its own with --compile, a seed gives the same numbers twice,
and the episode statistics are the real game's (all lives, unclipped rewards)."""

import envpool
import numpy as np
import pytest
from helpers import (PPO_LOSSES, assert_close_logs, assert_identical_logs, check_flag_run, flag_configs, load_script,
                     run_script)

EAGER, FAST = "ppo_atari_envpool", "ppo_atari_envpool_torchcompile"
# 4 iterations of 2 envs x 64 steps on Breakout: losses logged 4 times, fps from the second on, and
# two games end (at steps 342 and 398, returns 1 and 2)
SHORT = ("--env-id", "Breakout-v5", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512",
         "--num-minibatches", "2", "--update-epochs", "2", "--seed", "7")
LOSSES = PPO_LOSSES
GAMES = ["charts/episodic_return", "charts/episodic_length"]
CONFIGS = flag_configs(EAGER, FAST)


@pytest.mark.parametrize("config", CONFIGS, ids=" ".join)
def test_every_flag_combination_runs_and_logs(config, cached_run):
    run = cached_run(*config, *SHORT)
    check_flag_run(run, config, LOSSES, logs=4)
    assert len(run.values("charts/SPS")) == 3


# Same random numbers, same formulas; only the rounding of compiled kernels differs. Over 4
# iterations (16 minibatch updates) every logged value agrees within 1e-4 relative, and the games
# played (the actions sampled from the policy) are the same.
TOL = dict(rtol=1e-4, atol=1e-6)


def test_compile_gives_the_numbers_of_no_compile(cached_run):
    plain, compiled = cached_run(FAST, *SHORT).check(), cached_run(FAST, "--compile", *SHORT).check()
    assert_close_logs(compiled, plain, LOSSES + GAMES, **TOL)


def test_optimized_script_learns_what_the_eager_one_learns(cached_run):
    eager, fast = cached_run(EAGER, *SHORT).check(), cached_run(FAST, *SHORT).check()
    assert len(eager.values("charts/episodic_return")) == 2
    assert_close_logs(fast, eager, LOSSES + GAMES, **TOL)


@pytest.mark.parametrize("script", [EAGER, FAST])
def test_same_seed_same_numbers(script, cached_run, tmp_path):
    again = run_script(script, *SHORT, cwd=tmp_path).check()
    assert_identical_logs(cached_run(script, *SHORT).check(), again, LOSSES)


def step(reward, terminated, truncated, lives, elapsed):
    """One envpool step of two envs, as the scripts see it: flags, and the info they read."""
    info = {"reward": np.array(reward, float), "lives": np.array(lives), "elapsed_step": np.array(elapsed)}
    return info, np.array(terminated, bool), np.array(truncated, bool)


# A hand-made trace of two envs (episodic life: a lost life ends an episode for the agent, and
# envpool's next step is a reset with reward 0; the game goes on until its last life is lost).
TRACE = [  # (unclipped rewards, terminated, truncated, lives, elapsed steps) per env
    step([5, 0], [0, 0], [0, 0], [3, 3], [1, 1]),
    step([0, 0], [1, 0], [0, 0], [2, 3], [2, 2]),  # env 0 loses a life
    step([0, 0], [0, 0], [0, 0], [2, 3], [2, 3]),  # env 0's reset step: the game goes on
    step([10, 25], [0, 0], [0, 0], [2, 3], [3, 4]),
    step([0, 0], [1, 0], [0, 0], [0, 3], [4, 5]),  # env 0 loses its last life: game over, 5 + 10
    step([0, 0], [0, 1], [0, 0], [3, 0], [0, 6]),  # env 1 loses its last (only) life: 25
    step([7, 0], [0, 0], [0, 0], [3, 3], [1, 0]),
    step([3, 0], [0, 0], [1, 0], [3, 3], [2, 1]),  # env 0's new game is truncated: 7 + 3
]
EXPECTED = [[], [], [], [], [(0, 15.0, 4)], [(1, 25.0, 6)], [], [(0, 10.0, 2)]]


@pytest.mark.parametrize("script", [EAGER, FAST])
def test_episode_statistics_on_a_hand_checked_trace(script):
    stats = load_script(script).EpisodeStats(2)
    assert [stats.update(*s) for s in TRACE] == EXPECTED


def test_episode_statistics_on_a_real_game():
    """SpaceInvaders pays 5 to 30 points per invader: the logged returns must be the games' unclipped
    sums over all lives, one per game (envpool's own game-over flag), not the clipped rewards nor
    one per life."""
    module = load_script(FAST)
    envs = envpool.make("SpaceInvaders-v5", env_type="gymnasium", num_envs=1, episodic_life=True,
                        reward_clip=True, seed=3)
    envs.reset()
    stats, logged, rng = module.EpisodeStats(1), [], np.random.default_rng(0)
    games, current, clipped, lives_lost = [], 0.0, 0.0, 0
    while len(games) < 3:
        _, reward, terminated, truncated, info = envs.step(rng.integers(0, envs.action_space.n, size=1))
        logged += [r for _, r, _ in stats.update(info, terminated, truncated)]
        current, clipped = current + info["reward"][0], clipped + reward[0]
        lives_lost += int(terminated[0] and not info["terminated"][0])
        if info["terminated"][0] or truncated[0]:  # envpool's flag for the real end of a game
            games.append(current)
            current = 0.0
    assert logged == games
    assert lives_lost >= 3 * 2, "episodic life should end an agent episode at every lost life"
    assert sum(games) > clipped, "unclipped rewards sum to more than the clipped ones in SpaceInvaders"
