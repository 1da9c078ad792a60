"""The DQN pairs: every flag combination runs and logs, the optimized script's numbers match its eager
twin's (exploring, and greedy) and its own with --compile, a seed gives the same numbers twice, and
both CartPole scripts learn."""

import envpool
import numpy as np
import pytest
import torch
from helpers import assert_close_logs, assert_identical_logs, check_flag_run, flag_configs, learns_and_plays_back, load_script, run_script

EAGER, FAST = "dqn", "dqn_torchcompile"
# 1000 updates' worth of CartPole: 100 updates from step 500 (one every 10 steps), losses logged at
# every 100th step from 600 to 1400 (9 times), target copies every 200 steps, dozens of episodes
SHORT = ("--env-id", "CartPole-v1", "--total-timesteps", "1500", "--learning-starts", "500",
         "--target-network-frequency", "200", "--seed", "3")
GREEDY = SHORT + ("--start-e", "0", "--end-e", "0")
LOSSES = ["losses/td_loss", "losses/q_values", "charts/epsilon"]
CONFIGS = flag_configs(EAGER, FAST)


@pytest.mark.parametrize("config", CONFIGS, ids=" ".join)
def test_every_flag_combination_runs_and_logs(config, cached_run):
    run = cached_run(*config, *SHORT)
    check_flag_run(run, config, LOSSES, logs=9)
    assert len(run.values("charts/episodic_return")) > 20 and run.values("charts/warmup_time")


# Same batches, same ε-greedy draws (CartPole's: both scripts decide on the host), same formulas: the
# two scripts play the same games, and only the rounding differs (fused Adam, a fused target copy); over
# 100 updates every logged value agrees within 1e-4 relative. Exploring (ε near 1 in SHORT) checks the
# draws; greedy (ε = 0) checks the acting network. --compile draws the random numbers of no flag.
# The target copies (steps 600, 800, ..., 1400) feed the losses logged after them: a script of the pair whose
# target is never copied (in a copy of it: the eager loop's or the optimized lerp_ removed, or, for --compile,
# skipped under --compile only) logged td_loss 0.64 against 0.83 at step 700, and its games went another way.
TOL = dict(rtol=1e-4, atol=1e-6)


def test_compile_gives_the_numbers_of_no_compile(cached_run):
    plain, compiled = cached_run(FAST, *SHORT).check(), cached_run(FAST, "--compile", *SHORT).check()
    assert_close_logs(compiled, plain, LOSSES + ["charts/episodic_return"], **TOL)


@pytest.mark.parametrize("args", [SHORT, GREEDY], ids=["exploring", "greedy"])
def test_optimized_script_learns_what_the_eager_one_learns(args, cached_run):
    eager, fast = cached_run(EAGER, *args).check(), cached_run(FAST, *args).check()
    assert_close_logs(fast, eager, LOSSES + ["charts/episodic_return"], **TOL)


@pytest.mark.parametrize("script", [EAGER, FAST])
def test_same_seed_same_numbers(script, cached_run, tmp_path):
    again = run_script(script, *SHORT, cwd=tmp_path).check()
    assert_identical_logs(cached_run(script, *SHORT).check(), again, LOSSES + ["charts/episodic_return"])


# CartPole-v1: a random policy lasts 22 steps on average (std 12; over 100 groups of 50 episodes,
# at most 25.4 on average); after 25000 steps of learning, the episodes of the last 5000 steps last
# more than 75 steps on average (measured: 94 to 283 over 8 runs, seeds 1-4 of both scripts).
LEARN = ("--env-id", "CartPole-v1", "--total-timesteps", "30000", "--learning-starts", "5000")
THRESHOLD = 75
# the saved network, played back for 5 episodes: a random policy averages 22 +- 5 over 5 episodes; the
# final network of a DQN run wavers (measured 73 and more), so the bar is lower than training's
EVAL_THRESHOLD = 50


