"""Soft Actor-Critic (SAC) for continuous actions: the eager PyTorch reference.

CleanRL's algorithm and hyperparameters: twin Q-networks with target copies, a squashed
Gaussian policy, automatic entropy tuning and delayed policy updates. Its default task is
LeanRL's, HalfCheetah-v4 (CleanRL's SAC defaults to Hopper-v4). Read it next to
`sac_continuous_action_torchcompile.py`, which learns the same thing (faster with
--compile); on the CPU the two draw the same random numbers, so their runs can be compared
number for number (up to float rounding). Unlike CleanRL's script, this one steps a single
gymnasium environment (no vector env), keeps its replay buffer in a small class below, and
writes one update as a function of a batch.

    python leanrl/sac_continuous_action.py --env-id HalfCheetah-v4
"""

import copy
import os
import random
import time
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Adam
from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), playing a policy


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
    """the environment id of the task"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments (> --learning-starts)"""
    buffer_size: int = int(1e6)
    """the replay memory buffer size (>= --batch-size)"""
    gamma: float = 0.99
    """the discount factor gamma (in [0, 1])"""
    tau: float = 0.005
    """target smoothing coefficient (in (0, 1])"""
    batch_size: int = 256
    """the batch size of sample from the replay memory (> 0)"""
    learning_starts: int = 5000
    """timestep to start learning (>= 0)"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer (> 0)"""
    q_lr: float = 1e-3
    """the learning rate of the Q network optimizer (> 0)"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed) (> 0)"""
    target_network_frequency: int = 1
    """the frequency of updates for the target networks (> 0)"""
    alpha: float = 0.2
    """entropy regularization coefficient (>= 0)"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient"""
    measure_after: int = 20
    """updates left out of the fps window (the warm-up: compilation, CUDA-graph capture) (>= 0)"""


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
        harness.fail(f"--env-id {env_id!r}: SAC needs a continuous (Box) action space, got {env.action_space}")
    if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
        harness.fail(f"--env-id {env_id!r}: needs a flat Box observation space, got {env.observation_space}")
    if capture_video:
        env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env.action_space.seed(seed)
    return env


# ALGO LOGIC: initialize agent here:
class SoftQNetwork(nn.Module):
    def __init__(self, env):
        super().__init__()
        obs_dim = np.prod(env.observation_space.shape)
        act_dim = np.prod(env.action_space.shape)
        self.fc1 = nn.Linear(obs_dim + act_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


LOG_STD_MAX = 2
LOG_STD_MIN = -5


class Actor(nn.Module):
    def __init__(self, env):
        super().__init__()
        obs_dim = np.prod(env.observation_space.shape)
        act_dim = np.prod(env.action_space.shape)
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mean = nn.Linear(256, act_dim)
        self.fc_logstd = nn.Linear(256, act_dim)
        # action rescaling
        high, low = env.action_space.high, env.action_space.low
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        mean = self.fc_mean(x)
        log_std = self.fc_logstd(x)
        log_std = torch.tanh(log_std)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)  # From SpinUp / Denis Yarats
        return mean, log_std

    def get_action(self, x):
        mean, log_std = self(x)
        std = log_std.exp()
        normal = torch.distributions.Normal(mean, std)
        x_t = normal.rsample()  # for reparameterization trick (mean + std * N(0,1))
        y_t = torch.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t)
        # Enforcing Action Bound
        log_prob -= torch.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        log_prob = log_prob.sum(1, keepdim=True)
        mean = torch.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean


