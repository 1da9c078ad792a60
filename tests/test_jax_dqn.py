"""The JAX twins of the DQN pairs (dqn_jax, dqn_atari_envpool_jax): their short runs log what the eager
scripts log, a seed gives the same numbers twice, the CartPole twin learns as dqn.py does, the Atari twin
learns 30k steps of Seaquest, and from the eager script's own initial weights and first four batches the twin
plays the same actions and, past two soft target updates, computes the same loss and the same updated weights.
The frame buffer of the Atari twin is checked against a naive buffer on test_dqn's Breakout trace, and the
checkpoints convert both ways."""

import copy
import glob
import math
import shlex

import gymnasium as gym
import numpy as np
import pytest
import torch
import tyro
from helpers import assert_same_numbers_twice, check_flag_run, learns_and_plays_back, load_script, Run, with_flag

jax = pytest.importorskip("jax", reason="the JAX twins need the JAX extra (requirements/requirements-all.txt)")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import io_callback  # noqa: E402
# the pairs' short runs, thresholds and frame-buffer check, as test_dqn.py runs them: shared, not copied
from helpers import (DQN_ATARI as ATARI, DQN_ATARI_GREEDY as ATARI_GREEDY, DQN_EVAL_THRESHOLD as EVAL_THRESHOLD,  # noqa: E402
                     DQN_GREEDY as GREEDY, DQN_LEARN as LEARN, DQN_LOSSES as LOSSES, DQN_SHORT as SHORT,
                     DQN_THRESHOLD as THRESHOLD, assert_frame_buffer_returns_what_a_naive_buffer_returns)

from leanrl_utils import evals  # noqa: E402
from leanrl_utils.presets import load as load_preset  # noqa: E402

EAGER_OF = {"dqn_jax": "dqn", "dqn_atari_envpool_jax": "dqn_atari_envpool"}
# each twin's short run, as test_dqn runs its pair: CartPole logs its losses 9 times, Breakout 7 times
SHORT_RUNS = {"dqn_jax": (SHORT, 9), "dqn_atari_envpool_jax": (ATARI, 7)}
TIMINGS = ("charts/SPS", "charts/warmup_time")


@pytest.mark.parametrize("twin", EAGER_OF)
def test_short_run_logs_what_the_eager_script_logs(twin, cached_run):
    """Every tag the eager script logs, the same number of times at the same steps (the losses, ε, fps, the
    warm-up, the run's start); episodes at every game's end."""
    args, logs = SHORT_RUNS[twin]
    run, eager = cached_run(twin, *args), cached_run(EAGER_OF[twin], *args).check()
    check_flag_run(run, (twin,), LOSSES, logs=logs)
    assert sorted(run.scalars) == sorted(eager.scalars)
    for tag in LOSSES + list(TIMINGS) + ["charts/start"]:
        assert [s for s, _ in run.scalars[tag]] == [s for s, _ in eager.scalars[tag]], tag
    assert len(run.values("charts/episodic_return")) == len(run.values("charts/episodic_length")) > 0
    if twin == "dqn_jax":
        assert len(run.values("charts/episodic_return")) > 20


@pytest.mark.parametrize("twin", EAGER_OF)
def test_same_seed_same_numbers(twin, cached_run):
    assert_same_numbers_twice(cached_run, twin, SHORT_RUNS[twin][0], LOSSES + ["charts/episodic_return"])


@pytest.mark.slow
def test_learns_cartpole(tmp_path):
    """test_dqn's learning test, run on the twin: the same budget, thresholds and evaluation."""
    # the saved network is a torch checkpoint converted from the flax params; the run plays the flax params back
    learns_and_plays_back(("dqn_jax",), LEARN, cwd=tmp_path, threshold=THRESHOLD, from_step=25000,
                          eval_threshold=EVAL_THRESHOLD)


# DQN Atari at its defaults (CleanRL's) starts learning at step 80k and needs millions of steps. A small
# task for one core, the `cpu` preset's (leanrl_utils/presets.json, read here so that the two stay one):
# 30k steps of Seaquest, learning from step 1000 (one update every 4 steps, as by default), ε decayed
# over the first 9000 steps, a buffer that holds the whole run. A random policy scores 68.5 a game
# (test_jax_ppo's Seaquest comment has its spread); the twin's seeds 1-4 averaged 187, 275, 164 and 324
# over the games that ended in the second half (13 to 20 of them), the same run with a learning rate of
# 1e-9 84. The saved network is played back, but its score is no check of learning: at this budget the
# greedy policy changes much from one update to the next, and the last one, played over 10 games
# (ε = 0.05), scored 226, 322, 106 and 82 for seeds 1-4 where the untrained network scored 106 (the
# conversion of the checkpoint is test_checkpoint_conversion_plays_as_the_flax_network's). These runs'
# outputs and commands: docs/learning/seaquest_checks/.
ATARI_TASK = load_preset("cpu")["pairs"]["dqn_atari"]  # its args, and its threshold: 120
ATARI_LEARN = shlex.split(ATARI_TASK["args"])
ATARI_HALF = int(ATARI_LEARN[ATARI_LEARN.index("--total-timesteps") + 1]) // 2


