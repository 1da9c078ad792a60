"""Proximal Policy Optimization (PPO) on Atari through envpool: the eager PyTorch reference.

CleanRL's algorithm and defaults: the Nature-CNN agent on envpool's preprocessed
frames (84x84 grey, frame stack 4, episodic life, clipped rewards), GAE, clipped
surrogate and value losses, advantage normalization, learning-rate annealing and
gradient clipping. Read it next to `ppo_atari_envpool_torchcompile.py`, its optimized
twin: on the CPU the two draw the same random numbers, and their runs agree up to the
rounding of the twin's kernels (the tests compare them within a tolerance).

How it differs from CleanRL's `ppo_atari_envpool.py`:
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

    python leanrl/ppo_atari_envpool.py --env-id Breakout-v5
"""

import os
import random
import time
from dataclasses import asdict, dataclass

import envpool
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), playing a policy
from torch.distributions.categorical import Categorical


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


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        self.network = nn.Sequential(
            layer_init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            layer_init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.actor = layer_init(nn.Linear(512, envs.single_action_space.n), std=0.01)
        self.critic = layer_init(nn.Linear(512, 1), std=1)

    @staticmethod
    def frames(x):
        return x / 255.0  # the uint8 frames as floats in [0, 1]

    def get_value(self, x):
        return self.critic(self.network(self.frames(x)))

    def get_action_and_value(self, x, action=None):
        hidden = self.network(self.frames(x))
        logits = self.actor(hidden)
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)


def masked_mean(x, mask, count):
    """The mean of x over the entries where mask is 1, `count` of them."""
    return (x * mask).sum() / count


