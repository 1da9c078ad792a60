"""Twin Delayed DDPG (TD3) for continuous actions in JAX: the twin of `td3_continuous_action.py`.

The algorithm, defaults, networks, initialisation scheme, wrappers and logged values of the eager
PyTorch script, written in JAX with flax linen (a network is a pure function of a params pytree,
which `jax.jit`, `jax.vmap` and buffer donation take directly) and optax. What it does differently:

- [vmap-q] the twin Q-networks are one network `jax.vmap`ped over stacked params (as the optimized PyTorch script
  stacks them with tensordict): one batched matmul per layer for both critics, one Adam;
- [device-buffer] the replay buffer is preallocated device arrays, written by a jitted function that donates the
  buffer (`.at[pos].set` then updates it in place instead of copying it whole), and sampled inside the jitted update
  with the PRNG key: a batch never crosses to the host;
- [jit-update] a whole training step is one jitted function: the batch draw, the target policy smoothing noise, the
  critic update and, every `policy_frequency` steps, the delayed actor update and the Polyak update of the three
  target networks; whether the delayed updates run is a static argument, so each step is one call of one of two
  compiled programs, whose logged values stay on the device until a logging step reads them (as in the PyTorch
  pair);
- [jit-act] the acting step (the actor, its exploration noise, the clip to the action bounds) is jitted too, its
  draw taken from a PRNG key split inside;
- [jax-prng] randomness comes from JAX's PRNG: a seed gives the same run every time on the CPU, but not the PyTorch
  script's numbers (other generators, other initial weights drawn from the same law);
- [save-converted] `--save-model` converts the flax params into the eager script's torch `state_dict`s, so that the
  checkpoint loads as the eager script's (`leanrl_utils/evals.py`'s `load_policy`), and plays the trained policy in
  JAX;
- [jax-shared] shared with the other JAX twins: typed PRNG keys (`jax.random.key`), `--torch-deterministic` as
  `--xla_gpu_deterministic_ops` (a no-op on the CPU, whose kernels are deterministic), and a train state that is a
  plain `NamedTuple` of params and optax states (flax's `TrainState` would add an `apply_fn` that the jitted
  functions, which close over their networks, never call);
- [buffer-add] each environment step writes its transition with one jitted `buffer_add` call; the DQN twins stage
  steps on the host and write them inside the update instead, which saves calls there because DQN updates every
  `train_frequency` steps, where TD3 updates every step (a staged write would be a call per step all the same); the
  layers use a `Linear` of this file that draws torch's default initialisation, where the DQN twins give `nn.Dense`
  initialisers that draw the same law.

What these choices measure on a CPU: docs/speed.md and docs/limits.md.

    python leanrl/td3_continuous_action_jax.py --env-id HalfCheetah-v4
"""

import math
import os
import random
import time
from dataclasses import asdict, dataclass
from functools import partial
from types import SimpleNamespace
from typing import NamedTuple

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch  # for the checkpoint (torch.save) only
from flax import linen as nn
from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), playing a policy


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, XLA's GPU kernels are deterministic (`--xla_gpu_deterministic_ops`); the CPU's are"""
    cuda: bool = True
    """if toggled, JAX runs on the GPU when it has one (else on the CPU)"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    wandb_project_name: str = "leanrl"
    """the wandb's project name"""
    wandb_entity: str | None = None
    """the entity (team) of wandb's project"""
    capture_video: bool = False
    """whether to capture videos of the agent performances (check out `videos` folder)"""
    save_model: bool = False
    """whether to save the trained model (and evaluate it) in the run's folder"""
    eval_episodes: int = 10
    """episodes played by the saved policy after training (with --save-model) (> 0)"""

    # Algorithm specific arguments
    env_id: str = "HalfCheetah-v4"
    """the environment id of the task"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments (> --learning-starts)"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer (> 0)"""
    buffer_size: int = int(1e6)
    """the replay memory buffer size (>= --batch-size)"""
    gamma: float = 0.99
    """the discount factor gamma (in [0, 1])"""
    tau: float = 0.005
    """target smoothing coefficient (in (0, 1])"""
    batch_size: int = 256
    """the batch size of sample from the replay memory (> 0)"""
    policy_noise: float = 0.2
    """the scale of policy noise (>= 0)"""
    exploration_noise: float = 0.1
    """the scale of exploration noise (>= 0)"""
    learning_starts: int = 25000
    """timestep to start learning (>= 0)"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed) (> 0)"""
    noise_clip: float = 0.5
    """noise clip parameter of the Target Policy Smoothing Regularization (>= 0)"""
    measure_after: int = 20
    """updates left out of the fps window (the warm-up: jit compilation) (>= 0)"""


