"""The JAX twins of the off-policy pairs (SAC, TD3): a short run logs what the eager script logs, a seed
gives the same numbers twice, the replay buffer cuts the bootstrap at terminations only, the first
update's losses equal the eager script's from the same weights, batch and random draws (and over four
updates every weight, the target networks' included), main() moves the targets on the eager script's steps,
and both twins learn Pendulum as the PyTorch pair does (the same task, budget and threshold as test_offpolicy)."""

import copy

import numpy as np
import pytest
import torch

jax = pytest.importorskip("jax", reason="the JAX twins need the JAX extra (requirements/requirements-all.txt)")
import jax.numpy as jnp  # noqa: E402
from helpers import assert_same_numbers_twice, check_flag_run, learns_and_plays_back, load_script  # noqa: E402
# the PyTorch pair's runs (test_offpolicy.py's)
from helpers import (OFF_POLICY_LEARN as LEARN, OFF_POLICY_SHORT as SHORT, OFF_POLICY_TAGS as TAGS,  # noqa: E402
                     OFF_POLICY_THRESHOLD as THRESHOLD, off_policy_eager as eager, register_inverted_pendulum_short)
from leanrl_utils import harness  # noqa: E402

register_inverted_pendulum_short()  # InvertedPendulumShort-v4, for the buffer test


def twin(pair: str) -> str:
    return f"{pair}_continuous_action_jax"


@pytest.mark.parametrize("pair", TAGS)
def test_short_run_logs_what_the_eager_script_logs(pair, cached_run):
    run = cached_run(twin(pair), *SHORT)
    check_flag_run(run, (twin(pair),), TAGS[pair] + ["charts/episodic_return"], logs=3)
    assert run.values("charts/warmup_time")
    # every tag of the eager script's run, at the same steps (fps and warm-up included)
    reference = cached_run(eager(pair), *SHORT).check()
    steps = lambda r: {tag: [s for s, _ in points] for tag, points in r.scalars.items()}  # noqa: E731
    assert steps(run) == steps(reference)


@pytest.mark.parametrize("pair", TAGS)
def test_same_seed_same_numbers(pair, cached_run):
    assert_same_numbers_twice(cached_run, twin(pair), SHORT, TAGS[pair] + ["charts/episodic_return"])


@pytest.mark.slow
@pytest.mark.parametrize("pair", TAGS)
def test_learns_pendulum(pair, tmp_path):
    # the trained policy swings the pendulum up, and so does the checkpoint, converted to the eager script's
    # state_dicts and loaded back into its networks (learns_and_plays_back: one loaded wrong scores as a random one)
    run = learns_and_plays_back((twin(pair),), LEARN[pair], cwd=tmp_path, threshold=THRESHOLD)
    # the eager script's checkpoint layout: the same keys, and the state_dicts of its own networks
    # (test_contract compares a pair's two checkpoints; here the eager script's networks stand for its run)
    checkpoint = torch.load(next(run.run_dir.glob("*.pt")), weights_only=True)
    module = load_script(eager(pair))
    env = module.make_env("Pendulum-v1", seed=0)
    qnet = module.SoftQNetwork if pair == "sac" else module.QNetwork
    nets = dict(actor=module.Actor(env), qf1=qnet(env), qf2=qnet(env))
    assert sorted(checkpoint) == ["actor", "algo", "args", "qf1", "qf2"] and checkpoint["algo"] == pair
    for name, net in nets.items():
        assert {k: v.shape for k, v in checkpoint[name].items()} == {k: v.shape for k, v in net.state_dict().items()}


