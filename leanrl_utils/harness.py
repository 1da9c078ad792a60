"""The script contract's plumbing (CONTRIBUTING.md), shared by every script of leanrl/: not the lesson.

A script imports it as it imports any library (CleanRL's SAC takes its replay buffer from Stable-Baselines3)
and keeps the reinforcement learning: its `Args`, environment, networks, buffers, losses, loop, its own
argument ranges (`check_args`) and every optimization. What is here is the same for every script:

    from leanrl_utils import harness

    device = harness.pick_device(args)                 # threads for a busy machine, CUDA or the CPU, said why
    writer = harness.make_writer(args, run_name)       # TensorBoard (and wandb), closed at exit
    progress = harness.Progress(args, writer, total=..., start_step=..., warmup_steps=...)  # the bar and fps
    checkpoint = harness.Checkpoint(args, writer, dict(actor=actor, rb=rb, env=env, ...))  # what the run's state is
    start, obs, ... = checkpoint.resume(0, obs, ...)   # --resume: the state put back, the loop's values returned
    for global_step in range(start, args.total_timesteps):
        checkpoint.tick(global_step, obs, ...)         # a checkpoint every --checkpoint-every steps, and at Ctrl-C
        progress.tick(global_step)                     # the bar, the fps window's bounds
        ...
        harness.log_losses(writer, losses, global_step)  # at a logging step: losses/*, and the NaN stop
    checkpoint.close(args.total_timesteps, obs, ...)   # the run's last state, which a longer run goes on from
    progress.close()
    ...
    if __name__ == "__main__":
        harness.run(main, Args, check_args)            # flags and their one-line mistakes, then main(args)

A user's mistake stops in one line (`fail`, exit code 2), a run whose losses stop being finite numbers stops in
one line (exit code 3), and a Ctrl-C (exit code 130) or an error keeps what was logged on disk. Every script
takes two flags of the harness's besides its own `Args` (`RunFlags`): `--checkpoint-every N` and `--resume RUN`.
A Ctrl-C in the loop writes a checkpoint at the next safe point (the loop's next `checkpoint.tick`) and prints
the command that goes on from it; a second one stops at once. `--resume` puts the run's whole state back and
goes on in the run's folder, exactly where it stopped (leanrl_utils/checkpoints.py says how; CONTRIBUTING.md
says what each family restores).

It sets nothing that changes a run's numbers or its speed, beyond the thread count, which the contract gives
it: inductor's options, random-number settings and every other choice a reader of a pair should see are made
in the scripts. Everything it does to a run's process (`tests/test_harness.py` checks this list against what a
run through it changes):
- threads: `torch.set_num_threads`, cut on a busy machine (`pick_threads`; OMP_NUM_THREADS wins);
- warnings: tensordict's that say nothing a user can act on, and for a MuJoCo -v4 task gymnasium's "out of
  date" and MuJoCo's `settotalmass` deprecation, said once in one line instead (`quiet_libraries`);
- logging: tensordict's logger at WARNING (`quiet_libraries`);
- mujoco: its warning handler, through which MuJoCo's other warnings still print (`quiet_libraries`);
- signals: SIGINT held while a scalar is written, then raised again (`Writer.add_scalar`); in the loop, from
  `Checkpoint` on, a first SIGINT asks for a checkpoint at the next safe point, a second stops at once;
- random generators: with --resume, Python's, numpy's and torch's put back to the checkpoint's (`Checkpoint`);
- atexit: the writer closed, and wandb finished with --track (`make_writer`);
- jax: its platform, the CPU, with --no-cuda (`use_jax_device`, for the JAX twins);
- environment: XLA_FLAGS, asking XLA for deterministic GPU kernels with --torch-deterministic (`use_jax_device`).
"""

import atexit
import dataclasses
import logging
import math
import os
import re
import signal
import sys
import time
import warnings
from typing import Callable, NoReturn

import torch
import tqdm
import tyro
from torch.utils.tensorboard import SummaryWriter

from leanrl_utils import checkpoints

# when the current run's main() began (set by `run`): charts/start's wall time, so that the time to reach a
# return counts set-up and compilation
_started: float | None = None
# the run's arguments (set by `run`) and the step its loop is at (set by `Progress.tick`): a diverged run's line
# names both
_args = None
_step: int | None = None
# the checkpoint being resumed (set by `run` with --resume, read by run_name, make_writer, Progress, env_seed and
# Checkpoint.resume, which drops it once the state is put back)
_resume: dict | None = None
# the run's Checkpoint, once made (its last step and file are named when a second Ctrl-C stops the run)
_checkpoint = None
# the running script's name (set by `run`): a checkpoint names the script that wrote it
_script: str | None = None


@dataclasses.dataclass
class RunFlags:
    """The flags every script takes besides its own `Args` (added by `run`): the run's checkpoints."""

    checkpoint_every: int = 100_000
    """environment steps between two checkpoints of the run's whole state (at the end of the run too), 0 for none (>= 0)"""
    resume: str | None = None
    """go on with the run in this folder (runs/<run>) from its checkpoint, as if it had not stopped"""


# RunFlags' fields that may differ between a run and its --resume: none changes what the run computes
FREE_ON_RESUME = {"checkpoint_every", "resume", "total_timesteps", "measure_after", "track", "wandb_project_name",
                  "wandb_entity", "save_model", "eval_episodes"}


def with_run_flags(Args: type) -> type:
    """`Args` with RunFlags' fields after its own (a subclass: `--help` lists them last)."""
    if issubclass(Args, RunFlags):
        return Args
    cls = dataclasses.dataclass(type(Args.__name__, (RunFlags, Args), {"__module__": __name__,
                                                                        "__qualname__": f"{Args.__qualname__}+RunFlags"}))
    return cls


def fail(message: str) -> NoReturn:
    """A user's mistake: one line on stderr, exit code 2, no stack trace."""
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
    sys.exit(2)