@pytest.mark.slow
def test_atari_learns_seaquest(tmp_path):
    """The games that end in the second half average above the preset's threshold; the saved network
    loads and plays 2 games back (unscored: see above)."""
    # (its checkpoint's conversion is checked against the flax network by test_checkpoint_conversion_plays_...)
    learns_and_plays_back(("dqn_atari_envpool_jax",), ATARI_LEARN, cwd=tmp_path, threshold=ATARI_TASK["threshold"],
                          from_step=ATARI_HALF, eval_threshold=-math.inf, eval_episodes=2, reload=False)


# The cross-framework check. The eager script's main() runs in this process over its first four updates, with
# hooks that record its initial weights (its QNetwork, subclassed), its batches' draws (torch.randint with the
# buffer's generator), the actions it plays (a wrapper on its env) and the checkpoint after the last update
# (--save-model; the evaluation is stubbed out). The twin's main() then runs the same steps with its flax params
# loaded from those weights (its `from_torch_state_dict`) and its batch draw (jax.random.randint, inside its
# jitted update) replaced by the eager script's draws, in order (an ordered io_callback: a value patched in at
# trace time would be one draw for every call). ε-greedy draws come from the same host generators in both, so
# they play the same games: greedy (ε = 0) every action comes from the network.
# Compared: every observation and action, the initial Q-values on those observations, the logged td_loss and
# q_values, and every weight after the fourth Adam step.
# The four updates (CartPole: steps 570 to 600, one every 10; Breakout: 488 to 500, one every 4) pass two soft
# target updates (--tau 0.3) before the last one, which falls on a logging step, and the buffer wraps around
# before it: one made inside the jitted update, after its loss (CartPole: step 570; Breakout: 492), one on a
# step without an update, made by main()'s own call (585; 498). The logged loss is computed against the target
# that both made, and the last weights follow from it: a twin whose target is never updated, or updated on the
# wrong steps (at every update, say), or copied whole instead of averaged (tau ignored), computes another loss
# and other weights. Not tau 0.5: that average is symmetric, and its two arguments swapped would pass.
TARGET_TAU = "0.3"


def first_updates(args, learning_starts, target_frequency):
    """`args` cut to the first four updates after `learning_starts` (the last on step `learning_starts` + 31,
    CartPole's, or + 13, Breakout's), with target updates every `target_frequency` steps."""
    train_frequency = 10 if "CartPole-v1" in args else 4
    args = with_flag(list(args), "--total-timesteps", str(learning_starts + 1 + 3 * train_frequency + 1))
    for flag, value in (("--learning-starts", learning_starts), ("--buffer-size", 256),
                        ("--target-network-frequency", target_frequency), ("--tau", TARGET_TAU)):
        args = with_flag(args, flag, str(value))
    return tuple(args)


FIRST_UPDATES = {
    "dqn_jax": [first_updates(SHORT, 569, 15), first_updates(GREEDY, 569, 15)],
    "dqn_atari_envpool_jax": [first_updates(ATARI, 487, 6), first_updates(ATARI_GREEDY, 487, 6)],
}
UPDATES = 4
# Measured (seed 3, on a 2-core Intel CPU): twin and eager agree on the logged td_loss within 1e-5 relative
# (Breakout's is near 3e-5, a mean of squares of differences of near-equal values: 9.8e-6 apart), on q_values
# within 2.3e-7 (CartPole's mean is near -0.01: an absolute tolerance), on the weights within 1.4e-7. The twin
# broken each way named above, in a copy (no sync inside the update, none on a step without one, neither, tau
# ignored, a sync at every update), moved the loss by 0.45% (CartPole) and 2.7% (Breakout) or more, and a weight
# by 1e-5 or more: the tolerances sit between.
LOSS_TOLERANCE = {"losses/td_loss": dict(rtol=1e-4), "losses/q_values": dict(rtol=1e-5, atol=1e-6)}


