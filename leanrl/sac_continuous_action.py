"""Soft Actor-Critic (SAC) for continuous actions: the eager PyTorch reference.

CleanRL's algorithm and defaults: twin Q-networks with target copies, a squashed
Gaussian policy, automatic entropy tuning and delayed policy updates. Read it next
to `sac_continuous_action_torchcompile.py`, which learns the same thing faster; on
the CPU the two draw the same random numbers, so their runs can be compared number
for number. Unlike CleanRL's script, this one steps a single gymnasium environment
(no vector env) and keeps its replay buffer in a small class below.

    python leanrl/sac_continuous_action.py --env-id HalfCheetah-v4
"""

import atexit
import copy
import importlib.util
import math
import os
import random
import signal
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import tqdm
import tyro
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
    buffer_size: int = int(1e6)
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """target smoothing coefficient"""
    batch_size: int = 256
    """the batch size of sample from the replay memory"""
    learning_starts: int = 5000
    """timestep to start learning"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 1e-3
    """the learning rate of the Q network optimizer"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed)"""
    target_network_frequency: int = 1
    """the frequency of updates for the target networks"""
    alpha: float = 0.2
    """entropy regularization coefficient"""
    autotune: bool = True
    """automatic tuning of the entropy coefficient"""
    measure_after: int = 20
    """updates left out of the fps window (the warm-up: compilation, CUDA-graph capture)"""


