"""The DQN pairs: every flag combination runs and logs, the optimized script's numbers match its eager
twin's (exploring, and greedy) and its own with --compile, a seed gives the same numbers twice, and
both CartPole scripts learn."""

import pytest
import torch
from helpers import DQN_ATARI as ATARI, DQN_ATARI_GREEDY as ATARI_GREEDY, DQN_EVAL_THRESHOLD as EVAL_THRESHOLD, \
    DQN_GREEDY as GREEDY, DQN_LEARN as LEARN, DQN_LOSSES as LOSSES, DQN_SHORT as SHORT, DQN_THRESHOLD as THRESHOLD, \
    assert_as_measured, assert_close_logs, assert_frame_buffer_returns_what_a_naive_buffer_returns, \
    assert_same_numbers_twice, check_flag_run, flag_configs, learns_and_plays_back, load_script, tier

EAGER, FAST = "dqn", "dqn_torchcompile"
CONFIGS = flag_configs(EAGER, FAST)


@pytest.mark.parametrize("config", [pytest.param(c, marks=tier(c), id=" ".join(c)) for c in CONFIGS])
def test_every_flag_combination_runs_and_logs(config, cached_run):
    run = cached_run(*config, *SHORT)
    check_flag_run(run, config, LOSSES, logs=9)
    assert len(run.values("charts/episodic_return")) > 20 and run.values("charts/warmup_time")


# Same batches, same ε-greedy draws (CartPole's: both scripts decide on the host), same formulas: the
# two scripts play the same games, and only the rounding differs (fused Adam, a fused target copy); the first
# updates (to step 700) agree within 10 times the rounding measured there, the whole run within 1e-4
# (tests/tolerances.md). Exploring (ε near 1 in SHORT) checks the draws; greedy (ε = 0) checks the acting
# network. --compile draws the random numbers of no flag.
# The target copies (steps 600, 800, ..., 1400) feed the losses logged after them: a script of the pair whose
# target is never copied (in a copy of it: the eager loop's or the optimized lerp_ removed, or, for --compile,
# skipped under --compile only) logged td_loss 0.64 against 0.83 at step 700, and its games went another way.
def test_compile_gives_the_numbers_of_no_compile(cached_run):
    plain, compiled = cached_run(FAST, *SHORT).check(), cached_run(FAST, "--compile", *SHORT).check()
    assert_as_measured(compiled, plain, "dqn compile")


@pytest.mark.parametrize("args", [SHORT, GREEDY], ids=["exploring", "greedy"])
def test_optimized_script_learns_what_the_eager_one_learns(args, cached_run):
    eager, fast = cached_run(EAGER, *args).check(), cached_run(FAST, *args).check()
    assert_as_measured(fast, eager, "dqn twin" + (" greedy" if args == GREEDY else ""))


@pytest.mark.parametrize("script", [EAGER, FAST])
def test_same_seed_same_numbers(script, cached_run):
    assert_same_numbers_twice(cached_run, script, SHORT, LOSSES + ["charts/episodic_return"])


@pytest.mark.slow
@pytest.mark.parametrize("config", [(EAGER,), (FAST, "--compile")], ids=" ".join)
def test_learns_cartpole(config, tmp_path):
    # the episodes of the last 5000 steps; the saved network, played back ε-greedily (ε = 0.05), balances
    # the pole too
    learns_and_plays_back(config, LEARN, cwd=tmp_path, threshold=THRESHOLD, from_step=25000,
                          eval_threshold=EVAL_THRESHOLD)


ATARI_EAGER, ATARI_FAST = "dqn_atari_envpool", "dqn_atari_envpool_torchcompile"
ATARI_CONFIGS = flag_configs(ATARI_EAGER, ATARI_FAST)


@pytest.mark.parametrize("config", [pytest.param(c, marks=tier(c), id=" ".join(c)) for c in ATARI_CONFIGS])
def test_atari_every_flag_combination_runs_and_logs(config, cached_run):
    run = cached_run(*config, *ATARI)
    check_flag_run(run, config, LOSSES, logs=7)
    assert run.values("charts/episodic_return")


# The compiled convolutions and their fused epilogues round differently from eager's kernels, and how much
# depends on the CPU: exploring, the CI machine saw the losses apart by 35% at step 1000 (values near 1e-5)
# where this one saw them within 1e-4. As between the eager and the optimized script (below), the games
# must be the same, and the losses, greedy, within 10 times the rounding measured with native and AVX2 kernels.
def test_atari_compile_gives_the_numbers_of_no_compile(cached_run):
    plain = cached_run(ATARI_FAST, *ATARI_GREEDY).check()
    compiled = cached_run(ATARI_FAST, "--compile", *ATARI_GREEDY).check()
    assert_close_logs(compiled, plain, ["charts/episodic_return", "charts/episodic_length"], rtol=0, atol=0)
    assert_as_measured(compiled, plain, "dqn_atari compile greedy")


# The target copies (every 200 steps: 600, 800, 1000) feed the losses logged after them: either script with its
# target never copied (in a copy of it), or the optimized one with its copy skipped under --compile only, logged
# td_loss 5.0e-4 against 1.8e-4 at step 700, greedy, against its twin (here, and in the --compile test above).
# The optimized script runs its convolutions in the channels-last layout, whose kernels round differently:
# greedy, the first updates within 10 times the rounding measured (tests/tolerances.md), the games the same.
# Exploring (ε from 1 to 0.01 over the first 120 steps) the two scripts make the same ε-greedy draws on the host,
# so they play the same games; there the drift grew to 2% of the Q-values by step 1100 (measured, seed 3), so the
# losses are compared greedy only.
@pytest.mark.parametrize("args", [ATARI, ATARI_GREEDY], ids=["exploring", "greedy"])
def test_atari_optimized_script_learns_what_the_eager_one_learns(args, cached_run):
    eager, fast = cached_run(ATARI_EAGER, *args).check(), cached_run(ATARI_FAST, *args).check()
    games = ["charts/episodic_return", "charts/episodic_length", "charts/epsilon"]
    assert_close_logs(fast, eager, games, rtol=0, atol=0)
    if args == ATARI_GREEDY:
        assert_as_measured(fast, eager, "dqn_atari twin greedy")


@pytest.mark.parametrize("script", [ATARI_EAGER, ATARI_FAST])
def test_atari_same_seed_same_numbers(script, cached_run):
    assert_same_numbers_twice(cached_run, script, ATARI, LOSSES + ["charts/episodic_return"])


@pytest.mark.parametrize("script", [ATARI_EAGER, ATARI_FAST])
def test_frame_buffer_returns_what_a_naive_buffer_returns(script):
    """Breakout played at random into a 128-slot frame buffer, wrapped five times: every transition it holds,
    and every one it samples, is exactly a naive buffer's (helpers.py's check, which the JAX twin's buffer
    passes too)."""
    assert_frame_buffer_returns_what_a_naive_buffer_returns(load_script(script).ReplayBuffer)


@pytest.mark.parametrize("script", [ATARI_EAGER, ATARI_FAST])
def test_the_default_buffer_fits_in_8_gb(script):
    """A slot holds one 84x84 frame and 25 bytes of bookkeeping: the default 1M slots take 7.1 GB (a naive
    buffer of stacked observations and next observations: 56 GB)."""
    module = load_script(script)
    rb = module.ReplayBuffer(1000, (84, 84), torch.device("cpu"), seed=0)
    per_slot = sum(t.element_size() * t[0].numel() for t in vars(rb).values() if isinstance(t, torch.Tensor))
    assert per_slot == 84 * 84 + 25
    assert module.Args().buffer_size * per_slot < 7.1e9