def flag(name: str) -> str:
    """A field of `Args` as the user types it: total_timesteps -> --total-timesteps."""
    return "--" + name.replace("_", "-")


# A flag's range, declared where its docstring ends (and shown by --help): "(> 0)", "(>= 0)", "(in [0, 1])",
# "(in (0, 1])", a bound that is another flag ("(>= --batch-size)"), several joined by ", ", or "(computed)" for a
# field the script fills in itself. Every int and float flag declares one; `check_declared` enforces them all.
RANGE = re.compile(r" \(((?:in [\[(][^\])]+[\])]|[<>]=? [-\w.]+|computed)(?:, (?:in [\[(][^\])]+[\])]|[<>]=? [-\w.]+))*)\)$")
CLAUSE = re.compile(r"in ([\[(])([^,]+), ([^\])]+)([\])])|([<>]=?) ([-\w.]+)")


def field_docs(Args: type) -> dict[str, str]:
    """Each field of `Args` and its one-line docstring (what --help shows)."""
    import inspect

    docs = {}
    for cls in reversed(Args.__mro__):  # a subclass's fields (RunFlags added by `run`) after its bases'
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):  # a class without a source file (made at run time): no docstrings to read
            continue
        docs.update(re.findall(r'^    (\w+):.*\n    """(.*?)"""', source, flags=re.M))
    return {name: docs[name] for name in [f.name for f in dataclasses.fields(Args)] if name in docs} \
        if dataclasses.is_dataclass(Args) else docs


def declared_ranges(Args: type) -> dict[str, list[str]]:
    """Each field's declared range: its clauses ("> 0", "in [0, 1]", ">= --batch-size", "computed")."""
    return {name: [c.group(0) for c in CLAUSE.finditer(m.group(1))] or [m.group(1)]
            for name, doc in field_docs(Args).items() if (m := RANGE.search(doc))}


def out_of_range(args, name: str, clause: str) -> str | None:
    """What is wrong with the flag `name` against one clause of its range, in words; None where it is within."""
    value = getattr(args, name)
    if value is None:  # an optional flag left unset
        return None
    if clause == "computed":
        default = next(f.default for f in dataclasses.fields(args) if f.name == name)
        return None if value == default else f"{flag(name)} is computed by the script from other flags: leave it out"
    m = CLAUSE.fullmatch(clause)
    if m.group(1):  # an interval
        low, high = float(m.group(2)), float(m.group(3))
        inside = (low < value if m.group(1) == "(" else low <= value) and \
                 (value < high if m.group(4) == ")" else value <= high)
        return None if inside else f"{flag(name)} must be in {clause[3:]}, got {value}"
    op, bound = m.group(5), m.group(6)
    other = bound.startswith("--")
    limit = getattr(args, bound[2:].replace("-", "_")) if other else float(bound)
    if limit is None or {"<": value < limit, "<=": value <= limit, ">": value > limit, ">=": value >= limit}[op]:
        return None
    if other:
        return f"{flag(name)} ({value}) must be {op} {bound} ({limit})"
    return f"{flag(name)} must be {'positive' if (op, limit) == ('>', 0) else f'{op} {bound}'}, got {value}"


def check_declared(args) -> None:
    """Every flag against its declared range (RANGE), in the order of `Args`: the first flag out of its range is
    named alone, in one line."""
    for name, clauses in declared_ranges(type(args)).items():
        for clause in clauses:
            if (wrong := out_of_range(args, name, clause)) is not None:
                fail(wrong)


def check_common(args) -> None:
    """What every script refuses before its own checks: a float flag given as nan or inf (it would pass every
    range check written as a comparison), a seed that numpy and gymnasium refuse (they take 0 to 2**32 - 1) only
    once the run has started, an experiment name that cannot name a run's folder, `--async-envs` (PPO Atari's
    optimized twin: the envs in two halves) with an odd number of envs, and every flag outside its declared range
    (`check_declared`)."""
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            fail(f"{flag(name)} must be a finite number, got {value}")
    if hasattr(args, "seed") and not 0 <= args.seed < 2**32:
        fail(f"--seed must be in [0, 2**32 - 1] (numpy's and gymnasium's seeds), got {args.seed}")
    name = getattr(args, "exp_name", "x")
    if not name.strip() or any(c in name for c in "/\\\0") or len(name.encode()) > 200:
        fail(f"--exp-name {name!r}: it names the run's folder: a name without '/', '\\' or NUL, of at most 200 bytes")
    if getattr(args, "async_envs", False) and args.num_envs % 2:
        fail(f"--async-envs steps the envs in two halves: --num-envs must be even, not {args.num_envs}")
    check_declared(args)


def known_env_id(env_id: str, maker: str) -> None:
    """Refuse, in one line and before any work, a task that `maker` ("gymnasium" or "envpool") does not know."""
    if maker == "envpool":
        import envpool

        if env_id not in envpool.list_all_envs():
            fail(f"--env-id {env_id!r}: envpool has no such environment (Atari ids look like Breakout-v5)")
        return
    import gymnasium as gym

    try:
        gym.spec(env_id)
    except gym.error.Error as err:
        fail(f"--env-id {env_id!r}: {str(err).splitlines()[0] if str(err) else type(err).__name__}")


def check_batches(args, batch: int, ranks: int = 1) -> None:
    """An on-policy run's sizes against each other: the minibatches divide the `batch` of one iteration (each of
    `ranks` processes collects one), and the step budget holds at least one iteration. A budget that is not a whole
    number of iterations runs the whole ones only: one line says how many steps will run."""
    if batch % args.num_minibatches != 0:
        fail(f"--num-minibatches ({args.num_minibatches}) must divide the batch (--num-envs x --num-steps = {batch})")
    whole = batch * ranks
    if args.total_timesteps < whole:
        fail(f"--total-timesteps ({args.total_timesteps}) is less than one batch (--num-envs x --num-steps"
             + (f" x {ranks} ranks" if ranks > 1 else "") + f" = {whole})")
    if args.total_timesteps % whole and int(os.environ.get("RANK", "0")) == 0:
        iterations = args.total_timesteps // whole
        print(f"{os.path.basename(sys.argv[0])}: --total-timesteps {args.total_timesteps} is not a whole number of "
              f"batches of {whole}: {iterations} iterations, {iterations * whole} steps, will run", file=sys.stderr)