def check_args(args: Args) -> None:
    """What the flags' declared ranges (the end of their docstrings, checked by the harness) cannot say, checked
    before any work: the task exists."""
    harness.known_env_id(args.env_id, "gymnasium")


def make_env(env_id: str, seed: int, capture_video: bool = False, run_name: str = "") -> gym.Env:
    """One environment with episode statistics; a user's bad id or action space stops here."""
    if capture_video:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering
    try:
        env = gym.make(env_id, render_mode="rgb_array" if capture_video else None)
    except gym.error.Error as e:
        harness.fail(f"--env-id {env_id!r}: {e}")
    if not isinstance(env.action_space, gym.spaces.Box):
        harness.fail(f"--env-id {env_id!r}: TD3 needs a continuous (Box) action space, got {env.action_space}")
    if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
        harness.fail(f"--env-id {env_id!r}: needs a flat Box observation space, got {env.observation_space}")
    if capture_video:
        env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env.action_space.seed(seed)
    return env


# ALGO LOGIC: initialize agent here:
class Linear(nn.Module):
    """torch's nn.Linear: `x @ kernel + bias`, kernel and bias both drawn from U(-1/sqrt(fan_in),
    1/sqrt(fan_in)) as torch's default init does (flax's bias initialisers see only the bias's shape: the DQN
    twins pass the fan-in to `nn.Dense` instead; here the layer reads it from its input).
    The kernel is torch's weight transposed: (in, out)."""

    features: int

    @nn.compact
    def __call__(self, x):
        bound = 1.0 / math.sqrt(x.shape[-1])
        init = partial(jax.random.uniform, minval=-bound, maxval=bound)
        kernel = self.param("kernel", init, (x.shape[-1], self.features))
        bias = self.param("bias", init, (self.features,))
        return x @ kernel + bias


class QNetwork(nn.Module):
    @nn.compact
    def __call__(self, x, a):
        x = jnp.concatenate([x, a], -1)
        x = nn.relu(Linear(256, name="fc1")(x))
        x = nn.relu(Linear(256, name="fc2")(x))
        return Linear(1, name="fc3")(x)


class Actor(nn.Module):
    action_scale: np.ndarray  # action rescaling: (high - low) / 2
    action_bias: np.ndarray  # (high + low) / 2

    @nn.compact
    def __call__(self, x):
        x = nn.relu(Linear(256, name="fc1")(x))
        x = nn.relu(Linear(256, name="fc2")(x))
        x = jnp.tanh(Linear(self.action_scale.shape[0], name="fc_mu")(x))
        return x * self.action_scale + self.action_bias


class ReplayBuffer(NamedTuple):
    """A circular buffer of transitions preallocated on the device, with its write position and fill."""

    observations: jax.Array
    next_observations: jax.Array
    actions: jax.Array
    rewards: jax.Array
    dones: jax.Array
    pos: jax.Array  # int32 scalars
    size: jax.Array


