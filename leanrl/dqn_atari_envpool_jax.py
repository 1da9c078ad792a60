"""Deep Q-Network (DQN) on Atari through envpool, in JAX.

The algorithm, defaults, network, initialisation, replay buffer and logging of
`dqn_atari_envpool.py`, written with JAX, flax and optax. The networks are flax
**linen** modules: a model is a pure function of a params pytree, which `jax.jit` and
buffer donation take directly. What it does differently from `dqn_atari_envpool.py`,
and why:

- [device-buffer] the replay buffer is the eager script's frame buffer (each frame stored once, the stacks of 4
  rebuilt when sampled, never across a game's start or the write head) kept entirely in device arrays, frames and
  bookkeeping alike; the stacks are rebuilt by a gather inside the jitted update, so a batch never crosses from the
  host;
- [jit-update] the whole update is one jitted function: write the steps played since the last update into the
  buffer, draw the batch from a PRNG key, loss, gradients, the Adam step and the target copy; the train state and
  the buffer are donated, so XLA updates them in place (a 1M-frame buffer is 7 GB: a copy per update is out of the
  question);
- [staged-steps] the steps are staged on the host and reach the device once per update (every `train_frequency`
  steps): one call and at most one small copy per update instead of one each per env step;
- [channels-last] the Nature CNN runs in the NHWC layout that XLA's convolutions take: the uint8 frames are
  transposed once inside jit, before they become floats;
- [jit-act] the greedy action is a jitted forward pass; ε-greedy is decided on the host, as in the eager script, so
  that an exploring step runs no network;
- [jax-prng] the batches come from JAX's PRNG (a key carried in the train state), not from torch's generator: runs
  are not number for number those of `dqn_atari_envpool.py`, but from the same weights and the same batch the first
  loss is the same up to rounding (tests/test_jax_dqn.py);
- [save-converted] `--save-model` converts the flax params to the eager script's torch `state_dict` (conv kernels
  HWIO -> OIHW, the first Dense layer's inputs from the NHWC flatten order to torch's NCHW one), so that the
  checkpoint loads as the eager script's (`leanrl_utils/evals.py`'s `load_policy`); the trained network is played in
  JAX;
- [jax-shared] shared with the other JAX twins: typed PRNG keys (`jax.random.key`), `--torch-deterministic` as
  `--xla_gpu_deterministic_ops` (a no-op on the CPU, whose kernels are deterministic), and a train state that is a
  plain `NamedTuple` of params and optax states (flax's `TrainState` would add an `apply_fn` that the jitted
  functions, which close over their networks, never call).

What these choices measure on a CPU: docs/speed.md and docs/limits.md.

    python leanrl/dqn_atari_envpool_jax.py --env-id Breakout-v5
"""

import math
import os
import random
import time
from dataclasses import asdict, dataclass
from functools import partial
from typing import NamedTuple

import envpool
import flax.linen as nn
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
    env_id: str = "Breakout-v5"
    """the id of the environment"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments (> --learning-starts)"""
    learning_rate: float = 1e-4
    """the learning rate of the optimizer (> 0)"""
    buffer_size: int = 1000000
    """the replay memory buffer size (>= --batch-size)"""
    gamma: float = 0.99
    """the discount factor gamma (in [0, 1])"""
    tau: float = 1.0
    """the target network update rate (in (0, 1])"""
    target_network_frequency: int = 1000
    """the timesteps it takes to update the target network (> 0)"""
    batch_size: int = 32
    """the batch size of sample from the reply memory (> 0)"""
    start_e: float = 1
    """the starting epsilon for exploration (in [0, 1])"""
    end_e: float = 0.01
    """the ending epsilon for exploration (in [0, 1])"""
    exploration_fraction: float = 0.10
    """the fraction of `total-timesteps` it takes from start-e to go end-e (in (0, 1])"""
    learning_starts: int = 80000
    """timestep to start learning (>= 0)"""
    train_frequency: int = 4
    """the frequency of training (> 0)"""
    measure_after: int = 20
    """updates left out of the fps window (the warm-up: compilation, CUDA-graph capture) (>= 0)"""


def check_args(args: Args) -> None:
    """What the flags' declared ranges (the end of their docstrings, checked by the harness) cannot say, checked
    before any work: the task exists; envpool renders no frames."""
    harness.known_env_id(args.env_id, "envpool")
    harness.no_video_with_envpool(args)