def parse_args(Args: type, argv: list[str] | None = None):
    """tyro's command line, where a mistake stops in one line: an unknown flag names the nearest real ones (by
    name, or by the words of their help: --learning-rate finds the flags whose help says "learning rate"), and a
    value tyro cannot read is named in tyro's own words, without its box. --help is tyro's."""
    import contextlib
    import difflib
    import io
    import itertools

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
        given = unknown[0].split("=")[0]
        if not given.startswith("-"):
            fail(f"{given!r} is neither a flag nor a flag's value; --help lists the flags")
        helps = {flag(name): RANGE.sub("", text).lower().split() for name, text in field_docs(Args).items()}
        near = [name for name, words in helps.items() if all(w in words for w in given.lstrip("-").split("-"))]
        near += [name for name in difflib.get_close_matches(given, helps, n=3, cutoff=0.75) if name not in near]
        near = near[:3]
        fail(f"{given}: no such flag" + (f"; did you mean {', '.join(near[:-1]) + ' or ' * (len(near) > 1) + near[-1]}?"
                                         if near else "; --help lists the flags"))
    return args


def pick_threads() -> None:
    """torch's CPU threads: one per core (torch's default), cut to the share of the machine that other programs
    leave free, at least one. A parallel region waits for its slowest thread, and a thread whose core another
    program holds waits for its turn, so on a busy machine fewer threads run faster (docs/speed_settings.md).
    The load is read from /proc/stat (Linux) over a fifth of a second, before the run does any work, as the
    busy fraction of all logical CPUs, which is applied to torch's count (cores, where SMT gives a core two
    logical CPUs): one unit throughout. A user's OMP_NUM_THREADS wins. The thread count can change the last
    digits of a run's numbers: a cut says so."""
    if "OMP_NUM_THREADS" in os.environ or not os.path.exists("/proc/stat"):
        return

    def ticks():  # (all, idle + iowait) jiffies of every CPU since boot
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        return sum(cpu), cpu[3] + cpu[4]

    (total, idle), _, (total_after, idle_after) = ticks(), time.sleep(0.2), ticks()
    busy = 1 - (idle_after - idle) / max(1, total_after - total)  # the fraction of the machine others use
    cores = torch.get_num_threads()
    threads = threads_left(cores, busy)
    if threads < cores:
        torch.set_num_threads(threads)
        print(f"{os.path.basename(sys.argv[0])}: other programs keep {busy:.0%} of the {os.cpu_count()} CPUs busy: "
              f"torch runs on {threads} thread{'s' * (threads > 1)}, not {cores} (OMP_NUM_THREADS sets it)",
              file=sys.stderr)


def threads_left(cores: int, busy: float) -> int:
    """The threads for `cores` when a fraction `busy` of the machine is taken: the free share of them, >= 1."""
    return max(1, min(cores, round(cores * (1 - busy))))


def why_not_cuda() -> str | None:
    """None where torch can use CUDA; otherwise why not, in a few words: torch's own reason where it gives one
    (a driver too old for this build), a CPU build of torch, or no visible device."""
    with warnings.catch_warnings(record=True) as caught:  # torch gives its reason as a warning (an old driver)
        warnings.simplefilter("always")
        if torch.cuda.is_available():
            return None
    reasons = [str(w.message).strip().splitlines()[0] for w in caught if "CUDA" in str(w.message)]
    return (f"torch {torch.__version__} is a CPU build" if torch.version.cuda is None
            else reasons[0] if reasons else "no CUDA device is visible")


def quiet_libraries(env_id: str | None) -> None:
    """Leave out the libraries' messages that say nothing a user can act on, every other warning left visible.
    tensordict's: a lock_() traced by torch.compile skips its check of locked parents (nothing in the scripts
    unlocks a tensordict); CudaGraphModule made without CUDA (pick_device says once that --cudagraphs runs
    without graphs there); each graph module it sets up (logged at INFO). And on a MuJoCo -v4 task (CleanRL's
    and LeanRL's published figures use v4), gymnasium's warning that v4 is out of date and MuJoCo's deprecation
    of the `settotalmass` attribute of v4's model files (once per environment made), said once in one line
    instead. Called by `run`, before main()."""
    warnings.filterwarnings("ignore", r"Using lock_\(\) inside a compiled graph")
    warnings.filterwarnings("ignore", "This module is instantiated on a machine without CUDA")
    logging.getLogger("tensordict").setLevel(logging.WARNING)
    if not (env_id or "").endswith("-v4") or env_id.split("-")[0] not in MUJOCO_V4:
        return
    import mujoco

    warnings.filterwarnings("ignore", rf"(?s).*The environment {re.escape(env_id)} is out of date")
    mujoco.set_mju_user_warning(lambda text: None if "settotalmass" in text else print(
        f"WARNING: {text}\n", file=sys.stderr))  # MuJoCo's own format for the others
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"{os.path.basename(sys.argv[0])}: {env_id}: the version CleanRL's and LeanRL's published figures use "
              "(gymnasium's out-of-date warning and MuJoCo's settotalmass deprecation for it are left out)",
              file=sys.stderr)


# gymnasium's MuJoCo tasks that have a -v4 (whose model files set `settotalmass`)
MUJOCO_V4 = {"Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup", "InvertedDoublePendulum",
             "InvertedPendulum", "Pusher", "Reacher", "Swimmer", "Walker2d"}


