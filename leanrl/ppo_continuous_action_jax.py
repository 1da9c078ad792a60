"""Proximal Policy Optimization (PPO) for continuous actions, in JAX.

The algorithm, defaults, networks, initialization, wrappers and logged scalars of
`ppo_continuous_action.py`, written with JAX, flax linen (a model is a pure function
of a params pytree, which `jax.jit` and `lax.scan` take directly) and optax. What it
does differently from the PyTorch pair, and why:

- [jit-act] the acting step is one jitted function: the policy's forward pass, the Gaussian sample (the PRNG key
  split inside) and the writes of the step into the rollout storage, a device-resident buffer donated to the call
  and updated in place;
- [jit-update] the whole update is one jitted function: the bootstrap value, GAE as a reverse `lax.scan`, the
  flattening of the batch, and all epochs x minibatches as one `lax.scan`, with each epoch's permutation drawn
  inside from the key, the loss, its gradient, the gradient clipping and the Adam step; the train state is donated,
  so the new parameters overwrite the old ones;
- [device-rollout] the rewards are kept in a host array, handed to the update once per iteration (as the optimized
  PyTorch twin stages them), not sent to the device each step;
- [lr-tensor] the learning rate is an argument of the update (annealed by the host as the eager script does): no
  recompilation when it changes;
- [target-kl-cond] `--target-kl` skips the epochs after the one that crossed it (`lax.cond`), where the eager script
  breaks out of its loop: a scan has a fixed length;
- [jax-prng] random numbers come from JAX's PRNG (threefry), not torch's: the same seed gives the same run every
  time, but not the eager script's run. The environments are seeded as in the eager script;
- [torch-formulas] the Gaussian policy is written out (the formulas of torch.distributions.Normal), gradients are
  clipped as torch's `clip_grad_norm_` does (max_norm / (norm + 1e-6)), and Adam is optax's `scale_by_adam` with
  torch's eps (1e-5 here), times the learning rate;
- [no-sync] the training statistics are fetched once per iteration, when they are logged;
- [save-converted] `--save-model` converts the flax params into the eager script's torch `state_dict`, so that the
  checkpoint loads as the eager script's (`leanrl_utils/evals.py`'s `load_policy`), and plays the trained policy in
  JAX;
- [jax-shared] shared with the other JAX twins: typed PRNG keys (`jax.random.key`), `--torch-deterministic` as
  `--xla_gpu_deterministic_ops` (a no-op on the CPU, whose kernels are deterministic), and a train state that is a
  plain `NamedTuple` of params and optax states (flax's `TrainState` would add an `apply_fn` that the jitted
  functions, which close over their networks, never call).

gymnasium 1.x vector environments reset a finished episode on the *next* step by
default; this script, as the eager one, asks for same-step autoreset, so that the
step that ends an episode returns the first observation of the next one
(`next_done` marks it) and no reset step ever enters the rollout as a transition.
The environments run on the host, with the eager script's wrappers.

What these choices measure on a CPU: docs/speed.md and docs/limits.md.

    python leanrl/ppo_continuous_action_jax.py --env-id HalfCheetah-v4
"""

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
import torch  # for the checkpoint only: the eager script's state_dict, saved with torch.save
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
    env_id: str = "HalfCheetah-v4"
    """the id of the environment"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments (> 0)"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer (> 0)"""
    num_envs: int = 1
    """the number of parallel game environments (> 0)"""
    num_steps: int = 2048
    """the number of steps to run in each environment per policy rollout (> 0)"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma (in [0, 1])"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation (in [0, 1])"""
    num_minibatches: int = 32
    """the number of mini-batches (> 0)"""
    update_epochs: int = 10
    """the K epochs to update the policy (> 0)"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient (>= 0)"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.0
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
    before any work: the task exists, the minibatches divide the batch, the step budget holds whole batches."""
    harness.known_env_id(args.env_id, "gymnasium")
    harness.check_batches(args, args.num_envs * args.num_steps)