@pytest.mark.parametrize("pair", TAGS)
def test_buffer_cuts_the_bootstrap_at_terminations_only(pair, tmp_path, monkeypatch):
    """As test_offpolicy's check of the PyTorch buffers (on helpers.py's InvertedPendulumShort-v4):
    a stored `done` marks a termination, never a truncation, and a truncated episode's last transition
    keeps its true last observation. No update runs (learning starts at the last step): no compilation."""
    module, buffers = load_script(twin(pair)), []
    add = module.buffer_add

    def recorded_add(*args):
        buffers[:] = [add(*args)]
        return buffers[0]

    monkeypatch.setattr(module, "buffer_add", recorded_add)
    monkeypatch.setenv("XLA_FLAGS", "")  # main adds its GPU determinism flag: restored after the test
    monkeypatch.chdir(tmp_path)
    module.main(module.Args(env_id="InvertedPendulumShort-v4", total_timesteps=300, learning_starts=299, seed=4))
    data = {k: np.asarray(getattr(buffers[0], k)[:300]) for k in ("observations", "next_observations", "dones")}
    fell = np.abs(data["next_observations"][:, 1]) > 0.2
    assert data["dones"].flatten().astype(bool).tolist() == fell.tolist()
    ends = ~(data["next_observations"][:-1] == data["observations"][1:]).all(1)
    truncated = ends & ~fell[:-1]
    assert fell.sum() >= 5 and truncated.sum() >= 5, (fell.sum(), truncated.sum())
    assert (np.abs(data["observations"][1:][truncated]).max(1) <= 0.01).all()  # a reset state follows


# The cross-framework check: the eager script runs in this process for 101 steps with learning from step
# 99 on, so that its one update (at step 100, a policy step too) is the logged one; hooks record its
# batch, its networks' initial weights, its random draws and what it logs. The twin's update functions
# then run from the same weights on the same batch with the same draws.
class Recorder:
    """Stands in for the SummaryWriter: keeps the scalars, writes nothing."""

    def __init__(self, *args, **kwargs):
        self.scalars = {}

    def add_scalar(self, tag, value, step, walltime=None):
        self.scalars[tag] = float(value)

    def add_text(self, *args, **kwargs):
        pass

    def close(self):
        pass


def run_eager_first_update(pair: str, monkeypatch, tmp_path, record_draw, updates: int = 1, tau: float = 0.005,
                           **flags) -> dict:
    """The eager script's first `updates` updates (at steps 100, 101, ...), recorded: their batches (the
    first as "batch"), the initial weights, the weights and target weights after the last update, the
    scalars logged (at step 100) and the random draws that `record_draw` (a monkeypatch of the draw the
    update makes) appends to. `flags`: more of the script's Args."""
    module = load_script(eager(pair))
    recorded = dict(nets=[], writers=[], batches=[], targets=[])
    deepcopy = copy.deepcopy

    def recording_deepcopy(x, memo=None):
        out = deepcopy(x, memo)
        if any(x is net for net in recorded["nets"]):  # a target network, made as a copy of its network
            recorded["targets"].append(out)
        return out

    def recording(cls):
        class Recorded(cls):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                recorded["nets"].append(self)  # the actor, then qf1 and qf2 (deep copies make the targets)

        return Recorded

    class Buffer(module.ReplayBuffer):
        def sample(self, batch_size):
            batch = super().sample(batch_size)
            recorded["batches"].append({k: v.numpy().copy() for k, v in batch.items()})
            if len(recorded["batches"]) == 1:
                recorded["batch"] = recorded["batches"][0]
                recorded["initial"] = [{k: v.clone() for k, v in net.state_dict().items()} for net in recorded["nets"]]
            return batch

    def writer(*args, **kwargs):
        recorded["writers"].append(Recorder())
        return recorded["writers"][-1]

    for name in ("Actor", "SoftQNetwork" if pair == "sac" else "QNetwork"):
        monkeypatch.setattr(module, name, recording(getattr(module, name)))
    monkeypatch.setattr(module, "ReplayBuffer", Buffer)
    monkeypatch.setattr(harness, "make_writer", writer)
    monkeypatch.setattr(copy, "deepcopy", recording_deepcopy)
    monkeypatch.chdir(tmp_path)
    record_draw()
    module.main(module.Args(env_id="Pendulum-v1", total_timesteps=100 + updates, learning_starts=99, seed=7, cuda=False,
                            tau=tau, **flags))
    assert len(recorded["batches"]) == updates
    recorded["logged"] = recorded["writers"][0].scalars
    recorded["updated"] = [net.state_dict() for net in recorded["nets"]]
    recorded["updated_targets"] = [net.state_dict() for net in recorded["targets"]]
    return recorded


def flax_params(state_dict: dict) -> dict:
    """An eager network's state_dict as the twin's params: the kernel is torch's weight transposed."""
    layers = [k[: -len(".weight")] for k in state_dict if k.endswith(".weight")]
    return {"params": {layer: {"kernel": jnp.asarray(state_dict[f"{layer}.weight"].numpy().T),
                               "bias": jnp.asarray(state_dict[f"{layer}.bias"].numpy())} for layer in layers}}


