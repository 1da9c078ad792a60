"""Twin Delayed DDPG (TD3) for continuous actions, made fast.

The algorithm, defaults and random-number stream of `td3_continuous_action.py`;
only the execution changes. Each optimization carries a comment saying what it
saves:

- the twin Q-networks run as one `torch.vmap`'d ensemble (one batched matmul per
  layer for both critics, one optimizer over stacked weights);
- the replay buffer is one tensor of rows preallocated on the training device, a
  transition per row, staged on the host and copied over in one copy when a batch
  is drawn (or when the stage fills); the update gathers its batch from it with
  one index; exploration noise is drawn on the device: no host round-trip but the
  action handed to the environment;
- each update (critic, delayed actor, target networks) is one function: gradients
  come from `torch.autograd.grad` (only those asked for, nothing to zero) and Adam is
  written out over tensors (`Adam` below), so that the whole update can be one
  compiled program;
- target networks are updated with one fused `lerp_` per network;
- `--compile`: `torch.compile` of the whole update, one graph per kind of update
  (with or without the delayed actor step), and of the acting step on a GPU;
- `--cudagraphs`: each kind of update, and the acting step, replayed as one CUDA
  graph (tensordict's `CudaGraphModule`): one launch for all of its kernels on a GPU;
- no `.item()` in the hot loop: but for the action handed to the environment, values
  are read back only at logging intervals.

What these choices measure on a CPU: docs/speed.md and docs/limits.md.

    python leanrl/td3_continuous_action_torchcompile.py --compile --cudagraphs
"""

import atexit
import functools
import logging
import importlib.util
import math
import os
import random
import signal
import sys
import time
import warnings
from dataclasses import asdict, dataclass

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tqdm
import tyro
from tensordict import TensorDict, from_module, from_modules
from tensordict.nn import CudaGraphModule
from torch.utils.tensorboard import SummaryWriter


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
    """episodes played by the saved policy after training (with --save-model)"""

    # Algorithm specific arguments
    env_id: str = "HalfCheetah-v4"
    """the environment id of the task"""
    total_timesteps: int = 1000000
    """total timesteps of the experiments"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer"""
    buffer_size: int = int(1e6)
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """target smoothing coefficient"""
    batch_size: int = 256
    """the batch size of sample from the replay memory"""
    policy_noise: float = 0.2
    """the scale of policy noise"""
    exploration_noise: float = 0.1
    """the scale of exploration noise"""
    learning_starts: int = 25000
    """timestep to start learning"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed)"""
    noise_clip: float = 0.5
    """noise clip parameter of the Target Policy Smoothing Regularization"""
    measure_after: int = 20
    """updates left out of the fps window (the warm-up: compilation, CUDA-graph capture)"""

    compile: bool = False
    """whether to use torch.compile"""
    cudagraphs: bool = False
    """whether to use CUDA graphs (needs CUDA)"""


def make_env(env_id: str, seed: int, capture_video: bool = False, run_name: str = "") -> gym.Env:
    """One environment with episode statistics; a user's bad id or action space stops here."""
    if capture_video:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering
    try:
        env = gym.make(env_id, render_mode="rgb_array" if capture_video else None)
    except gym.error.Error as e:
        fail(f"--env-id {env_id!r}: {e}")
    if not isinstance(env.action_space, gym.spaces.Box):
        fail(f"--env-id {env_id!r}: TD3 needs a continuous (Box) action space, got {env.action_space}")
    if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
        fail(f"--env-id {env_id!r}: needs a flat Box observation space, got {env.observation_space}")
    if capture_video:
        env = gym.wrappers.RecordVideo(env, f"videos/{run_name}")
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env.action_space.seed(seed)
    return env


# ALGO LOGIC: initialize agent here:
class QNetwork(nn.Module):
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