def pick_device(args) -> torch.device:
    """The run's device, after its CPU threads (`pick_threads`): CUDA when --cuda (the default) asks for it and
    torch can use it; otherwise the CPU, and if CUDA was asked for, one line that says why it is not used, so
    that a run meant for a GPU never runs on the CPU unnoticed. --cudagraphs (the optimized scripts' flag)
    without CUDA says once that it runs without graphs (tensordict's CudaGraphModule then calls each function
    directly); on a machine with CUDA, --no-cuda beside it is refused, since the graphs would be captured from
    CPU tensors."""
    pick_threads()
    why = why_not_cuda()
    if args.cuda and why is None:
        return torch.device("cuda")
    if getattr(args, "cudagraphs", False):
        if why is None:
            fail("--cudagraphs records CUDA graphs and --no-cuda keeps this run on the CPU: leave out one of the two")
        print("warning: --cudagraphs needs a CUDA device; running without CUDA graphs", file=sys.stderr)
    if args.cuda:
        print(f"{os.path.basename(sys.argv[0])}: --cuda: {why}; running on the CPU", file=sys.stderr)
    return torch.device("cpu")


def pick_rank_device(args, local_rank: int) -> torch.device:
    """A rank's device for the multi-process scripts (torchrun): the CPU, or the GPU of its local rank, after
    its CPU threads. Refuses, in one line, what would fail at the first collective: a backend this torch build
    lacks, NCCL without CUDA, NCCL ranks sharing a GPU. Where --cuda asked for CUDA and it is not usable, one
    line (rank 0's) says why."""
    import torch.distributed as dist

    pick_threads()
    if args.backend is not None and not dist.is_backend_available(args.backend):
        fail(f"--backend {args.backend}: this build of torch has no such backend"
             + (" (NCCL needs a CUDA build of torch and a GPU; on the CPU use gloo, the default)" if args.backend == "nccl" else ""))
    why = why_not_cuda()
    if not (why is None and args.cuda):
        if args.backend == "nccl":
            fail("--backend nccl: NCCL runs on CUDA devices only and this run has none; use gloo (the default on the CPU)")
        if getattr(args, "cudagraphs", False):
            if why is None:  # the graphs would be captured from CPU tensors
                fail("--cudagraphs records CUDA graphs and --no-cuda keeps this run on the CPU: leave out one of the two")
            if int(os.environ.get("RANK", "0")) == 0:
                print("warning: --cudagraphs needs a CUDA device; running without CUDA graphs", file=sys.stderr)
        if args.cuda and int(os.environ.get("RANK", "0")) == 0:  # CUDA was asked for: one line says why it is not used
            print(f"{os.path.basename(sys.argv[0])}: --cuda: {why}; running on the CPU", file=sys.stderr)
        return torch.device("cpu")
    count = torch.cuda.device_count()
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(args.world_size)))  # ranks on this machine
    gpus = args.device_ids or [r % count for r in range(local_world)]
    if len(gpus) < local_world or not all(0 <= g < count for g in gpus):
        fail(f"--device-ids {gpus}: needs an id for each of the {local_world} ranks on this machine, each below the "
             f"number of GPUs ({count})")
    if args.world_size > 1 and (args.backend or "nccl") == "nccl" and len(set(gpus[:local_world])) < local_world:
        fail(f"--backend nccl: the {local_world} ranks on this machine would share GPUs ({gpus[:local_world]}), which "
             "NCCL refuses at the first collective; run one rank per GPU, or use --backend gloo without --cudagraphs")
    return torch.device("cuda", gpus[local_rank])


def no_video_with_envpool(args) -> None:
    """envpool renders no frames: --capture-video says so once (rank 0's line in a multi-process run), and the run
    goes on without a video."""
    if args.capture_video and int(os.environ.get("RANK", "0")) == 0:
        print("warning: --capture-video is not supported with envpool; no video is recorded", file=sys.stderr)


def inductor_options(device: torch.device, torch_version: str = torch.__version__) -> dict | None:
    """inductor's settings for compiling SAC's and TD3's updates: none, but on CUDA with torch before 2.12. There
    inductor crashes compiling a function that mixes foreach kernels (the Adam written out, the target networks'
    `lerp_`) with reductions over tensors of other shapes, in its loop reordering after fusion
    (pytorch/pytorch#176591, fixed by #176849, first released in torch 2.12): such an update is compiled with
    that pass off, a fusion heuristic given up so that the GPU machine's own torch, which often cannot be
    replaced, runs it."""
    if device.type == "cuda" and torch.torch_version.TorchVersion(torch_version) < (2, 12):
        return {"loop_ordering_after_fusion": False}
    return None


def use_jax_device(args) -> None:
    """The JAX twins' device: --cuda off keeps JAX on the CPU even where it has a GPU; --torch-deterministic
    asks for XLA's deterministic GPU kernels, unless XLA_FLAGS already sets that flag (the user's value wins).
    Both are read when JAX starts its backend, at the first array: call this before any. The CPU's kernels are
    deterministic anyway. Where --cuda asked for a GPU and JAX has none, one line says so. (JAX is imported
    here, not at the top: the PyTorch scripts never import it.)"""
    import jax

    if not args.cuda:
        jax.config.update("jax_platforms", "cpu")
    if args.torch_deterministic and "xla_gpu_deterministic_ops" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_deterministic_ops=true").strip()
    if args.cuda and jax.default_backend() == "cpu":  # starts the backend, once the settings above are made
        print(f"{os.path.basename(sys.argv[0])}: --cuda: JAX {jax.__version__} has no usable GPU here (a CPU-only "
              "jaxlib, or no visible GPU); running on the CPU", file=sys.stderr)


def run_name(args) -> str:
    """The run's folder under runs/: CleanRL's `<env id>__<exp name>__<seed>__<unix time>`, or with --resume the
    folder of the run resumed."""
    if _resume is not None:
        return _resume["run_name"]
    return f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"