def twin_setup(pair: str, recorded: dict, tau: float = 0.005, **flags):
    """The twin's modules, update functions and train state around the eager script's initial weights."""
    module = load_script(twin(pair))
    args = module.Args(env_id="Pendulum-v1", total_timesteps=101, learning_starts=99, seed=7, cuda=False, tau=tau,
                       **flags)
    actor_sd, qf1_sd, qf2_sd = recorded["initial"]
    actor = module.Actor(action_scale=actor_sd["action_scale"].numpy(), action_bias=actor_sd["action_bias"].numpy())
    qnet = module.SoftQNetwork() if pair == "sac" else module.QNetwork()
    qf_params = jax.tree.map(lambda a, b: jnp.stack([a, b]), flax_params(qf1_sd), flax_params(qf2_sd))
    state = module.make_train_state(args, flax_params(actor_sd), qf_params)
    batch = module.ReplayBuffer(**{k: jnp.asarray(v) for k, v in recorded["batch"].items()}, pos=0, size=0)
    return module, args, actor, qnet, state, batch


LOSS_TOLERANCE = dict(rtol=1e-5, atol=1e-6)  # float32 rounding, summed in another order
WEIGHT_TOLERANCE = dict(rtol=1e-5, atol=1e-6)


def assert_updated_weights(state, recorded: dict, tolerance: dict = WEIGHT_TOLERANCE, targets: bool = False):
    """The weights after the update equal the eager script's: Adam's first step moves each weight by
    about lr * sign(gradient), so this checks the gradients' signs and the optimizer's arithmetic. With
    `targets`, the target networks too (the eager script's deep copies: TD3's actor's, then the critics')."""
    actor_sd, qf1_sd, qf2_sd = recorded["updated"]
    pairs = [("actor", state.actor_params, actor_sd),
             ("qf1", jax.tree.map(lambda p: p[0], state.qf_params), qf1_sd),
             ("qf2", jax.tree.map(lambda p: p[1], state.qf_params), qf2_sd)]
    if targets:
        *actor_target, qf1_target, qf2_target = recorded["updated_targets"]
        pairs += [("qf1 target", jax.tree.map(lambda p: p[0], state.qf_target_params), qf1_target),
                  ("qf2 target", jax.tree.map(lambda p: p[1], state.qf_target_params), qf2_target)]
        if actor_target:  # TD3
            pairs.append(("actor target", state.actor_target_params, actor_target[0]))
        assert len(actor_target) == (1 if hasattr(state, "actor_target_params") else 0)
    for name, params, sd in pairs:
        expected = flax_params(sd)
        for path, value in jax.tree_util.tree_leaves_with_path(params):
            want = expected
            for part in path:
                want = want[part.key]
            np.testing.assert_allclose(np.asarray(value), np.asarray(want), err_msg=f"{name} {path}", **tolerance)




def test_sac_first_update_equals_the_eager_scripts(monkeypatch, tmp_path):
    """The Gaussian draws of the eager script's reparameterised samples are recorded (Normal.rsample
    written out, drawing its noise with torch.randn) and fed to the twin: the next actions' draw to the
    critic update, then each of the two actor steps' draw and its alpha step's fresh draw to the actor
    update. Compared: every logged loss and value (the actor and alpha losses are the second step's,
    as logged), alpha after the two alpha steps, and the updated weights of the actor and both critics."""
    draws = []

    def rsample(self, sample_shape=()):
        eps = torch.randn(self._extended_shape(sample_shape))
        draws.append(eps.numpy().copy())
        return self.loc + eps * self.scale

    recorded = run_eager_first_update(
        "sac", monkeypatch, tmp_path, lambda: monkeypatch.setattr(torch.distributions.Normal, "rsample", rsample))
    update_draws = [d for d in draws if d.shape[0] > 1]  # those of the update, not of the acting steps
    assert len(update_draws) == 5, [d.shape for d in draws]  # next actions, then (actor, alpha) twice

    module, args, actor, qnet, state, batch = twin_setup("sac", recorded)
    fns = module.make_update_fns(args, actor, qnet, target_entropy=-1.0)
    state, info = jax.jit(fns.update_critic)(state, batch, update_draws[0])
    update_actor = jax.jit(fns.update_actor)
    for noise, alpha_noise in (update_draws[1:3], update_draws[3:5]):  # policy_frequency = 2 actor steps
        state, actor_info = update_actor(state, batch.observations, noise, alpha_noise)
    info |= actor_info
    info["alpha"] = jnp.exp(state.log_alpha)

    logged = recorded["logged"]
    assert sorted(f"losses/{k}" for k in info) == sorted(k for k in logged if k.startswith("losses/"))
    for name, value in info.items():
        np.testing.assert_allclose(float(value), logged[f"losses/{name}"], **LOSS_TOLERANCE, err_msg=name)
    assert_updated_weights(state, recorded)


