"""The continuous PPO pair: every flag combination runs and logs, the optimized script's numbers
match its eager twin's and its own with --compile, a seed gives the same numbers twice, GAE matches
a direct computation, episodes are logged once each, and both scripts learn InvertedPendulum."""

import numpy as np
import pytest
import torch
from helpers import (PPO_LOSSES, assert_close_logs, assert_identical_logs, check_flag_run, flag_configs,
                     learns_and_plays_back, load_script, run_script)
from leanrl_utils import evals  # helpers puts the repository root on the path

EAGER, FAST = "ppo_continuous_action", "ppo_continuous_action_torchcompile"
# 4 iterations of 256 steps on Pendulum (episodes of exactly 200 steps): losses logged 4 times,
# fps from the second iteration on, 5 episodes
SHORT = ("--env-id", "Pendulum-v1", "--total-timesteps", "1024", "--num-steps", "256", "--num-minibatches", "4",
         "--update-epochs", "2", "--seed", "5")
LOSSES = PPO_LOSSES
CONFIGS = flag_configs(EAGER, FAST)


@pytest.mark.parametrize("config", CONFIGS, ids=" ".join)
def test_every_flag_combination_runs_and_logs(config, cached_run):
    run = cached_run(*config, *SHORT)
    check_flag_run(run, config, LOSSES, logs=4)
    assert len(run.values("charts/SPS")) == 3


def test_each_episode_is_logged_once(cached_run):
    """Same-step autoreset: Pendulum's 200-step episodes end at steps 200, 400, ..., each logged once,
    with its full length: no reset step is counted, none is lost."""
    run = cached_run(FAST, *SHORT).check()
    assert [s for s, _ in run.scalars["charts/episodic_length"]] == [200, 400, 600, 800, 1000]
    assert set(run.values("charts/episodic_length")) == {200}
    two_envs = cached_run(FAST, *SHORT, "--num-envs", "2").check()  # 512 steps per env: 2 episodes each
    assert sorted(two_envs.values("charts/episodic_length")) == [200] * 4


# Both scripts draw the same random numbers and compute the same formulas; only the float rounding
# of compiled kernels differs. Over 4 iterations (64 minibatch updates) every logged value agrees
# within 1e-4 relative (1e-6 absolute for values near zero).
TOL = dict(rtol=1e-4, atol=1e-6)


def test_compile_gives_the_numbers_of_no_compile(cached_run):
    plain, compiled = cached_run(FAST, *SHORT).check(), cached_run(FAST, "--compile", *SHORT).check()
    assert_close_logs(compiled, plain, LOSSES + ["charts/episodic_return"], **TOL)


def test_optimized_script_learns_what_the_eager_one_learns(cached_run):
    eager, fast = cached_run(EAGER, *SHORT).check(), cached_run(FAST, *SHORT).check()
    assert_close_logs(fast, eager, LOSSES + ["charts/episodic_return"], **TOL)


@pytest.mark.parametrize("script", [EAGER, FAST])
def test_same_seed_same_numbers(script, cached_run, tmp_path):
    again = run_script(script, *SHORT, cwd=tmp_path).check()
    assert_identical_logs(cached_run(script, *SHORT).check(), again, LOSSES)


def reference_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """GAE from its definition, in float64: A_t = sum_k (gamma lam)^k delta_{t+k}, the sum and the
    bootstrap cut where an episode ends (dones[t + 1], or next_done after the last step)."""
    T, N = rewards.shape
    ends = np.concatenate([dones[1:], next_done[None]]).astype(bool)  # ends[t]: step t ends an episode
    next_values = np.concatenate([values[1:], next_value[None]])
    delta = rewards + gamma * next_values * (~ends) - values
    adv = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            for k in range(T - t):
                adv[t, n] += (gamma * lam) ** k * delta[t + k, n]
                if ends[t + k, n]:
                    break
    return adv