class Actor(nn.Module):
    def __init__(self, env):
        super().__init__()
        obs_dim = np.prod(env.observation_space.shape)
        act_dim = np.prod(env.action_space.shape)
        self.fc1 = nn.Linear(obs_dim, 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mu = nn.Linear(256, act_dim)
        # action rescaling
        high, low = env.action_space.high, env.action_space.low
        self.register_buffer("action_scale", torch.tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias", torch.tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = torch.tanh(self.fc_mu(x))
        return x * self.action_scale + self.action_bias


class ReplayBuffer:
    """A circular buffer of transitions preallocated on the training device. Each transition is one row of
    a single tensor (observation, next observation, action, reward, done), so that the update gathers a
    batch with one index, inside its compiled program; rows are staged on the host and reach the device in
    one copy when a batch is drawn, not five small copies per step."""

    def __init__(self, size: int, obs_dim: int, act_dim: int, device: torch.device, stage: int = 64):
        self.widths = [obs_dim, obs_dim, act_dim, 1, 1]  # observations, next_observations, actions, rewards, dones
        self.size, self.pos, self.full, self.n_staged, self.device = size, 0, False, 0, device
        self.rows = torch.zeros(size, sum(self.widths), device=device)
        self.staged = torch.zeros(stage, sum(self.widths))
        self.staged_np = self.staged.numpy()  # writing a row there is cheap
        self.ends = np.cumsum(self.widths)

    def add(self, obs, next_obs, action, reward, done):
        # written into a staged host row; a full stage reaches the device in one copy (flush)
        row = self.staged_np[self.n_staged]
        for value, start, end in zip((obs, next_obs, action, reward, done), self.ends - self.widths, self.ends):
            row[start:end] = value
        self.n_staged += 1
        if self.n_staged == len(self.staged_np):
            self.flush()

    def flush(self):
        n, self.n_staged = self.n_staged, 0
        idx = (self.pos + torch.arange(n)) % self.size
        # a blocking copy: the staged rows can be overwritten right after (it costs no wait: the acting
        # step reads its action back every step and the device is idle by then)
        self.rows[idx.to(self.device)] = self.staged[:n].to(self.device)
        self.full = self.full or self.pos + n >= self.size
        self.pos = (self.pos + n) % self.size

    def sample_indices(self, batch_size: int) -> torch.Tensor:
        """A batch's indices; the update gathers the batch itself. The indices come from the CPU generator,
        as in the eager script: the same batches on a GPU too, for one small copy (no sync) to the device."""
        self.flush()
        return torch.randint(0, self.size if self.full else self.pos, (batch_size,)).to(self.device, non_blocking=True)

    def batch(self, idx: torch.Tensor) -> dict:
        """The transitions at `idx`, field by field (views of one gathered block of rows)."""
        keys = ("observations", "next_observations", "actions", "rewards", "dones")
        return dict(zip(keys, self.rows[idx].split(self.widths, dim=1)))


class Adam:
    """torch.optim.Adam's arithmetic (no weight decay, no amsgrad) written out over lists of tensors.

    torch.optim's step() breaks a compiled graph on purpose (before and after it) and reads its step
    count on the host; written out, torch.compile traces the step into the update's program, where
    inductor fuses its element-wise work into a few loops, and a CUDA graph can replay it: the step
    count, the learning rate and the bias corrections are device tensors."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps=1e-8):
        self.params = list(params)
        self.beta1, self.beta2, self.eps = betas[0], betas[1], eps
        device = self.params[0].device
        self.lr = torch.tensor(lr, device=device)
        self.t = torch.zeros((), dtype=torch.float64, device=device)  # steps taken
        # the bias corrections of the next step, 1 / (1 - beta1**t) and sqrt(1 - beta2**t), kept ready: the
        # compiled loops over the weights read two numbers, where computed in the step they would recompute
        # a power and a square root every few elements
        self.inv_bias_correction1 = torch.tensor(1 / (1 - betas[0]), device=device)
        self.bias_correction2_sqrt = torch.tensor((1 - betas[1]) ** 0.5, device=device)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self, grads) -> None:
        # one foreach call per operation over every tensor: in eager mode too a step is a few calls, not a few
        # per weight (on a GPU a few kernels; on a CPU each call loops over the tensors inside)
        torch._foreach_lerp_(self.exp_avg, grads, 1 - self.beta1)
        torch._foreach_mul_(self.exp_avg_sq, self.beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, grads, grads, 1 - self.beta2)
        denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(self.exp_avg_sq), self.bias_correction2_sqrt),
                                   self.eps)
        steps = torch._foreach_div(self.exp_avg, denom)
        torch._foreach_mul_(steps, -self.lr * self.inv_bias_correction1)
        torch._foreach_add_(self.params, steps)
        # the next step's bias corrections, in float64 as torch.optim computes them on the host (in float32,
        # 1 - 0.999**t is off by about 1e-5 at the first steps)
        self.t += 1
        self.inv_bias_correction1.copy_(1 / (1 - self.beta1 ** (self.t + 1)))
        self.bias_correction2_sqrt.copy_((1 - self.beta2 ** (self.t + 1)).sqrt())


# The devices on which --compile compiles the acting step: CUDA only. On a CPU, at batch 1, the compiled call's
# fixed cost (guards, the wrapper) exceeds the math of this deterministic MLP, which has no sampling to fuse.
COMPILED_ACTING = ("cuda",)


def main(args: Args) -> None:
    started = time.time()  # the run's start, logged as charts/start (see make_writer)
    check_args(args)  # a user's mistake stops here, before any work (see the end of the file)
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    pick_threads()  # fewer CPU threads where other programs keep the cores busy
    device = pick_device(args)  # CUDA when asked for and usable; otherwise the CPU, saying why
    # CUDA graphs exist on CUDA devices only: on a machine without CUDA --cudagraphs is ignored, with a warning
    # (tensordict's CudaGraphModule then calls each function directly); on a machine with CUDA, --no-cuda beside it
    # is refused, since the graphs would be captured from CPU tensors
    graphs = args.cudagraphs and device.type == "cuda"
    if args.cudagraphs and not graphs:
        if torch.cuda.is_available():
            fail("--cudagraphs records CUDA graphs and --no-cuda keeps this run on the CPU: leave out one of the two")
        print("warning: --cudagraphs needs a CUDA device; running without CUDA graphs", file=sys.stderr)

    # env setup
    env = make_env(args.env_id, args.seed, args.capture_video, run_name)

    # the networks are built on the CPU and moved, as in the eager script: the same initial weights, drawn
    # from the CPU generator, on any device
    actor = Actor(env).to(device)
    actor_params = from_module(actor).data  # detached views of the actor's weights, shared storage
    with torch.device("meta"):  # shells without weights of their own: each runs the weights put into it
        actor_detach, target_actor = Actor(env), Actor(env)
    # the policy that acts reads the same weights, detached: no autograd bookkeeping when acting
    actor_params.to_module(actor_detach, preserve_module_state=False)
    # the target actor: a copy of the weights (the targets start as exact copies)
    target_actor_params = actor_params.clone()
    target_actor_params.to_module(target_actor, preserve_module_state=False)

    def get_q_params():
        qf1 = QNetwork(env).to(device)
        qf2 = QNetwork(env).to(device)
        qnet_params = from_modules(qf1, qf2, as_module=True)
        qnet_target = qnet_params.data.clone()
        # discard the params of the original modules: a "meta" shell runs any set of weights
        with torch.device("meta"):
            qnet = QNetwork(env)
        qnet_params.to_module(qnet, preserve_module_state=False)
        return qnet_params, qnet_target, qnet

    qnet_params, qnet_target, qnet = get_q_params()
    # stacked weights: one Adam over both critics (Adam written out above: one program with the update)
    q_optimizer = Adam(qnet_params.values(True, True), lr=args.learning_rate)
    actor_optimizer = Adam(actor.parameters(), lr=args.learning_rate)
    low, high = env.action_space.low, env.action_space.high
    # exploration noise and action bounds as device tensors: the acting step stays on the device
    exploration_std = actor.action_scale * args.exploration_noise
    low_t, high_t = (torch.as_tensor(b, device=device) for b in (low, high))

    rb = ReplayBuffer(args.buffer_size, env.observation_space.shape[0], env.action_space.shape[0], device)

    def policy(obs):
        action = actor_detach(obs)
        action = action + torch.randn_like(action) * exploration_std
        return action.clamp(low_t, high_t)

    def batched_qf(params, obs, action):
        with params.to_module(qnet, preserve_module_state=False):
            return qnet(obs, action)

    def update(idx, policy_step: bool):
        """One whole update, from the batch's indices to the target networks: under --compile one program."""
        data = rb.batch(idx)  # the batch is gathered inside the update: one index, fused with its first reads
        with torch.no_grad():
            clipped_noise = (torch.randn_like(data["actions"]) * args.policy_noise).clamp(
                -args.noise_clip, args.noise_clip
            ) * target_actor.action_scale

            next_state_actions = (target_actor(data["next_observations"]) + clipped_noise).clamp(low[0], high[0])
            # one vmapped call evaluates both critics: a batched matmul per layer instead of two matmuls
            qf_next_target = torch.vmap(batched_qf, (0, None, None))(
                qnet_target, data["next_observations"], next_state_actions
            )
            min_qf_next_target = qf_next_target.min(dim=0).values
            next_q_value = data["rewards"].flatten() + (1 - data["dones"].flatten()) * args.gamma * min_qf_next_target.view(-1)

        qf_a_values = torch.vmap(batched_qf, (0, None, None))(qnet_params, data["observations"], data["actions"])
        qf_a_values = qf_a_values.view(2, -1)
        qf_losses = (qf_a_values - next_q_value).pow(2).mean(1)  # the two critics' mse losses
        qf_loss = qf_losses.sum()
        # gradients as values (torch.autograd.grad), not accumulated into .grad: nothing to zero, and
        # only the gradients asked for are computed
        q_optimizer.step(torch.autograd.grad(qf_loss, q_optimizer.params))
        qf_values, qf_losses = qf_a_values.detach().mean(1), qf_losses.detach()
        out = dict(qf1_values=qf_values[0], qf2_values=qf_values[1], qf1_loss=qf_losses[0], qf2_loss=qf_losses[1],
                   qf_loss=qf_loss.detach() / 2.0)

        if policy_step:
            # only the first critic enters the actor loss: evaluate it alone; the actor's gradients only,
            # autograd skips the critic's weights, which this step does not update
            actor_loss = -batched_qf(qnet_params[0], data["observations"], actor(data["observations"])).mean()
            actor_optimizer.step(torch.autograd.grad(actor_loss, actor_optimizer.params))
            out["actor_loss"] = actor_loss.detach()

            # update the target networks: one fused lerp per network instead of a Python loop of copies
            target_actor_params.lerp_(actor_params, args.tau)
            qnet_target.lerp_(qnet_params.data, args.tau)
        return TensorDict(out)

    if args.compile:
        # tensordict warns that a lock_() traced by torch.compile skips its check of locked parents: nothing here
        # unlocks a tensordict, so the warning says nothing a user can act on
        warnings.filterwarnings("ignore", r"Using lock_\(\) inside a compiled graph")
        if device.type == "cpu":
            # compiled code draws eager's random numbers on the CPU, so that --compile reproduces a run
            # without it (the contract); on a GPU inductor's own generator is faster and stays on
            torch._inductor.config.fallback_random = True
        # trace torch.autograd.grad into the compiled graph: forward, backward and the Adam steps of the
        # whole update become one program, with no graph break and one guard check per update
        torch._dynamo.config.trace_autograd_ops = True
        # a crash worked around: torch before 2.12 cannot compile this update on CUDA (see update_options)
        update = torch.compile(update, options=update_options(torch.__version__, device))
        if device.type in COMPILED_ACTING:
            policy = torch.compile(policy)

    # the update's two kinds (with the delayed actor and target step or without), each its own program
    updates = {p: functools.partial(update, policy_step=p) for p in (False, True)}
    if args.cudagraphs:
        # each whole update becomes one graph replay; the warm-up calls before the capture let compilation
        # finish (without CUDA: called directly)
        warnings.filterwarnings("ignore", "This module is instantiated on a machine without CUDA")
        # tensordict logs each graph module it sets up (INFO): nothing a user acts on
        logging.getLogger("tensordict").setLevel(logging.WARNING)
        warmup = 4 if args.compile else 2
        updates = {key: CudaGraphModule(fn, warmup=warmup) for key, fn in updates.items()}
        policy = CudaGraphModule(policy, warmup=warmup)

    writer = make_writer(args, run_name, started)
    # fps is measured from the `measure_after`-th update on: the warm-up before it is logged apart
    # a line above the progress bar says what the warm-up does (compiling, capturing) and how long it took
    work = [w for w, on in (("compiling (--compile)", args.compile), ("capturing CUDA graphs", graphs)) if on]
    speed = Speed(writer, start_step=args.learning_starts + 1, warmup_steps=args.measure_after,
                  busy=" and ".join(work) or None)
    # the last updates' outputs, without and with the delayed actor step: left on the device and read
    # only at logging intervals
    episodic_return, out_main, out_pol = float("nan"), None, None

    # TRY NOT TO MODIFY: start the game
    obs, _ = env.reset(seed=args.seed)
    pbar = tqdm.trange(args.total_timesteps, desc=args.exp_name, unit="step")
    for global_step in pbar:
        # ALGO LOGIC: put action logic here
        if global_step < args.learning_starts:
            action = env.action_space.sample()
        else:
            # noise and clipping done on the device
            action = policy(torch.as_tensor(obs, device=device, dtype=torch.float32)[None])[0].cpu().numpy()

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
            speed.tick(global_step)
            # only the batch's indices here: the update gathers the batch itself, inside its program
            idx = rb.sample_indices(args.batch_size)
            policy_step = global_step % args.policy_frequency == 0
            out = updates[policy_step](idx)
            out_main, out_pol = out, (out if policy_step else out_pol)

            if global_step % 100 == 0:
                # the only reads of device values in the loop but the action, at logging intervals
                # the last policy step's values, then this step's (the critic's values are this step's)
                logs = (out_pol.to_dict() if out_pol is not None else {}) | out_main.to_dict()
                for key, value in logs.items():
                    writer.add_scalar(f"losses/{key}", value.item(), global_step)
                if (sps := speed.log(global_step)) is not None:
                    pbar.set_postfix(fps=f"{sps:.0f}", ret=f"{episodic_return:.1f}")

    if args.save_model:
        # serves --save-model only, from the project's package (pip install -e .): imported here, so that this
        # file alone still trains
        from leanrl_utils.evals import evaluate

        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        qf1, qf2 = (qnet_params.data[i].flatten_keys(".").to_dict() for i in range(2))  # the eager script's layout
        torch.save({"algo": "td3", "args": asdict(args), "actor": actor.state_dict(), "qf1": qf1, "qf2": qf2},
                   model_path)
        print(f"model saved to {model_path}")
        for idx, episodic_return in enumerate(evaluate(model_path, args.eval_episodes, args.seed, device)):
            writer.add_scalar("eval/episodic_return", episodic_return, idx)


# The contract's plumbing (CONTRIBUTING.md), kept out of the algorithm's way: input checks, logging, fps, Ctrl-C.
def check_args(args: Args) -> None:
    # a flag given as nan or inf would pass every comparison below: refused first
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            fail(f"--{name.replace('_', '-')} must be a finite number, got {value}")
    if args.save_model and importlib.util.find_spec("leanrl_utils") is None:  # before hours of training
        fail("--save-model plays the saved policy back with the project's leanrl_utils, which is not installed: "
             "pip install -e . from the repository (or leave the flag out)")
    positive = ["total_timesteps", "buffer_size", "batch_size", "learning_rate", "policy_frequency", "eval_episodes"]
    for name in positive + ["learning_starts", "measure_after", "policy_noise", "exploration_noise", "noise_clip"]:
        value = getattr(args, name)
        if value < 0 or (value == 0 and name in positive):
            fail(f"--{name.replace('_', '-')} must be {'positive' if name in positive else '>= 0'}, got {value}")
    if not 0.0 <= args.gamma <= 1.0:
        fail(f"--gamma must be in [0, 1], got {args.gamma}")
    if not 0.0 < args.tau <= 1.0:
        fail(f"--tau must be in (0, 1], got {args.tau}")
    if args.total_timesteps <= args.learning_starts:
        fail(f"--total-timesteps ({args.total_timesteps}) must exceed --learning-starts ({args.learning_starts})")


def fail(message: str) -> None:
    """A user's mistake: one line on stderr, exit code 2, no stack trace."""
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
    sys.exit(2)


def pick_threads() -> None:
    """torch's CPU threads: one per core (torch's default), cut to the cores that other programs leave free, at
    least one. A parallel region waits for its slowest thread, and a thread whose core another program holds
    waits for its turn, so on a busy machine fewer threads run faster (docs/speed_settings.md). The load is
    read from /proc/stat (Linux) over a fifth of a second, before the run does any work; a user's
    OMP_NUM_THREADS wins. The thread count can change the last digits of a run's numbers: a cut says so."""
    if "OMP_NUM_THREADS" in os.environ or not os.path.exists("/proc/stat"):
        return

    def ticks():  # (all, idle + iowait) jiffies of every CPU since boot
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        return sum(cpu), cpu[3] + cpu[4]

    (total, idle), _, (total_after, idle_after) = ticks(), time.sleep(0.2), ticks()
    busy = (1 - (idle_after - idle) / max(1, total_after - total)) * (os.cpu_count() or 1)  # CPUs others use
    cores = torch.get_num_threads()
    threads = max(1, min(cores, round(cores - busy)))
    if threads < cores:
        torch.set_num_threads(threads)
        print(f"{os.path.basename(sys.argv[0])}: other programs keep {busy:.1f} of {os.cpu_count()} CPUs busy: torch "
              f"runs on {threads} thread{'s' * (threads > 1)}, not {cores} (OMP_NUM_THREADS sets it)", file=sys.stderr)


def pick_device(args: Args) -> torch.device:
    """CUDA when --cuda (the default) asks for it and torch can use it; otherwise the CPU, and if CUDA was asked
    for, one line that says why it is not used (a CPU build of torch, no visible GPU, a driver too old for this
    build), so that a run meant for a GPU never runs on the CPU unnoticed."""
    if args.cuda:
        with warnings.catch_warnings(record=True) as caught:  # torch gives its reason as a warning (an old driver)
            warnings.simplefilter("always")
            if torch.cuda.is_available():
                return torch.device("cuda")
        reasons = [str(w.message).strip().splitlines()[0] for w in caught if "CUDA" in str(w.message)]
        why = (f"torch {torch.__version__} is a CPU build" if torch.version.cuda is None
               else reasons[0] if reasons else "no CUDA device is visible")
        print(f"{os.path.basename(sys.argv[0])}: --cuda: {why}; running on the CPU", file=sys.stderr)
    return torch.device("cpu")


def update_options(torch_version: str, device: torch.device) -> dict | None:
    """inductor's settings for compiling the update: none, but on CUDA with torch before 2.12. There inductor
    crashes compiling a function that mixes foreach kernels (the Adam written out, the target networks' `lerp_`)
    with reductions over tensors of other shapes, in its loop reordering after fusion (pytorch/pytorch#176591,
    fixed by #176849, first released in torch 2.12): the update is compiled with that pass off, a fusion
    heuristic given up so that the GPU machine's own torch, which often cannot be replaced, runs it."""
    if device.type == "cuda" and torch.torch_version.TorchVersion(torch_version) < (2, 12):
        return {"loop_ordering_after_fusion": False}
    return None


def make_writer(args: Args, run_name: str, started: float) -> SummaryWriter:
    """TensorBoard (and wandb with --track), closed at exit: what was logged is kept after Ctrl-C or an error."""
    if args.track:
        import wandb

        wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                   config=vars(args), name=run_name, save_code=True)
        atexit.register(wandb.finish)
    writer = SummaryWriter(f"runs/{run_name}")
    writer.add_scalar = ctrl_c_held(writer.add_scalar)  # a Ctrl-C waits for the write in progress
    writer.add_scalar = stop_if_diverged(writer.add_scalar, args)  # a NaN loss stops the run
    # one point whose wall time is the run's start: time to a given return counts from it, set-up and
    # compilation before the first logged value included
    writer.add_scalar("charts/start", 0, 0, walltime=started)
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(args).items()))
    atexit.register(writer.close)  # registered last, runs first: before wandb.finish
    return writer