# TD3's smoothing noise at its default scale (0.2) reaches --noise-clip (0.5) in about 1% of a batch's draws, whose
# change moves the losses by less than float32 rounding: a clip bound wrong in both PyTorch scripts would pass. At
# scale 1.0 most draws are clipped, and the clip is checked at the losses' precision.
NOISE_CLIP = 0.5  # the scripts' default --noise-clip
@pytest.mark.parametrize("policy_noise", [0.2, 1.0], ids=["default noise", "noise clipped often"])
def test_td3_first_update_equals_the_eager_scripts(policy_noise, monkeypatch, tmp_path):
    """The standard normal draw of the eager script's target policy smoothing (`torch.randn_like`) is
    recorded and fed to the twin's critic update; the actor update draws nothing. Compared: every logged
    loss and value, and the updated weights of the actor and both critics."""
    draws, randn_like = [], torch.randn_like

    def recording_randn_like(*args, **kwargs):
        out = randn_like(*args, **kwargs)
        draws.append(out.numpy().copy())
        return out

    recorded = run_eager_first_update(
        "td3", monkeypatch, tmp_path, lambda: monkeypatch.setattr(torch, "randn_like", recording_randn_like),
        policy_noise=policy_noise)
    assert len(draws) == 1 and draws[0].shape == (256, 1), [d.shape for d in draws]
    clipped = (np.abs(draws[0]) * policy_noise > NOISE_CLIP).mean()
    assert clipped > 0.5 or policy_noise < 1.0, clipped  # most draws clipped: the bound is what the losses show

    module, args, actor, qnet, state, batch = twin_setup("td3", recorded, policy_noise=policy_noise)
    fns = module.make_update_fns(args, actor, qnet, low=np.float32([-2.0]), high=np.float32([2.0]))
    state, info = jax.jit(fns.update_critic)(state, batch, draws[0])
    state, actor_info = jax.jit(fns.update_actor)(state, batch.observations)
    info |= actor_info

    logged = recorded["logged"]
    assert sorted(f"losses/{k}" for k in info) == sorted(k for k in logged if k.startswith("losses/"))
    for name, value in info.items():
        np.testing.assert_allclose(float(value), logged[f"losses/{name}"], **LOSS_TOLERANCE, err_msg=name)
    assert_updated_weights(state, recorded)


# Four updates (steps 100 to 103): the delayed actor update runs twice (steps 100 and 102; SAC's with
# its two actor and alpha steps each) and the targets move (SAC's every step, TD3's with the actor).
UPDATES = 4
# Adam divides by the root of its second moment: where a gradient is near zero, float32 rounding in
# another summation order moves that weight's step by a few percent of the learning rate (1e-3 for the
# critics), and four updates add up. A wrong update (a target copied instead of averaged, a skipped or
# extra actor step) moves weights by about a learning rate, 20 times this tolerance.
TRAIN_STEP_TOLERANCE = dict(rtol=1e-4, atol=5e-5)
# At the default tau (0.005) four updates move a target by about tau times a learning rate, far below any
# tolerance: a target update skipped or wrong would pass. With tau = 0.3 each target moves by a third of
# its network's move, so the targets are checked at the precision of the networks. Not 0.5: that average
# is symmetric, and a target update with its two arguments swapped would give the same numbers.
TRAIN_STEP_TAU = 0.3


