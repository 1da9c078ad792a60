"""Deep Q-Network (DQN) for discrete actions, in JAX.

The algorithm, defaults, network, initialisation and logging of `dqn.py`, written
with JAX, flax and optax. The networks are flax **linen** modules: a model is a pure
function of a params pytree, which `jax.jit` and buffer donation take directly.
What it does differently from `dqn.py`, and why:

- [jit-update] the whole update is one jitted function: write the steps played since the last update into the replay
  buffer, draw the batch from a PRNG key, loss, gradients, the Adam step and the target copy; the train state and
  the buffer are donated, so XLA updates them in place instead of allocating new ones each call;
- [staged-steps] the replay buffer lives on the device as a fixed-size pytree of arrays; the steps are staged on the
  host in one small array and reach the device once per update (every `train_frequency` steps), written by the
  update itself: with a single env, a write per step would add a jitted call (its dispatch and a copy) to every env
  step. A host buffer whose batches are copied over would move `batch_size` rows per update instead of
  `train_frequency`, and draw the batch outside the jitted update (the two buffers' speeds are compared in no
  committed output);
- [jit-act] the greedy action is a jitted forward pass; ε-greedy is decided on the host, as in the eager script, so
  that an exploring step runs no network;
- [jax-prng] the batches come from JAX's PRNG (a key carried in the train state), not from torch's generator: runs
  are not number for number those of `dqn.py`, but from the same weights and the same batch the first loss is the
  same up to rounding (tests/test_jax_dqn.py);
- [save-converted] `--save-model` converts the flax params to `dqn.py`'s torch `state_dict` (Dense kernels
  transposed), so that the checkpoint loads as the eager script's (`leanrl_utils/evals.py`'s `load_policy`); the
  trained network is played in JAX;
- [jax-shared] shared with the other JAX twins: typed PRNG keys (`jax.random.key`), `--torch-deterministic` as
  `--xla_gpu_deterministic_ops` (a no-op on the CPU, whose kernels are deterministic), and a train state that is a
  plain `NamedTuple` of params and optax states (flax's `TrainState` would add an `apply_fn` that the jitted
  functions, which close over their networks, never call).

What these choices measure on a CPU: docs/speed.md and docs/limits.md.

    python leanrl/dqn_jax.py --env-id CartPole-v1
"""

import math
import os
import random
import time
from dataclasses import asdict, dataclass
from functools import partial
from typing import NamedTuple

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch  # for the checkpoint (torch.save) only
from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), playing a policy


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, XLA's GPU kernels are deterministic (`--xla_gpu_deterministic_ops`); the CPU always is"""
    cuda: bool = True
    """if toggled, JAX uses the GPU when it has one (else the CPU)"""
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
    env_id: str = "CartPole-v1"
    """the id of the environment"""
    total_timesteps: int = 500000
    """total timesteps of the experiments (> --learning-starts)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer (> 0)"""
    buffer_size: int = 10000
    """the replay memory buffer size (>= --batch-size)"""
    gamma: float = 0.99
    """the discount factor gamma (in [0, 1])"""
    tau: float = 1.0
    """the target network update rate (in (0, 1])"""
    target_network_frequency: int = 500
    """the timesteps it takes to update the target network (> 0)"""
    batch_size: int = 128
    """the batch size of sample from the reply memory (> 0)"""
    start_e: float = 1
    """the starting epsilon for exploration (in [0, 1])"""
    end_e: float = 0.05
    """the ending epsilon for exploration (in [0, 1])"""
    exploration_fraction: float = 0.5
    """the fraction of `total-timesteps` it takes from start-e to go end-e (in (0, 1])"""
    learning_starts: int = 10000
    """timestep to start learning (>= 0)"""
    train_frequency: int = 10
    """the frequency of training (> 0)"""
    measure_after: int = 20
    """updates left out of the fps window (the warm-up: compilation, CUDA-graph capture) (>= 0)"""


def check_args(args: Args) -> None:
    """What the flags' declared ranges (the end of their docstrings, checked by the harness) cannot say, checked
    before any work: the task exists."""
    harness.known_env_id(args.env_id, "gymnasium")