class RecordSteps(gym.Wrapper):
    """Records the observation each action was taken from, and the action (CartPole: one gymnasium env)."""

    def __init__(self, env, steps: list):
        super().__init__(env)
        self.steps, self.obs = steps, None

    def reset(self, **kwargs):
        self.obs, info = self.env.reset(**kwargs)
        return self.obs, info

    def step(self, action):
        self.steps.append((np.array(self.obs), int(action)))
        out = self.env.step(action)
        self.obs = out[0]
        return out


class RecordEnvpool:
    """The same for envpool's vector env (one env), passed through attribute by attribute."""

    def __init__(self, envs, steps: list):
        self.envs, self.steps, self.obs = envs, steps, None

    def __getattr__(self, name):
        return getattr(self.envs, name)

    def reset(self, *args, **kwargs):
        self.obs, info = self.envs.reset(*args, **kwargs)
        return self.obs, info

    def step(self, actions):
        self.steps.append((np.array(self.obs[0]), int(actions[0])))
        out = self.envs.step(actions)
        self.obs = out[0]
        return out


def record_steps(monkeypatch, module, twin: str) -> list:
    """Patch `module`'s env factory so that the first env made records its steps; returns the record."""
    steps, made = [], []
    name, wrapper = ("make_env", RecordSteps) if twin == "dqn_jax" else ("make_envs", RecordEnvpool)
    make = getattr(module, name)

    def make_recorded(*args, **kwargs):
        made.append(wrapper(make(*args, **kwargs), steps if not made else []))
        return made[-1]

    monkeypatch.setattr(module, name, make_recorded)
    return steps


def run_main(module, args, cwd) -> tuple[Run, dict]:
    """`module.main` on the command line `args`, in `cwd`: its logs and its checkpoint."""
    module.main(tyro.cli(module.Args, args=list(args)))
    run = Run(0, "", "", cwd)
    return run, torch.load(glob.glob(str(run.run_dir / "*.pt"))[0], weights_only=True)["q_network"]


@pytest.mark.parametrize("twin,args", [(t, a) for t, runs in FIRST_UPDATES.items() for a in runs],
                         ids=["cartpole-exploring", "cartpole-greedy", "atari-exploring", "atari-greedy"])
