"""Deep Q-Network (DQN) on Atari through envpool, made fast.

The algorithm, defaults and random numbers (the same batches, the same ε-greedy choices) of `dqn_atari_envpool.py`;
only the execution changes: on the CPU the two play the same games, their losses apart by rounding. Each
optimization is named, the same name in every pair, and each change from the eager script carries its name in its
comment, so that `diff -u dqn_atari_envpool.py dqn_atari_envpool_torchcompile.py` reads as this list (what each
measured: docs/optimizations.md):

- [device-buffer] the frame buffer's frames (each stored once, as uint8) on the training device, the stacks rebuilt
  there: a batch is a gather on the device, a frame crosses from the host once; the bookkeeping (a few numbers a
  slot) stays on the host, where reading it costs no sync;
- [channels-last] frames and convolutions in the channels-last layout;
- [detached-policy] the policy that acts runs the trained weights detached, in a weightless copy;
- [fused-adam] torch's fused Adam: one call over every weight, its state on the device;
- [lerp-target] the target network moves with one fused `lerp_`;
- [compile] `--compile`: `torch.compile` of the loss with its backward pass (`zero_grad` and the fused Adam step
  stay eager), and of the acting step on CUDA only (`COMPILED_ACTING`);
- [cudagraphs] `--cudagraphs`: the whole update, the acting step and the target's update, each replayed as one
  CUDA graph (tensordict's `CudaGraphModule`).

As in the eager script (its docstring says more): ε-greedy decides on the host (an exploring step runs no CNN);
the buffer stores each frame once (1M transitions: 7 GB, not 28); envpool's reset step is no transition; episode
statistics are the real game's.

    python leanrl/dqn_atari_envpool_torchcompile.py --compile --cudagraphs
"""

import copy
import os
import random
import time
from dataclasses import asdict, dataclass

import envpool
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

    compile: bool = False
    """whether to use torch.compile"""
    cudagraphs: bool = False
    """whether to use CUDA graphs (needs CUDA)"""


def check_args(args: Args) -> None:
    """What the flags' declared ranges (the end of their docstrings, checked by the harness) cannot say, checked
    before any work: the task exists; envpool renders no frames."""
    harness.known_env_id(args.env_id, "envpool")
    harness.no_video_with_envpool(args)


# [compile] the devices where --compile compiles the acting step: on a CPU the update takes most of a step, and a
# compiled call's fixed cost is above one action's CNN at batch 1
COMPILED_ACTING = ("cuda",)


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
class QNetwork(nn.Module):
    def __init__(self, env):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(),
            nn.Linear(512, env.single_action_space.n),
        )
        self.to(memory_format=torch.channels_last)  # [channels-last] the convolutions' weights too (see forward), kept by .to()

    def forward(self, x):
        # [channels-last] the frames in the layout the convolution kernels work in (oneDNN's, tensor cores')
        return self.network(x.contiguous(memory_format=torch.channels_last) / 255.0)


def linear_schedule(start_e: float, end_e: float, duration: int, t: int):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


class ReplayBuffer:
    """[device-buffer] A circular buffer of transitions storing each frame once, on the training device, where the batches are
    gathered; its bookkeeping stays in CPU tensors (reading it costs no sync).

    Slot t holds the newest frame of observation t, the action taken from it, the reward and the
    termination that followed, and how many earlier frames of the same game its stack of 4 shows (up
    to 3). The stack is rebuilt from those frames; envpool stacks a game's first frame 4 times, and the
    rebuilt stack repeats it the same way, so no stack reaches into the previous game. Observation
    t + 1, in slot t + 1, is the next observation. A slot is no transition when its observation ended
    an episode (the next step is envpool's reset step), when no action was taken from it yet (the write
    head), or when the write head has overwritten a frame its stack needs."""

    def __init__(self, size: int, frame_shape: tuple, device: torch.device, seed: int):
        # [device-buffer] the frames on the training device: a batch's stacks are a gather there; the bookkeeping stays here
        harness.check_memory("--buffer-size", size * int(np.prod(frame_shape)), device)  # refused if it cannot fit
        self.frames = torch.zeros((size, *frame_shape), dtype=torch.uint8, device=device)
        self.back = torch.zeros(size, dtype=torch.long)  # earlier frames of the same game in the stack, up to 3
        self.actions, self.rewards = torch.zeros(size, dtype=torch.long), torch.zeros(size)
        self.dones, self.valid = torch.zeros(size), torch.zeros(size, dtype=torch.bool)
        self.size, self.pos, self.full, self.obs_done, self.device = size, 0, False, False, device
        # the batches are drawn from a generator of their own: exploring does not shift them
        self.generator = torch.Generator().manual_seed(seed)

    def add(self, action, reward, terminated, truncated, next_obs, info):
        p = self.pos
        self.actions[p], self.rewards[p], self.dones[p] = int(action), float(reward), float(terminated)
        self.valid[p] = not self.obs_done  # from a done observation, the next step is envpool's reset step
        self.obs_done = bool(terminated or truncated)
        self.pos = (p + 1) % self.size
        self.full = self.full or self.pos == 0
        self.write_obs(next_obs[0], game_start=info["elapsed_step"][0] == 0)

    def write_obs(self, obs, game_start: bool):
        p = self.pos
        for j in (1, 2, 3):  # the stacks that reach back to the frame overwritten here are gone
            q = (p + j) % self.size
            self.valid[q] &= self.back[q] < j
        self.frames[p] = torch.as_tensor(obs[-1]).to(self.device, non_blocking=True)  # [device-buffer] one frame crosses, as uint8
        self.back[p] = 0 if game_start else min(int(self.back[p - 1]) + 1, 3)
        self.valid[p] = False  # no action taken from it yet

    def stacks(self, slots):
        """The stacks of 4 frames of the observations in `slots`, as envpool returned them."""
        offsets = torch.minimum(torch.arange(3, -1, -1), self.back[slots, None])
        # [device-buffer] the indices from the host's bookkeeping; the gather on the device
        return self.frames[((slots[:, None] - offsets) % self.size).to(self.device, non_blocking=True)]

    def sample(self, batch_size: int) -> dict:
        # uniform over the slots that hold transitions: the first `batch_size` valid ones among 4x as many
        # uniform draws (the buffer's invalid slots are a few percent: too few valid is all but impossible)
        candidates = torch.randint(0, self.size if self.full else self.pos, (4 * batch_size,), generator=self.generator)
        slots = candidates[torch.argsort((~self.valid[candidates]).byte(), stable=True)[:batch_size]]
        data = dict(observations=self.stacks(slots), actions=self.actions[slots, None], rewards=self.rewards[slots],
                    next_observations=self.stacks((slots + 1) % self.size), dones=self.dones[slots])
        # [device-buffer] the stacks are on the device already; the small fields cross without waiting for the device
        return {key: value.to(self.device, non_blocking=True) for key, value in data.items()}