def make_env(env_id: str, seed: int, capture_video: bool = False, run_name: str = "") -> gym.Env:
    """One environment with episode statistics; a user's bad id or action space stops here."""
    try:
        env = gym.make(env_id, render_mode="rgb_array" if capture_video else None)
    except gym.error.Error as e:
        harness.fail(f"--env-id {env_id!r}: {e}")
    if not isinstance(env.action_space, gym.spaces.Discrete):
        harness.fail(f"--env-id {env_id!r}: DQN needs a discrete action space, got {env.action_space}")
    if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
        harness.fail(f"--env-id {env_id!r}: needs a flat Box observation space, got {env.observation_space}")
    if capture_video:
        env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env.action_space.seed(seed)
    return env


# ALGO LOGIC: initialize agent here:
def torch_uniform(fan_in: int):
    """torch's default init of an nn.Linear bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1 / math.sqrt(fan_in)
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


# torch's default init of an nn.Linear weight, the same U(-1/sqrt(fan_in), 1/sqrt(fan_in))
TORCH_KERNEL_INIT = nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform")


def torch_linear(features: int, fan_in: int, name: str) -> nn.Dense:
    """A Dense layer initialised as torch's nn.Linear."""
    return nn.Dense(features, name=name, kernel_init=TORCH_KERNEL_INIT, bias_init=torch_uniform(fan_in))


class QNetwork(nn.Module):
    """`dqn.py`'s 120-84 MLP; layer `network_i` is the torch Sequential's `network.i`."""

    action_dim: int

    @nn.compact
    def __call__(self, x):
        x = nn.relu(torch_linear(120, x.shape[-1], "network_0")(x))
        x = nn.relu(torch_linear(84, 120, "network_2")(x))
        return torch_linear(self.action_dim, 84, "network_4")(x)


def to_torch_state_dict(params) -> dict[str, torch.Tensor]:
    """The flax params as `dqn.py`'s QNetwork state_dict: flax's Dense kernel is (in, out), torch's weight (out, in)."""
    state_dict = {}
    for name, layer in params["params"].items():
        key = name.replace("_", ".")
        state_dict[f"{key}.weight"] = torch.tensor(np.asarray(layer["kernel"]).T)
        state_dict[f"{key}.bias"] = torch.tensor(np.asarray(layer["bias"]))
    return state_dict


def from_torch_state_dict(state_dict: dict[str, torch.Tensor]):
    """`dqn.py`'s QNetwork state_dict as flax params (the inverse of `to_torch_state_dict`)."""
    layers = {key.rsplit(".", 1)[0] for key in state_dict}
    return {"params": {layer.replace(".", "_"): {
        "kernel": jnp.asarray(state_dict[f"{layer}.weight"].detach().cpu().numpy().T),
        "bias": jnp.asarray(state_dict[f"{layer}.bias"].detach().cpu().numpy())} for layer in sorted(layers)}}


def linear_schedule(start_e: float, end_e: float, duration: int, t: int):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


class ReplayBuffer(NamedTuple):
    """A circular buffer of transitions in device arrays: written and sampled inside jit (see `write`)."""

    observations: jax.Array  # (size, obs_dim)
    next_observations: jax.Array  # (size, obs_dim)
    actions: jax.Array  # (size,) int32
    rewards: jax.Array  # (size,)
    dones: jax.Array  # (size,)
    pos: jax.Array  # the next slot written
    count: jax.Array  # the slots written so far, up to size: a batch is drawn from [0, count)

    @classmethod
    def create(cls, size: int, obs_dim: int) -> "ReplayBuffer":
        zeros = lambda *shape: jnp.zeros((size, *shape))  # noqa: E731
        harness.check_memory("--buffer-size", size * (2 * obs_dim + 3) * 4, "jax")  # refused if it cannot fit
        return cls(zeros(obs_dim), zeros(obs_dim), jnp.zeros(size, jnp.int32), zeros(), zeros(),
                   jnp.int32(0), jnp.int32(0))


