"""Deep Q-Network (DQN) on Atari through envpool, made fast.

The algorithm and defaults of `dqn_atari_envpool.py`; only the execution changes.
Each optimization carries a comment saying what it saves:

- the replay buffer keeps its frames (each stored once, as uint8) on the training
  device and rebuilds the stacks there: a batch is a gather on the device, and a
  frame enters the buffer from the host once, when it is stored (acting sends its own
  stack); its bookkeeping (a few
  numbers per slot) stays on the host, where reading it costs no sync;
- frames and convolutions in the channels-last layout;
- the target network is updated with one fused `lerp_`;
- `--compile`: `torch.compile` of the loss with its backward pass (the fused
  optimizer step stays eager: one call over every weight), and of the acting step on
  a GPU;
- `--cudagraphs`: the whole update, the greedy acting step and the target copy,
  replayed as one CUDA graph each (tensordict's `CudaGraphModule`): one launch for
  all of its kernels on a GPU;
- no `.item()` in the hot loop but the action handed to the environment.

The two scripts draw the same batches (the replay buffer has a generator of its
own) and the same ε-greedy choices (Python's generator and the action space's, as
CleanRL does), so their runs can be compared number for number on the CPU.

As in the eager script, and unlike CleanRL's script (gymnasium's Atari wrappers):
- the replay buffer stores each frame once and rebuilds the stacks of 4 when it
  samples: 1M transitions take 7 GB, not the 28 GB of stacked observations (and 56
  GB with the next observations) that a naive buffer needs;
- envpool resets an environment on the step *after* it reports done (a lost life
  or a finished game): that step ignores the action and returns reward 0. It is no
  transition, and is not stored;
- episode statistics are the real game's: the unclipped rewards summed over all
  lives, logged when the last life is lost or the game is truncated, with the
  game's length in agent steps.

What these choices measure on a CPU: docs/speed.md and docs/limits.md.

    python leanrl/dqn_atari_envpool_torchcompile.py --compile --cudagraphs
"""

import atexit
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

import envpool
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import tqdm
import tyro
from tensordict import TensorDict, from_module
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
    env_id: str = "Breakout-v5"
    """the id of the environment"""
    total_timesteps: int = 10000000
    """total timesteps of the experiments"""
    learning_rate: float = 1e-4
    """the learning rate of the optimizer"""
    buffer_size: int = 1000000
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 1.0
    """the target network update rate"""
    target_network_frequency: int = 1000
    """the timesteps it takes to update the target network"""
    batch_size: int = 32
    """the batch size of sample from the reply memory"""
    start_e: float = 1
    """the starting epsilon for exploration"""
    end_e: float = 0.01
    """the ending epsilon for exploration"""
    exploration_fraction: float = 0.10
    """the fraction of `total-timesteps` it takes from start-e to go end-e"""
    learning_starts: int = 80000
    """timestep to start learning"""
    train_frequency: int = 4
    """the frequency of training"""
    measure_after: int = 20
    """updates left out of the fps window (the warm-up: compilation, CUDA-graph capture)"""

    compile: bool = False
    """whether to use torch.compile"""
    cudagraphs: bool = False
    """whether to use CUDA graphs (needs CUDA)"""