def diverged(what: str, args: Args, step: int | None = None) -> None:
    """Training diverged: every update after a NaN is NaN too, so the run stops. One line names the step, what is
    not a finite number and the learning rates; exit code 3; what was logged is kept (the writer closes at exit)."""
    for bar in list(getattr(tqdm.tqdm, "_instances", ())):
        bar.close()  # the progress bar's line ends before the message's
    rates = ", ".join(f"--{name.replace('_', '-')} {value:g}" for name, value in vars(args).items()
                      if isinstance(value, float) and (name.endswith("_lr") or name == "learning_rate"))
    print(f"{os.path.basename(sys.argv[0])}: error: step {step}: {what}: training diverged; a smaller learning rate "
          f"({rates}) may help", file=sys.stderr)
    sys.exit(3)


def stop_if_diverged(write, args: Args):
    """`write` (the writer's add_scalar) that stops the run (`diverged`) once a loss it logs is not a finite
    number, after writing it."""

    def checked(tag, value, step=None, *more, **kwargs):
        written = write(tag, value, step, *more, **kwargs)
        if tag.startswith("losses/") and not math.isfinite(float(value)):
            diverged(f"{tag} is {float(value)}", args, step)
        return written
    return checked


def ctrl_c_held(write):
    """`write` with a Ctrl-C held until it returns, then raised again: a KeyboardInterrupt raised inside the
    locks of TensorBoard's queue can leave its writer thread asleep, and the run hung at exit (writer.close)."""

    def held(*args, **kwargs):
        caught = []
        previous = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
        try:
            return write(*args, **kwargs)
        finally:
            signal.signal(signal.SIGINT, previous)
            if caught:
                signal.raise_signal(signal.SIGINT)
    return held