def recording(draws: list):
    """Monkeypatches of the eager pair's draws: SAC's reparameterised samples (Normal.rsample written out,
    its noise from torch.randn), TD3's target policy smoothing (torch.randn_like)."""
    randn_like = torch.randn_like

    def recording_rsample(self, sample_shape=()):
        eps = torch.randn(self._extended_shape(sample_shape))
        draws.append(eps.numpy().copy())
        return self.loc + eps * self.scale

    def recording_randn_like(*args, **kwargs):
        out = randn_like(*args, **kwargs)
        draws.append(out.numpy().copy())
        return out
    return {"sac": recording_rsample, "td3": recording_randn_like}


@pytest.mark.parametrize("pair", TAGS)
def test_train_step_over_four_updates_equals_the_eager_scripts(pair, monkeypatch, tmp_path):
    """The twin's jitted `train_step`, the function its training loop calls, run four times from the eager
    script's initial weights on its four batches, with its random draws fed in order where the twin
    draws from its key (the batch index and every Gaussian draw: `buffer_sample` and `jax.random.normal`
    patched, under `jax.disable_jit()` so that each call runs them). Its key splitting, the static
    branches of the delayed updates, the `fori_loop` of SAC's actor steps and the target updates are all
    the twin's own. Compared with eager: the losses logged at step 100, and every weight of the actor,
    both critics and every target network after the fourth update."""
    draws = []
    patch = recording(draws)[pair]

    def record_draw():
        if pair == "sac":
            monkeypatch.setattr(torch.distributions.Normal, "rsample", patch)
        else:
            monkeypatch.setattr(torch, "randn_like", patch)

    recorded = run_eager_first_update(pair, monkeypatch, tmp_path, record_draw, updates=UPDATES, tau=TRAIN_STEP_TAU)
    update_draws = [d for d in draws if d.shape[0] > 1]  # those of the updates, not of the acting steps
    policy_steps = [step % 2 == 0 for step in range(100, 100 + UPDATES)]
    assert len(update_draws) == UPDATES + (4 * sum(policy_steps) if pair == "sac" else 0), [d.shape for d in draws]

    module, args, actor, qnet, state, _ = twin_setup(pair, recorded, tau=TRAIN_STEP_TAU)
    env = module.make_env("Pendulum-v1", seed=0)  # the task's action space, as main() reads it
    if pair == "sac":
        fns = module.make_update_fns(args, actor, qnet, target_entropy=-float(np.prod(env.action_space.shape)))
    else:
        fns = module.make_update_fns(args, actor, qnet, env.action_space.low, env.action_space.high)
    batches = iter(module.ReplayBuffer(**{k: jnp.asarray(v) for k, v in b.items()}, pos=0, size=0)
                   for b in recorded["batches"])
    queue = iter(update_draws)

    def normal(key, shape=(), *args, **kwargs):
        if len(shape) == 3:  # SAC's actor step: its draw and its alpha step's, stacked
            return jnp.stack([jnp.asarray(next(queue)), jnp.asarray(next(queue))])
        return jnp.asarray(next(queue))

    monkeypatch.setattr(module, "buffer_sample", lambda rb, key, batch_size: next(batches))
    monkeypatch.setattr(jax.random, "normal", normal)
    key, infos = jax.random.key(0), []
    with jax.disable_jit():
        for policy_update in policy_steps:
            flags = dict(policy_update=policy_update) | (dict(target_update=True) if pair == "sac" else {})
            state, key, info = fns.train_step(state, None, key, **flags)
            infos.append(info)
    assert next(queue, None) is None and next(batches, None) is None  # every draw and batch used, in order

    logged = recorded["logged"]  # step 100's, the first update's (a policy step)
    assert sorted(f"losses/{k}" for k in infos[0]) == sorted(k for k in logged if k.startswith("losses/"))
    for name, value in infos[0].items():
        np.testing.assert_allclose(float(value), logged[f"losses/{name}"], **LOSS_TOLERANCE, err_msg=name)
    assert_updated_weights(state, recorded, TRAIN_STEP_TOLERANCE, targets=True)