def make_envs(args: Args, num_envs: int = 1, seed: int | None = None):
    """envpool's Atari vector env, of one env as in CleanRL's DQN; a user's bad id stops here."""
    if args.env_id not in envpool.list_all_envs():
        fail(f"--env-id {args.env_id!r}: envpool has no such environment (Atari ids look like Breakout-v5)")
    if type(envpool.make_spec(args.env_id)).__name__ != "AtariEnvSpec":
        fail(f"--env-id {args.env_id!r}: not an Atari game (this script is for envpool's Atari ids, e.g. Breakout-v5)")
    envs = envpool.make(
        args.env_id,
        env_type="gymnasium",
        num_envs=num_envs,
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

    def forward(self, x):
        # uint8 frames become floats here, on the device, in the channels-last layout that oneDNN's
        # CPU convolutions run fastest (see ppo_atari_envpool_torchcompile.py)
        return self.network(x.contiguous(memory_format=torch.channels_last) / 255.0)


def linear_schedule(start_e: float, end_e: float, duration: int, t: int):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


class ReplayBuffer:
    """A circular buffer of transitions that stores each frame once, on the training device, where the
    batches are gathered; its bookkeeping stays in CPU tensors (reading it costs no sync).

    Slot t holds the newest frame of observation t, the action taken from it, the reward and the
    termination that followed, and how many earlier frames of the same game its stack of 4 shows (up
    to 3). The stack is rebuilt from those frames; envpool stacks a game's first frame 4 times, and the
    rebuilt stack repeats it the same way, so no stack reaches into the previous game. Observation
    t + 1, in slot t + 1, is the next observation. A slot is no transition when its observation ended
    an episode (the next step is envpool's reset step), when no action was taken from it yet (the write
    head), or when the write head has overwritten a frame its stack needs."""

    def __init__(self, size: int, frame_shape: tuple, device: torch.device, seed: int):
        # the frames on the training device: a batch's stacks are a gather there; the bookkeeping stays here
        self.frames = torch.zeros((size, *frame_shape), dtype=torch.uint8, device=device)
        self.back = torch.zeros(size, dtype=torch.long)  # earlier frames of the same game in the stack, up to 3
        self.actions, self.rewards = torch.zeros(size, dtype=torch.long), torch.zeros(size)
        self.dones, self.valid = torch.zeros(size), torch.zeros(size, dtype=torch.bool)
        self.size, self.pos, self.full, self.obs_done, self.device = size, 0, False, False, device
        # the batches are drawn from a generator of their own: exploring does not shift them
        self.generator = torch.Generator().manual_seed(seed)

    def start(self, obs, info):
        """The first observation of the run (one env)."""
        self.write_obs(obs[0], game_start=True)

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
        self.frames[p] = torch.as_tensor(obs[-1]).to(self.device, non_blocking=True)  # one frame crosses, as uint8
        self.back[p] = 0 if game_start else min(int(self.back[p - 1]) + 1, 3)
        self.valid[p] = False  # no action taken from it yet

    def stacks(self, slots):
        """The stacks of 4 frames of the observations in `slots`, as envpool returned them."""
        offsets = torch.minimum(torch.arange(3, -1, -1), self.back[slots, None])
        # the indices are worked out on the host, where the bookkeeping is; the gather runs on the device
        return self.frames[((slots[:, None] - offsets) % self.size).to(self.device, non_blocking=True)]

    def sample(self, batch_size: int) -> TensorDict:
        # a TensorDict, not a namespace: one .to() moves its small tensors, and a compiled or graphed update
        # takes it as an input of tensors
        # uniform over the slots that hold transitions: the first `batch_size` valid ones among 4x as many
        # uniform draws (the buffer's invalid slots are a few percent: too few valid is all but impossible)
        candidates = torch.randint(0, self.size if self.full else self.pos, (4 * batch_size,), generator=self.generator)
        slots = candidates[torch.argsort((~self.valid[candidates]).byte(), stable=True)[:batch_size]]
        small = TensorDict(actions=self.actions[slots, None], rewards=self.rewards[slots], dones=self.dones[slots])
        return small.to(self.device, non_blocking=True).update(
            observations=self.stacks(slots), next_observations=self.stacks((slots + 1) % self.size))


# The devices on which --compile compiles the acting step: CUDA only, where it becomes part of the acting
# graph; on a CPU the acting step is a small part of a step that the update dominates, and stays eager.
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
    envs = make_envs(args)
    if args.capture_video:
        print("warning: --capture-video is not supported with envpool; no video is recorded", file=sys.stderr)
    envs.single_action_space.seed(args.seed)
    episode_stats = EpisodeStats(1)

    # the network is built on the CPU and moved, as in the eager script: the same initial weights, drawn
    # from the CPU generator, on any device
    q_network = QNetwork(envs).to(device, memory_format=torch.channels_last)  # see QNetwork.forward
    q_params = from_module(q_network).data  # detached views of the weights, shared storage
    # fused: one call per step over every weight, its state on the device; capturable under CUDA graphs: a
    # replayed step reads its step count on the device
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, fused=True, capturable=graphs)
    # the policy that acts reads the same weights, detached: no autograd bookkeeping when acting
    with torch.device("meta"):  # shells without weights of their own: each runs the weights put into it
        q_network_detach, target_network = QNetwork(envs), QNetwork(envs)
    q_params.to_module(q_network_detach, preserve_module_state=False)
    # the target network: a copy of the weights run by a "meta" shell (the target starts as an exact copy)
    target_params = q_params.clone()
    target_params.to_module(target_network, preserve_module_state=False)

    rb = ReplayBuffer(args.buffer_size, envs.single_observation_space.shape[1:], device, args.seed)

    def policy(obs):
        return q_network_detach(obs).argmax(dim=-1)  # the greedy action

    def loss_and_grads(data):
        with torch.no_grad():
            target_max, _ = target_network(data["next_observations"]).max(dim=1)
            td_target = data["rewards"].flatten() + args.gamma * target_max * (1 - data["dones"].flatten())
        old_val = q_network(data["observations"]).gather(1, data["actions"]).squeeze()
        loss = F.mse_loss(td_target, old_val)
        loss.backward()
        return TensorDict(td_loss=loss.detach(), q_values=old_val.detach().mean())

    def update(data):
        optimizer.zero_grad()
        out = loss_and_grads(data)  # forward and backward
        optimizer.step()
        return out

    def update_target():
        # one fused lerp over every weight instead of a Python loop of copies (tau = 1: a hard copy)
        target_params.lerp_(q_params, args.tau)

    if args.compile:
        # tensordict warns that a lock_() traced by torch.compile skips its check of locked parents: nothing here
        # unlocks a tensordict, so the warning says nothing a user can act on
        warnings.filterwarnings("ignore", r"Using lock_\(\) inside a compiled graph")
        if device.type == "cpu":
            # compiled code draws eager's random numbers on the CPU, so that --compile reproduces a run
            # without it (the contract); on a GPU inductor's own generator is faster and stays on
            torch._inductor.config.fallback_random = True
        # trace loss.backward() into the compiled graph: forward and backward become one graph
        torch._dynamo.config.trace_autograd_ops = True
        # the optimizer step stays eager: one fused call, which compiled would add graph breaks (torch.optim
        # breaks the graph around step() by design)
        loss_and_grads = torch.compile(loss_and_grads)
        if device.type in COMPILED_ACTING:
            policy = torch.compile(policy)

    if args.cudagraphs:
        # the whole update (zero_grad, forward, backward, optimizer step), the acting step and the target
        # copy each become one graph replay; the warm-up calls before the capture let compilation
        # finish (without CUDA: called directly)
        warnings.filterwarnings("ignore", "This module is instantiated on a machine without CUDA")
        # tensordict logs each graph module it sets up (INFO): nothing a user acts on
        logging.getLogger("tensordict").setLevel(logging.WARNING)
        warmup = 4 if args.compile else 2
        update = CudaGraphModule(update, in_keys=[], out_keys=[], warmup=warmup)
        update_target = CudaGraphModule(update_target, warmup=warmup)  # a function of no argument: graphed too
        policy = CudaGraphModule(policy, warmup=warmup)

    writer = make_writer(args, run_name, started)
    # fps is measured from the `measure_after`-th update on: the warm-up before it is logged apart
    # a line above the progress bar says what the warm-up does (compiling, capturing) and how long it took
    work = [w for w, on in (("compiling (--compile)", args.compile), ("capturing CUDA graphs", graphs)) if on]
    speed = Speed(writer, start_step=args.learning_starts + 1, warmup_steps=args.measure_after * args.train_frequency,
                  busy=" and ".join(work) or None)
    # out: the last update's losses, left on the device and read only at logging intervals
    episodic_return, out = float("nan"), None

    # TRY NOT TO MODIFY: start the game
    obs, info = envs.reset()
    rb.start(obs, info)
    pbar = tqdm.trange(args.total_timesteps, desc=args.exp_name, unit="step")
    for global_step in pbar:
        # ALGO LOGIC: put action logic here
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        # ε-greedy on the host, as in the eager script: the actions come back every step anyway, so the
        # branch costs no sync, and an exploring step runs no CNN (a device-side pick would run it always)
        if random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample()])
        else:
            actions = policy(torch.as_tensor(obs, device=device)).cpu().numpy()  # uint8 frames cross

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
            speed.tick(global_step)
            if global_step % args.train_frequency == 0:
                # the whole update in one call: the loss, its gradients and the optimizer step (update above)
                out = update(rb.sample(args.batch_size))

                if global_step % 100 == 0:
                    # the only reads of device values in the loop but the action, at logging intervals
                    for key, value in out.items():
                        writer.add_scalar(f"losses/{key}", value.item(), global_step)
                    writer.add_scalar("charts/epsilon", epsilon, global_step)
                    if (sps := speed.log(global_step)) is not None:
                        pbar.set_postfix(fps=f"{sps:.0f}", ret=f"{episodic_return:.1f}")

            # update target network
            if global_step % args.target_network_frequency == 0:
                update_target()  # one fused lerp_ (above)

    if args.save_model:
        # serves --save-model only, from the project's package (pip install -e .): imported here, so that this
        # file alone still trains
        from leanrl_utils.evals import evaluate

        model_path = f"runs/{run_name}/{args.exp_name}.pt"
        torch.save({"algo": "dqn_atari", "args": asdict(args), "q_network": q_network.state_dict()}, model_path)
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
    positive = ["total_timesteps", "learning_rate", "buffer_size", "batch_size", "target_network_frequency",
                "train_frequency", "exploration_fraction", "eval_episodes"]
    for name in positive + ["learning_starts", "measure_after", "start_e", "end_e"]:
        value = getattr(args, name)
        if value < 0 or (value == 0 and name in positive):
            fail(f"--{name.replace('_', '-')} must be {'positive' if name in positive else '>= 0'}, got {value}")
    if not 0.0 <= args.gamma <= 1.0:
        fail(f"--gamma must be in [0, 1], got {args.gamma}")
    if not 0.0 < args.tau <= 1.0:
        fail(f"--tau must be in (0, 1], got {args.tau}")
    for name in ("start_e", "end_e"):  # probabilities (>= 0 is checked above): each named alone
        if getattr(args, name) > 1:
            fail(f"--{name.replace('_', '-')} must be a probability, in [0, 1], got {getattr(args, name)}")
    if args.total_timesteps <= args.learning_starts:
        fail(f"--total-timesteps ({args.total_timesteps}) must exceed --learning-starts ({args.learning_starts})")
    if args.batch_size > args.buffer_size:
        fail(f"--batch-size ({args.batch_size}) must not exceed --buffer-size ({args.buffer_size})")


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