class Speed:
    """`charts/SPS` over a window that starts `warmup_steps` after `start_step`, once the warm-up
    (compilation, CUDA-graph capture) is over; `charts/warmup_time` is the time before it. With `busy` (what the
    warm-up does), a line says so when it starts and how long it took when it ends."""

    def __init__(self, writer: SummaryWriter, start_step: int, warmup_steps: int, busy: str | None = None):
        self.writer, self.steps, self.times, self.busy = writer, (start_step, start_step + warmup_steps), {}, busy

    def tick(self, step: int) -> None:
        if step in self.steps:
            self.times[step] = time.perf_counter()
            if step == self.steps[0] and self.busy:  # a line above the progress bar, which stalls meanwhile
                tqdm.tqdm.write(f"warm-up: {self.busy}; fps are counted after it", file=sys.stderr)
            if step == self.steps[1]:
                warmup = self.times[step] - self.times[self.steps[0]]
                self.writer.add_scalar("charts/warmup_time", warmup, step)
                if self.busy:
                    tqdm.tqdm.write(f"warm-up done in {warmup:.1f} s", file=sys.stderr)

    def log(self, step: int) -> float | None:
        if step <= self.steps[1] or self.steps[1] not in self.times:
            return None
        sps = (step - self.steps[1]) / (time.perf_counter() - self.times[self.steps[1]])
        self.writer.add_scalar("charts/SPS", sps, step)
        return sps