def make_writer(args, run_name: str) -> "Writer":
    """TensorBoard in runs/<run_name>/ (and wandb with --track), closed at exit: what was logged is kept after
    Ctrl-C or an error. The hyperparameters go in as a text table, and `charts/start` as one point whose wall
    time is when main() began: the time to reach a return counts from it, set-up and compilation before the
    first logged value included. With --resume the writer goes on in the run's folder and TensorBoard drops what
    the run logged after its checkpoint (`purge_step`): a curve has no stretch twice; wandb goes on with the
    run's own id (kept in the folder)."""
    # absolute: the writer's thread writes at its flushes and at exit, wherever the process's folder is by then (a
    # test that ran main() in a folder of its own and left it)
    folder = os.path.abspath(f"runs/{run_name}")
    if args.track:
        import wandb

        id_file = os.path.join(folder, "wandb_id")
        if _resume is not None and os.path.exists(id_file):
            with open(id_file) as f:
                run_id = f.read().strip()
        else:
            import secrets

            run_id = secrets.token_hex(4)  # a new W&B run's id, kept for a --resume (not from `random`: the run's)
            os.makedirs(folder, exist_ok=True)
            with open(id_file, "w") as f:
                f.write(run_id)
        # the run's folder named as the one TensorBoard folder to sync: without a root, wandb waits 10 s at exit
        # for a second one to appear
        wandb.tensorboard.patch(root_logdir=folder)
        wandb.init(project=args.wandb_project_name, entity=args.wandb_entity, sync_tensorboard=True,
                   config=vars(args), name=run_name, save_code=True, id=run_id, resume="allow")
        atexit.register(wandb.finish)
    if _resume is not None:
        writer = Writer(folder, purge_step=_resume["purge_step"])
        writer.last_step = _resume["purge_step"] - 1  # what the run had logged when its checkpoint was written
    else:
        writer = Writer(folder)
        writer.add_scalar("charts/start", 0, 0, walltime=_started if _started is not None else time.time())
        writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in vars(args).items()))
    atexit.register(writer.close)  # registered last, runs first: before wandb.finish
    return writer


class Writer(SummaryWriter):
    """TensorBoard's writer, where a Ctrl-C that lands while a scalar is written waits for the write, then is
    raised again: a KeyboardInterrupt raised inside the locks of TensorBoard's queue can leave its writer thread
    asleep, and the run hung at exit (writer.close). It keeps the last step it was given (`last_step`): a
    checkpoint's resume drops what was logged after it."""

    last_step = -1

    def add_scalar(self, tag, scalar_value, global_step=None, *args, **kwargs):
        if global_step is not None and not tag.startswith("eval/"):  # eval/ counts episodes, after the loop
            self.last_step = max(self.last_step, int(global_step))
        caught = []
        previous = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
        try:
            return super().add_scalar(tag, scalar_value, global_step, *args, **kwargs)
        finally:
            signal.signal(signal.SIGINT, previous)
            if caught:
                signal.raise_signal(signal.SIGINT)


def resume_command(run_name: str) -> str:
    """The command that goes on with the run in runs/<run_name>: the script with --resume alone (the run's flags
    come from its checkpoint)."""
    import shlex
    import shutil

    found = shutil.which("python")  # `python` where it is this interpreter (the same environment's bin/)
    python = "python" if found and os.path.dirname(found) == os.path.dirname(sys.executable) else sys.executable
    if "WORLD_SIZE" in os.environ:
        launch = ["torchrun", "--standalone", f"--nproc-per-node={os.environ.get('LOCAL_WORLD_SIZE', os.environ['WORLD_SIZE'])}"]
    else:
        launch = [python]
    script = os.path.relpath(sys.argv[0])
    script = script if not script.startswith("..") else os.path.abspath(sys.argv[0])
    return shlex.join(launch + [script, "--resume", f"runs/{run_name}"])


class Stopped(KeyboardInterrupt):
    """A Ctrl-C answered at a safe point, after a checkpoint: `run` prints its message and exits 130."""


