"""Proximal Policy Optimization (PPO) on Atari through envpool, in JAX.

The algorithm, defaults, network, initialization, environment options and logged
scalars of `ppo_atari_envpool.py`, written with JAX, flax linen (a model is a pure
function of a params pytree, which `jax.jit` and `lax.scan` take directly) and optax.
What it does differently, and why:

- [xla-rollout] the whole rollout is one jitted `lax.scan`: envpool's XLA interface (`envs.xla()`) puts the
  environment step inside the compiled function, so the policy's forward pass, the categorical sample (the PRNG key
  split inside), the step of the 84x84 frames and the writes into the rollout storage never return to Python between
  steps; the host sees the rollout once per iteration, to log the finished games. Host stepping
  (`envs.step(np.asarray(action))` after a jitted acting step) pays a dispatch, a wait and copies of the frames at
  every step, which the XLA rollout does without, keeping the loop to one host crossing per iteration (how the two
  compare in speed is in no committed output);
- [jit-update] the whole update is one jitted function: the bootstrap value, GAE as a reverse `lax.scan`, and all
  epochs x minibatches as one `lax.scan`, with each epoch's permutation drawn inside from the key, the loss, its
  gradient, the gradient clipping and the Adam step; the train state is donated, so the new parameters overwrite the
  old ones. On the CPU both scans are unrolled, so that XLA compiles the convolutions' backward pass as
  straight-line code, not inside the while loop a rolled scan compiles to, where XLA's CPU backend was seen to run
  it much slower when this script was written (no committed output measures the two); unrolled, compilation takes
  longer, more so the more epochs x minibatches;
- [channels-last] the Nature CNN runs in NHWC, XLA's native convolution layout: the uint8 frames are transposed
  once, when they are acted on, and stored so. `--save-model` converts the weights to the eager script's layout
  (OIHW convolutions, and the first Dense layer's inputs reordered from the NHWC flatten to torch's NCHW one), so
  that its `Agent` loads them (`leanrl_utils/evals.py`'s `load_policy`); the trained policy itself is played in JAX,
  sampling its actions from JAX's PRNG;
- [lr-tensor] the learning rate is an argument of the update (annealed by the host as the eager script does): no
  recompilation when it changes;
- [target-kl-cond] `--target-kl` skips the epochs after the one that crossed it (`lax.cond`), where the eager script
  breaks out of its loop: a scan has a fixed length;
- [jax-prng] random numbers come from JAX's PRNG (threefry), not torch's: the same seed gives the same run every
  time, but not the eager script's run. The environments are seeded as in the eager script;
- [torch-formulas] the categorical policy is written out (log-softmax), gradients are clipped as torch's
  `clip_grad_norm_` does (max_norm / (norm + 1e-6)), and Adam is optax's `scale_by_adam` with torch's eps (1e-5
  here), times the learning rate;
- [no-sync] the progress bar moves once per rollout, and the training statistics are fetched once per iteration,
  when they are logged;
- [jax-shared] shared with the other JAX twins: typed PRNG keys (`jax.random.key`), `--torch-deterministic` as
  `--xla_gpu_deterministic_ops` (a no-op on the CPU, whose kernels are deterministic), and a train state that is a
  plain `NamedTuple` of params and optax states (flax's `TrainState` would add an `apply_fn` that the jitted
  functions, which close over their networks, never call).

As in the eager script:
- envpool resets an environment on the step *after* it reports done (a lost life
  or a finished game): that step ignores the action and returns reward 0. It is
  not a transition, so it is masked out of the losses and of the explained
  variance (`valid` below); CleanRL's envpool script trains on it.
- Episode statistics, as in CleanRL's script, are the real game's: the unclipped
  rewards summed over all lives, logged when the last life is lost. Two things
  differ: a game's length is envpool's count of its agent steps (CleanRL's also
  counts the reset steps), and a truncated game (the 108k-frame limit) is logged
  and its sum restarts (CleanRL logs it never and carries its sum into the next
  game).

What these choices measure on a CPU: docs/speed.md and docs/limits.md.

    python leanrl/ppo_atari_envpool_jax.py --env-id Breakout-v5
"""

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
import torch  # for the checkpoint, as CleanRL's JAX scripts
from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), playing a policy


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, XLA's GPU kernels are made deterministic (`--xla_gpu_deterministic_ops`); the CPU is anyway"""
    cuda: bool = True
    """if toggled, JAX uses the GPU when it has one (else the CPU); if not, the CPU"""
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
    """total timesteps of the experiments (> 0)"""
    learning_rate: float = 2.5e-4
    """the learning rate of the optimizer (> 0)"""
    num_envs: int = 8
    """the number of parallel game environments (> 0)"""
    num_steps: int = 128
    """the number of steps to run in each environment per policy rollout (> 0)"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma (in [0, 1])"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation (in [0, 1])"""
    num_minibatches: int = 4
    """the number of mini-batches (> 0)"""
    update_epochs: int = 4
    """the K epochs to update the policy (> 0)"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.1
    """the surrogate clipping coefficient (>= 0)"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy (>= 0)"""
    vf_coef: float = 0.5
    """coefficient of the value function (>= 0)"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping (> 0)"""
    target_kl: float | None = None
    """the target KL divergence threshold (>= 0)"""
    measure_after: int = 1
    """iterations left out of the fps window (the warm-up: jit compilation) (>= 0)"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed)"""
    minibatch_size: int = 0
    """the mini-batch size (computed)"""
    num_iterations: int = 0
    """the number of iterations (computed)"""