def test_first_updates_match_the_eager_script(twin, args, monkeypatch, tmp_path):
    args = args + ("--save-model",)
    eager, jax_twin = load_script(EAGER_OF[twin]), load_script(twin)
    monkeypatch.setattr(evals, "play", lambda *a, **k: [])  # the checkpoints are compared, not played
    recorded = {"draws": []}

    class RecordingQNetwork(eager.QNetwork):
        def __init__(self, env):
            super().__init__(env)
            recorded.setdefault("initial", copy.deepcopy(self.state_dict()))
            recorded.setdefault("network", self)

    randint = torch.randint

    def recording_randint(*a, **k):
        out = randint(*a, **k)
        if "generator" in k:  # the replay buffer's draw
            recorded["draws"].append(out.numpy().copy())
        return out

    monkeypatch.setattr(eager, "QNetwork", RecordingQNetwork)
    monkeypatch.setattr(torch, "randint", recording_randint)
    eager_steps = record_steps(monkeypatch, eager, twin)
    (tmp_path / "eager").mkdir()
    monkeypatch.chdir(tmp_path / "eager")
    eager_run, eager_weights = run_main(eager, args, tmp_path / "eager")
    monkeypatch.setattr(torch, "randint", randint)
    assert len(recorded["draws"]) == UPDATES

    params = jax_twin.from_torch_state_dict(recorded["initial"])
    # a copy per call: the twin donates its params to the update, which deletes the arrays handed in
    monkeypatch.setattr(jax_twin.QNetwork, "init", lambda self, *a, **k: jax.tree.map(jnp.copy, params))
    draws = iter(recorded["draws"])

    def eager_draw(key, shape, *a, **k):  # called when the update is traced; the callback, at each call
        next_draw = lambda: np.asarray(next(draws), np.int32).reshape(shape)  # noqa: E731
        return io_callback(next_draw, jax.ShapeDtypeStruct(shape, jnp.int32), ordered=True)

    monkeypatch.setattr(jax.random, "randint", eager_draw)
    twin_steps = record_steps(monkeypatch, jax_twin, twin)
    (tmp_path / "twin").mkdir()
    monkeypatch.chdir(tmp_path / "twin")
    twin_run, twin_weights = run_main(jax_twin, args, tmp_path / "twin")
    assert next(draws, None) is None  # every draw used, one per update

    # the same games: every observation and action (greedy: every action from the network, the updated one after
    # each update)
    assert len(twin_steps) == len(eager_steps) == int(args[args.index("--total-timesteps") + 1])
    for (twin_obs, twin_action), (eager_obs, eager_action) in zip(twin_steps, eager_steps):
        np.testing.assert_array_equal(twin_obs, eager_obs)
        assert twin_action == eager_action
    # the Q-values on those observations, from the same initial weights (Breakout's initial network prefers one
    # action on every frame: equal actions alone would say little there)
    observations = np.stack([obs for obs, _ in eager_steps])
    eager_network = copy.deepcopy(recorded["network"])
    eager_network.load_state_dict(recorded["initial"])
    with torch.no_grad():
        expected = eager_network(torch.as_tensor(observations)).numpy()
    q_values = np.asarray(jax_twin.QNetwork(expected.shape[1]).apply(params, observations))
    np.testing.assert_allclose(q_values, expected, rtol=1e-4, atol=1e-6)
    # the logged loss (the fourth update's, against the target of the two soft updates before it), within float32
    # rounding (sums in another order)
    for tag, tolerance in LOSS_TOLERANCE.items():
        (step, value), = twin_run.scalars[tag]
        assert [step] == [s for s, _ in eager_run.scalars[tag]]
        np.testing.assert_allclose(value, eager_run.scalars[tag][0][1], err_msg=tag, **tolerance)
    # the weights after the fourth Adam step (each moved by about four learning rates), saved in torch's layout
    assert twin_weights.keys() == eager_weights.keys()
    for key, weight in eager_weights.items():
        np.testing.assert_allclose(twin_weights[key].numpy(), weight.numpy(), rtol=0, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("twin", EAGER_OF)
def test_checkpoint_conversion_plays_as_the_flax_network(twin):
    """The flax params, converted to the eager script's state_dict, load into its QNetwork: the same Q-values
    and greedy actions on the same observations (CartPole: random states; Atari: random uint8 frames, which
    catch a wrong flatten order); and the conversion back gives the params again."""
    eager, jax_twin = load_script(EAGER_OF[twin]), load_script(twin)
    rng = np.random.default_rng(0)
    if twin == "dqn_jax":
        env, obs = eager.make_env("CartPole-v1", seed=0), rng.normal(size=(64, 4)).astype(np.float32)
        network, torch_obs = jax_twin.QNetwork(env.action_space.n), torch.as_tensor(obs)
    else:
        env = eager.make_envs(eager.Args(env_id="Breakout-v5"))
        obs = rng.integers(0, 256, size=(64, 4, 84, 84), dtype=np.uint8)
        network, torch_obs = jax_twin.QNetwork(env.single_action_space.n), torch.as_tensor(obs)
    params = network.init(jax.random.key(0), obs[:1])
    torch_network = eager.QNetwork(env)
    torch_network.load_state_dict(jax_twin.to_torch_state_dict(params))  # strict: the same names and shapes
    with torch.no_grad():
        expected = torch_network(torch_obs).numpy()
    q_values = np.asarray(network.apply(params, obs))
    np.testing.assert_allclose(q_values, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(q_values.argmax(1), expected.argmax(1))
    back = jax_twin.from_torch_state_dict(torch_network.state_dict())
    jax.tree.map(np.testing.assert_array_equal, back, params)


def test_initial_weights_are_torch_defaults():
    """Each layer's weights and biases lie in torch's U(-1/sqrt(fan_in), 1/sqrt(fan_in)) and, where they are
    many, fill it (the largest draw is near the bound), as the eager networks' do."""
    for twin, obs in (("dqn_jax", np.zeros((1, 4), np.float32)),
                      ("dqn_atari_envpool_jax", np.zeros((1, 4, 84, 84), np.uint8))):
        jax_twin = load_script(twin)
        state_dict = jax_twin.to_torch_state_dict(jax_twin.QNetwork(2).init(jax.random.key(1), obs))
        for key, value in state_dict.items():
            weight = state_dict[key.replace(".bias", ".weight")]
            bound = 1 / np.sqrt(weight[0].numel())
            assert value.abs().max() <= bound, (twin, key)
            assert value.numel() < 100 or value.abs().max() > 0.9 * bound, (twin, key)


def test_cartpole_buffer_writes_staged_steps_in_order():
    """Steps staged in chunks of any length up to `train_frequency` (the run's first chunk holds one step)
    land in the slots a step-by-step circular buffer would give them, wrap-around included; a batch holds
    only written transitions."""
    jax_twin = load_script("dqn_jax")
    size, rows, rng = 8, 10, np.random.default_rng(0)  # a chunk may hold more steps than the buffer
    rb, staged, naive = jax_twin.ReplayBuffer.create(size, 4), jax_twin.StagedSteps(rows, 4), []
    write = jax.jit(jax_twin.write, donate_argnums=0)
    for chunk in (1, 10, 3, 10, 7, 10):
        for _ in range(chunk):
            step = (rng.normal(size=4), rng.normal(size=4), int(rng.integers(2)), float(rng.normal()),
                    float(rng.integers(2)))
            staged.add(*step)
            naive.append(step)
        rb = write(rb, *staged.take())
    assert int(rb.pos) == len(naive) % size and int(rb.count) == size
    for slot in range(size):
        s = max(i for i in range(len(naive)) if i % size == slot)
        obs, next_obs, action, reward, done = naive[s]
        np.testing.assert_allclose(rb.observations[slot], obs, rtol=1e-6)
        np.testing.assert_allclose(rb.next_observations[slot], next_obs, rtol=1e-6)
        assert (int(rb.actions[slot]), float(rb.dones[slot])) == (action, done)
        np.testing.assert_allclose(float(rb.rewards[slot]), reward, rtol=1e-6)
    batch = jax.jit(jax_twin.sample, static_argnums=2)(rb, jax.random.key(0), 64)
    written = {tuple(np.float32(x) for x in step[0]) for step in naive[-size:]}
    assert all(tuple(row) in written for row in np.asarray(batch.observations))


class TwinFrameBuffer:
    """dqn_atari_envpool_jax's frame buffer (device arrays and pure functions) behind the eager ReplayBuffer's
    interface (start, add, valid, stacks, actions, rewards, dones, sample), so that test_dqn's frame-buffer
    test plays its Breakout trace into it and checks it against its naive buffer. Steps are staged and
    written `STAGE` at a time by the twin's own StagedSteps and `write`, as its main loop does (a read
    first writes the steps staged so far: a partial chunk)."""

    STAGE = 4  # the twin's default train_frequency

    def __init__(self, size, frame_shape, device, seed):
        self.twin = load_script("dqn_atari_envpool_jax")
        self.rb, self.key = self.twin.ReplayBuffer.create(size, frame_shape), jax.random.key(seed)
        self.staged = self.twin.StagedSteps(self.STAGE, frame_shape)
        self.jitted = dict(start=jax.jit(self.twin.write_obs, donate_argnums=0),
                           write=jax.jit(self.twin.write, donate_argnums=0), stacks=jax.jit(self.twin.stacks),
                           sample=jax.jit(self.twin.sample, static_argnums=2))

    def write_obs(self, obs, game_start):
        self.rb = self.jitted["start"](self.rb, obs[-1], game_start)

    def add(self, action, reward, terminated, truncated, next_obs, info):
        self.staged.add(action, reward, terminated, truncated, next_obs[0, -1], info["elapsed_step"][0] == 0)
        if self.staged.n == self.STAGE:
            self.flush()

    def flush(self) -> "TwinFrameBuffer":
        if self.staged.n:
            self.rb = self.jitted["write"](self.rb, *self.staged.take())
        return self

    def __getattr__(self, name):  # valid, actions, rewards, dones: as torch tensors, like the eager buffer's
        return torch.as_tensor(np.array(getattr(self.flush().rb, name)))

    def stacks(self, slots):
        return torch.as_tensor(np.array(self.jitted["stacks"](self.flush().rb, jnp.asarray(slots.numpy()))))

    def sample(self, batch_size):
        self.key, key = jax.random.split(self.key)
        batch = self.jitted["sample"](self.flush().rb, key, batch_size)
        return {k: torch.as_tensor(np.array(v)) for k, v in batch._asdict().items()}


def test_frame_buffer_returns_what_a_naive_buffer_returns():
    """test_dqn's frame-buffer test (lost lives, finished and truncated games, a 128-slot buffer wrapped
    five times, every held and sampled transition equal to the naive one), run on the twin's buffer."""
    assert_frame_buffer_returns_what_a_naive_buffer_returns(TwinFrameBuffer)


def test_the_default_buffer_fits_in_8_gb():
    """As the eager buffer: a slot holds one 84x84 frame and its bookkeeping (here 14 bytes), 7.07 GB for the
    default 1M slots."""
    jax_twin = load_script("dqn_atari_envpool_jax")
    rb = jax_twin.ReplayBuffer.create(1000, (84, 84))
    per_slot = sum(x.nbytes // 1000 for x in rb if x.ndim >= 1)
    assert per_slot == 84 * 84 + 14
    assert jax_twin.Args().buffer_size * per_slot < 7.1e9