def compute_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """Generalized advantage estimates of a rollout (CleanRL's loop); `dones[t]` marks obs t as an episode's first."""
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    num_steps = rewards.shape[0]
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
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
    envs = make_envs(args, seed=harness.env_seed(args))  # --resume: new games (envpool cannot save its own)

    # built on the CPU and moved: the initial weights come from the CPU generator, the same on any device
    agent = Agent(envs).to(device)

    def policy(obs):  # the acting step
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(obs)
        return action, logprob, value.flatten()

    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    episode_stats = EpisodeStats(args.num_envs)

    # ALGO Logic: Storage setup: the rollout's fields, by name (flattened into the batch, cut into minibatches)
    shape = (args.num_steps, args.num_envs)
    rollout = {key: torch.zeros(shape).to(device) for key in ("logprobs", "rewards", "dones", "values")}
    rollout["obs"] = torch.zeros(shape + envs.single_observation_space.shape, dtype=torch.uint8).to(device)
    rollout["actions"] = torch.zeros(shape, dtype=torch.long).to(device)  # integers, as sampled

    def update(mb):
        """One minibatch update (`mb`: the batch's fields at the minibatch's indices); returns its logged losses."""
        _, newlogprob, entropy, newvalue = agent.get_action_and_value(mb["obs"], mb["actions"])
        logratio = newlogprob - mb["logprobs"]
        ratio = logratio.exp()
        # envpool resets an env on the step after it was done (dones[t]): that step ignored the
        # action and is no transition, so it is left out of the losses
        mb_valid = 1.0 - mb["dones"]
        n_valid = mb_valid.sum().clamp(min=1.0)

        with torch.no_grad():
            # calculate approx_kl http://joschu.net/blog/kl-approx.html
            old_approx_kl = masked_mean(-logratio, mb_valid, n_valid)
            approx_kl = masked_mean((ratio - 1) - logratio, mb_valid, n_valid)
            clipfrac = masked_mean(((ratio - 1.0).abs() > args.clip_coef).float(), mb_valid, n_valid)

        mb_advantages = mb["advantages"]
        if args.norm_adv:
            mean = masked_mean(mb_advantages, mb_valid, n_valid)
            std = (((mb_advantages - mean) ** 2 * mb_valid).sum() / (n_valid - 1).clamp(min=1.0)).sqrt()
            mb_advantages = (mb_advantages - mean) / (std + 1e-8)

        # Policy loss
        pg_loss1 = -mb_advantages * ratio
        pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
        pg_loss = masked_mean(torch.max(pg_loss1, pg_loss2), mb_valid, n_valid)

        # Value loss
        newvalue = newvalue.view(-1)
        if args.clip_vloss:
            v_loss_unclipped = (newvalue - mb["returns"]) ** 2
            v_clipped = mb["values"] + torch.clamp(newvalue - mb["values"], -args.clip_coef, args.clip_coef)
            v_loss_clipped = (v_clipped - mb["returns"]) ** 2
            v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
            v_loss = 0.5 * masked_mean(v_loss_max, mb_valid, n_valid)
        else:
            v_loss = 0.5 * masked_mean((newvalue - mb["returns"]) ** 2, mb_valid, n_valid)

        entropy_loss = masked_mean(entropy, mb_valid, n_valid)
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

    def collect(global_step, next_obs, next_done, episodic_return):
        """One rollout: `num_steps` steps of every env, written into `rollout`; returns the loop's values after it."""
        for step in range(0, args.num_steps):
            global_step += args.num_envs
            rollout["obs"][step] = next_obs
            rollout["dones"][step] = next_done

            # ALGO LOGIC: action logic
            action, logprob, value = policy(next_obs)
            rollout["values"][step] = value
            rollout["actions"][step] = action
            rollout["logprobs"][step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations)
            rollout["rewards"][step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.as_tensor(next_obs).to(device), torch.Tensor(next_done).to(device)

            for _, episodic_return, episodic_length in episode_stats.update(infos, terminations, truncations):
                writer.add_scalar("charts/episodic_return", episodic_return, global_step)
                writer.add_scalar("charts/episodic_length", episodic_length, global_step)
            progress.update(args.num_envs)
        return global_step, next_obs, next_done, episodic_return

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(agent=agent, optimizer=optimizer), envpool=True)

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    next_obs, _ = envs.reset()
    next_obs = torch.as_tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)

    # --resume: the run as saved, at the start of an iteration (checkpoints fall there only)
    global_step, first, episodic_return = checkpoint.resume(global_step, 1, episodic_return)
    for iteration in range(first, args.num_iterations + 1):
        checkpoint.tick(global_step, iteration, episodic_return)  # a checkpoint when one is due, or asked for
        progress.tick(global_step)
        global_step, next_obs, next_done, episodic_return = collect(global_step, next_obs, next_done, episodic_return)

        # bootstrap value if not done
        rewards, values, dones = rollout["rewards"], rollout["values"], rollout["dones"]
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = compute_gae(rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda)
            returns = advantages + values

        # flatten the batch: each field, (steps, envs, ...) -> (steps x envs, ...)
        batch = {key: x.flatten(0, 1) for key, x in dict(rollout, advantages=advantages, returns=returns).items()}

        # Annealing the rate if instructed to do so (the update reads it, the rollout does not).
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        # Optimizing the policy and value network
        clipfracs = []
        for epoch in range(args.update_epochs):
            # a torch permutation (CleanRL's is numpy's): on the CPU the eager and optimized scripts draw the same one
            b_inds = torch.randperm(args.batch_size, device=device)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]
                losses = update({key: x[mb_inds] for key, x in batch.items()})
                clipfracs += [losses["clipfrac"].item()]

            if args.target_kl is not None and losses["approx_kl"] > args.target_kl:
                break

        # over the transitions only, as the losses: envpool's reset steps are left out
        kept = (1.0 - batch["dones"]).cpu().numpy() > 0
        y_pred, y_true = batch["values"].cpu().numpy()[kept], batch["returns"].cpu().numpy()[kept]
        var_y = np.var(y_true) if len(y_true) else 0.0
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y

        # TRY NOT TO MODIFY: record rewards for plotting purposes (the last minibatch's losses, the mean clip fraction)
        writer.add_scalar("charts/learning_rate", optimizer.param_groups[0]["lr"], global_step)
        harness.log_losses(writer, dict(losses, clipfrac=np.mean(clipfracs), explained_variance=explained_var), global_step)
        progress.log(global_step, episodic_return)
    checkpoint.close(global_step, args.num_iterations + 1, episodic_return)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        torch.save({"algo": "ppo_atari", "args": asdict(args), "agent": agent.state_dict()}, model_path)
        print(f"model saved to {model_path}")

        def act(obs):  # the policy samples its action, as in training
            return agent.get_action_and_value(torch.as_tensor(obs, device=device))[0].cpu().numpy()
        # whole games (unclipped rewards), on one environment seeded with the run's seed
        for idx, episodic_return in enumerate(evals.play(make_envs(args, num_envs=1), act, args.eval_episodes,
                                                         args.seed, stats=EpisodeStats(1))):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