def check_args(args: Args) -> None:
    """What the flags' declared ranges (the end of their docstrings, checked by the harness) cannot say, checked
    before any work: the task exists, the minibatches divide the batch, the step budget holds whole batches;
    envpool renders no frames."""
    harness.known_env_id(args.env_id, "envpool")
    harness.check_batches(args, args.num_envs * args.num_steps)
    harness.no_video_with_envpool(args)


def make_envs(args: Args, num_envs: int | None = None, seed: int | None = None):
    """envpool's Atari vector env; a user's bad id stops here."""
    if args.env_id not in envpool.list_all_envs():
        harness.fail(f"--env-id {args.env_id!r}: envpool has no such environment (Atari ids look like Breakout-v5)")
    if type(envpool.make_spec(args.env_id)).__name__ != "AtariEnvSpec":
        harness.fail(f"--env-id {args.env_id!r}: not an Atari game (this script is for envpool's Atari ids, e.g. Breakout-v5)")
    envs = envpool.make(
        args.env_id,
        env_type="gymnasium",
        num_envs=num_envs or args.num_envs,
        episodic_life=True,
        reward_clip=True,
        seed=args.seed if seed is None else seed,
    )
    return envs


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


def layer_init(layer, features, std=np.sqrt(2), bias_const=0.0, **kwargs):
    """The eager script's layer_init: an orthogonal kernel scaled by `std`, a constant bias."""
    return layer(features, kernel_init=nn.initializers.orthogonal(std), bias_init=nn.initializers.constant(bias_const),
                 **kwargs)


class Agent(nn.Module):
    """The eager Agent's Nature CNN, actor and critic, on NHWC uint8 frames. The layers are named after
    the torch module's (`network_7` is `network.7`): `to_torch_state_dict` relies on it."""

    action_n: int

    def setup(self):
        self.network_0 = layer_init(nn.Conv, 32, kernel_size=(8, 8), strides=(4, 4), padding="VALID")
        self.network_2 = layer_init(nn.Conv, 64, kernel_size=(4, 4), strides=(2, 2), padding="VALID")
        self.network_4 = layer_init(nn.Conv, 64, kernel_size=(3, 3), strides=(1, 1), padding="VALID")
        self.network_7 = layer_init(nn.Dense, 512)
        self.actor = layer_init(nn.Dense, self.action_n, std=0.01)
        self.critic = layer_init(nn.Dense, 1, std=1)

    def network(self, x):
        x = x.astype(jnp.float32) / 255.0
        x = nn.relu(self.network_0(x))
        x = nn.relu(self.network_2(x))
        x = nn.relu(self.network_4(x))
        x = x.reshape(x.shape[0], -1)  # flattened in (h, w, c) order: see to_torch_state_dict
        return nn.relu(self.network_7(x))

    def get_value(self, x):
        return self.critic(self.network(x))[..., 0]

    def __call__(self, x):
        """The policy's logits and the value."""
        hidden = self.network(x)
        return self.actor(hidden), self.critic(hidden)[..., 0]