@pytest.mark.slow
@pytest.mark.parametrize("config", [(EAGER,), (FAST, "--compile")], ids=" ".join)
def test_learns_cartpole(config, tmp_path):
    # the episodes of the last 5000 steps; the saved network, played back ε-greedily (ε = 0.05), balances
    # the pole too
    learns_and_plays_back(config, LEARN, cwd=tmp_path, threshold=THRESHOLD, from_step=25000,
                          eval_threshold=EVAL_THRESHOLD)


ATARI_EAGER, ATARI_FAST = "dqn_atari_envpool", "dqn_atari_envpool_torchcompile"
# Breakout: 300 updates' worth of steps from step 400 (one every 4 steps), losses logged at every 100th
# step from 500 to 1100 (7 times), a 1000-slot buffer that wraps around, a few games
ATARI = ("--env-id", "Breakout-v5", "--total-timesteps", "1200", "--learning-starts", "400", "--buffer-size", "1000",
         "--target-network-frequency", "200", "--seed", "3")
ATARI_GREEDY = ATARI + ("--start-e", "0", "--end-e", "0")
ATARI_CONFIGS = flag_configs(ATARI_EAGER, ATARI_FAST)


@pytest.mark.parametrize("config", ATARI_CONFIGS, ids=" ".join)
def test_atari_every_flag_combination_runs_and_logs(config, cached_run):
    run = cached_run(*config, *ATARI)
    check_flag_run(run, config, LOSSES, logs=7)
    assert run.values("charts/episodic_return")


# The compiled convolutions and their fused epilogues round differently from eager's kernels, and how much
# depends on the CPU: exploring, the CI machine saw the losses apart by 35% at step 1000 (values near 1e-5)
# where this one saw them within 1e-4. As between the eager and the optimized script (below), the games
# must be the same, and the losses, greedy, within 1e-2.
def test_atari_compile_gives_the_numbers_of_no_compile(cached_run):
    plain = cached_run(ATARI_FAST, *ATARI_GREEDY).check()
    compiled = cached_run(ATARI_FAST, "--compile", *ATARI_GREEDY).check()
    assert_close_logs(compiled, plain, ["charts/episodic_return", "charts/episodic_length"], rtol=0, atol=0)
    assert_close_logs(compiled, plain, LOSSES, rtol=1e-2, atol=1e-6)


# The target copies (every 200 steps: 600, 800, 1000) feed the losses logged after them: either script with its
# target never copied (in a copy of it), or the optimized one with its copy skipped under --compile only, logged
# td_loss 5.0e-4 against 1.8e-4 at step 700, greedy, against its twin (here, and in the --compile test above).
# The optimized script runs its convolutions in the channels-last layout, whose kernels round
# differently: greedy, over 175 updates the Q-values drift apart by up to 1e-3 relative (the games are
# the same). Exploring (ε from 1 to 0.01 over the first 120 steps) the two scripts make the same ε-greedy
# draws on the host, so they play the same games; there the drift grew to 2% of the Q-values by step
# 1100 (measured, seed 3), so the losses are compared greedy only.
@pytest.mark.parametrize("args", [ATARI, ATARI_GREEDY], ids=["exploring", "greedy"])
def test_atari_optimized_script_learns_what_the_eager_one_learns(args, cached_run):
    eager, fast = cached_run(ATARI_EAGER, *args).check(), cached_run(ATARI_FAST, *args).check()
    games = ["charts/episodic_return", "charts/episodic_length", "charts/epsilon"]
    assert_close_logs(fast, eager, games, rtol=0, atol=0)
    if args == ATARI_GREEDY:
        assert_close_logs(fast, eager, LOSSES, rtol=1e-2, atol=1e-6)


@pytest.mark.parametrize("script", [ATARI_EAGER, ATARI_FAST])
def test_atari_same_seed_same_numbers(script, cached_run, tmp_path):
    again = run_script(script, *ATARI, cwd=tmp_path).check()
    assert_identical_logs(cached_run(script, *ATARI).check(), again, LOSSES + ["charts/episodic_return"])