def buffer_init(size: int, obs_dim: int, act_dim: int) -> ReplayBuffer:
    dims = (obs_dim, obs_dim, act_dim, 1, 1)
    harness.check_memory("--buffer-size", size * sum(dims) * 4, "jax")  # float32 rows: refused if they cannot fit
    return ReplayBuffer(*(jnp.zeros((size, dim)) for dim in dims), pos=jnp.int32(0), size=jnp.int32(0))


# donated: the buffer's memory is reused for the result, so a write updates one row in place instead of
# copying the whole buffer (XLA cannot update an input in place unless the caller gives it up)
@partial(jax.jit, donate_argnums=0)
def buffer_add(rb: ReplayBuffer, obs, next_obs, action, reward, done) -> ReplayBuffer:
    capacity = rb.observations.shape[0]
    rows = (obs, next_obs, action, reward, done)
    data = [column.at[rb.pos].set(jnp.reshape(row, column.shape[1:])) for column, row in zip(rb[:5], rows)]
    return ReplayBuffer(*data, pos=(rb.pos + 1) % capacity, size=jnp.minimum(rb.size + 1, capacity))


def buffer_sample(rb: ReplayBuffer, key: jax.Array, batch_size: int) -> ReplayBuffer:
    """A batch drawn uniformly from the filled part (inside jit: the batch stays on the device)."""
    idx = jax.random.randint(key, (batch_size,), 0, rb.size)
    return ReplayBuffer(*(column[idx] for column in rb[:5]), pos=rb.pos, size=rb.size)


class TrainState(NamedTuple):
    actor_params: dict
    actor_target_params: dict
    qf_params: dict  # both critics' params, stacked on a leading axis of 2
    qf_target_params: dict
    actor_opt_state: optax.OptState
    q_opt_state: optax.OptState


def make_train_state(args: Args, actor_params, qf_params) -> TrainState:
    """The optimizers' initial state around the given weights; the targets start as exact copies."""
    tx = optax.adam(args.learning_rate)  # optax.adam's defaults are torch's
    return TrainState(
        actor_params=actor_params,
        actor_target_params=jax.tree.map(jnp.array, actor_params),
        qf_params=qf_params,
        qf_target_params=jax.tree.map(jnp.array, qf_params),
        actor_opt_state=tx.init(actor_params),
        q_opt_state=tx.init(qf_params),
    )