def main(args: Args) -> None:
    run_name = harness.run_name(args)  # runs/<env>__<exp>__<seed>__<time>, or the run --resume names

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    device = harness.pick_device(args)  # CUDA if asked for and usable, else the CPU (saying why); CPU threads

    # env setup
    envs = make_envs(args, seed=harness.env_seed(args))  # --resume: new games (envpool cannot save its own)
    envs.single_action_space.seed(args.seed)
    episode_stats = EpisodeStats(1)

    # built on the CPU and moved: the initial weights come from the CPU generator, the same on any device
    q_network = QNetwork(envs).to(device)
    # [fused-adam] one call per step over every weight; capturable, for --cudagraphs to replay it
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, fused=True,
                           capturable=args.cudagraphs and device.type == "cuda")
    target_network = copy.deepcopy(q_network)  # the target starts as an exact copy

    rb = ReplayBuffer(args.buffer_size, envs.single_observation_space.shape[1:], device, args.seed)
    writer = harness.make_writer(args, run_name)
    # fps is measured from the `measure_after`-th update on: the warm-up before it is logged apart
    progress = harness.Progress(args, writer, total=args.total_timesteps, start_step=args.learning_starts + 1,
                                warmup_steps=args.measure_after * args.train_frequency)
    episodic_return = float("nan")

    # [detached-policy] the policy that acts reads the same weights, detached: no autograd bookkeeping
    with torch.device("meta"):  # a shell without weights of its own: it runs the weights put into it
        q_network_detach = QNetwork(envs)
    from_module(q_network).data.to_module(q_network_detach, preserve_module_state=False)

    def policy(obs):  # the greedy actions (ε-greedy, in the loop, explores around them)
        return q_network_detach(obs).argmax(dim=-1)  # [detached-policy] no torch.no_grad() to enter

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
        q_network=q_network, optimizer=optimizer, target_network=target_network, rb=rb,
        action_space=envs.single_action_space), envpool=True)
    first, episodic_return = checkpoint.resume(0, episodic_return)  # --resume: as saved
    # TRY NOT TO MODIFY: start the game (after --resume, new games: their first observation is written the same way)
    obs, info = envs.reset()
    rb.write_obs(obs[0], game_start=True)  # the run's first observation (one env)
    for global_step in range(first, args.total_timesteps):
        checkpoint.tick(global_step, episodic_return)  # a checkpoint when one is due, or asked for
        progress.tick(global_step)  # the bar; the fps window opens and closes at its bounds
        # ALGO LOGIC: put action logic here
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        if random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample()])
        else:
            actions = policy(torch.as_tensor(obs, device=device)).cpu().numpy()  # uint8 frames cross (forward: floats)

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        for _, episodic_return, episodic_length in episode_stats.update(infos, terminations, truncations):
            writer.add_scalar("charts/episodic_return", episodic_return, global_step)
            writer.add_scalar("charts/episodic_length", episodic_length, global_step)

        # the buffer keeps the true next observation; only a termination (a lost life, not a time-limit
        # truncation) cuts the bootstrap
        rb.add(actions[0], rewards[0], terminations[0], truncations[0], next_obs, infos)

        # TRY NOT TO MODIFY: CRUCIAL step easy to overlook
        obs = next_obs

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                out = update(rb.sample(args.batch_size))
                if global_step % 100 == 0:
                    harness.log_losses(writer, out, global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    progress.log(global_step, episodic_return)

            if global_step % args.target_network_frequency == 0:  # update target network
                update_target()
    checkpoint.close(args.total_timesteps, episodic_return)
    progress.close()

    if args.save_model:
        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        torch.save({"algo": "dqn_atari", "args": asdict(args), "q_network": q_network.state_dict()}, model_path)
        print(f"model saved to {model_path}")
        eval_envs = make_envs(args)  # ε-greedy with a small ε, as CleanRL's evaluation plays it; whole games count
        act = evals.epsilon_greedy(
            lambda obs: q_network(torch.as_tensor(obs, device=device)).argmax(dim=1).cpu().numpy(),
            lambda: np.array([eval_envs.single_action_space.sample()]), args.seed)
        for idx, episodic_return in enumerate(evals.play(eval_envs, act, args.eval_episodes, args.seed,
                                                         stats=EpisodeStats(1))):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


if __name__ == "__main__":
    harness.run(main, Args, check_args)