def make_envs(args: Args, num_envs: int = 1, seed: int | None = None):
    """envpool's Atari vector env, of one env as in CleanRL's DQN; a user's bad id stops here."""
    if args.env_id not in envpool.list_all_envs():
        harness.fail(f"--env-id {args.env_id!r}: envpool has no such environment (Atari ids look like Breakout-v5)")
    if type(envpool.make_spec(args.env_id)).__name__ != "AtariEnvSpec":
        harness.fail(f"--env-id {args.env_id!r}: not an Atari game (this script is for envpool's Atari ids, e.g. Breakout-v5)")
    return envpool.make(args.env_id, env_type="gymnasium", num_envs=num_envs, episodic_life=True, reward_clip=True,
                        seed=args.seed if seed is None else seed)


class EpisodeStats:
    """Whole-game statistics from envpool's info: the unclipped rewards summed over all lives,
    reported once per game, when its last life is lost or it is truncated."""

    def __init__(self, num_envs: int):
        self.returns = np.zeros(num_envs)

    def update(self, info: dict, terminated: np.ndarray, truncated: np.ndarray) -> list[tuple[int, float, int]]:
        """Add one step; returns (env index, game return, game length in agent steps) of each finished game."""
        self.returns += info["reward"]  # unclipped (the env's reward is clipped for training)
        game_over = (terminated & (info["lives"] == 0)) | truncated
        finished = [(int(i), float(self.returns[i]), int(info["elapsed_step"][i])) for i in np.flatnonzero(game_over)]
        self.returns[game_over] = 0.0
        return finished


# ALGO LOGIC: initialize agent here:
def torch_uniform(fan_in: int):
    """torch's default init of nn.Linear and nn.Conv2d biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1 / math.sqrt(fan_in)
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


# torch's default init of nn.Linear and nn.Conv2d weights, the same U(-1/sqrt(fan_in), 1/sqrt(fan_in))
TORCH_KERNEL_INIT = nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform")


class QNetwork(nn.Module):
    """The Nature CNN of `dqn_atari_envpool.py`; layer `network_i` is the torch Sequential's `network.i`."""

    action_dim: int

    @nn.compact
    def __call__(self, x):
        # uint8 frames (batch, 4, 84, 84) as envpool returns them: transposed to NHWC while still uint8, then floats
        x = jnp.transpose(x, (0, 2, 3, 1)).astype(jnp.float32) / 255.0
        for name, features, size, stride in (("network_0", 32, 8, 4), ("network_2", 64, 4, 2), ("network_4", 64, 3, 1)):
            fan_in = x.shape[-1] * size * size
            x = nn.relu(nn.Conv(features, (size, size), (stride, stride), padding="VALID", name=name,
                                kernel_init=TORCH_KERNEL_INIT, bias_init=torch_uniform(fan_in))(x))
        x = x.reshape((x.shape[0], -1))  # flattened in (height, width, channel) order; torch's is (c, h, w)
        x = nn.relu(nn.Dense(512, name="network_7", kernel_init=TORCH_KERNEL_INIT, bias_init=torch_uniform(3136))(x))
        return nn.Dense(self.action_dim, name="network_9", kernel_init=TORCH_KERNEL_INIT,
                        bias_init=torch_uniform(512))(x)


CONV_OUT = (7, 7, 64)  # the last convolution's output (height, width, channels), flattened into network_7


def to_torch_state_dict(params) -> dict[str, torch.Tensor]:
    """The flax params as `dqn_atari_envpool.py`'s QNetwork state_dict: conv kernels HWIO -> OIHW, Dense
    kernels (in, out) -> (out, in), and network_7's inputs reordered from the NHWC flatten to torch's NCHW one."""
    state_dict = {}
    for name, layer in params["params"].items():
        kernel, key = np.asarray(layer["kernel"]), name.replace("_", ".")
        if kernel.ndim == 4:
            weight = kernel.transpose(3, 2, 0, 1)
        elif name == "network_7":
            weight = kernel.reshape(*CONV_OUT, -1).transpose(3, 2, 0, 1).reshape(kernel.shape[1], -1)
        else:
            weight = kernel.T
        state_dict[f"{key}.weight"] = torch.tensor(np.ascontiguousarray(weight))
        state_dict[f"{key}.bias"] = torch.tensor(np.asarray(layer["bias"]))
    return state_dict