class Checkpoint:
    """The run's whole state, named by the script, for --checkpoint-every, Ctrl-C and --resume.

    `objects` are what the run changes in place (networks, optimizers, buffers, gymnasium environments, a
    tensor such as SAC's log_alpha): a checkpoint holds their state (leanrl_utils/checkpoints.py: `encode`)
    and --resume puts it back into them in place. The values the loop carries from one step to the next (the
    observation, the latest return and losses, a JAX twin's train state and key) are given to `resume` and
    `tick`: `resume` returns them restored. The global random generators (Python, numpy, torch's CPU and CUDA
    ones) are saved too. `envpool=True`: the environments are envpool's, which cannot save their games: they are
    not part of the state, and a resumed run makes them anew with `env_seed`.

    `tick(step, ...)` is the loop's safe point, at the top of an iteration: every --checkpoint-every steps it
    writes a checkpoint (atomically: a kill leaves the previous one whole), and after a Ctrl-C it writes one and
    stops the run, printing the command that goes on. `close` writes the run's last state, from which a longer
    --total-timesteps goes on."""

    def __init__(self, args, writer, objects: dict, envpool: bool = False):
        global _checkpoint
        self.args, self.writer, self.objects, self.envpool = args, writer, objects, envpool
        self.every = getattr(args, "checkpoint_every", 0)
        # a multi-process run: rank 0 writes the file (the ranks' weights are the same), with every rank's generators
        self.rank, self.world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        # the run's folder as the user names it (the writer holds it absolute), runs/<name> on ranks that log nothing
        folder = os.path.relpath(writer.log_dir) if getattr(writer, "log_dir", None) else f"runs/{run_name(args)}"
        self.run_name, self.path = os.path.basename(os.path.normpath(folder)), os.path.join(folder, checkpoints.FILE)
        self.asked, self.saved_step, self.due, self.previous_handler = False, None, math.inf, None
        _checkpoint = self
        # a first Ctrl-C asks for a checkpoint at the next safe point, a second stops at once; a multi-process
        # run stops at once (its ranks would have to agree on the step): its last periodic checkpoint goes on
        if self.every and "WORLD_SIZE" not in os.environ and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self.previous_handler = signal.signal(signal.SIGINT, self._ask)

    def _ask(self, signum, frame) -> None:
        self.asked = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        tqdm.tqdm.write("Ctrl-C: the run stops at its next step, after writing a checkpoint (Ctrl-C again stops at "
                        "once)", file=sys.stderr)

    def release(self) -> None:
        """SIGINT's handler as it was before the loop."""
        if self.previous_handler is not None:
            signal.signal(signal.SIGINT, self.previous_handler)
            self.previous_handler = None

    def _plan(self, step: int) -> None:
        self.due = (step // self.every + 1) * self.every if self.every else math.inf

    def resume(self, step: int, *values):
        """With --resume: the objects' state put back, the random generators', and the loop's `values` as they
        were at the checkpoint's step; returns (the checkpoint's step, *values). Without: (step, *values)."""
        global _resume
        if _resume is None:
            self._plan(step)
            return (step, *values)
        saved, _resume = _resume, None
        try:
            checkpoints.check_names(saved["objects"], self.objects)
            for name, obj in self.objects.items():
                checkpoints.decode(obj, saved["objects"][name])
            if len(saved["values"]) != len(values):
                raise checkpoints.Mismatch(f"{len(saved['values'])} loop values where this run has {len(values)}")
            values = [checkpoints.decode(value, state) for value, state in zip(values, saved["values"])]
            checkpoints.set_rng_state(saved["rng"][self.rank] if isinstance(saved["rng"], list) else saved["rng"])
        except (checkpoints.Mismatch, KeyError, RuntimeError) as err:
            fail(f"{self.path}: does not fit this run: {str(err).splitlines()[0]}")
        step = self.saved_step = saved["step"]
        self._plan(step)
        if self.rank == 0:
            note = (f"; envpool cannot save its games: they start anew, seeded from --seed and step {step}"
                    if self.envpool else "")
            tqdm.tqdm.write(f"resumed runs/{self.run_name} at step {step}{note}", file=sys.stderr)
        return (step, *values)

    def tick(self, step: int, *values) -> None:
        """The loop's safe point: a checkpoint when one is due, and after a Ctrl-C one, then the run stops."""
        if step >= self.due or self.asked:
            self.save(step, values)
            if self.asked:
                raise Stopped(f"stopped at step {step}, its whole state saved in {self.path}; go on with:\n"
                              + resume_command(self.run_name))

    def close(self, step: int, *values) -> None:
        """The loop is over: the run's last state saved (where it ran at least --checkpoint-every steps)."""
        if self.every and step >= self.every and self.saved_step != step:
            self.save(step, values, done=True)
        self.release()

    def save(self, step: int, values, done: bool = False) -> None:
        """The whole state at `step` written to the run's checkpoint file, atomically."""
        rng = checkpoints.rng_state()
        if self.world > 1:  # every rank's generators, to rank 0 (the ranks tick at the same steps)
            import torch.distributed as dist

            ranks = [None] * self.world
            dist.all_gather_object(ranks, rng)
            rng = ranks
        self.saved_step = step
        self._plan(step)
        if self.rank != 0:
            return
        self.writer.flush()  # what was logged up to here is on disk before the checkpoint that follows it
        state = {"format": checkpoints.FORMAT, "script": _script, "step": step, "done": done,
                 "purge_step": self.writer.last_step + 1, "envs": "restarted" if self.envpool else "restored",
                 "args": {k: v for k, v in vars(self.args).items() if k != "resume"}, "world_size": self.world,
                 "objects": {name: checkpoints.encode(obj) for name, obj in self.objects.items()},
                 "values": [checkpoints.encode(value) for value in values], "rng": rng}
        checkpoints.write(self.path, state)


def env_seed(args, offset: int = 0) -> int:
    """The seed of envpool's games (plus `offset`, a rank's): --seed's; with --resume, one drawn from --seed and
    the checkpoint's step (envpool cannot save its games: they start anew, as other games than at the start)."""
    if _resume is None:
        return args.seed + offset
    import numpy as np

    return int(np.random.SeedSequence([args.seed, _resume["step"], offset]).generate_state(1)[0] >> 1)


def check_memory(flag_name: str, nbytes: int, device) -> None:
    """Refuse, in one line and before any work, a buffer of `nbytes` that the device's memory cannot hold: the
    bytes it needs and what the machine has (a GPU's free memory, or the host's available memory)."""
    if device == "jax":  # a JAX twin's device: a GPU's memory, or the host's
        import jax

        stats = jax.devices()[0].memory_stats() if jax.devices()[0].platform != "cpu" else None
        if stats and "bytes_limit" in stats:
            free, total = stats["bytes_limit"] - stats.get("bytes_in_use", 0), stats["bytes_limit"]
            if nbytes > free:
                fail(f"{flag_name}: the buffer needs {nbytes / 1e9:.1f} GB ({nbytes} bytes) and the GPU has "
                     f"{free / 1e9:.1f} GB free of {total / 1e9:.1f} GB (JAX's share)")
            return
        device = "cpu"
    device = torch.device(device) if not isinstance(device, torch.device) else device
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        where = f"GPU {device.index or 0} has {free / 1e9:.1f} GB free of {total / 1e9:.1f} GB"
    else:
        free = total = None
        try:
            with open("/proc/meminfo") as f:
                info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
            free, total = info.get("MemAvailable", info["MemFree"]), info["MemTotal"]
        except (OSError, KeyError, ValueError):  # not Linux: the total from sysconf, where it has one
            if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
                free = total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        if free is None:
            return
        where = f"the machine has {free / 1e9:.1f} GB available of {total / 1e9:.1f} GB"
    if nbytes > free:
        fail(f"{flag_name}: the buffer needs {nbytes / 1e9:.1f} GB ({nbytes} bytes) and {where}")


def log_losses(writer, losses: dict, step: int) -> None:
    """At a logging step: each value of `losses` (tensors, numbers; None is left out) as the scalar
    `losses/<name>`, a tensor read back to the host here; then the NaN stop: every update after a NaN is NaN
    too, so a run whose loss is not a finite number stops (`diverged`), that value written first."""
    values = {name: float(value) for name, value in losses.items() if value is not None}
    for name, value in values.items():
        writer.add_scalar(f"losses/{name}", value, step)
    for name, value in values.items():
        if not math.isfinite(value):
            diverged(f"losses/{name} is {value}", step)


def diverged(what: str, step: int | None) -> NoReturn:
    """Training diverged: one line names the step, what is not a finite number and the run's learning rates;
    exit code 3; what was logged is kept (the writer closes at exit)."""
    close_bars()  # the progress bar's line ends before the message's
    rates = ", ".join(f"{flag(name)} {value:g}" for name, value in vars(_args or object()).items()
                      if isinstance(value, float) and (name.endswith("_lr") or name == "learning_rate"))
    print(f"{os.path.basename(sys.argv[0])}: error: step {step}: {what}: training diverged"
          + (f"; a smaller learning rate ({rates}) may help" if rates else ""), file=sys.stderr)
    sys.exit(3)


# the progress bars this process's runs opened (Progress), until closed: a line printed after a run's end must not
# land on one of them
_bars: list = []


def close_bars() -> None:
    """Every progress bar a run opened closed, its line ended: what is printed next starts a line of its own."""
    while _bars:
        _bars.pop().close()


class Progress:
    """The progress bar over a run's `total` environment steps, and its fps: `charts/SPS` over a window that
    starts `warmup_steps` after `start_step`, once the warm-up (compilation, CUDA-graph capture, jit) is over,
    and `charts/warmup_time`, the time before it. A line above the bar says what the warm-up does and, when it
    ends, how long it took: `busy`, or for the optimized scripts what their flags make it do (--compile
    compiles; --cudagraphs captures, on a CUDA device). A disabled bar (a rank other than 0) says nothing."""

    def __init__(self, args, writer, *, total: int, start_step: int, warmup_steps: int, busy: str | None = None,
                 disable: bool = False):
        if busy is None:
            graphs = getattr(args, "cudagraphs", False) and args.cuda and why_not_cuda() is None
            work = [w for w, on in (("compiling (--compile)", getattr(args, "compile", False)),
                                    ("capturing CUDA graphs", graphs)) if on]
            busy = " and ".join(work) or None
        if _resume is not None:  # a resumed run warms up again (compiles, captures) from where it goes on
            start_step = max(start_step, _resume["step"])
        self.writer, self.steps, self.times, self.busy = writer, (start_step, start_step + warmup_steps), {}, busy
        self.bar = tqdm.tqdm(total=total, desc=args.exp_name, unit="step", disable=disable)
        _bars.append(self.bar)

    def tick(self, step: int) -> None:
        """The loop is at `step` (`step` environment steps done): the bar shows them, and at the fps window's
        bounds the time is taken. A run that diverges names the step its loop was at."""
        global _step
        _step = step
        self.bar.update(step - self.bar.n)
        if step in self.steps and step not in self.times:
            self.times[step] = time.perf_counter()
            if step == self.steps[0] and self.busy and not self.bar.disable:  # a line above the bar, which stalls
                tqdm.tqdm.write(f"warm-up: {self.busy}; fps are counted after it", file=sys.stderr)
            if step == self.steps[1]:
                warmup = self.times[step] - self.times[self.steps[0]]
                self.writer.add_scalar("charts/warmup_time", warmup, step)
                if self.busy and not self.bar.disable:
                    tqdm.tqdm.write(f"warm-up done in {warmup:.1f} s", file=sys.stderr)

    def update(self, steps: int) -> None:
        """The bar advanced by `steps` environment steps within an iteration (a loop that steps several
        environments at once)."""
        self.bar.update(steps)

    def log(self, step: int, episodic_return: float = float("nan")) -> float | None:
        """At a logging step: `charts/SPS` since the window opened, shown on the bar with the latest return."""
        if step <= self.steps[1] or self.steps[1] not in self.times:
            return None
        sps = (step - self.steps[1]) / (time.perf_counter() - self.times[self.steps[1]])
        self.writer.add_scalar("charts/SPS", sps, step)
        self.bar.set_postfix(fps=f"{sps:.0f}", ret=f"{episodic_return:.1f}")
        return sps

    def close(self) -> None:
        """The loop is over: the bar full, its line ended."""
        self.bar.update(self.bar.total - self.bar.n)
        self.bar.close()
        if self.bar in _bars:
            _bars.remove(self.bar)


def run(main: Callable, Args: type, check_args: Callable | None = None, argv: list[str] | None = None) -> None:
    """What `python leanrl/<script>.py` does: read the command line (`parse_args`, `Args` with RunFlags' fields),
    with --resume take the run's flags from its checkpoint (`load_resume`), refuse what no script takes
    (`check_common`) and what this one does not (its `check_args`), all before any work and before any run folder
    is written; then train, `main(args)`, and end a run that diverged, was interrupted or lost another rank in
    one line."""
    global _started, _args, _step, _resume, _script, _checkpoint
    import inspect

    try:
        _script = os.path.splitext(os.path.basename(inspect.getfile(main)))[0]
    except TypeError:  # a main() without a source file (a test's): the command's
        _script = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    args = parse_args(with_run_flags(Args), argv)
    if args.resume is not None:
        args, _resume = load_resume(args, sys.argv[1:] if argv is None else argv)
    check_common(args)
    if check_args is not None:
        check_args(args)
    check_writable(args)
    quiet_libraries(getattr(args, "env_id", None))
    _started, _args, _step = time.time(), args, None
    try:
        main(args)
    except ValueError as err:
        # torch.distributions refuses parameters that are not finite numbers (the eager scripts that sample
        # from one): training diverged before a logged loss could show it, at the step the loop was at
        if "found invalid values" not in str(err):
            raise
        diverged("a distribution's parameters are not finite numbers", _step)
    except BaseException as err:
        if lost_contact(err):  # another rank stopped (a crash, a kill) or did not answer within --dist-timeout
            print(f"{os.path.basename(sys.argv[0])}: error: lost contact with another rank: {str(err).splitlines()[0]}",
                  file=sys.stderr)
            sys.exit(1)
        # a Ctrl-C inside a tensordict `to_module` context leaves it as a RuntimeError: look down the chain
        cause = err
        while cause is not None and not isinstance(cause, KeyboardInterrupt):
            cause = cause.__context__
        if cause is None:
            if not isinstance(err, SystemExit):
                go_on_from_checkpoint()
            raise
        close_bars()  # the lines below start a line of their own, and are the last
        if isinstance(cause, Stopped):
            print(cause, file=sys.stderr)
        else:
            print("interrupted; what was logged is kept in runs/", file=sys.stderr)
            go_on_from_checkpoint()
        sys.exit(130)
    finally:
        if _checkpoint is not None:
            _checkpoint.release()
        _started, _args, _step, _resume, _checkpoint = None, None, None, None, None


def go_on_from_checkpoint() -> None:
    """After a run stopped short: the command that goes on from its last checkpoint, if it wrote one."""
    if _checkpoint is not None and _checkpoint.saved_step is not None:
        print(f"its checkpoint of step {_checkpoint.saved_step} goes on with:\n{resume_command(_checkpoint.run_name)}",
              file=sys.stderr)


def typed_flags(argv: list[str], args) -> set[str]:
    """The fields of `args` that the command line `argv` sets (--flag, --flag=value, --no-flag)."""
    names = {f.name for f in dataclasses.fields(args)}
    typed = set()
    for token in argv:
        if token.startswith("--"):
            name = token[2:].split("=")[0].replace("-", "_")
            typed.add(name[3:] if name not in names and name.startswith("no_") else name)
    return typed & names


def load_resume(args, argv: list[str]):
    """--resume RUN: the run's folder (runs/RUN, or a path to it), its checkpoint read, and the run's flags taken
    from it, but those the command line gives: these must be the run's own, or among FREE_ON_RESUME (a larger
    --total-timesteps goes on with a finished run). Each mistake is refused in one line, before any work:
    no such folder, no checkpoint in it, a file that is none, another script's, flags that differ (all listed)."""
    given = args.resume
    folder = os.path.normpath(given if os.path.isdir(given) else os.path.join("runs", given))
    if not os.path.isdir(folder):
        fail(f"--resume {given}: no such run folder")
    if os.path.realpath(os.path.dirname(os.path.abspath(folder))) != os.path.realpath("runs"):
        fail(f"--resume {given}: the scripts write their runs into runs/ of the current folder; resume from the "
             f"folder that holds runs/{os.path.basename(folder)}")
    path = os.path.join(folder, checkpoints.FILE)
    if not os.path.exists(path):
        fail(f"--resume {given}: {path} does not exist: the run stopped before its first checkpoint "
             "(--checkpoint-every), or was not run with checkpoints")
    try:
        saved = checkpoints.read(path)
    except ValueError as err:
        fail(f"--resume {given}: {path} {err}")
    if saved["script"] != _script:
        fail(f"--resume {given}: its checkpoint was written by {saved['script']}.py, not {_script}.py: resume it "
             f"with that script (a script goes on only from its own checkpoints, number for number)")
    if saved["world_size"] != int(os.environ.get("WORLD_SIZE", "1")):
        fail(f"--resume {given}: the run had {saved['world_size']} processes; resume it with as many")
    typed, computed = typed_flags(argv, args), {n for n, c in declared_ranges(type(args)).items() if c == ["computed"]}
    differing = []
    for name, value in saved["args"].items():
        if not hasattr(args, name) or name in computed or name == "resume":
            continue
        if name not in typed:
            setattr(args, name, value)
        elif getattr(args, name) != value and name not in FREE_ON_RESUME:
            differing.append(f"{flag(name)} {getattr(args, name)} (the run's: {value})")
    if differing:
        fail(f"--resume {given}: flags that differ from the run's: {', '.join(differing)}; leave them out to go on "
             "with the run's")
    if args.total_timesteps <= saved["step"]:
        fail(f"--resume {given}: the run is at step {saved['step']}"
             + (" (it ended there)" if saved["done"] else "")
             + f"; --total-timesteps {args.total_timesteps} must be larger to go on")
    saved["run_name"] = os.path.basename(folder)
    return args, saved


def check_writable(args) -> None:
    """Refuse, in one line and before any work, a folder the run will write into that cannot be written: runs/
    (TensorBoard's logs and --save-model's checkpoint), videos/ with --capture-video, wandb/ with --track, and the
    run's own folder with --resume (its checkpoints and logs go on there). Nothing
    is made: a file is created and removed in the folder, or where it will be made if it does not exist yet."""
    import tempfile

    resumed = f"runs/{_resume['run_name']}" if _resume is not None else None
    for folder, on in (("runs", True), ("videos", getattr(args, "capture_video", False)),
                       ("wandb", getattr(args, "track", False)), (resumed, resumed is not None)):
        if not on:
            continue
        where = os.path.abspath(folder)
        if os.path.exists(where) and not os.path.isdir(where):
            fail(f"{where}: the run writes its {folder} there, and it is a file, not a folder")
        try:
            tempfile.NamedTemporaryFile(dir=where if os.path.isdir(where) else os.path.dirname(where)).close()
        except OSError as err:
            fail(f"{where}: the run writes its {folder} there and cannot: {err.strerror or err}")


def lost_contact(err: BaseException) -> bool:
    """Whether `err` says that another rank of this run's process group is gone (none outside torchrun)."""
    if "torch.distributed" not in sys.modules or isinstance(err, (SystemExit, KeyboardInterrupt)):
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and (isinstance(err, dist.DistError) or any(
        word in str(err).lower() for word in ("by peer", "timed out", "timeout", "connection")))