@pytest.mark.parametrize("script", [ATARI_EAGER, ATARI_FAST])
def test_frame_buffer_returns_what_a_naive_buffer_returns(script):
    """Play Breakout at random (lost lives, finished games, games truncated at 150 steps) into a 128-slot
    frame buffer, wrapping around it five times, and record each transition with its full stacks as a
    naive buffer would. Every transition the frame buffer holds, and every one it samples, is exactly the
    naive one: its stacks never straddle a game boundary or the write head; it holds no reset step; and
    it holds every transition whose frames are still there."""
    module, capacity, steps = load_script(script), 128, 700
    envs = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=1, episodic_life=True, reward_clip=True,
                        seed=3, max_episode_steps=150)
    rb = module.ReplayBuffer(capacity, (84, 84), torch.device("cpu"), seed=0)
    obs, info = envs.reset()
    rb.start(obs, info)
    naive, obs_done, rng, ends = [], False, np.random.default_rng(0), {"life": 0, "game": 0, "truncated": 0}
    for _ in range(steps):
        action = rng.integers(0, envs.single_action_space.n, size=1)
        next_obs, reward, terminated, truncated, info = envs.step(action)
        rb.add(action[0], reward[0], terminated[0], truncated[0], next_obs, info)
        # (observation, action, reward, next observation, done); None for envpool's reset steps
        naive.append(None if obs_done else (obs[0], int(action[0]), float(reward[0]), next_obs[0], float(terminated[0])))
        ends["truncated" if truncated[0] else "game" if info["lives"][0] == 0 else "life"] += bool(terminated[0] or truncated[0])
        obs_done, obs = bool(terminated[0] or truncated[0]), next_obs
    assert min(ends.values()) >= 2, ends  # the trace holds every kind of end

    def held(slots):
        slots = torch.as_tensor(slots)
        return list(zip(rb.stacks(slots).cpu().numpy(), rb.actions[slots].tolist(), rb.rewards[slots].tolist(),
                        rb.stacks((slots + 1) % capacity).cpu().numpy(), rb.dones[slots].tolist()))

    # slot s % capacity holds step s's observation; the last 128 observations are steps 573..700
    valid = [s for s in range(steps - capacity + 1, steps + 1) if rb.valid[s % capacity]]
    assert all(naive[s] is not None for s in valid), "a reset step is held as a transition"
    full_history = [s for s in range(steps - capacity + 4, steps) if naive[s] is not None]
    assert set(full_history) <= set(valid), "a transition whose frames are all there is missing"
    for s, got in zip(valid, held([s % capacity for s in valid])):
        assert_same_transition(got, naive[s])
    batch = rb.sample(256)
    batch = batch if hasattr(batch, "keys") else vars(batch)  # a TensorDict, or the eager script's namespace
    keys = ("observations", "actions", "rewards", "next_observations", "dones")
    in_window = {naive[s][0].tobytes() + naive[s][3].tobytes() + bytes([naive[s][1]]): naive[s] for s in valid}
    for i in range(256):
        got = tuple(batch[k][i] for k in keys)
        key = got[0].cpu().numpy().tobytes() + got[3].cpu().numpy().tobytes() + bytes([int(got[1])])
        assert key in in_window, "a sampled transition is not one of the buffer's"
        assert_same_transition((got[0].cpu().numpy(), int(got[1]), float(got[2]), got[3].cpu().numpy(), float(got[4])),
                               in_window[key])


def assert_same_transition(got, expected):
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[3], expected[3])
    assert got[1:3] + got[4:] == expected[1:3] + expected[4:]


@pytest.mark.parametrize("script", [ATARI_EAGER, ATARI_FAST])
def test_the_default_buffer_fits_in_8_gb(script):
    """A slot holds one 84x84 frame and 25 bytes of bookkeeping: the default 1M slots take 7.1 GB (a naive
    buffer of stacked observations and next observations: 56 GB)."""
    module = load_script(script)
    rb = module.ReplayBuffer(1000, (84, 84), torch.device("cpu"), seed=0)
    per_slot = sum(t.element_size() * t[0].numel() for t in vars(rb).values() if isinstance(t, torch.Tensor))
    assert per_slot == 84 * 84 + 25
    assert module.Args().buffer_size * per_slot < 7.1e9