def gae_data(seed=0, T=40, N=3):
    """Hand-made rollout: random rewards and values, episodes ended by terminations and by
    truncations (CleanRL's PPO, like these scripts, treats both as done), one cut on the last step."""
    rng = np.random.default_rng(seed)
    rewards, values = rng.normal(size=(T, N)), rng.normal(size=(T, N))
    dones = np.zeros((T, N))
    dones[[3, 17, 18, 30], 0] = 1  # env 0: a termination, two steps in a row, a truncation
    dones[[10], 1] = 1  # env 1: one episode boundary
    next_value, next_done = rng.normal(size=N), np.array([0.0, 0.0, 1.0])  # env 2 ends on the last step
    return rewards, values, dones, next_value, next_done


@pytest.mark.parametrize("seed", [0, 1])
def test_gae_matches_its_definition(seed):
    rewards, values, dones, next_value, next_done = gae_data(seed)
    expected = reference_gae(rewards, values, dones, next_value, next_done, 0.99, 0.95)
    t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731

    eager = load_script(EAGER).compute_gae(t(rewards), t(values), t(dones), t(next_value)[None], t(next_done),
                                            0.99, 0.95)
    np.testing.assert_allclose(eager.numpy(), expected, rtol=1e-5, atol=1e-5)

    fast = load_script(FAST)
    delta, coef = fast.gae_deltas(t(rewards), t(values), t(dones), t(next_value)[None], t(next_done), 0.99, 0.95)
    for chunk in (fast.chunk_size(40), 8, 1):  # the scan gives the same answer whatever the chunk size
        advantages, carry = torch.empty_like(delta), torch.zeros_like(delta[0])
        for end in range(40, 0, -chunk):
            advantages[end - chunk:end], carry = fast.gae_chunk(delta[end - chunk:end], coef[end - chunk:end], carry)
        np.testing.assert_allclose(advantages.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert fast.chunk_size(2048) == 64 and fast.chunk_size(128) == 64 and fast.chunk_size(100) == 50


# InvertedPendulum-v4: a random policy balances for 6 steps on average (return 6.2, std 3.6; over 100
# groups of 5 episodes the best group mean was 11). The maximum is 1000 (the episode's time limit);
# a mean above 500 over the last 5 episodes means PPO learned to balance the pole.
LEARN = ("--env-id", "InvertedPendulum-v4", "--total-timesteps", "28672")
THRESHOLD = 500


@pytest.mark.slow
@pytest.mark.parametrize("config", [(EAGER,), (FAST, "--compile")], ids=" ".join)
def test_learns_inverted_pendulum(config, tmp_path):
    # the saved policy, played back with its mean action and the frozen training normalization, holds
    # the pole as the trained one did (a policy loaded wrong balances for a few steps, as a random one)
    learns_and_plays_back(config, LEARN, cwd=tmp_path, threshold=THRESHOLD)


def test_evaluation_freezes_the_observation_normalization():
    """evals.freeze_normalization loads the saved statistics into the NormalizeObservation wrapper and
    stops it updating them, however many steps are played (the wrapper's own flag; gymnasium's
    set_wrapper_attr would stop at NormalizeReward, which has a flag of the same name)."""
    module = load_script(EAGER)
    envs = module.make_envs(module.Args(env_id="Pendulum-v1"), "", num_envs=1)
    saved = {"mean": torch.tensor([0.5, -0.5, 1.0]), "var": torch.tensor([2.0, 3.0, 4.0]), "count": 123.0}
    evals.freeze_normalization(envs, saved)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(50):
        obs, *_ = envs.step(envs.action_space.sample())
    rms = envs.envs[0].get_wrapper_attr("obs_rms")
    assert rms.count == 123.0
    np.testing.assert_array_equal(rms.mean, saved["mean"].numpy())
    np.testing.assert_array_equal(rms.var, saved["var"].numpy())
    raw = envs.envs[0].unwrapped._get_obs()  # Pendulum: (cos, sin, angular velocity)
    expected = np.clip((raw - saved["mean"].numpy()) / np.sqrt(saved["var"].numpy() + 1e-8), -10, 10)
    np.testing.assert_allclose(obs[0], expected, rtol=1e-5)