def make_update_fns(args: Args, actor: Actor, qnet: QNetwork, low: np.ndarray, high: np.ndarray):
    """The losses and updates, closed over the hyperparameters and networks; `train_step` is jitted."""
    tx = optax.adam(args.learning_rate)
    # one vmapped call evaluates both critics: a batched matmul per layer instead of two matmuls
    twin_qf = jax.vmap(qnet.apply, in_axes=(0, None, None))

    def critic_loss(qf_params, state: TrainState, data: ReplayBuffer, noise):
        clipped_noise = jnp.clip(noise * args.policy_noise, -args.noise_clip, args.noise_clip) * actor.action_scale
        # clipped to the first dimension's bounds, as the eager script does (CleanRL's)
        next_state_actions = jnp.clip(actor.apply(state.actor_target_params, data.next_observations) + clipped_noise,
                                      low[0], high[0])
        qf_next_target = twin_qf(state.qf_target_params, data.next_observations, next_state_actions)
        min_qf_next_target = qf_next_target.min(0)
        next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * args.gamma * min_qf_next_target.reshape(-1)

        qf_a_values = twin_qf(qf_params, data.observations, data.actions).reshape(2, -1)
        qf_losses = ((qf_a_values - next_q_value) ** 2).mean(1)  # the two critics' mse losses
        qf_loss = qf_losses.sum()
        qf_values = qf_a_values.mean(1)
        return qf_loss, dict(qf1_values=qf_values[0], qf2_values=qf_values[1], qf1_loss=qf_losses[0],
                             qf2_loss=qf_losses[1], qf_loss=qf_loss / 2.0)

    def update_critic(state: TrainState, data: ReplayBuffer, noise):
        """One critic step; `noise`: the standard normal draw of the target policy smoothing."""
        grads, info = jax.grad(critic_loss, has_aux=True)(state.qf_params, state, data, noise)
        updates, q_opt_state = tx.update(grads, state.q_opt_state)
        return state._replace(qf_params=optax.apply_updates(state.qf_params, updates), q_opt_state=q_opt_state), info

    def actor_loss(actor_params, state: TrainState, obs):
        qf1_params = jax.tree.map(lambda p: p[0], state.qf_params)  # the first critic alone
        return -qnet.apply(qf1_params, obs, actor.apply(actor_params, obs)).mean()

    def update_actor(state: TrainState, obs):
        loss, grads = jax.value_and_grad(actor_loss)(state.actor_params, state, obs)
        updates, actor_opt_state = tx.update(grads, state.actor_opt_state)
        state = state._replace(actor_params=optax.apply_updates(state.actor_params, updates),
                               actor_opt_state=actor_opt_state)
        return state, dict(actor_loss=loss)

    def update_targets(state: TrainState) -> TrainState:
        # tau * param + (1 - tau) * target, over every weight of a network at once
        return state._replace(
            actor_target_params=optax.incremental_update(state.actor_params, state.actor_target_params, args.tau),
            qf_target_params=optax.incremental_update(state.qf_params, state.qf_target_params, args.tau),
        )

    # the state is donated: its buffers are reused for the new state instead of being allocated anew
    @partial(jax.jit, static_argnames="policy_update", donate_argnums=0)
    def train_step(state: TrainState, rb: ReplayBuffer, key: jax.Array, policy_update: bool):
        key, sample_key, noise_key = jax.random.split(key, 3)
        data = buffer_sample(rb, sample_key, args.batch_size)
        state, info = update_critic(state, data, jax.random.normal(noise_key, data.actions.shape))

        if policy_update:  # the delayed actor update, then the target networks'
            state, actor_info = update_actor(state, data.observations)
            info |= actor_info
            state = update_targets(state)
        return state, key, info

    return SimpleNamespace(critic_loss=critic_loss, update_critic=update_critic, actor_loss=actor_loss,
                           update_actor=update_actor, train_step=train_step)