def make_env(env_id, idx, capture_video, run_name, gamma):
    def thunk():
        if capture_video and idx == 0:
            env = gym.make(env_id, render_mode="rgb_array")
            env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
        else:
            env = gym.make(env_id)
        if not isinstance(env.action_space, gym.spaces.Box):
            harness.fail(f"--env-id {env_id!r}: this PPO needs a continuous (Box) action space, "
                         f"got {env.action_space}")
        env = gym.wrappers.FlattenObservation(env)  # deal with dm_control's Dict observation space
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        env = gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
        return env

    return thunk


def make_envs(args: Args, run_name: str, num_envs: int | None = None) -> gym.vector.SyncVectorEnv:
    """The vector env, with same-step autoreset; a user's bad id or action space stops here."""
    if args.capture_video:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering
    try:
        envs = gym.vector.SyncVectorEnv(
            [make_env(args.env_id, i, args.capture_video, run_name, args.gamma) for i in range(num_envs or args.num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
    except gym.error.Error as e:
        harness.fail(f"--env-id {args.env_id!r}: {e}")
    return envs


def layer_init(features, std=np.sqrt(2), bias_const=0.0, name=None):
    """The eager script's layer_init: an orthogonal kernel scaled by `std`, a constant bias."""
    return nn.Dense(features, kernel_init=nn.initializers.orthogonal(std),
                    bias_init=nn.initializers.constant(bias_const), name=name)


class Agent(nn.Module):
    """The eager Agent's two 64-64 tanh MLPs and state-independent log std. The layers are named after
    the torch module's (`critic_0` is `critic.0`): `to_torch_state_dict` relies on it."""

    act_dim: int

    def setup(self):
        self.critic_0, self.critic_2, self.critic_4 = layer_init(64), layer_init(64), layer_init(1, std=1.0)
        self.actor_mean_0, self.actor_mean_2 = layer_init(64), layer_init(64)
        self.actor_mean_4 = layer_init(self.act_dim, std=0.01)
        self.actor_logstd = self.param("actor_logstd", nn.initializers.zeros, (1, self.act_dim))

    def get_value(self, x):
        return self.critic_4(nn.tanh(self.critic_2(nn.tanh(self.critic_0(x)))))[..., 0]

    def __call__(self, x):
        """The Gaussian's mean and log std, and the value."""
        action_mean = self.actor_mean_4(nn.tanh(self.actor_mean_2(nn.tanh(self.actor_mean_0(x)))))
        return action_mean, jnp.broadcast_to(self.actor_logstd, action_mean.shape), self.get_value(x)


def gaussian_log_prob_entropy(action, action_mean, action_logstd):
    """torch.distributions.Normal's log_prob and entropy, summed over the action's dimensions."""
    log_prob = (-((action - action_mean) ** 2) / (2 * jnp.exp(action_logstd) ** 2) - action_logstd
                - jnp.log(jnp.sqrt(2 * jnp.pi)))
    entropy = 0.5 + 0.5 * jnp.log(2 * jnp.pi) + action_logstd
    return log_prob.sum(-1), entropy.sum(-1)


def to_torch_state_dict(params) -> dict[str, torch.Tensor]:
    """The flax params as the eager Agent's `state_dict`: Dense kernels (in, out) become torch weights
    (out, in); the keys and their order are the torch module's (its own parameter first)."""
    params = jax.device_get(params["params"])
    state = {"actor_logstd": torch.as_tensor(np.array(params["actor_logstd"]))}
    for net in ("critic", "actor_mean"):
        for i in (0, 2, 4):
            layer = params[f"{net}_{i}"]
            state[f"{net}.{i}.weight"] = torch.as_tensor(np.array(layer["kernel"]).T.copy())
            state[f"{net}.{i}.bias"] = torch.as_tensor(np.array(layer["bias"]))
    return state


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
    """The rollout storage: device arrays of shape (num_steps, num_envs, ...), written by `act`."""

    obs: jax.Array
    actions: jax.Array
    logprobs: jax.Array
    dones: jax.Array
    values: jax.Array


class TrainState(NamedTuple):
    params: dict
    opt_state: optax.OptState


def make_functions(args: Args, agent: Agent, optimizer: optax.GradientTransformation):
    """The jitted acting step and update, and the pieces the update is made of (kept apart for the tests)."""

    # the rollout storage is donated: XLA writes the step into the same buffers instead of copying them
    @partial(jax.jit, donate_argnums=(1,))
    def act(params, rollout: Rollout, step, obs, done, key):
        """Sample an action for `obs` and write the step (obs, done, action, logprob, value) into the rollout."""
        key, subkey = jax.random.split(key)
        action_mean, action_logstd, value = agent.apply(params, obs)
        action = action_mean + jnp.exp(action_logstd) * jax.random.normal(subkey, action_mean.shape)
        logprob, _ = gaussian_log_prob_entropy(action, action_mean, action_logstd)
        rollout = Rollout(obs=rollout.obs.at[step].set(obs), actions=rollout.actions.at[step].set(action),
                          logprobs=rollout.logprobs.at[step].set(logprob), dones=rollout.dones.at[step].set(done),
                          values=rollout.values.at[step].set(value))
        return rollout, action, key

    def ppo_loss(params, mb):
        """The eager script's minibatch loss; returns it and (value, policy, entropy losses, old and new
        approx KL, clip fraction)."""
        action_mean, action_logstd, newvalue = agent.apply(params, mb["obs"])
        newlogprob, entropy = gaussian_log_prob_entropy(mb["actions"], action_mean, action_logstd)
        logratio = newlogprob - mb["logprobs"]
        ratio = jnp.exp(logratio)

        # calculate approx_kl http://joschu.net/blog/kl-approx.html (no gradient flows from these)
        old_approx_kl = jax.lax.stop_gradient((-logratio).mean())
        approx_kl = jax.lax.stop_gradient(((ratio - 1) - logratio).mean())
        clipfrac = jax.lax.stop_gradient((jnp.abs(ratio - 1.0) > args.clip_coef).astype(jnp.float32).mean())

        mb_advantages = mb["advantages"]
        if args.norm_adv:  # torch's std is the unbiased one (ddof=1)
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std(ddof=1) + 1e-8)

        # Policy loss
        pg_loss1 = -mb_advantages * ratio
        pg_loss2 = -mb_advantages * jnp.clip(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
        pg_loss = jnp.maximum(pg_loss1, pg_loss2).mean()

        # Value loss
        if args.clip_vloss:
            v_loss_unclipped = (newvalue - mb["returns"]) ** 2
            v_clipped = mb["values"] + jnp.clip(newvalue - mb["values"], -args.clip_coef, args.clip_coef)
            v_loss_clipped = (v_clipped - mb["returns"]) ** 2
            v_loss = 0.5 * jnp.maximum(v_loss_unclipped, v_loss_clipped).mean()
        else:
            v_loss = 0.5 * ((newvalue - mb["returns"]) ** 2).mean()

        entropy_loss = entropy.mean()
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
        scan over the minibatches inside; returns the train state and each minibatch's statistics
        (epochs, num_minibatches), and which epochs ran (all, unless --target-kl stopped them)."""

        def minibatch(state, inds):
            return minibatch_step(state, jax.tree.map(lambda x: x[inds], batch), lr)

        def epoch(carry, perm):
            state, stopped = carry
            minibatches = perm.reshape(args.num_minibatches, args.minibatch_size)
            if args.target_kl is None:
                state, stats = jax.lax.scan(minibatch, state, minibatches)
                return (state, stopped), (stats, ~stopped)
            # a scan cannot break: once an epoch's last approx_kl crosses --target-kl, the later ones are skipped
            run = lambda s: jax.lax.scan(minibatch, s, minibatches)  # noqa: E731
            def skip(state):  # the state unchanged, and zeros shaped as an epoch's statistics
                return state, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(run, state)[1])

            state, stats = jax.lax.cond(stopped, skip, run, state)
            return (state, stopped | (stats["approx_kl"][-1] > args.target_kl)), (stats, ~stopped)

        (state, _), (stats, ran) = jax.lax.scan(epoch, (state, jnp.array(False)), permutations)
        return state, stats, ran

    # the train state is donated: the new parameters and optimizer moments overwrite the old ones
    @partial(jax.jit, donate_argnums=(0,))
    def update(state: TrainState, rollout: Rollout, rewards, next_obs, next_done, lr, key):
        """GAE, then all epochs x minibatches; returns the train state and the logged statistics."""
        next_value = agent.apply(state.params, next_obs, method=Agent.get_value)
        advantages = compute_gae(rewards, rollout.values, rollout.dones, next_value, next_done, args.gamma,
                                 args.gae_lambda)
        returns = advantages + rollout.values

        # flatten the batch
        batch = dict(obs=rollout.obs, actions=rollout.actions, logprobs=rollout.logprobs, advantages=advantages,
                     returns=returns, values=rollout.values)
        batch = jax.tree.map(lambda x: x.reshape((args.batch_size,) + x.shape[2:]), batch)

        # one permutation per epoch, drawn here from the key
        key, *keys = jax.random.split(key, args.update_epochs + 1)
        permutations = jax.vmap(lambda k: jax.random.permutation(k, args.batch_size))(jnp.stack(keys))
        state, stats, ran = update_epochs(state, batch, permutations, lr)

        # logged as the eager script: the last minibatch's losses, the clip fraction over all minibatches
        last = jnp.maximum(ran.sum() - 1, 0)
        logged = {name: value[last, -1] for name, value in stats.items()}
        logged["clipfrac"] = (stats["clipfrac"] * ran[:, None]).sum() / (ran.sum() * args.num_minibatches)
        y_pred, y_true = batch["values"], batch["returns"]
        var_y = jnp.var(y_true)
        logged["explained_variance"] = jnp.where(var_y == 0, jnp.nan, 1 - jnp.var(y_true - y_pred) / var_y)
        return state, logged, key

    return act, update, update_epochs, ppo_loss


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
    envs = make_envs(args, run_name)
    obs_shape, act_shape = envs.single_observation_space.shape, envs.single_action_space.shape

    agent = Agent(act_dim=int(np.prod(act_shape)))
    params = agent.init(agent_key, jnp.zeros((1,) + obs_shape))
    # torch's Adam (eps 1e-5 as the eager script); the learning rate multiplies its output in `update`
    optimizer = optax.scale_by_adam(eps=1e-5)
    state = TrainState(params, optimizer.init(params))
    act, update, _, _ = make_functions(args, agent, optimizer)

    # ALGO Logic: Storage setup, on the device (rewards come from the host, so they are kept there)
    rollout = Rollout(obs=jnp.zeros((args.num_steps, args.num_envs) + obs_shape),
                      actions=jnp.zeros((args.num_steps, args.num_envs) + act_shape),
                      logprobs=jnp.zeros((args.num_steps, args.num_envs)),
                      dones=jnp.zeros((args.num_steps, args.num_envs)),
                      values=jnp.zeros((args.num_steps, args.num_envs)))
    rewards = np.zeros((args.num_steps, args.num_envs), dtype=np.float32)

    writer = harness.make_writer(args, run_name)
    # fps is measured from iteration `measure_after` + 1 on: the warm-up before it (here the jit
    # compilation of `act` and `update`, which a line above the progress bar announces) is logged apart
    progress = harness.Progress(args, writer, total=args.num_iterations * args.batch_size, start_step=0,
                                warmup_steps=args.measure_after * args.batch_size, busy="compiling (jax.jit)")
    episodic_return = float("nan")

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(envs=envs))

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = np.asarray(next_obs, dtype=np.float32)
    next_done = np.zeros(args.num_envs, dtype=np.float32)

    # --resume: the run as saved, at the start of an iteration (checkpoints fall there only)
    global_step, first, state, key, next_obs, next_done, episodic_return = checkpoint.resume(
        global_step, 1, state, key, next_obs, next_done, episodic_return)
    for iteration in range(first, args.num_iterations + 1):
        checkpoint.tick(global_step, iteration, state, key, next_obs, next_done, episodic_return)
        progress.tick(global_step)
        # Annealing the rate if instructed to do so.
        lrnow = args.learning_rate
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate

        for step in range(0, args.num_steps):
            global_step += args.num_envs

            # ALGO LOGIC: action logic. The host crossings of a step: the observation and done flags go
            # to the device, the action comes back (np.asarray: the host waits for the queued work to
            # finish; on a GPU each crossing is a copy): what the environment step needs, nothing more
            rollout, action, key = act(state.params, rollout, step, next_obs, next_done, key)

            # TRY NOT TO MODIFY: execute the game and log data.
            next_obs, reward, terminations, truncations, infos = envs.step(np.asarray(action))
            # as in CleanRL, a time-limit truncation ends the episode like a termination: GAE does not
            # bootstrap from the last observation (every HalfCheetah episode ends so, after 1000 steps)
            next_done = np.logical_or(terminations, truncations).astype(np.float32)
            rewards[step] = reward
            next_obs = np.asarray(next_obs, dtype=np.float32)

            # same-step autoreset: a finished episode's statistics come in final_info, once
            if "final_info" in infos and "episode" in infos["final_info"]:
                stats = infos["final_info"]["episode"]
                for i in np.flatnonzero(infos["final_info"]["_episode"]):
                    episodic_return = float(stats["r"][i])
                    writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    writer.add_scalar("charts/episodic_length", int(stats["l"][i]), global_step)
            progress.update(args.num_envs)

        # bootstrap value, GAE and the whole update: one call (the rewards travel to the device once)
        state, logged, key = update(state, rollout, rewards, next_obs, next_done, lrnow, key)
        # the one fetch of the statistics per iteration, for logging; it waits for the update to finish, so
        # the host's reward buffer (which JAX may read in place on the CPU) is rewritten only after it
        logged = jax.device_get(logged)

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        writer.add_scalar("charts/learning_rate", lrnow, global_step)
        harness.log_losses(writer, logged, global_step)
        progress.log(global_step, episodic_return)
    checkpoint.close(global_step, args.num_iterations + 1, state, key, next_obs, next_done, episodic_return)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        # the eager script's checkpoint: its Agent's state_dict, and the observation normalizer's
        # statistics beside it (they belong to the policy)
        rms = envs.envs[0].get_wrapper_attr("obs_rms")
        obs_rms = {"mean": torch.as_tensor(rms.mean), "var": torch.as_tensor(rms.var), "count": float(rms.count)}
        torch.save({"algo": "ppo_continuous", "args": asdict(args), "agent": to_torch_state_dict(state.params),
                    "obs_rms": obs_rms}, model_path)
        print(f"model saved to {model_path}")

        # played in one environment (without video) under the training statistics, frozen
        eval_envs = make_envs(Args(env_id=args.env_id, gamma=args.gamma), "", num_envs=1)
        evals.freeze_normalization(eval_envs, obs_rms)
        mean_action = jax.jit(lambda params, obs: agent.apply(params, obs)[0])  # one program per step

        def act(obs):  # the Gaussian policy's mean action: the trained policy without its exploration noise
            return np.asarray(mean_action(state.params, np.asarray(obs, dtype=np.float32)))
        for idx, episodic_return in enumerate(evals.play(eval_envs, act, args.eval_episodes, args.seed)):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
