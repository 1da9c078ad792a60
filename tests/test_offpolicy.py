"""The off-policy pairs (SAC, TD3): every flag combination runs and logs, the optimized script's
numbers match its eager twin's and its own with --compile, a seed gives the same numbers twice,
and both scripts of each pair learn Pendulum."""

import numpy as np
import pytest
import torch
from helpers import OFF_POLICY_LEARN as LEARN, OFF_POLICY_SHORT as SHORT, OFF_POLICY_TAGS as TAGS, \
    OFF_POLICY_THRESHOLD as THRESHOLD, Run, assert_as_measured, assert_close_logs, assert_identical_logs, \
    assert_same_numbers_twice, check_flag_run, flag_configs, learns_and_plays_back, load_script, \
    off_policy_eager as eager, off_policy_fast as fast, register_inverted_pendulum_short, tier

CONFIGS = [(pair, config) for pair in TAGS for config in flag_configs(eager(pair), fast(pair))]


@pytest.mark.parametrize("pair,config", [pytest.param(p, c, marks=tier(c), id=" ".join(c)) for p, c in CONFIGS])
def test_every_flag_combination_runs_and_logs(pair, config, cached_run):
    run = cached_run(*config, *SHORT)
    check_flag_run(run, config, TAGS[pair] + ["charts/episodic_return"], logs=3)
    assert run.values("charts/warmup_time")


# The runs compared start from the same weights and draw the same random numbers; float rounding
# differs (fused kernels, batched matmuls, lerp), and training amplifies it. The first 100 updates (to step 300)
# agree within 10 times the rounding measured there; the 400 updates draw the same curve, within 5% or 10 times the
# largest rounding measured, the looser (tests/tolerances.md). TD3's twin with its smoothing noise clipped at twice
# --noise-clip moved its losses by 2e-5 relative by step 300, where the rounding measured is at most 4e-7.
# The target networks move at every update (SAC) or with every actor step (TD3), by tau = 0.005 of the way, and
# the Q-values logged at step 300 already depend on it: a script of the pair whose targets never move (its
# target update removed in a copy: the eager script's, or the optimized script's lerp) logged its qf1_values
# there 27% (SAC: -6.17 against -8.48) and 10% (TD3: -7.08 against -7.87) away from its twin's; and the
# optimized script's --compile, with its target lerp left out of the compiled update only, from no flag's.
@pytest.mark.parametrize("pair", TAGS)
def test_compile_gives_the_numbers_of_no_compile(pair, cached_run):
    plain, compiled = cached_run(fast(pair), *SHORT).check(), cached_run(fast(pair), "--compile", *SHORT).check()
    assert_as_measured(compiled, plain, f"{pair} compile")


@pytest.mark.parametrize("pair", TAGS)
def test_optimized_script_learns_what_the_eager_one_learns(pair, cached_run):
    slow, quick = cached_run(eager(pair), *SHORT).check(), cached_run(fast(pair), *SHORT).check()
    assert_as_measured(quick, slow, f"{pair} twin")
    assert_close_logs(quick, slow, ["charts/episodic_return"], rtol=0, atol=0, upto_step=200)  # random actions


@pytest.mark.parametrize("script", [s for pair in TAGS for s in (eager(pair), fast(pair))])
def test_same_seed_same_numbers(script, cached_run):
    pair = script.split("_")[0]
    assert_same_numbers_twice(cached_run, script, SHORT, TAGS[pair] + ["charts/episodic_return"])


def test_identical_logs_needs_something_logged(tmp_path):
    """The same-seed tests' helper: two runs that logged nothing, or only their start and timings, or
    not a tag the caller names, do not pass as identical."""
    def run(scalars):
        return Run(0, "", "", tmp_path, _scalars=scalars)

    timings = {"charts/start": [(0, 0.0)], "charts/SPS": [(300, 1.0)], "charts/warmup_time": [(300, 2.0)]}
    losses = timings | {"losses/qf_loss": [(300, 0.5)]}
    for a, b, tags in [({}, {}, []), (timings, timings, []), (losses, losses, ["charts/episodic_return"])]:
        with pytest.raises(AssertionError):
            assert_identical_logs(run(a), run(b), tags)
    assert_identical_logs(run(losses), run(losses | {"charts/SPS": [(300, 3.0)]}), ["losses/qf_loss"])


@pytest.mark.slow
@pytest.mark.parametrize("pair,config", [(p, c) for p in TAGS for c in [(eager(p),), (fast(p), "--compile")]],
                         ids=lambda x: " ".join(x) if isinstance(x, tuple) else x)
def test_learns_pendulum(pair, config, tmp_path):
    # the saved policy, played back (SAC: its mean action; TD3: with its exploration noise), swings the
    # pendulum up as the trained one did (a policy loaded wrong scores as a random one, about -1256)
    learns_and_plays_back(config, LEARN[pair], cwd=tmp_path, threshold=THRESHOLD)


register_inverted_pendulum_short()  # InvertedPendulumShort-v4: both ends within 7 steps


@pytest.mark.parametrize("script", [s for pair in TAGS for s in (eager(pair), fast(pair))])
def test_buffer_cuts_the_bootstrap_at_terminations_only(script, tmp_path, monkeypatch):
    """Run the script in this process on a task with terminations and truncations, then read its replay
    buffer: a stored `done` marks a termination (the pole fell), never a truncation, and a truncated
    episode's last transition keeps its true last observation (not the next episode's first)."""
    module, buffers = load_script(script), []

    class Recorded(module.ReplayBuffer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            buffers.append(self)

    monkeypatch.setattr(module, "ReplayBuffer", Recorded)
    monkeypatch.chdir(tmp_path)
    module.main(module.Args(env_id="InvertedPendulumShort-v4", total_timesteps=300, learning_starts=250, seed=4))
    rb = buffers[0]
    if hasattr(rb, "flush"):  # the optimized scripts stage rows on the host: they reach the rows first
        rb.flush()
    data = rb.batch(torch.arange(300))  # both scripts' buffers: one tensor of rows, read through their gather
    fell = data["next_observations"][:, 1].abs() > 0.2
    assert data["dones"].flatten().bool().tolist() == fell.tolist()
    continues = (data["next_observations"][:-1] == data["observations"][1:]).all(1)
    ends = ~continues
    truncated = ends & ~fell[:-1]
    assert fell.sum() >= 5 and truncated.sum() >= 5, (fell.sum(), truncated.sum())
    assert (data["observations"][1:][truncated].abs().max(1).values <= 0.01).all()  # a reset state follows


@pytest.mark.parametrize("script", [s for pair in TAGS for s in (eager(pair), fast(pair))])
def test_a_batch_holds_written_transitions_only(script):
    """Each script's buffer, filled by hand (transition i has reward i + 1), drawn from many times: a batch holds the
    transitions written and no other row (never the zeros of a row not written yet: the write head's), all of them in
    time, and after the buffer wraps around, only the newest `size` ones."""
    module = load_script(script)
    rb = module.ReplayBuffer(20, 1, 1, torch.device("cpu"))

    def drawn(n: int = 4000) -> set[int]:
        idx = rb.sample_indices(n) if hasattr(rb, "sample_indices") else None
        data = rb.batch(idx) if idx is not None else rb.sample(n)
        return set(data["rewards"].flatten().round().int().tolist())

    for i in range(30):
        rb.add(np.zeros(1), np.zeros(1), np.zeros(1), i + 1.0, 0.0)
        if i == 6:
            assert drawn() == set(range(1, 8))
    assert drawn() == set(range(11, 31))