def parse_args(argv: list[str] | None = None) -> Args:
    """tyro's command line, where a mistake stops in one line: an unknown flag names the nearest real ones (by
    name, or by the words of their help: --learning-rate finds the flags whose help says "learning rate"), and a
    value tyro cannot read is named in tyro's own words, without its box. --help is tyro's."""
    import contextlib
    import difflib
    import inspect
    import io
    import itertools
    import re

    drawn = io.StringIO()
    try:
        with contextlib.redirect_stderr(drawn):  # tyro draws an error in a box: its first lines are kept
            args, unknown = tyro.cli(Args, args=argv, return_unknown_args=True)
    except SystemExit as err:
        if not err.code:  # --help
            raise
        lines = [line.strip("│╭╮╰╯ ") for line in drawn.getvalue().splitlines()[1:]]
        said = " ".join(line for line in itertools.takewhile(lambda line: not line.startswith("─"), lines) if line)
        fail(said or "the command line cannot be read; --help lists the flags")
    if unknown:
        flag = unknown[0].split("=")[0]
        if not flag.startswith("-"):
            fail(f"{flag!r} is neither a flag nor a flag's value; --help lists the flags")
        helps = {"--" + name.replace("_", "-"): text.lower().split()
                 for name, text in re.findall(r'^    (\w+):.*\n    """(.*?)"""', inspect.getsource(Args), flags=re.M)}
        near = [name for name, words in helps.items() if all(w in words for w in flag.lstrip("-").split("-"))]
        near += [name for name in difflib.get_close_matches(flag, helps, n=3, cutoff=0.75) if name not in near]
        near = near[:3]
        fail(f"{flag}: no such flag" + (f"; did you mean {', '.join(near[:-1]) + ' or ' * (len(near) > 1) + near[-1]}?"
                                        if near else "; --help lists the flags"))
    return args


def run(argv: list[str] | None = None) -> None:
    """What `python leanrl/<this file>.py` does: read the command line, train, and end a run that diverged or
    was interrupted in one line."""
    cli = parse_args(argv)
    try:
        main(cli)
    except ValueError as err:
        # torch.distributions refuses parameters that are not finite numbers: training diverged before a
        # logged loss could show it
        if "found invalid values" not in str(err):
            raise
        import traceback

        steps = [frame.f_locals["global_step"] for frame, _ in traceback.walk_tb(err.__traceback__)
                 if "global_step" in frame.f_locals]  # main()'s step when the error was raised
        diverged("a distribution's parameters are not finite numbers", cli, steps[-1] if steps else None)
    except BaseException as err:
        # a Ctrl-C inside a tensordict `to_module` context leaves it as a RuntimeError: look down the chain
        while err is not None and not isinstance(err, KeyboardInterrupt):
            err = err.__context__
        if err is None:
            raise
        print("interrupted; what was logged is kept in runs/", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    run()