def from_torch_state_dict(state_dict: dict[str, torch.Tensor]):
    """`dqn_atari_envpool.py`'s QNetwork state_dict as flax params (the inverse of `to_torch_state_dict`)."""
    params = {}
    for key in sorted({k.rsplit(".", 1)[0] for k in state_dict}):
        weight, name = state_dict[f"{key}.weight"].detach().cpu().numpy(), key.replace(".", "_")
        if weight.ndim == 4:
            kernel = weight.transpose(2, 3, 1, 0)
        elif name == "network_7":
            h, w, c = CONV_OUT
            kernel = weight.reshape(-1, c, h, w).transpose(2, 3, 1, 0).reshape(h * w * c, -1)
        else:
            kernel = weight.T
        bias = state_dict[f"{key}.bias"].detach().cpu().numpy()
        params[name] = {"kernel": jnp.asarray(kernel), "bias": jnp.asarray(bias)}
    return {"params": params}


def linear_schedule(start_e: float, end_e: float, duration: int, t: int):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


class ReplayBuffer(NamedTuple):
    """`dqn_atari_envpool.py`'s frame buffer, in device arrays: written (`add`) and sampled (`sample`) inside jit.

    Slot t holds the newest frame of observation t, the action taken from it, the reward and the
    termination that followed, and how many earlier frames of the same game its stack of 4 shows (up
    to 3). The stack is rebuilt from those frames; envpool stacks a game's first frame 4 times, and the
    rebuilt stack repeats it the same way, so no stack reaches into the previous game. Observation
    t + 1, in slot t + 1, is the next observation. A slot is no transition when its observation ended
    an episode (the next step is envpool's reset step), when no action was taken from it yet (the write
    head), or when the write head has overwritten a frame its stack needs."""

    frames: jax.Array  # (size, 84, 84) uint8
    back: jax.Array  # (size,) int8: earlier frames of the same game in the stack, up to 3
    actions: jax.Array  # (size,) int32
    rewards: jax.Array  # (size,)
    dones: jax.Array  # (size,)
    valid: jax.Array  # (size,) bool: the slot holds a transition
    pos: jax.Array  # the write head: the slot of the newest observation
    count: jax.Array  # slots that had an action taken, up to size: candidates are drawn from [0, count)
    obs_done: jax.Array  # the newest observation ended an episode

    @classmethod
    def create(cls, size: int, frame_shape: tuple) -> "ReplayBuffer":
        zeros = lambda dtype: jnp.zeros(size, dtype)  # noqa: E731
        harness.check_memory("--buffer-size", size * (int(np.prod(frame_shape)) + 14), "jax")  # refused if it cannot fit
        return cls(jnp.zeros((size, *frame_shape), jnp.uint8), zeros(jnp.int8), zeros(jnp.int32), zeros(jnp.float32),
                   zeros(jnp.float32), zeros(jnp.bool_), jnp.int32(0), jnp.int32(0), jnp.bool_(False))


def write_obs(rb: ReplayBuffer, frame: jax.Array, game_start: jax.Array) -> ReplayBuffer:
    """Write an observation's newest frame at the write head (the first observation of the run: `game_start`)."""
    p, size, valid = rb.pos, rb.valid.shape[0], rb.valid
    for j in (1, 2, 3):  # the stacks that reach back to the frame overwritten here are gone
        q = (p + j) % size
        valid = valid.at[q].set(valid[q] & (rb.back[q] < j))
    back = jnp.where(game_start, 0, jnp.minimum(rb.back[(p - 1) % size] + 1, 3)).astype(rb.back.dtype)
    return rb._replace(frames=rb.frames.at[p].set(frame), back=rb.back.at[p].set(back),
                       valid=valid.at[p].set(False))  # no action taken from it yet


class Steps(NamedTuple):
    """Steps played, as the buffer takes them: the action, its reward and end, and the next observation's frame."""

    actions: np.ndarray | jax.Array  # (k,) int32
    rewards: np.ndarray | jax.Array  # (k,) float32, clipped
    terminated: np.ndarray | jax.Array  # (k,) bool
    truncated: np.ndarray | jax.Array  # (k,) bool
    frames: np.ndarray | jax.Array  # (k, 84, 84) uint8: the next observation's newest frame
    game_start: np.ndarray | jax.Array  # (k,) bool: the next observation starts a game (envpool's reset step)


