"""Deep Q-Network (DQN) for discrete actions, made fast.

The algorithm, defaults and random numbers (the same batches, the same ε-greedy choices) of `dqn.py`; only the
execution changes, so that on the CPU the two runs agree step by step up to rounding. Each optimization is named,
the same name in every pair, and each change from `dqn.py` carries its name in its comment, so that
`diff -u dqn.py dqn_torchcompile.py` reads as this list (what each measured: docs/optimizations.md):

- [device-buffer] the replay buffer is one tensor of rows on the training device, staged on the host and copied
  over together; a batch is one gather there;
- [functional-greedy] the greedy action calls the layers' functions, not the module: at batch 1 the module's
  machinery costs more than the math;
- [detached-policy] the policy that acts runs the trained weights detached, in a weightless copy;
- [fused-adam] torch's fused Adam: one call over every weight, its state on the device;
- [lerp-target] the target network moves with one fused `lerp_`;
- [compile] `--compile`: `torch.compile` of the loss with its backward pass (`zero_grad` and the fused Adam step
  stay eager), and of the acting step on CUDA only (`COMPILED_ACTING`);
- [cudagraphs] `--cudagraphs`: the whole update, the acting step and the target's update, each replayed as one
  CUDA graph (tensordict's `CudaGraphModule`).

Kept as in the eager script: ε-greedy decides on the host. With one environment the action comes back every step
anyway, so the branch costs no sync, and an exploring step runs no network.

    python leanrl/dqn_torchcompile.py --compile --cudagraphs
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
import torch.optim as optim
from leanrl_utils import evals, harness  # the contract's plumbing (flags, errors, device, logging), playing a policy
from tensordict import from_module
from tensordict.nn import CudaGraphModule


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

    compile: bool = False
    """whether to use torch.compile"""
    cudagraphs: bool = False
    """whether to use CUDA graphs (needs CUDA)"""


def check_args(args: Args) -> None:
    """What the flags' declared ranges (the end of their docstrings, checked by the harness) cannot say, checked
    before any work: the task exists."""
    harness.known_env_id(args.env_id, "gymnasium")


# [compile] the devices where --compile compiles the acting step: on a CPU a compiled call's fixed cost is above the
# math of one greedy action at batch 1
COMPILED_ACTING = ("cuda",)


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
class QNetwork(nn.Module):
    def __init__(self, env):
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(np.array(env.observation_space.shape).prod(), 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, env.action_space.n),
        )

    def forward(self, x):
        return self.network(x)

    def greedy_action(self, x):
        """[functional-greedy] The action of the highest Q-value, from the layers' functions on their weights: at batch
        1 the module calls (Sequential, five modules, their hook checks) cost more than the math."""
        first, _, second, _, last = self.network
        x = F.linear(x, first.weight, first.bias).relu()
        x = F.linear(x, second.weight, second.bias).relu()
        return F.linear(x, last.weight, last.bias).argmax(dim=-1)


def linear_schedule(start_e: float, end_e: float, duration: int, t: int):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


class ReplayBuffer:
    """[device-buffer] A circular buffer of transitions on the training device, one row of a single tensor each
    (observation, next observation, action, reward, done): a batch is one gather there, and only its indices cross
    from the host. Transitions are staged on the host and cross together when a batch is drawn: two copies, not
    five small ones per step."""

    def __init__(self, size: int, obs_dim: int, device: torch.device, seed: int, stage: int = 64):
        # the batches are drawn from a generator of their own: exploring does not shift them
        self.generator = torch.Generator().manual_seed(seed)
        self.obs_dim, self.size, self.pos, self.full, self.n_staged, self.device = obs_dim, size, 0, False, 0, device
        harness.check_memory("--buffer-size", size * (2 * obs_dim + 3) * 4, device)  # refused if it cannot fit
        self.rows = torch.zeros(size, 2 * obs_dim + 3, device=device)
        self.staged = torch.zeros(stage, 2 * obs_dim + 3)
        self.staged_np = self.staged.numpy()  # writing a row there is cheap

    def add(self, obs, next_obs, action, reward, done):
        row = self.staged_np[self.n_staged]  # a staged host row; a full stage crosses together (flush)
        row[: self.obs_dim], row[self.obs_dim: 2 * self.obs_dim], row[-3:] = obs, next_obs, (action, reward, done)
        self.n_staged += 1
        if self.n_staged == len(self.staged_np):
            self.flush()

    def flush(self):
        n, self.n_staged = self.n_staged, 0
        idx = (self.pos + torch.arange(n)) % self.size
        # a blocking copy, so that the staged rows can be written again at once
        self.rows[idx.to(self.device)] = self.staged[:n].to(self.device)
        self.full = self.full or self.pos + n >= self.size
        self.pos = (self.pos + n) % self.size

    def sample(self, batch_size: int) -> dict:
        self.flush()
        # indices from the CPU generator, as in the eager script (the same batches on a GPU), one small copy over
        idx = torch.randint(0, self.size if self.full else self.pos, (batch_size,), generator=self.generator)
        rows, d = self.rows[idx.to(self.device, non_blocking=True)], self.obs_dim
        # views of the gathered rows, but the actions: converted to integers (a copy) to index the Q-values
        return dict(observations=rows[:, :d], next_observations=rows[:, d:2 * d], actions=rows[:, -3:-2].long(),
                    rewards=rows[:, -2:-1], dones=rows[:, -1:])


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

    # built on the CPU and moved: the initial weights come from the CPU generator, the same on any device
    q_network = QNetwork(env).to(device)
    # [fused-adam] one call per step over every weight; capturable, for --cudagraphs to replay it
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, fused=True,
                           capturable=args.cudagraphs and device.type == "cuda")
    target_network = copy.deepcopy(q_network)  # the target starts as an exact copy

    rb = ReplayBuffer(args.buffer_size, env.observation_space.shape[0], device, args.seed)
    writer = harness.make_writer(args, run_name)
    # fps is measured from the `measure_after`-th update on: the warm-up before it is logged apart
    progress = harness.Progress(args, writer, total=args.total_timesteps, start_step=args.learning_starts + 1,
                                warmup_steps=args.measure_after * args.train_frequency)
    episodic_return = float("nan")

    # [detached-policy] the policy that acts reads the same weights, detached: no autograd bookkeeping
    with torch.device("meta"):  # a shell without weights of its own: it runs the weights put into it
        q_network_detach = QNetwork(env)
    from_module(q_network).data.to_module(q_network_detach, preserve_module_state=False)

    def policy(obs):  # the greedy action (ε-greedy, in the loop, explores around it)
        return q_network_detach.greedy_action(obs)  # [detached-policy] no torch.no_grad() to enter

    def loss_and_grads(data):  # the TD loss of a batch and its gradients; returns the values to log, detached
        with torch.no_grad():
            target_max, _ = target_network(data["next_observations"]).max(dim=1)
            td_target = data["rewards"].flatten() + args.gamma * target_max * (1 - data["dones"].flatten())
        old_val = q_network(data["observations"]).gather(1, data["actions"]).squeeze()
        loss = F.mse_loss(td_target, old_val)
        loss.backward()
        return dict(td_loss=loss.detach(), q_values=old_val.detach().mean())

    def update_target():  # the target network moves toward the Q-network by tau (tau = 1: a hard copy)
        # [lerp-target] one fused lerp over every weight instead of a Python loop of copies
        from_module(target_network).data.lerp_(from_module(q_network).data, args.tau)

    def update(data):
        """One update: the TD loss's gradients, then an optimizer step; returns the values to log."""
        optimizer.zero_grad()
        out = loss_and_grads(data)
        optimizer.step()
        return out

    if args.compile:  # [compile]
        if device.type == "cpu":  # inductor's C++ wrapper: kernels called from C++, a smaller fixed cost per call
            torch._inductor.config.cpp_wrapper = True
        # the backward pass traced into the loss's graph; zero_grad and the fused Adam step, one call each, stay eager
        torch._dynamo.config.trace_autograd_ops = True
        loss_and_grads = torch.compile(loss_and_grads)
        if device.type in COMPILED_ACTING:
            policy = torch.compile(policy)

    if args.cudagraphs:
        # [cudagraphs] the update, the acting step and the target's update each one graph replay, captured once the
        # warm-up calls have let compilation finish (without CUDA: called directly, each tensor argument cloned)
        warmup = 4 if args.compile else 2
        update = CudaGraphModule(update, warmup=warmup)
        update_target = CudaGraphModule(update_target, warmup=warmup)  # a function of no argument: graphed too
        policy = CudaGraphModule(policy, warmup=warmup)

    # the run's whole state, for its checkpoints (--checkpoint-every, Ctrl-C) and --resume
    checkpoint = harness.Checkpoint(args, writer, dict(
        q_network=q_network, optimizer=optimizer, target_network=target_network, rb=rb, env=env))

    # TRY NOT TO MODIFY: start the game
    obs, _ = env.reset(seed=args.seed)
    first, obs, episodic_return = checkpoint.resume(0, obs, episodic_return)  # --resume: as saved
    for global_step in range(first, args.total_timesteps):
        checkpoint.tick(global_step, obs, episodic_return)  # a checkpoint when one is due, or asked for
        progress.tick(global_step)  # the bar; the fps window opens and closes at its bounds
        # ALGO LOGIC: put action logic here
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        if random.random() < epsilon:
            action = env.action_space.sample()
        else:
            action = policy(torch.as_tensor(obs, device=device, dtype=torch.float32)[None])[0].item()

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
            if global_step % args.train_frequency == 0:
                out = update(rb.sample(args.batch_size))
                if global_step % 100 == 0:
                    harness.log_losses(writer, out, global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    progress.log(global_step, episodic_return)

            # update target network
            if global_step % args.target_network_frequency == 0:
                update_target()
    checkpoint.close(args.total_timesteps, obs, episodic_return)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        torch.save({"algo": "dqn", "args": asdict(args), "q_network": q_network.state_dict()}, model_path)
        print(f"model saved to {model_path}")
        eval_env = make_env(args.env_id, args.seed)  # ε-greedy with a small ε, as CleanRL's evaluation plays it
        act = evals.epsilon_greedy(
            lambda obs: q_network(torch.as_tensor(obs, device=device, dtype=torch.float32)[None]).argmax().item(),
            eval_env.action_space.sample, args.seed)
        for idx, episodic_return in enumerate(evals.play(eval_env, act, args.eval_episodes, args.seed)):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