def main(args: Args) -> None:
    run_name = harness.run_name(args)  # runs/<env>__<exp>__<seed>__<time>, or the run --resume names

    # env setup
    env = make_env(args.env_id, args.seed, args.capture_video, run_name)
    harness.use_jax_device(args)  # before any array is made: JAX picks its backend at the first one

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    key = jax.random.key(args.seed)
    key, actor_key, qf_key = jax.random.split(key, 3)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    low, high = env.action_space.low, env.action_space.high
    actor = Actor(action_scale=np.float32((high - low) / 2.0), action_bias=np.float32((high + low) / 2.0))
    qnet = QNetwork()
    obs0, act0 = jnp.zeros((1, obs_dim)), jnp.zeros((1, act_dim))
    # the initializers jitted: one compiled program each instead of one per initializer op
    actor_params = jax.jit(actor.init)(actor_key, obs0)
    qf_init = jax.jit(jax.vmap(qnet.init, in_axes=(0, None, None)))  # qf1 and qf2, stacked
    qf_params = qf_init(jax.random.split(qf_key, 2), obs0, act0)
    state = make_train_state(args, actor_params, qf_params)
    train_step = make_update_fns(args, actor, qnet, low, high).train_step

    @jax.jit
    def act(actor_params, obs, key):
        key, noise_key = jax.random.split(key)
        action = actor.apply(actor_params, obs[None])[0]
        action += jax.random.normal(noise_key, action.shape) * actor.action_scale * args.exploration_noise
        return jnp.clip(action, low, high), key

    rb = buffer_init(args.buffer_size, obs_dim, act_dim)
    writer = harness.make_writer(args, run_name)
    # fps is measured from the `measure_after`-th update on: the warm-up before it (the update's jit
    # compilation, which a line above the progress bar announces) is logged apart
    progress = harness.Progress(args, writer, total=args.total_timesteps, start_step=args.learning_starts + 1,
                                warmup_steps=args.measure_after, busy="compiling (jax.jit)")
    episodic_return, info = float("nan"), {}

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(env=env))

    # TRY NOT TO MODIFY: start the game
    obs, _ = env.reset(seed=args.seed)
    first, state, rb, key, obs, episodic_return, info = checkpoint.resume(0, state, rb, key, obs, episodic_return, info)
    for global_step in range(first, args.total_timesteps):
        checkpoint.tick(global_step, state, rb, key, obs, episodic_return, info)
        progress.tick(global_step)  # the bar; the fps window opens and closes at its bounds
        # ALGO LOGIC: put action logic here
        if global_step < args.learning_starts:
            action = env.action_space.sample()
        else:
            action, key = act(state.actor_params, obs, key)
            # the step's one read back to the host but at logging steps: a wait for the queued update it
            # depends on (and, on a GPU, a copy)
            action = np.asarray(action)

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, reward, terminated, truncated, env_info = env.step(action)

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        if "episode" in env_info:
            episodic_return = float(env_info["episode"]["r"])
            writer.add_scalar("charts/episodic_return", episodic_return, global_step)
            writer.add_scalar("charts/episodic_length", int(env_info["episode"]["l"]), global_step)

        # the buffer keeps the true next observation; only a termination (not a time-limit truncation)
        # cuts the bootstrap. The transition goes to the device as the call's arguments (host-to-device
        # copies of a few numbers, queued without waiting)
        rb = buffer_add(rb, obs, next_obs, action, np.float32(reward), np.float32(terminated))

        # TRY NOT TO MODIFY: CRUCIAL step easy to overlook
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            # dispatched without waiting: the host steps on while the device trains
            state, key, step_info = train_step(state, rb, key, policy_update=global_step % args.policy_frequency == 0)
            info |= step_info  # device scalars: the latest actor loss is kept between its updates

            if global_step % 100 == 0:  # read back from the device at logging steps only
                harness.log_losses(writer, info, global_step)  # the critic's and actor's latest values
                progress.log(global_step, episodic_return)
    checkpoint.close(args.total_timesteps, state, rb, key, obs, episodic_return, info)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        # the eager script's checkpoint: its networks' state_dicts, converted from the flax params
        qf1, qf2 = (jax.tree.map(lambda p, i=i: p[i], state.qf_params) for i in range(2))
        torch.save({"algo": "td3", "args": asdict(args),
                    "actor": to_state_dict(state.actor_params, action_scale=actor.action_scale,
                                           action_bias=actor.action_bias),
                    "qf1": to_state_dict(qf1), "qf2": to_state_dict(qf2)}, model_path)
        print(f"model saved to {model_path}")

        def play_act(obs):  # the acting step: the actor's action with its exploration noise, clipped
            nonlocal key
            action, key = act(state.actor_params, obs, key)
            return np.asarray(action)
        for idx, episodic_return in enumerate(evals.play(make_env(args.env_id, args.seed), play_act,
                                                         args.eval_episodes, args.seed)):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


def to_state_dict(params: dict, **buffers: np.ndarray) -> dict[str, torch.Tensor]:
    """flax params -> the eager script's torch `state_dict`: `fc1.weight` is the kernel transposed."""
    state_dict = {}
    for layer, p in params["params"].items():
        state_dict[f"{layer}.weight"] = torch.tensor(np.asarray(p["kernel"]).T)
        state_dict[f"{layer}.bias"] = torch.tensor(np.asarray(p["bias"]))
    return state_dict | {name: torch.tensor(value) for name, value in buffers.items()}


if __name__ == "__main__":
    harness.run(main, Args, check_args)