def add(rb: ReplayBuffer, step: Steps) -> ReplayBuffer:
    """One step: the action taken from the newest observation, what followed, and the next observation."""
    p, size = rb.pos, rb.valid.shape[0]
    rb = rb._replace(actions=rb.actions.at[p].set(step.actions), rewards=rb.rewards.at[p].set(step.rewards),
                     dones=rb.dones.at[p].set(step.terminated.astype(jnp.float32)),
                     # from a done observation, the next step is envpool's reset step: no transition
                     valid=rb.valid.at[p].set(~rb.obs_done), obs_done=step.terminated | step.truncated,
                     pos=(p + 1) % size, count=jnp.minimum(rb.count + 1, size))
    return write_obs(rb, step.frames, step.game_start)


def write(rb: ReplayBuffer, steps: Steps, n: jax.Array) -> ReplayBuffer:
    """The first `n` staged steps, added in order (a loop inside jit: the frames are written in place)."""
    return jax.lax.fori_loop(0, n, lambda i, rb: add(rb, jax.tree.map(lambda x: x[i], steps)), rb)


class StagedSteps:
    """The steps played since the last write to the device, staged on the host in arrays of `rows` rows."""

    def __init__(self, rows: int, frame_shape: tuple):
        self.rows, self.frame_shape = rows, frame_shape
        self.steps, self.n = self.empty(), 0

    def empty(self) -> Steps:
        return Steps(np.zeros(self.rows, np.int32), np.zeros(self.rows, np.float32), np.zeros(self.rows, bool),
                     np.zeros(self.rows, bool), np.zeros((self.rows, *self.frame_shape), np.uint8),
                     np.zeros(self.rows, bool))

    def add(self, action, reward, terminated, truncated, frame, game_start):
        for column, value in zip(self.steps, (action, reward, terminated, truncated, frame, game_start)):
            column[self.n] = value
        self.n += 1

    def take(self) -> tuple[Steps, int]:
        """The staged steps (full-size arrays, `n` of them filled) and `n`; staging starts over in new arrays:
        JAX may read a host array handed to a jitted call after the call returns (on the CPU without a copy),
        so an array handed over is never written again."""
        steps, n = self.steps, self.n
        self.steps, self.n = self.empty(), 0
        return steps, n


def stacks(rb: ReplayBuffer, slots: jax.Array) -> jax.Array:
    """The stacks of 4 frames of the observations in `slots`, as envpool returned them: one gather."""
    offsets = jnp.minimum(jnp.arange(3, -1, -1), rb.back[slots, None])
    return rb.frames[(slots[:, None] - offsets) % rb.frames.shape[0]]


class Batch(NamedTuple):
    observations: jax.Array  # (batch, 4, 84, 84) uint8
    actions: jax.Array
    rewards: jax.Array
    next_observations: jax.Array
    dones: jax.Array