class ReplayBuffer:
    """A circular buffer of transitions, one row of a single CPU tensor each (observation, next observation,
    action, reward, done): a batch is gathered with one index and split into its fields."""

    def __init__(self, size: int, obs_dim: int, act_dim: int, device: torch.device):
        self.widths = [obs_dim, obs_dim, act_dim, 1, 1]  # observations, next_observations, actions, rewards, dones
        self.size, self.pos, self.full, self.device = size, 0, False, device
        harness.check_memory("--buffer-size", size * sum(self.widths) * 4, "cpu")  # float32 rows: refused if too many
        self.rows = torch.zeros(size, sum(self.widths))

    def add(self, obs, next_obs, action, reward, done):
        self.rows[self.pos] = torch.as_tensor(np.concatenate([obs, next_obs, action, [reward, done]]))
        self.pos = (self.pos + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, batch_size: int) -> dict:
        """A batch drawn uniformly from the transitions held, on `device`."""
        idx = torch.randint(0, self.size if self.full else self.pos, (batch_size,))
        return {key: value.to(self.device) for key, value in self.batch(idx).items()}

    def batch(self, idx: torch.Tensor) -> dict:
        """The transitions at `idx`, field by field (views of one gathered block of rows)."""
        keys = ("observations", "next_observations", "actions", "rewards", "dones")
        return dict(zip(keys, self.rows[idx].split(self.widths, dim=1)))