class StagedSteps:
    """The transitions played since the last write to the device, staged on the host: one row of one float32
    array each (observation, next observation, action, reward, done), so that they cross in one copy at most
    (on the CPU, JAX may read them in place)."""

    def __init__(self, rows: int, obs_dim: int):
        self.shape, self.obs_dim = (rows, 2 * obs_dim + 3), obs_dim
        self.rows, self.n = np.zeros(self.shape, np.float32), 0

    def add(self, obs, next_obs, action, reward, done):
        row, d = self.rows[self.n], self.obs_dim
        row[:d], row[d:2 * d], row[2 * d:] = obs, next_obs, (action, reward, done)
        self.n += 1

    def take(self) -> tuple[np.ndarray, int]:
        """The staged rows (a full-size array, `n` of them filled) and `n`; staging starts over in a new array:
        JAX may read a host array handed to a jitted call after the call returns (on the CPU without a copy),
        so an array handed over is never written again."""
        rows, n = self.rows, self.n
        self.rows, self.n = np.zeros(self.shape, np.float32), 0
        return rows, n


def write(rb: ReplayBuffer, rows: jax.Array, n: jax.Array) -> ReplayBuffer:
    """The first `n` staged rows, written at the write head in one scatter (those past `n` are dropped)."""
    size, d, i = rb.actions.shape[0], rb.observations.shape[1], jnp.arange(rows.shape[0])
    # a row is written if it is staged and not overwritten by a later one of the same call (n > size)
    slots = jnp.where((i < n) & (i >= n - size), (rb.pos + i) % size, size)  # slot `size`: dropped
    put = lambda column, values: column.at[slots].set(values, mode="drop")  # noqa: E731
    return ReplayBuffer(put(rb.observations, rows[:, :d]), put(rb.next_observations, rows[:, d:2 * d]),
                        put(rb.actions, rows[:, 2 * d].astype(jnp.int32)), put(rb.rewards, rows[:, 2 * d + 1]),
                        put(rb.dones, rows[:, 2 * d + 2]), (rb.pos + n) % size, jnp.minimum(rb.count + n, size))


def sample(rb: ReplayBuffer, key: jax.Array, batch_size: int) -> ReplayBuffer:
    """A uniform batch of the transitions written so far (as a ReplayBuffer of batch_size rows)."""
    idx = jax.random.randint(key, (batch_size,), 0, rb.count)
    return rb._replace(**{field: getattr(rb, field)[idx] for field in ReplayBuffer._fields[:5]})


class TrainState(NamedTuple):
    params: dict
    target_params: dict
    opt_state: optax.OptState
    key: jax.Array  # the batches' PRNG key, split inside the update