@pytest.mark.parametrize("pair", TAGS)
def test_train_step_jitted_equals_its_python_and_uses_every_key_once(pair, monkeypatch):
    """The test above runs `train_step` under `jax.disable_jit()` (its draws are fed in by Python); here the
    compiled program the training loop runs is compared with that Python over four updates from the same
    state, key and buffer (two with the delayed actor step, every target update, at tau 0.3), and the keys
    the Python run hands to its draws (the batch indices, every Gaussian) are all different: a key used
    twice would draw the same numbers twice."""
    module = load_script(twin(pair))
    args = module.Args(env_id="Pendulum-v1", cuda=False, batch_size=32, tau=0.3)
    env = module.make_env("Pendulum-v1", seed=0)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    low, high = env.action_space.low, env.action_space.high
    actor = module.Actor(action_scale=np.float32((high - low) / 2.0), action_bias=np.float32((high + low) / 2.0))
    qnet = module.SoftQNetwork() if pair == "sac" else module.QNetwork()
    keys = jax.random.split(jax.random.key(3), 3)
    obs0, act0 = jnp.zeros((1, obs_dim)), jnp.zeros((1, act_dim))
    state = module.make_train_state(args, actor.init(keys[0], obs0),
                                    jax.vmap(qnet.init, in_axes=(0, None, None))(jax.random.split(keys[1], 2), obs0, act0))
    fns = (module.make_update_fns(args, actor, qnet, target_entropy=-float(act_dim)) if pair == "sac"
           else module.make_update_fns(args, actor, qnet, low, high))
    rng = np.random.default_rng(0)
    rb = module.buffer_init(64, obs_dim, act_dim)
    rb = rb._replace(**{f: jnp.asarray(rng.normal(size=getattr(rb, f).shape), jnp.float32) for f in rb._fields[:5]},
                     size=jnp.int32(64))

    def run(state, key):
        infos = []
        for policy_update in (True, False, True, False):
            flags = dict(policy_update=policy_update) | (dict(target_update=True) if pair == "sac" else {})
            state, key, info = fns.train_step(state, rb, key, **flags)
            infos.append(info)
        return state, infos

    # train_step donates its state (its buffers are reused for the result): the Python run gets a copy
    start = jax.tree.map(jnp.copy, state)
    compiled = run(state, keys[2])
    used, normal, randint = [], jax.random.normal, jax.random.randint

    def recording(draw):
        def call(key, *a, **k):
            used.append(tuple(np.asarray(jax.random.key_data(key)).ravel()))
            return draw(key, *a, **k)
        return call
    monkeypatch.setattr(jax.random, "normal", recording(normal))
    monkeypatch.setattr(jax.random, "randint", recording(randint))
    with jax.disable_jit():
        python = run(start, keys[2])
    assert len(used) >= 8 and len(set(used)) == len(used), f"{len(used) - len(set(used))} keys used twice"
    for a, b in zip(jax.tree.leaves(compiled), jax.tree.leaves(python)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


# The tests above call `train_step` with the flags they choose; in a run main() chooses them. SAC's twin is the
# one whose main() chooses the target step apart from the actor's (TD3's targets move inside `train_step`, with
# its delayed actor step, which the four-update test follows). Here its main() runs four updates (steps 100 to
# 103) with its jitted `train_step` wrapped, the actor stepping at every update (--policy-frequency 1) and the
# targets every other (--target-network-frequency 2): the targets move at steps 100 and 102, as the eager
# script's would, and at no other. A target step never made, made at every update, or tied to the actor's, fails.
def test_main_moves_the_targets_on_the_eager_scripts_steps(monkeypatch, tmp_path):
    module = load_script(twin("sac"))
    make_update_fns, moved = module.make_update_fns, []

    def targets(state):  # copied to the host: train_step donates the state it is given
        return [np.array(x) for x in jax.tree.leaves(state.qf_target_params)]

    def recording_make_update_fns(*args, **kwargs):
        fns = make_update_fns(*args, **kwargs)
        train_step = fns.train_step

        def recording_train_step(state, *args, **kwargs):
            before = targets(state)
            state, *out = train_step(state, *args, **kwargs)
            moved.append(any(not np.array_equal(a, b) for a, b in zip(before, targets(state))))
            return state, *out

        fns.train_step = recording_train_step
        return fns

    monkeypatch.setattr(module, "make_update_fns", recording_make_update_fns)
    monkeypatch.setenv("XLA_FLAGS", "")  # main adds its GPU determinism flag: restored after the test
    monkeypatch.chdir(tmp_path)
    args = module.Args(env_id="Pendulum-v1", total_timesteps=104, learning_starts=99, buffer_size=1000, seed=4,
                       cuda=False, policy_frequency=1, target_network_frequency=2)
    module.main(args)
    assert moved == [step % args.target_network_frequency == 0 for step in range(100, 104)], moved