def optimize(optimizer: Adam, loss: torch.Tensor) -> None:
    """One gradient step of `optimizer` on `loss`."""
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def main(args: Args) -> None:
    run_name = harness.run_name(args)  # runs/<env>__<exp>__<seed>__<time>, or the run --resume names

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = harness.pick_device(args)  # CUDA if asked for and usable, else the CPU (saying why); CPU threads

    # env setup
    env = make_env(args.env_id, args.seed, args.capture_video, run_name)

    # the networks are built on the CPU and moved: their initial weights come from the CPU generator, on any device
    actor = Actor(env).to(device)
    qf1 = SoftQNetwork(env).to(device)
    qf2 = SoftQNetwork(env).to(device)
    qf1_target = copy.deepcopy(qf1)  # the targets start as exact copies
    qf2_target = copy.deepcopy(qf2)
    q_optimizer = Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr)
    actor_optimizer = Adam(list(actor.parameters()), lr=args.policy_lr)

    # Automatic entropy tuning
    if args.autotune:
        target_entropy = -torch.prod(torch.Tensor(env.action_space.shape).to(device)).item()
        log_alpha = torch.zeros(1, requires_grad=True, device=device)
        a_optimizer = Adam([log_alpha], lr=args.q_lr)

    # the replay buffer: every step's transition (its true next observation, done only where the episode terminated),
    # from which each update draws a uniform batch
    rb = ReplayBuffer(args.buffer_size, env.observation_space.shape[0], env.action_space.shape[0], device)

    def update(data: dict, policy_step: bool, target_step: bool) -> dict:
        """One update on a batch: the critics; with `policy_step` the actor and the temperature, `policy_frequency`
        times; with `target_step` the target networks. Returns the values to log, detached from autograd's graph."""
        alpha = log_alpha.exp().item() if args.autotune else args.alpha
        with torch.no_grad():
            next_state_actions, next_state_log_pi, _ = actor.get_action(data["next_observations"])
            qf1_next_target = qf1_target(data["next_observations"], next_state_actions)
            qf2_next_target = qf2_target(data["next_observations"], next_state_actions)
            min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
            next_q_value = data["rewards"].flatten() + (1 - data["dones"].flatten()) * args.gamma * (min_qf_next_target).view(-1)

        qf1_a_values = qf1(data["observations"], data["actions"]).view(-1)
        qf2_a_values = qf2(data["observations"], data["actions"]).view(-1)
        qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
        qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
        qf_loss = qf1_loss + qf2_loss

        # optimize the model
        optimize(q_optimizer, qf_loss)
        out = dict(qf1_values=qf1_a_values.detach().mean(), qf2_values=qf2_a_values.detach().mean(),
                   qf1_loss=qf1_loss.detach(), qf2_loss=qf2_loss.detach(), qf_loss=qf_loss.detach() / 2.0)

        if policy_step:  # TD 3 Delayed update support
            for _ in range(args.policy_frequency):  # compensate for the delay by doing 'policy_frequency' instead of 1
                pi, log_pi, _ = actor.get_action(data["observations"])
                qf1_pi = qf1(data["observations"], pi)
                qf2_pi = qf2(data["observations"], pi)
                min_qf_pi = torch.min(qf1_pi, qf2_pi)
                actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
                optimize(actor_optimizer, actor_loss)
                out["actor_loss"] = actor_loss.detach()

                if args.autotune:
                    with torch.no_grad():
                        _, log_pi, _ = actor.get_action(data["observations"])
                    alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
                    optimize(a_optimizer, alpha_loss)
                    alpha = log_alpha.exp().item()
                    out["alpha_loss"] = alpha_loss.detach()

        out["alpha"] = alpha

        # update the target networks: each target weight moves `tau` of the way to its network's (Polyak
        # averaging), so that the critics' targets change slowly
        if target_step:
            for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
            for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
        return out

    writer = harness.make_writer(args, run_name)
    # fps is measured from the `measure_after`-th update on: the warm-up before it is logged apart
    progress = harness.Progress(args, writer, total=args.total_timesteps, start_step=args.learning_starts + 1,
                                warmup_steps=args.measure_after)
    # the latest episode's return; the latest losses (the actor's and temperature's from the last policy step)
    episodic_return, losses = float("nan"), {}

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(
        actor=actor, qf1=qf1, qf2=qf2, qf1_target=qf1_target, qf2_target=qf2_target, q_optimizer=q_optimizer,
        actor_optimizer=actor_optimizer, rb=rb, env=env,
        **(dict(log_alpha=log_alpha, a_optimizer=a_optimizer) if args.autotune else {})))

    # TRY NOT TO MODIFY: start the game
    obs, _ = env.reset(seed=args.seed)
    first, obs, episodic_return, losses = checkpoint.resume(0, obs, episodic_return, losses)  # --resume: as saved
    for global_step in range(first, args.total_timesteps):
        checkpoint.tick(global_step, obs, episodic_return, losses)  # a checkpoint when one is due, or asked for
        progress.tick(global_step)  # the bar; the fps window opens and closes at its bounds
        # ALGO LOGIC: put action logic here
        if global_step < args.learning_starts:
            action = env.action_space.sample()
        else:
            with torch.no_grad():
                action, _, _ = actor.get_action(torch.as_tensor(obs, device=device, dtype=torch.float32)[None])
            action = action[0].cpu().numpy()

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, reward, terminated, truncated, info = env.step(action)

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        if "episode" in info:
            episodic_return = float(info["episode"]["r"])
            writer.add_scalar("charts/episodic_return", episodic_return, global_step)
            writer.add_scalar("charts/episodic_length", int(info["episode"]["l"]), global_step)

        # the buffer keeps the true next observation; only a termination (not a time-limit truncation)
        # cuts the bootstrap
        rb.add(obs, next_obs, action, reward, terminated)

        # TRY NOT TO MODIFY: CRUCIAL step easy to overlook
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            data = rb.sample(args.batch_size)
            losses |= update(data, policy_step=global_step % args.policy_frequency == 0,
                             target_step=global_step % args.target_network_frequency == 0)

            if global_step % 100 == 0:
                harness.log_losses(writer, losses, global_step)  # read back to the host here, at logging steps only
                progress.log(global_step, episodic_return)
    checkpoint.close(args.total_timesteps, obs, episodic_return, losses)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        torch.save({"algo": "sac", "args": asdict(args), "actor": actor.state_dict(), "qf1": qf1.state_dict(),
                    "qf2": qf2.state_dict()}, model_path)
        print(f"model saved to {model_path}")

        def act(obs):  # the policy's mean action, as CleanRL's evaluation plays it
            return actor.get_action(torch.as_tensor(obs, device=device, dtype=torch.float32)[None])[2][0].cpu().numpy()
        for idx, episodic_return in enumerate(evals.play(make_env(args.env_id, args.seed), act, args.eval_episodes,
                                                         args.seed)):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