def sample(rb: ReplayBuffer, key: jax.Array, batch_size: int) -> Batch:
    # uniform over the slots that hold transitions: the first `batch_size` valid ones among 4x as many
    # uniform draws (the buffer's invalid slots are a few percent: too few valid is all but impossible)
    candidates = jax.random.randint(key, (4 * batch_size,), 0, rb.count)
    slots = candidates[jnp.argsort((~rb.valid[candidates]).astype(jnp.uint8), stable=True)[:batch_size]]
    return Batch(stacks(rb, slots), rb.actions[slots], rb.rewards[slots], stacks(rb, (slots + 1) % rb.valid.shape[0]),
                 rb.dones[slots])


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
    envs = make_envs(args, seed=harness.env_seed(args))  # --resume: new games (envpool cannot save its own)
    envs.single_action_space.seed(args.seed)
    episode_stats = EpisodeStats(1)
    frame_shape = envs.single_observation_space.shape[1:]

    q_network = QNetwork(envs.single_action_space.n)
    params = q_network.init(q_key, jnp.zeros((1, *envs.single_observation_space.shape), jnp.uint8))
    optimizer = optax.adam(args.learning_rate)  # torch's Adam defaults: betas (0.9, 0.999), eps 1e-8
    # the target starts as an exact copy
    state = TrainState(params, jax.tree.map(jnp.copy, params), optimizer.init(params), key)

    rb = ReplayBuffer.create(args.buffer_size, frame_shape)
    staged = StagedSteps(args.train_frequency, frame_shape)

    @jax.jit
    def greedy_action(params, obs):
        return jnp.argmax(q_network.apply(params, obs), axis=1)

    def td_loss(params, target_params, data):
        target_max = q_network.apply(target_params, data.next_observations).max(axis=1)
        td_target = jax.lax.stop_gradient(data.rewards + args.gamma * target_max * (1 - data.dones))
        old_val = jnp.take_along_axis(q_network.apply(params, data.observations), data.actions[:, None], axis=1)[:, 0]
        return jnp.mean((td_target - old_val) ** 2), old_val.mean()

    def update_target(state):
        soft = lambda q, t: args.tau * q + (1.0 - args.tau) * t  # noqa: E731  (tau = 1: a hard copy)
        return state._replace(target_params=jax.tree.map(soft, state.params, state.target_params))

    # the buffer and the train state are donated: XLA writes them in place (their old arrays are not used again)
    start = jax.jit(write_obs, donate_argnums=0)
    write_steps = jax.jit(write, donate_argnums=0)

    @partial(jax.jit, donate_argnums=(0, 1))
    def update(state, rb, steps, n, sync_target):
        """Write the staged steps, draw a batch, one Adam step, and the target copy when `sync_target`."""
        rb = write(rb, steps, n)
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

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume (not the steps
    # staged since the buffer's last write: they belong to the games a resume does not go on with)
    checkpoint = harness.Checkpoint(args, writer, dict(action_space=envs.single_action_space), envpool=True)
    first, state, rb, episodic_return = checkpoint.resume(0, state, rb, episodic_return)  # --resume: as saved
    # TRY NOT TO MODIFY: start the game (after --resume, new games: their first observation is written the same way)
    obs, _ = envs.reset()
    rb = start(rb, obs[0, -1], True)  # the first observation of the run
    for global_step in range(first, args.total_timesteps):
        checkpoint.tick(global_step, state, rb, episodic_return)  # a checkpoint when one is due, or asked for
        progress.tick(global_step)  # the bar; the fps window opens and closes at its bounds
        # ALGO LOGIC: put action logic here
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        if random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample()])
        else:
            # the uint8 frames cross to the device and the action back (on a GPU, a copy each way), and the
            # host waits for the forward pass (the env needs the action anyway)
            actions = np.asarray(greedy_action(state.params, obs))

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        for _, episodic_return, episodic_length in episode_stats.update(infos, terminations, truncations):
            writer.add_scalar("charts/episodic_return", episodic_return, global_step)
            writer.add_scalar("charts/episodic_length", episodic_length, global_step)

        # the buffer keeps the true next observation; only a termination (a lost life, not a time-limit
        # truncation) cuts the bootstrap; the step is staged on the host (its newest frame copied), and reaches
        # the device at the next write
        game_start = infos["elapsed_step"][0] == 0  # the next observation is a new game's first
        staged.add(actions[0], rewards[0], terminations[0], truncations[0], next_obs[0, -1], game_start)

        # TRY NOT TO MODIFY: CRUCIAL step easy to overlook
        obs = next_obs

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                # one call: the staged steps cross to the device (one small copy at most, no wait) and the update is
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
    checkpoint.close(args.total_timesteps, state, rb, episodic_return)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        # the eager script's checkpoint: its network's state_dict, converted from the flax params
        q_network_state = to_torch_state_dict(state.params)
        torch.save({"algo": "dqn_atari", "args": asdict(args), "q_network": q_network_state}, model_path)
        print(f"model saved to {model_path}")
        eval_envs = make_envs(args)  # ε-greedy with a small ε, as CleanRL's evaluation plays it; whole games count
        act = evals.epsilon_greedy(lambda obs: np.asarray(greedy_action(state.params, obs)),
                                   lambda: np.array([eval_envs.single_action_space.sample()]), args.seed)
        for idx, episodic_return in enumerate(evals.play(eval_envs, act, args.eval_episodes, args.seed,
                                                         stats=EpisodeStats(1))):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