def main(args: Args) -> None:
    run_name = harness.run_name(args)  # runs/<env>__<exp>__<seed>__<time>, or the run --resume names

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    harness.use_jax_device(args)  # before any array is made: JAX picks its backend at the first one
    key = jax.random.key(args.seed)
    key, q_key = jax.random.split(key)

    # env setup
    env = make_env(args.env_id, args.seed, args.capture_video, run_name)
    obs_dim = env.observation_space.shape[0]

    q_network = QNetwork(env.action_space.n)
    params = q_network.init(q_key, jnp.zeros((1, obs_dim)))
    optimizer = optax.adam(args.learning_rate)  # torch's Adam defaults: betas (0.9, 0.999), eps 1e-8
    # the target starts as an exact copy
    state = TrainState(params, jax.tree.map(jnp.copy, params), optimizer.init(params), key)

    rb = ReplayBuffer.create(args.buffer_size, obs_dim)
    staged = StagedSteps(args.train_frequency, obs_dim)

    @jax.jit
    def greedy_action(params, obs):
        return jnp.argmax(q_network.apply(params, obs))

    def td_loss(params, target_params, data):
        target_max = q_network.apply(target_params, data.next_observations).max(axis=1)
        td_target = jax.lax.stop_gradient(data.rewards + args.gamma * target_max * (1 - data.dones))
        old_val = jnp.take_along_axis(q_network.apply(params, data.observations), data.actions[:, None], axis=1)[:, 0]
        return jnp.mean((td_target - old_val) ** 2), old_val.mean()

    def update_target(state):
        soft = lambda q, t: args.tau * q + (1.0 - args.tau) * t  # noqa: E731  (tau = 1: a hard copy)
        return state._replace(target_params=jax.tree.map(soft, state.params, state.target_params))

    # the buffer and the train state are donated: XLA writes them in place (their old arrays are not used again)
    write_steps = jax.jit(write, donate_argnums=0)

    @partial(jax.jit, donate_argnums=(0, 1))
    def update(state, rb, rows, n, sync_target):
        """Write the staged steps, draw a batch, one Adam step, and the target copy when `sync_target`."""
        rb = write(rb, rows, n)
        key, batch_key = jax.random.split(state.key)
        data = sample(rb, batch_key, args.batch_size)
        (loss, q_values), grads = jax.value_and_grad(td_loss, has_aux=True)(state.params, state.target_params, data)
        updates, opt_state = optimizer.update(grads, state.opt_state)
        state = state._replace(params=optax.apply_updates(state.params, updates), opt_state=opt_state, key=key)
        state = jax.lax.cond(sync_target, update_target, lambda s: s, state)
        return state, rb, (loss, q_values)

    update_target_only = jax.jit(update_target, donate_argnums=0)

    writer = harness.make_writer(args, run_name)
    # fps is measured from the `measure_after`-th update on: the warm-up before it (here the jit compilation
    # of the update, which a line above the progress bar announces) is logged apart
    progress = harness.Progress(args, writer, total=args.total_timesteps, start_step=args.learning_starts + 1,
                                warmup_steps=args.measure_after * args.train_frequency, busy="compiling (jax.jit)")
    episodic_return = float("nan")

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(staged=staged, env=env))

    # TRY NOT TO MODIFY: start the game
    obs, _ = env.reset(seed=args.seed)
    first, state, rb, obs, episodic_return = checkpoint.resume(0, state, rb, obs, episodic_return)  # --resume: as saved
    for global_step in range(first, args.total_timesteps):
        checkpoint.tick(global_step, state, rb, obs, episodic_return)  # a checkpoint when one is due, or asked for
        progress.tick(global_step)  # the bar; the fps window opens and closes at its bounds
        # ALGO LOGIC: put action logic here
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        if random.random() < epsilon:
            action = env.action_space.sample()
        else:
            # the observation crosses to the device and the action back (on a GPU, a copy each way), and the
            # host waits for the forward pass (the env needs the action anyway)
            action = int(greedy_action(state.params, np.asarray(obs, np.float32)[None]))

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, reward, terminated, truncated, info = env.step(action)

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        if "episode" in info:
            episodic_return = float(info["episode"]["r"])
            writer.add_scalar("charts/episodic_return", episodic_return, global_step)
            writer.add_scalar("charts/episodic_length", int(info["episode"]["l"]), global_step)

        # the buffer keeps the true next observation; only a termination (not a time-limit truncation)
        # cuts the bootstrap; the transition is staged on the host, and reaches the device at the next write
        staged.add(obs, next_obs, action, reward, terminated)

        # TRY NOT TO MODIFY: CRUCIAL step easy to overlook
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                # one call: the staged rows cross to the device (one small copy at most, no wait) and the update is
                # queued; the host plays on while it runs, until a greedy action needs the new weights
                state, rb, out = update(state, rb, *staged.take(), global_step % args.target_network_frequency == 0)

                if global_step % 100 == 0:
                    # the only reads of device values in the loop but the action, at logging intervals
                    harness.log_losses(writer, dict(td_loss=out[0], q_values=out[1]), global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    progress.log(global_step, episodic_return)

            # update target network (inside the update above when the two fall on the same step)
            elif global_step % args.target_network_frequency == 0:
                state = update_target_only(state)
        elif global_step % args.train_frequency == 0:
            rb = write_steps(rb, *staged.take())  # before learning starts: the staged steps alone
    checkpoint.close(args.total_timesteps, state, rb, obs, episodic_return)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        # the eager script's checkpoint: its network's state_dict, converted from the flax params
        torch.save({"algo": "dqn", "args": asdict(args), "q_network": to_torch_state_dict(state.params)}, model_path)
        print(f"model saved to {model_path}")
        eval_env = make_env(args.env_id, args.seed)  # ε-greedy with a small ε, as CleanRL's evaluation plays it
        act = evals.epsilon_greedy(lambda obs: int(greedy_action(state.params, np.asarray(obs, np.float32)[None])),
                                   eval_env.action_space.sample, args.seed)
        for idx, episodic_return in enumerate(evals.play(eval_env, act, args.eval_episodes, args.seed)):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