def categorical_log_prob_entropy(logits, action):
    """torch.distributions.Categorical's log_prob and entropy, from the logits."""
    log_probs = jax.nn.log_softmax(logits)
    log_prob = jnp.take_along_axis(log_probs, action[..., None], axis=-1)[..., 0]
    entropy = -(jnp.exp(log_probs) * log_probs).sum(-1)
    return log_prob, entropy


def to_torch_state_dict(params) -> dict[str, torch.Tensor]:
    """The flax params as the eager Agent's `state_dict`: convolution kernels HWIO -> OIHW, Dense kernels
    (in, out) -> torch weights (out, in). The first Dense layer reads the last convolution's output
    flattened in NHWC order (h, w, c) where torch flattens NCHW (c, h, w): its input columns are
    reordered so that the torch layer computes the same function."""
    params = jax.device_get(params["params"])
    t = lambda x: torch.from_numpy(np.array(x))  # a writable, contiguous copy  # noqa: E731
    state = {}
    for i in (0, 2, 4):
        state[f"network.{i}.weight"] = t(np.transpose(params[f"network_{i}"]["kernel"], (3, 2, 0, 1)))
        state[f"network.{i}.bias"] = t(params[f"network_{i}"]["bias"])
    kernel = np.asarray(params["network_7"]["kernel"])  # (7 * 7 * 64, 512), rows in (h, w, c) order
    channels = params["network_4"]["kernel"].shape[-1]
    side = int(round(np.sqrt(kernel.shape[0] // channels)))
    kernel = kernel.reshape(side, side, channels, -1).transpose(3, 2, 0, 1)  # (512, c, h, w)
    state["network.7.weight"] = t(kernel.reshape(kernel.shape[0], -1))
    state["network.7.bias"] = t(params["network_7"]["bias"])
    for name in ("actor", "critic"):
        state[f"{name}.weight"] = t(np.asarray(params[name]["kernel"]).T)
        state[f"{name}.bias"] = t(params[name]["bias"])
    return state


def masked_mean(x, mask, count):
    return (x * mask).sum() / count


def compute_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """Generalized advantage estimates of a rollout, as a reverse `lax.scan`; `dones[t]` marks obs t as an
    episode's first. The per-step terms are computed for all steps at once; the scan carries only
    A[t] = delta[t] + gamma * lambda * nextnonterminal[t] * A[t + 1]."""
    nextnonterminal = 1.0 - jnp.concatenate([dones[1:], next_done[None]])
    nextvalues = jnp.concatenate([values[1:], next_value[None]])
    deltas = rewards + gamma * nextvalues * nextnonterminal - values

    def step(lastgaelam, x):
        delta, nonterminal = x
        lastgaelam = delta + gamma * gae_lambda * nonterminal * lastgaelam
        return lastgaelam, lastgaelam

    _, advantages = jax.lax.scan(step, jnp.zeros_like(next_value), (deltas, nextnonterminal), reverse=True)
    return advantages


class Rollout(NamedTuple):
    """One rollout, (num_steps, num_envs, ...): what the update reads, and envpool's info for the games."""

    obs: jax.Array  # uint8 frames, NHWC
    actions: jax.Array
    logprobs: jax.Array
    rewards: jax.Array
    dones: jax.Array
    values: jax.Array
    game: dict  # info["reward"] (unclipped), info["lives"], info["elapsed_step"], terminated, truncated


class TrainState(NamedTuple):
    params: dict
    opt_state: optax.OptState


def make_functions(args: Args, agent: Agent, optimizer: optax.GradientTransformation, step_env):
    """The jitted rollout and update, and the pieces the update is made of (kept apart for the tests).
    `step_env` is envpool's jittable step (`envs.xla()`)."""

    @jax.jit
    def rollout(params, handle, next_obs, next_done, key):
        """`num_steps` steps of every env in one `lax.scan`: act, step envpool, store. The envpool handle
        threads through the steps (envpool's XLA calls read and return it), which orders them."""

        def step(carry, _):
            handle, obs, done, key = carry
            key, subkey = jax.random.split(key)
            obs = jnp.transpose(obs, (0, 2, 3, 1))  # NCHW -> NHWC, once per frame: stored so for the update
            logits, value = agent.apply(params, obs)
            action = jax.random.categorical(subkey, logits)
            logprob, _ = categorical_log_prob_entropy(logits, action)
            handle, (next_obs, reward, terminated, truncated, info) = step_env(handle, action)
            game = dict(reward=info["reward"], lives=info["lives"], elapsed_step=info["elapsed_step"],
                        terminated=terminated, truncated=truncated)
            transition = dict(obs=obs, actions=action, logprobs=logprob, rewards=reward, dones=done, values=value,
                              game=game)
            return (handle, next_obs, jnp.logical_or(terminated, truncated).astype(jnp.float32), key), transition

        (handle, next_obs, next_done, key), steps = jax.lax.scan(step, (handle, next_obs, next_done, key), None,
                                                                  length=args.num_steps)
        return handle, next_obs, next_done, key, Rollout(**steps)

    def ppo_loss(params, mb):
        """The eager script's minibatch loss, masked to the transitions (`valid`); returns it and (value,
        policy, entropy losses, old and new approx KL, clip fraction)."""
        logits, newvalue = agent.apply(params, mb["obs"])
        newlogprob, entropy = categorical_log_prob_entropy(logits, mb["actions"])
        logratio = newlogprob - mb["logprobs"]
        ratio = jnp.exp(logratio)
        mb_valid = mb["valid"]
        n_valid = jnp.maximum(mb_valid.sum(), 1.0)

        # calculate approx_kl http://joschu.net/blog/kl-approx.html (no gradient flows from these)
        old_approx_kl = jax.lax.stop_gradient(masked_mean(-logratio, mb_valid, n_valid))
        approx_kl = jax.lax.stop_gradient(masked_mean((ratio - 1) - logratio, mb_valid, n_valid))
        clipfrac = jax.lax.stop_gradient(
            masked_mean((jnp.abs(ratio - 1.0) > args.clip_coef).astype(jnp.float32), mb_valid, n_valid))

        mb_advantages = mb["advantages"]
        if args.norm_adv:
            mean = masked_mean(mb_advantages, mb_valid, n_valid)
            std = jnp.sqrt(((mb_advantages - mean) ** 2 * mb_valid).sum() / jnp.maximum(n_valid - 1, 1.0))
            mb_advantages = (mb_advantages - mean) / (std + 1e-8)

        # Policy loss
        pg_loss1 = -mb_advantages * ratio
        pg_loss2 = -mb_advantages * jnp.clip(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
        pg_loss = masked_mean(jnp.maximum(pg_loss1, pg_loss2), mb_valid, n_valid)

        # Value loss
        if args.clip_vloss:
            v_loss_unclipped = (newvalue - mb["returns"]) ** 2
            v_clipped = mb["values"] + jnp.clip(newvalue - mb["values"], -args.clip_coef, args.clip_coef)
            v_loss_clipped = (v_clipped - mb["returns"]) ** 2
            v_loss = 0.5 * masked_mean(jnp.maximum(v_loss_unclipped, v_loss_clipped), mb_valid, n_valid)
        else:
            v_loss = 0.5 * masked_mean((newvalue - mb["returns"]) ** 2, mb_valid, n_valid)

        entropy_loss = masked_mean(entropy, mb_valid, n_valid)
        loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
        return loss, dict(value_loss=v_loss, policy_loss=pg_loss, entropy=entropy_loss, old_approx_kl=old_approx_kl,
                          approx_kl=approx_kl, clipfrac=clipfrac)

    def minibatch_step(state: TrainState, mb, lr):
        """One optimizer step: loss and gradient, torch's clip_grad_norm_, Adam."""
        grads, stats = jax.grad(ppo_loss, has_aux=True)(state.params, mb)
        # torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1
        scale = jnp.minimum(args.max_grad_norm / (optax.tree.norm(grads) + 1e-6), 1.0)
        grads = jax.tree.map(lambda g: g * scale, grads)
        updates, opt_state = optimizer.update(grads, state.opt_state)
        params = jax.tree.map(lambda p, u: p - lr * u, state.params, updates)
        return TrainState(params, opt_state), stats

    def update_epochs(state: TrainState, batch, permutations, lr):
        """All epochs x minibatches as one scan over the epochs' permutations (epochs, batch_size), with a
        scan over the minibatches inside (each gathers its rows of the batch); returns the train state,
        each minibatch's statistics (epochs, num_minibatches), and which epochs ran (all, unless
        --target-kl stopped them)."""

        def minibatch(state, inds):
            return minibatch_step(state, jax.tree.map(lambda x: x[inds], batch), lr)

        def epoch(carry, perm):
            state, stopped = carry
            minibatches = perm.reshape(args.num_minibatches, args.minibatch_size)
            run = lambda s: jax.lax.scan(minibatch, s, minibatches, unroll=unroll)  # noqa: E731
            if args.target_kl is None:
                state, stats = run(state)
                return (state, stopped), (stats, ~stopped)
            # a scan cannot break: once an epoch's last approx_kl crosses --target-kl, the later ones are skipped
            def skip(state):  # the state unchanged, and zeros shaped as an epoch's statistics
                return state, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(run, state)[1])

            state, stats = jax.lax.cond(stopped, skip, run, state)
            return (state, stopped | (stats["approx_kl"][-1] > args.target_kl)), (stats, ~stopped)

        # on the CPU both scans are unrolled: the same computation, compiled as straight-line code, not
        # inside the while loop a rolled scan compiles to, where XLA's CPU backend was seen to run the
        # convolutions' backward pass much slower (see the docstring; compilation takes longer the more
        # epochs x minibatches there are). On a GPU they stay rolled: one compiled minibatch step
        unroll = jax.default_backend() == "cpu"
        (state, _), (stats, ran) = jax.lax.scan(epoch, (state, jnp.array(False)), permutations, unroll=unroll)
        return state, stats, ran

    # the train state is donated: the new parameters and optimizer moments overwrite the old ones
    @partial(jax.jit, donate_argnums=(0,))
    def update(state: TrainState, rollout: Rollout, next_obs, next_done, lr, key):
        """GAE, then all epochs x minibatches; returns the train state and the logged statistics."""
        next_value = agent.apply(state.params, jnp.transpose(next_obs, (0, 2, 3, 1)), method=Agent.get_value)
        advantages = compute_gae(rollout.rewards, rollout.values, rollout.dones, next_value, next_done, args.gamma,
                                 args.gae_lambda)
        returns = advantages + rollout.values

        # flatten the batch; envpool resets an env on the step after it was done (dones[t]): that step
        # ignored the action and is no transition, so it is left out of the losses
        batch = dict(obs=rollout.obs, actions=rollout.actions, logprobs=rollout.logprobs, advantages=advantages,
                     returns=returns, values=rollout.values, valid=1.0 - rollout.dones)
        batch = jax.tree.map(lambda x: x.reshape((args.batch_size,) + x.shape[2:]), batch)

        # one permutation per epoch, drawn here from the key
        key, *keys = jax.random.split(key, args.update_epochs + 1)
        permutations = jax.vmap(lambda k: jax.random.permutation(k, args.batch_size))(jnp.stack(keys))
        state, stats, ran = update_epochs(state, batch, permutations, lr)

        # logged as the eager script: the last minibatch's losses, the clip fraction over all minibatches
        last = jnp.maximum(ran.sum() - 1, 0)
        logged = {name: value[last, -1] for name, value in stats.items()}
        logged["clipfrac"] = (stats["clipfrac"] * ran[:, None]).sum() / (ran.sum() * args.num_minibatches)
        # over the transitions only, as the losses: envpool's reset steps are left out
        kept, n = batch["valid"], batch["valid"].sum()
        y_pred, y_true = batch["values"], batch["returns"]
        masked_var = lambda x: masked_mean((x - masked_mean(x, kept, n)) ** 2, kept, n)  # noqa: E731
        var_y = jnp.where(n > 0, masked_var(y_true), 0.0)
        logged["explained_variance"] = jnp.where(var_y == 0, jnp.nan, 1 - masked_var(y_true - y_pred) / var_y)
        return state, logged, key

    return rollout, update, update_epochs, ppo_loss


def main(args: Args) -> None:
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    run_name = harness.run_name(args)  # runs/<env>__<exp>__<seed>__<time>, or the run --resume names

    # TRY NOT TO MODIFY: seeding (JAX's PRNG key; the environments as the eager script)
    random.seed(args.seed)
    np.random.seed(args.seed)
    harness.use_jax_device(args)  # before any array is made: JAX picks its backend at the first one
    key = jax.random.key(args.seed)
    key, agent_key = jax.random.split(key)

    # env setup
    envs = make_envs(args, seed=harness.env_seed(args))  # --resume: new games (envpool cannot save its own)

    agent = Agent(action_n=int(envs.single_action_space.n))
    obs_shape = envs.single_observation_space.shape  # (4, 84, 84): the network sees it NHWC
    params = agent.init(agent_key, jnp.zeros((1,) + obs_shape[1:] + obs_shape[:1], jnp.uint8))
    # torch's Adam (eps 1e-5 as the eager script); the learning rate multiplies its output in `update`
    optimizer = optax.scale_by_adam(eps=1e-5)
    state = TrainState(params, optimizer.init(params))
    episode_stats = EpisodeStats(args.num_envs)

    writer = harness.make_writer(args, run_name)
    # fps is measured from iteration `measure_after` + 1 on: the warm-up before it (here the jit compilation
    # of `rollout` and `update`, which a line above the progress bar announces) is logged apart
    progress = harness.Progress(args, writer, total=args.num_iterations * args.batch_size, start_step=0,
                                warmup_steps=args.measure_after * args.batch_size, busy="compiling (jax.jit)")
    episodic_return = float("nan")

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(), envpool=True)

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    next_obs, _ = envs.reset()
    # envpool's XLA interface: a handle on the envs, and a step function that runs inside jitted code
    handle, _, _, step_env = envs.xla()
    rollout, update, _, _ = make_functions(args, agent, optimizer, step_env)
    next_obs = jnp.asarray(next_obs)  # one copy to the device; from here on the frames stay there
    next_done = jnp.zeros(args.num_envs)

    # --resume: the run as saved, at the start of an iteration (checkpoints fall there only)
    global_step, first, state, key, episodic_return = checkpoint.resume(global_step, 1, state, key, episodic_return)
    for iteration in range(first, args.num_iterations + 1):
        checkpoint.tick(global_step, iteration, state, key, episodic_return)
        progress.tick(global_step)
        # Annealing the rate if instructed to do so.
        lrnow = args.learning_rate
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate

        # ALGO LOGIC: the whole rollout, acting and envpool's steps, in one call: no host crossing inside
        handle, next_obs, next_done, key, batch = rollout(state.params, handle, next_obs, next_done, key)
        # bootstrap value, GAE and the whole update: queued behind the rollout (asynchronous dispatch)
        state, logged, key = update(state, batch, next_obs, next_done, lrnow, key)

        # TRY NOT TO MODIFY: log the finished games. The crossing of the iteration: the rollout's game
        # statistics, (num_steps, num_envs) each, come to the host (a copy, once the rollout is done)
        # while the update runs
        game = jax.device_get(batch.game)
        for step in range(args.num_steps):
            info = {name: game[name][step] for name in ("reward", "lives", "elapsed_step")}
            for _, episodic_return, episodic_length in episode_stats.update(info, game["terminated"][step],
                                                                             game["truncated"][step]):
                step_count = global_step + (step + 1) * args.num_envs
                writer.add_scalar("charts/episodic_return", episodic_return, step_count)
                writer.add_scalar("charts/episodic_length", episodic_length, step_count)
        global_step += args.batch_size
        progress.update(args.batch_size)

        logged = jax.device_get(logged)  # the one fetch of the training statistics per iteration

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        writer.add_scalar("charts/learning_rate", lrnow, global_step)
        harness.log_losses(writer, logged, global_step)
        progress.log(global_step, episodic_return)
    checkpoint.close(global_step, args.num_iterations + 1, state, key, episodic_return)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        # the eager script's checkpoint: its Agent's state_dict, converted from the flax params
        torch.save({"algo": "ppo_atari", "args": asdict(args), "agent": to_torch_state_dict(state.params)}, model_path)
        print(f"model saved to {model_path}")

        @jax.jit
        def sample_action(params, obs, key):  # the policy samples its action, as in training
            key, subkey = jax.random.split(key)
            logits, _ = agent.apply(params, jnp.transpose(obs, (0, 2, 3, 1)))
            return jax.random.categorical(subkey, logits), key

        def act(obs):
            nonlocal key
            action, key = sample_action(state.params, obs, key)
            return np.asarray(action)
        # whole games (unclipped rewards), on one environment seeded with the run's seed
        for idx, episodic_return in enumerate(evals.play(make_envs(args, num_envs=1), act, args.eval_episodes,
                                                         args.seed, stats=EpisodeStats(1))):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
