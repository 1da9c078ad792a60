"""Proximal Policy Optimization (PPO) for continuous actions: the eager PyTorch reference.

CleanRL's algorithm and defaults: a Gaussian policy and a value network (64-64 tanh
MLPs), observation and reward normalization with clipping, GAE, clipped surrogate
and value losses, advantage normalization, learning-rate annealing and gradient
clipping. Read it next to `ppo_continuous_action_torchcompile.py`, which learns the
same thing faster; on the CPU the two draw the same random numbers, so that their
runs agree number for number up to float rounding (the optimized script's kernels
round differently: the tests compare within a tolerance).

gymnasium 1.x vector environments reset a finished episode on the *next* step by
default; this script asks for same-step autoreset, so that the step that ends an
episode returns the first observation of the next one (`next_done` marks it) and no
reset step ever enters the rollout as a transition.

    python leanrl/ppo_continuous_action.py --env-id HalfCheetah-v4
"""

import os
import random
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), playing a policy
from torch.distributions.normal import Normal
from torch.optim import Adam


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=True`"""
    cuda: bool = True
    """if toggled, cuda will be used when it is available"""
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
    """iterations left out of the fps window (the warm-up: compilation, CUDA-graph capture) (>= 0)"""

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


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        obs_dim = np.array(envs.single_observation_space.shape).prod()
        act_dim = np.prod(envs.single_action_space.shape)
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, act_dim), std=0.01),
        )
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        action_mean = self.actor_mean(x)
        action_logstd = self.actor_logstd.expand_as(action_mean)
        action_std = torch.exp(action_logstd)
        probs = Normal(action_mean, action_std)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)


def gae_deltas(rewards, values, dones, next_value, next_done, gamma: float, gae_lambda: float):
    """The per-step terms of GAE, all steps at once: A[t] = delta[t] + coef[t] * A[t + 1]."""
    nextnonterminal = 1.0 - torch.cat([dones[1:], next_done[None]])
    nextvalues = torch.cat([values[1:], next_value])
    delta = rewards + gamma * nextvalues * nextnonterminal - values
    return delta, gamma * gae_lambda * nextnonterminal


def compute_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """Generalized advantage estimates of a rollout (CleanRL's loop, its per-step terms computed at once, above):
    a reverse scan; `dones[t]` marks obs t as an episode's first."""
    delta, coef = gae_deltas(rewards, values, dones, next_value, next_done, gamma, gae_lambda)
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(rewards.shape[0])):
        advantages[t] = lastgaelam = delta[t] + coef[t] * lastgaelam
    return advantages


def main(args: Args) -> None:
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
    run_name = harness.run_name(args)  # runs/<env>__<exp>__<seed>__<time>, or the run --resume names

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = harness.pick_device(args)  # CUDA if asked for and usable, else the CPU (saying why); CPU threads

    # env setup
    envs = make_envs(args, run_name)

    # the network is built on the CPU and moved: the same initial weights, drawn from the CPU generator, on
    # any device
    agent = Agent(envs).to(device)
    optimizer = Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # ALGO Logic: Storage setup
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    def update(mb_inds):
        """One minibatch update, from its indices into the flattened rollout (`batch`, by field): the losses,
        their gradients and the Adam step. Returns the losses that are logged."""
        mb = {name: x[mb_inds] for name, x in batch.items()}
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb["obs"], mb["actions"])
        logratio = newlogprob - mb["logprobs"]
        ratio = logratio.exp()

        with torch.no_grad():
            # calculate approx_kl http://joschu.net/blog/kl-approx.html
            old_approx_kl = (-logratio).mean()
            approx_kl = ((ratio - 1) - logratio).mean()
            clipfrac = ((ratio - 1.0).abs() > args.clip_coef).float().mean().item()

        mb_advantages = mb["advantages"]
        if args.norm_adv:
            mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

        # Policy loss
        pg_loss1 = -mb_advantages * ratio
        pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
        pg_loss = torch.max(pg_loss1, pg_loss2).mean()

        # Value loss
        newvalue = newvalue.view(-1)
        if args.clip_vloss:
            v_loss_unclipped = (newvalue - mb["returns"]) ** 2
            v_clipped = mb["values"] + torch.clamp(
                newvalue - mb["values"],
                -args.clip_coef,
                args.clip_coef,
            )
            v_loss_clipped = (v_clipped - mb["returns"]) ** 2
            v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
            v_loss = 0.5 * v_loss_max.mean()
        else:
            v_loss = 0.5 * ((newvalue - mb["returns"]) ** 2).mean()

        entropy_loss = entropy.mean()
        loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
        return dict(value_loss=v_loss.detach(), policy_loss=pg_loss.detach(), entropy=entropy_loss.detach(),
                    old_approx_kl=old_approx_kl, approx_kl=approx_kl, clipfrac=clipfrac)

    writer = harness.make_writer(args, run_name)
    # fps is measured from iteration `measure_after` + 1 on: the warm-up before it is logged apart
    progress = harness.Progress(args, writer, total=args.num_iterations * args.batch_size, start_step=0,
                                warmup_steps=args.measure_after * args.batch_size)
    episodic_return = float("nan")

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(agent=agent, optimizer=optimizer, envs=envs))

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)

    # --resume: the run as saved, at the start of an iteration (checkpoints fall there only)
    global_step, first, next_obs, next_done, episodic_return = checkpoint.resume(
        global_step, 1, next_obs, next_done, episodic_return)
    for iteration in range(first, args.num_iterations + 1):
        checkpoint.tick(global_step, iteration, next_obs, next_done, episodic_return)
        progress.tick(global_step)
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            # ALGO LOGIC: action logic
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            # as in CleanRL, a time-limit truncation ends the episode like a termination: GAE does not
            # bootstrap from the last observation (every HalfCheetah episode ends so, after 1000 steps)
            next_done = np.logical_or(terminations, truncations)
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)

            # same-step autoreset: a finished episode's statistics come in final_info, once
            if "final_info" in infos and "episode" in infos["final_info"]:
                stats = infos["final_info"]["episode"]
                for i in np.flatnonzero(infos["final_info"]["_episode"]):
                    episodic_return = float(stats["r"][i])
                    writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                    writer.add_scalar("charts/episodic_length", int(stats["l"][i]), global_step)
            progress.update(args.num_envs)

        # bootstrap value if not done
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = compute_gae(rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda)
            returns = advantages + values

        # flatten the batch: its named fields, which the minibatch updates take by index
        batch = dict(obs=obs.reshape((-1,) + envs.single_observation_space.shape), logprobs=logprobs.reshape(-1),
                     actions=actions.reshape((-1,) + envs.single_action_space.shape),
                     advantages=advantages.reshape(-1), returns=returns.reshape(-1), values=values.reshape(-1))

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            # a torch permutation (CleanRL shuffles with numpy): on the CPU the eager and optimized scripts draw
            # the same one
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]
                out = update(mb_inds)
                clipfracs.append(out["clipfrac"])

            if args.target_kl is not None and out["approx_kl"] > args.target_kl:
                break

        y_pred, y_true = batch["values"].cpu().numpy(), batch["returns"].cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        harness.log_losses(writer, out | dict(clipfrac=np.mean(clipfracs), explained_variance=explained_var),
                           global_step)
        progress.log(global_step, episodic_return)
    checkpoint.close(global_step, args.num_iterations + 1, next_obs, next_done, episodic_return)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        # the observation normalizer's statistics belong to the policy: save them beside it
        rms = envs.envs[0].get_wrapper_attr("obs_rms")
        obs_rms = {"mean": torch.as_tensor(rms.mean), "var": torch.as_tensor(rms.var), "count": float(rms.count)}
        torch.save({"algo": "ppo_continuous", "args": asdict(args), "agent": agent.state_dict(), "obs_rms": obs_rms},
                   model_path)
        print(f"model saved to {model_path}")

        # played in one environment (without video) under the training statistics, frozen
        eval_envs = make_envs(Args(env_id=args.env_id, gamma=args.gamma), "", num_envs=1)
        evals.freeze_normalization(eval_envs, obs_rms)

        def act(obs):  # the Gaussian policy's mean action: the trained policy without its exploration noise
            return agent.actor_mean(torch.as_tensor(obs, device=device, dtype=torch.float32)).cpu().numpy()
        for idx, episodic_return in enumerate(evals.play(eval_envs, act, args.eval_episodes, args.seed)):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