def make_env(env_id: str, seed: int, capture_video: bool = False, run_name: str = "") -> gym.Env:
    """One environment with episode statistics; a user's bad id or action space stops here."""
    if capture_video:
        os.environ.setdefault("MUJOCO_GL", "egl")  # headless MuJoCo rendering
    try:
        env = gym.make(env_id, render_mode="rgb_array" if capture_video else None)
    except gym.error.Error as e:
        fail(f"--env-id {env_id!r}: {e}")
    if not isinstance(env.action_space, gym.spaces.Box):
        fail(f"--env-id {env_id!r}: SAC needs a continuous (Box) action space, got {env.action_space}")
    if not isinstance(env.observation_space, gym.spaces.Box) or len(env.observation_space.shape) != 1:
        fail(f"--env-id {env_id!r}: needs a flat Box observation space, got {env.observation_space}")
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
    """A circular buffer of transitions in CPU tensors; batches go to `device` when sampled."""

    def __init__(self, size: int, obs_dim: int, act_dim: int, device: torch.device):
        dims = dict(observations=obs_dim, next_observations=obs_dim, actions=act_dim, rewards=1, dones=1)
        self.data = {key: torch.zeros(size, dim) for key, dim in dims.items()}
        self.size, self.pos, self.full, self.device = size, 0, False, device

    def add(self, obs, next_obs, action, reward, done):
        for key, value in zip(self.data, (obs, next_obs, action, reward, done)):
            self.data[key][self.pos] = torch.as_tensor(value, dtype=torch.float32)
        self.pos = (self.pos + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, batch_size: int) -> SimpleNamespace:
        idx = torch.randint(0, self.size if self.full else self.pos, (batch_size,))
        return SimpleNamespace(**{key: value[idx].to(self.device) for key, value in self.data.items()})


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

    # env setup
    env = make_env(args.env_id, args.seed, args.capture_video, run_name)

    actor = Actor(env).to(device)
    qf1 = SoftQNetwork(env).to(device)
    qf2 = SoftQNetwork(env).to(device)
    qf1_target = copy.deepcopy(qf1)  # the targets start as exact copies
    qf2_target = copy.deepcopy(qf2)
    q_optimizer = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr)
    actor_optimizer = torch.optim.Adam(list(actor.parameters()), lr=args.policy_lr)

    # Automatic entropy tuning
    if args.autotune:
        target_entropy = -torch.prod(torch.Tensor(env.action_space.shape).to(device)).item()
        log_alpha = torch.zeros(1, requires_grad=True, device=device)
        alpha = log_alpha.exp().item()
        a_optimizer = torch.optim.Adam([log_alpha], lr=args.q_lr)
    else:
        alpha = args.alpha

    rb = ReplayBuffer(args.buffer_size, env.observation_space.shape[0], env.action_space.shape[0], device)
    writer = make_writer(args, run_name, started)
    # fps is measured from the `measure_after`-th update on: the warm-up before it is logged apart
    speed = Speed(writer, start_step=args.learning_starts + 1, warmup_steps=args.measure_after)
    episodic_return, actor_loss, alpha_loss = float("nan"), None, None

    # TRY NOT TO MODIFY: start the game
    obs, _ = env.reset(seed=args.seed)
    pbar = tqdm.trange(args.total_timesteps, desc=args.exp_name, unit="step")
    for global_step in pbar:
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
            speed.tick(global_step)
            data = rb.sample(args.batch_size)
            with torch.no_grad():
                next_state_actions, next_state_log_pi, _ = actor.get_action(data.next_observations)
                qf1_next_target = qf1_target(data.next_observations, next_state_actions)
                qf2_next_target = qf2_target(data.next_observations, next_state_actions)
                min_qf_next_target = torch.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
                next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * args.gamma * (min_qf_next_target).view(-1)

            qf1_a_values = qf1(data.observations, data.actions).view(-1)
            qf2_a_values = qf2(data.observations, data.actions).view(-1)
            qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
            qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
            qf_loss = qf1_loss + qf2_loss

            # optimize the model
            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            if global_step % args.policy_frequency == 0:  # TD 3 Delayed update support
                for _ in range(args.policy_frequency):  # compensate for the delay by doing 'policy_frequency' instead of 1
                    pi, log_pi, _ = actor.get_action(data.observations)
                    qf1_pi = qf1(data.observations, pi)
                    qf2_pi = qf2(data.observations, pi)
                    min_qf_pi = torch.min(qf1_pi, qf2_pi)
                    actor_loss = ((alpha * log_pi) - min_qf_pi).mean()

                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    actor_optimizer.step()

                    if args.autotune:
                        with torch.no_grad():
                            _, log_pi, _ = actor.get_action(data.observations)
                        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()

                        a_optimizer.zero_grad()
                        alpha_loss.backward()
                        a_optimizer.step()
                        alpha = log_alpha.exp().item()

            # update the target networks
            if global_step % args.target_network_frequency == 0:
                for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)

            if global_step % 100 == 0:
                writer.add_scalar("losses/qf1_values", qf1_a_values.mean().item(), global_step)
                writer.add_scalar("losses/qf2_values", qf2_a_values.mean().item(), global_step)
                writer.add_scalar("losses/qf1_loss", qf1_loss.item(), global_step)
                writer.add_scalar("losses/qf2_loss", qf2_loss.item(), global_step)
                writer.add_scalar("losses/qf_loss", qf_loss.item() / 2.0, global_step)
                if actor_loss is not None:
                    writer.add_scalar("losses/actor_loss", actor_loss.item(), global_step)
                writer.add_scalar("losses/alpha", alpha, global_step)
                if alpha_loss is not None:
                    writer.add_scalar("losses/alpha_loss", alpha_loss.item(), global_step)
                if (sps := speed.log(global_step)) is not None:
                    pbar.set_postfix(fps=f"{sps:.0f}", ret=f"{episodic_return:.1f}")

    if args.save_model:
        # serves --save-model only, from the project's package (pip install -e .): imported here, so that this
        # file alone still trains
        from leanrl_utils.evals import evaluate

        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        torch.save({"algo": "sac", "args": asdict(args), "actor": actor.state_dict(), "qf1": qf1.state_dict(),
                    "qf2": qf2.state_dict()}, model_path)
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
    positive = ["total_timesteps", "buffer_size", "batch_size", "policy_lr", "q_lr", "policy_frequency",
                "target_network_frequency", "eval_episodes"]
    for name in positive + ["learning_starts", "measure_after", "alpha"]:  # alpha: also when autotune ignores it
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
    except KeyboardInterrupt:
        print("interrupted; what was logged is kept in runs/", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    run()
