"""The script contract's plumbing, tested once, on the harness every script imports (leanrl_utils/harness.py):
the command line and its one-line mistakes, the ranges every script refuses, threads for a busy machine, where
a run runs and the one line that says why, inductor's settings, the writer (its NaN stop, a Ctrl-C held during
a write), the progress bar's fps window, and run(), which ends a diverged, interrupted or disconnected run in
one line. What a script's own code decides (its ranges, its environment, its logs, its checkpoint) is tested on
each script in test_contract.py and test_mistakes.py."""

import io
import math
import re
import sys
import time
import warnings
from dataclasses import dataclass

import pytest
import torch
from helpers import ONE_LINE_ERROR, interrupt_script, with_flag

from leanrl_utils import harness
from leanrl_utils.events import read_run


@dataclass
class Args:
    exp_name: str = "toy"
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    cuda: bool = True
    """if toggled, cuda will be used when it is available"""
    track: bool = False
    """if toggled, this experiment will be tracked with Weights and Biases"""
    total_timesteps: int = 1000
    """total timesteps of the experiments (> 0, > --learning-starts)"""
    learning_rate: float = 3e-4
    """the learning rate of the optimizer (> 0)"""
    learning_starts: int = 100
    """timestep to start learning (>= 0)"""
    gamma: float = 0.99
    """the discount factor gamma (in [0, 1])"""
    start_e: float = 1.0
    """the starting epsilon for exploration (in (0, 1])"""
    target_kl: float | None = None
    """the target KL divergence threshold (>= 0)"""
    batch_size: int = 0
    """the batch size (computed)"""
    cudagraphs: bool = False
    """whether to use CUDA graphs (needs CUDA)"""


def stopped(call, capsys) -> tuple[int, str]:
    """(exit code, the one line said) of a call that stops the run."""
    with pytest.raises(SystemExit) as stop:
        call()
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ONE_LINE_ERROR.match(lines[0]) and lines[0].startswith("toy.py: error: "), err
    return stop.value.code, lines[0].removeprefix("toy.py: error: ")


@pytest.fixture(autouse=True)
def toy_program(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["leanrl/toy.py"])  # the name a one-line message starts with


@pytest.mark.parametrize("argv,said", [
    (["--total-timestep", "5"], "--total-timestep: no such flag; did you mean --total-timesteps?"),
    # by the words of the flags' help: "learning rate" and "learning" ... "starts"
    (["--learning-rate-x"], "--learning-rate-x: no such flag; did you mean --learning-rate?"),
    (["--rate", "1"], "--rate: no such flag; did you mean --learning-rate?"),
    (["--no-such-thing"], "--no-such-thing: no such flag; --help lists the flags"),
    (["--seed", "1", "stray"], "'stray' is neither a flag nor a flag's value; --help lists the flags"),
])
def test_a_flag_that_does_not_exist_is_named_with_the_nearest_real_ones(argv, said, capsys):
    assert stopped(lambda: harness.parse_args(Args, argv), capsys) == (2, said)


def test_a_value_that_cannot_be_read_is_named_in_one_line(capsys):
    code, said = stopped(lambda: harness.parse_args(Args, ["--total-timesteps", "many"]), capsys)
    assert code == 2 and "--total-timesteps" in said and "'many'" in said, said


def test_help_is_tyros(capsys):
    with pytest.raises(SystemExit) as stop:
        harness.parse_args(Args, ["--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and "--learning-rate" in out and "the discount factor gamma" in out


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_flag_refuses_what_is_not_a_finite_number(value, capsys):
    """nan passes every range check written as a comparison: refused first, for every float flag."""
    for name in ("learning_rate", "gamma", "start_e"):
        args = harness.parse_args(Args, [harness.flag(name), value])
        code, said = stopped(lambda: harness.check_common(args), capsys)
        assert (code, said) == (2, f"{harness.flag(name)} must be a finite number, got {float(value)}")


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_a_seed_numpy_would_refuse_is_refused_up_front(seed, capsys):
    """np.random.seed and gymnasium's reset take 0 to 2**32 - 1: refused before the run starts, not in a stack
    trace once it has."""
    import numpy as np

    with pytest.raises(ValueError):
        np.random.seed(int(seed))  # what the run would have met
    args = harness.parse_args(Args, ["--seed", seed])
    assert stopped(lambda: harness.check_common(args), capsys) == (
        2, f"--seed must be in [0, 2**32 - 1] (numpy's and gymnasium's seeds), got {seed}")
    harness.check_common(Args(seed=2**32 - 1))  # the largest seed numpy takes


@pytest.mark.parametrize("given,said", [
    (dict(total_timesteps=0), "--total-timesteps must be positive, got 0"),
    (dict(total_timesteps=100), "--total-timesteps (100) must be > --learning-starts (100)"),
    (dict(learning_rate=-1e-4), "--learning-rate must be positive, got -0.0001"),
    (dict(learning_starts=-1), "--learning-starts must be >= 0, got -1"),
    (dict(gamma=1.5), "--gamma must be in [0, 1], got 1.5"),
    (dict(start_e=0.0), "--start-e must be in (0, 1], got 0.0"),
    (dict(target_kl=-0.1), "--target-kl must be >= 0, got -0.1"),
    (dict(batch_size=64), "--batch-size is computed by the script from other flags: leave it out"),
    # the first flag out of its range in the order of Args, named alone
    (dict(total_timesteps=0, gamma=2.0), "--total-timesteps must be positive, got 0"),
])
def test_ranges_name_the_one_flag_out_of_range(given, said, capsys):
    """Each flag's range is declared where its docstring ends (and --help shows it); the harness checks them
    all, the first out of its range named alone, a bound that is another flag named with its value."""
    assert stopped(lambda: harness.check_declared(Args(**given)), capsys) == (2, said)
    harness.check_declared(Args(learning_starts=0, gamma=0.0, start_e=1.0, target_kl=0.0))  # bounds are in range
    harness.check_declared(Args(target_kl=None))  # an optional flag left unset
    assert harness.declared_ranges(Args)["total_timesteps"] == ["> 0", "> --learning-starts"]


def test_the_threads_left_are_counted_in_one_unit():
    """The busy fraction of the machine (its logical CPUs) applied to torch's thread count (its cores): with
    two logical CPUs per core, two of eight busy leave three of four threads, not two."""
    assert harness.threads_left(4, busy=2 / 8) == 3
    assert harness.threads_left(2, busy=1 / 2) == 1 and harness.threads_left(2, busy=0.9) == 1  # at least one
    assert harness.threads_left(4, busy=0.0) == 4


def test_a_busy_machine_gets_fewer_threads(monkeypatch, capsys):
    """The CPUs other programs keep busy (read from /proc/stat twice) are taken from torch's threads, at least one
    left, and said in one line; an idle machine keeps torch's default, and a user's OMP_NUM_THREADS wins."""
    readings, chosen = [], []

    def proc_stat(path, *args, **kwargs):
        assert path == "/proc/stat"
        return io.StringIO(readings.pop(0))
    monkeypatch.setattr(harness, "open", proc_stat, raising=False)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    monkeypatch.setattr(harness.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    monkeypatch.setattr(torch, "set_num_threads", chosen.append)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    # 60% of the machine busy over the reading (user 300 + idle 200 of 500 jiffies): 2 of 4 threads left
    readings[:] = ["cpu  100 0 100 800 0 0 0 0 0 0\n", "cpu  400 0 100 1000 0 0 0 0 0 0\n"]
    harness.pick_threads()
    assert chosen == [2]
    assert capsys.readouterr().err == ("toy.py: other programs keep 60% of the 8 CPUs busy: torch runs on 2 threads, "
                                       "not 4 (OMP_NUM_THREADS sets it)\n")
    readings[:] = ["cpu  0 0 0 1000 0 0 0 0 0 0\n", "cpu  500 0 0 1000 0 0 0 0 0 0\n"]  # all busy: still one
    harness.pick_threads()
    assert chosen == [2, 1] and "torch runs on 1 thread, not 4" in capsys.readouterr().err
    readings[:] = ["cpu  0 0 0 1000 0 0 0 0 0 0\n", "cpu  5 0 0 1495 0 0 0 0 0 0\n"]  # idle: nothing said
    harness.pick_threads()
    assert chosen == [2, 1] and capsys.readouterr().err == ""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's count: /proc/stat is not even read
    harness.pick_threads()
    assert chosen == [2, 1] and readings == []


OLD_DRIVER = ("CUDA initialization: The NVIDIA driver on your system is too old (found version 11040). Please "
              "update your GPU driver by downloading and installing a new version from the URL: "
              "http://www.nvidia.com/Download/index.aspx")


@pytest.fixture
def no_threads(monkeypatch):
    monkeypatch.setattr(harness, "pick_threads", lambda: None)


@pytest.mark.parametrize("rank_device", [False, True], ids=["pick_device", "pick_rank_device"])
def test_a_run_asked_for_cuda_on_the_cpu_says_why(rank_device, monkeypatch, capsys, no_threads):
    """torch's own reason where it gives one (a driver too old for this build), else what is known; nothing where
    --no-cuda asked for the CPU. The multi-process scripts' rank device says it the same way (rank 0 only)."""
    monkeypatch.setenv("RANK", "0")

    def pick(**given):
        if rank_device:
            args = type("RankArgs", (), dict(cuda=True, backend=None, world_size=1, device_ids=None) | given)
            return harness.pick_rank_device(args, 0)
        return harness.pick_device(Args(**given))

    def too_old():
        warnings.warn(OLD_DRIVER)
        return False
    cases = [(None, lambda: False, f"torch {torch.__version__} is a CPU build"),
             ("13.0", too_old, OLD_DRIVER.splitlines()[0]),
             ("13.0", lambda: False, "no CUDA device is visible")]
    for cuda_version, available, why in cases:
        monkeypatch.setattr(torch.version, "cuda", cuda_version)
        monkeypatch.setattr(torch.cuda, "is_available", available)
        assert pick() == torch.device("cpu")
        assert capsys.readouterr().err == f"toy.py: --cuda: {why}; running on the CPU\n"
        assert pick(cuda=False) == torch.device("cpu")
        assert capsys.readouterr().err == ""
    monkeypatch.setenv("RANK", "1")
    if rank_device:  # another rank: the CPU, without a word
        assert pick() == torch.device("cpu") and capsys.readouterr().err == ""


def test_cudagraphs_need_cuda(monkeypatch, capsys, no_threads):
    """Without CUDA --cudagraphs runs without graphs, said once; on a machine with CUDA, --no-cuda beside it would
    capture graphs from CPU tensors: refused in one line."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert harness.pick_device(Args(cuda=False, cudagraphs=True)) == torch.device("cpu")
    assert capsys.readouterr().err == "warning: --cudagraphs needs a CUDA device; running without CUDA graphs\n"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    code, said = stopped(lambda: harness.pick_device(Args(cuda=False, cudagraphs=True)), capsys)
    assert code == 2 and "--cudagraphs" in said and "--no-cuda" in said
    assert harness.pick_device(Args(cuda=True, cudagraphs=True)) == torch.device("cuda")


def test_loop_ordering_is_switched_off_only_where_torch_lacks_the_fix():
    """pytorch/pytorch#176591 (fixed in 2.12) crashes the compilation of SAC's and TD3's update on CUDA: on
    torch 2.11 with CUDA the update is compiled with inductor's loop ordering after fusion off; on 2.12 and
    later, or on the CPU, inductor's settings are left alone."""
    off = {"loop_ordering_after_fusion": False}
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert harness.inductor_options(cuda, "2.11.0+cu130") == off and harness.inductor_options(cuda, "2.11.1") == off
    for version in ("2.12.0", "2.12.1+cu128", "2.13.0", "2.13.0+cpu", "2.14.0"):
        assert harness.inductor_options(cuda, version) is None, version
    assert harness.inductor_options(cpu, "2.11.0") is None
    # inductor knows the setting's name (a misspelt one would raise when compiling)
    doubled = torch.compile(lambda x: x * 2, options=harness.inductor_options(cuda, "2.11.0"))
    assert doubled(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]


def test_the_jax_twins_device(monkeypatch, capsys):
    """--torch-deterministic adds XLA's deterministic GPU kernels to XLA_FLAGS once, after what the user set there,
    and leaves a value the user gave for that flag alone; --no-cuda says nothing."""
    pytest.importorskip("jax")

    @dataclass
    class JaxArgs:
        cuda: bool = False
        torch_deterministic: bool = True
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    harness.use_jax_device(JaxArgs())
    harness.use_jax_device(JaxArgs())
    assert harness.os.environ["XLA_FLAGS"] == "--xla_cpu_enable_fast_math=false --xla_gpu_deterministic_ops=true"
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=false")
    harness.use_jax_device(JaxArgs())
    assert harness.os.environ["XLA_FLAGS"] == "--xla_gpu_deterministic_ops=false"
    monkeypatch.delenv("XLA_FLAGS")
    harness.use_jax_device(JaxArgs(torch_deterministic=False))
    assert "XLA_FLAGS" not in harness.os.environ and "--cuda:" not in capsys.readouterr().err


def test_the_writer_logs_the_start_and_the_hyperparameters(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(harness, "_started", 1234.5)
    writer = harness.make_writer(Args(), "run")
    writer.add_scalar("losses/loss", 0.5, 3)
    writer.close()
    log = read_run(tmp_path / "runs" / "run")
    assert log.scalars["charts/start"] == [(0, 1234.5, 0.0)] and log.values("losses/loss") == [0.5]


def test_a_loss_that_is_not_a_finite_number_stops_the_run(tmp_path, monkeypatch, capsys):
    """Every update after a NaN is NaN too: the run stops where its losses are logged (`log_losses`, a call the
    script shows) once one is not a finite number, in one line naming the step, the loss and the run's learning
    rates, exit code 3, every value written first; a value left None is not logged, and the writer itself logs
    a NaN as it is (an episode's return may be one)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(harness, "_args", Args())  # the run's arguments, as run() sets them
    writer = harness.make_writer(Args(), "run")
    writer.add_scalar("charts/episodic_return", math.nan, 1)
    harness.log_losses(writer, dict(q_values=torch.tensor(2.5), actor_loss=None), 5)
    with pytest.raises(SystemExit) as stop:
        harness.log_losses(writer, dict(td_loss=torch.tensor(math.inf), q_values=torch.tensor(3.0)), 7)
    writer.close()
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 3 and last == ("toy.py: error: step 7: losses/td_loss is inf: training diverged; a "
                                             "smaller learning rate (--learning-rate 0.0003) may help")
    log = read_run(tmp_path / "runs" / "run")
    assert log.values("losses/td_loss") == [math.inf] and log.values("losses/q_values") == [2.5, 3.0]
    assert "losses/actor_loss" not in log.scalars


def test_a_ctrl_c_during_a_write_waits_for_it(tmp_path, monkeypatch):
    """A SIGINT that lands while the writer writes a scalar is raised once the write is done: raised inside
    TensorBoard's queue, it could leave the writer's thread asleep and the run hung at exit (a script's Ctrl-C
    test hung 1 time in 14 so). Here the signal is sent from inside the write itself."""
    import signal

    from torch.utils.tensorboard.writer import FileWriter

    monkeypatch.chdir(tmp_path)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    add_summary, calls = FileWriter.add_summary, []

    def interrupted(self, *args, **kwargs):
        calls.append(True)
        signal.raise_signal(signal.SIGINT)
        return add_summary(self, *args, **kwargs)
    try:
        writer = harness.make_writer(Args(), "run")
        monkeypatch.setattr(FileWriter, "add_summary", interrupted)
        with pytest.raises(KeyboardInterrupt):
            writer.add_scalar("charts/written", 1.0, 7)
        monkeypatch.setattr(FileWriter, "add_summary", add_summary)
        writer.close()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert calls, "the write never reached the file writer"
    written = read_run(tmp_path / "runs" / "run").scalars.get("charts/written", [])
    assert [(step, value) for step, _, value in written] == [(7, 1.0)], written


class Recorder:
    def __init__(self):
        self.logged = []

    def add_scalar(self, tag, value, step):
        self.logged.append((tag, value, step))


def test_fps_are_counted_after_the_warm_up(monkeypatch, capsys):
    """charts/warmup_time is the time from `start_step` to `warmup_steps` later, charts/SPS the steps per second
    from there; nothing is logged before the window opens; the lines above the bar say what the warm-up does
    (the optimized scripts' flags, or what a JAX twin says) and how long it took."""
    clock = iter([10.0, 12.5, 14.5])
    monkeypatch.setattr(harness.time, "perf_counter", lambda: next(clock))
    writer = Recorder()
    progress = harness.Progress(Args(), writer, total=100, start_step=5, warmup_steps=10, busy="compiling (jax.jit)")
    progress.tick(4)
    progress.tick(5)  # the warm-up starts: 10.0
    progress.tick(5)  # a step ticked again (a loop's two calls) opens nothing twice
    assert progress.log(10) is None  # inside the warm-up
    progress.tick(15)  # the window opens: 12.5
    assert writer.logged == [("charts/warmup_time", 2.5, 15)] and progress.bar.n == 15 and harness._step == 15
    assert progress.log(35) == 10.0 and writer.logged[-1] == ("charts/SPS", 10.0, 35)  # 20 steps in 2 s
    progress.close()
    assert progress.bar.n == 100
    err = capsys.readouterr().err
    assert "warm-up: compiling (jax.jit); fps are counted after it" in err and "warm-up done in 2.5 s" in err
    # an optimized script says what its flags make the warm-up do; an eager one says nothing
    sizes = dict(total=10, start_step=0, warmup_steps=1)
    assert harness.Progress(Args(), writer, **sizes).busy is None
    compiled = type("Compiled", (), dict(exp_name="x", compile=True, cudagraphs=True, cuda=True))
    assert harness.Progress(compiled, writer, **sizes).busy == "compiling (--compile)"  # no CUDA here: no capture
    monkeypatch.setattr(harness, "why_not_cuda", lambda: None)
    assert harness.Progress(compiled, writer, **sizes).busy == "compiling (--compile) and capturing CUDA graphs"
    # a disabled bar (the ranks other than 0) says nothing of the warm-up
    monkeypatch.setattr(harness.time, "perf_counter", iter([1.0, 2.0]).__next__)
    capsys.readouterr()
    quiet = harness.Progress(Args(), writer, **sizes, busy="compiling", disable=True)
    quiet.tick(0)
    quiet.tick(1)
    assert capsys.readouterr().err == "" and writer.logged[-1] == ("charts/warmup_time", 1.0, 1)


def started_run(main, argv=(), capsys=None):
    with pytest.raises(SystemExit) as stop:
        harness.run(main, Args, None, list(argv))
    return stop.value.code, capsys.readouterr().err if capsys else ""


def test_run_checks_before_main_and_ends_an_interrupted_run_in_one_line(capsys):
    """run() reads and checks the flags before main() starts (a script's own check_args too), and a Ctrl-C ends
    the run with exit code 130 and one line, also when a library turned it into another error on the way out
    (tensordict's `to_module` context makes a KeyboardInterrupt a RuntimeError)."""
    mains = []
    with pytest.raises(SystemExit) as stop:
        harness.run(mains.append, Args, lambda args: harness.fail("no"), [])
    assert stop.value.code == 2 and mains == [] and capsys.readouterr().err == "toy.py: error: no\n"
    harness.run(mains.append, Args, None, ["--seed", "3"])
    # the script's Args, with the harness's run flags after its own
    assert isinstance(mains[0], Args) and vars(mains[0]) == vars(Args(seed=3)) | dict(checkpoint_every=100000, resume=None)
    assert harness._started is None  # the start is the run's alone

    def interrupted(args):
        raise KeyboardInterrupt

    def interrupted_inside_a_context(args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("to_module's exit")
    for main in (interrupted, interrupted_inside_a_context):
        assert started_run(main, capsys=capsys) == (130, "interrupted; what was logged is kept in runs/\n")

    def broken(args):
        raise RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):  # a real error keeps its stack trace
        harness.run(broken, Args, None, [])


def test_a_distribution_that_refuses_nan_stops_the_run_at_its_step(capsys, monkeypatch):
    """torch.distributions refuses parameters that are not finite numbers (a ValueError): training diverged
    before a logged loss could show it. One line names main()'s step, exit code 3. (torch.compile turns the
    distributions' checks off in its process when it first runs: they are turned back on here.)"""
    monkeypatch.setattr(torch.distributions.Distribution, "_validate_args", True)

    def main(args):
        progress = harness.Progress(args, Recorder(), total=10, start_step=0, warmup_steps=1)
        for global_step in range(10):
            progress.tick(global_step)  # the step where it is known: the run's line names it
            if global_step == 6:
                torch.distributions.Normal(torch.tensor([math.nan]), torch.tensor([1.0]))
    code, err = started_run(main, capsys=capsys)
    # the bar's line ends first: the run's line is a line of its own, and the last
    assert code == 3 and err.endswith("\ntoy.py: error: step 6: a distribution's parameters are not finite numbers: "
                                      "training diverged; a smaller learning rate (--learning-rate 0.0003) may help\n")


def test_a_lost_rank_ends_the_run_in_one_line(monkeypatch, capsys):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_initialized", lambda: True)

    def main(args):
        raise RuntimeError("Connection closed by peer [127.0.0.1]:29500\nmore")
    assert started_run(main, capsys=capsys) == (
        1, "toy.py: error: lost contact with another rank: Connection closed by peer [127.0.0.1]:29500\n")


def test_ctrl_c_keeps_what_was_logged(tmp_path):
    """A user's Ctrl-C, in a real process: exit code 130, no stack trace, the writer closed, so what was logged
    before is on disk; with checkpoints (the default), a checkpoint written at the next step and the command that
    goes on from it, on the last line; without (--checkpoint-every 0), one line. (One script stands for all: they
    share the harness that does it; tests/test_resume.py runs the command that goes on.)"""
    from helpers import SPECS

    spec = SPECS["dqn"]
    for every, last in (("100000", "--resume runs/"), ("0", "interrupted; what was logged is kept in runs/")):
        cwd = tmp_path / every
        run = interrupt_script("dqn", *with_flag(spec.short, "--total-timesteps", "1000000"), "--checkpoint-every",
                               every, cwd=cwd, after_step=spec.interrupt_after)
        assert run.returncode == 130, run.stderr[-3000:]
        # the bar closed first: the lines are lines of their own, and the last (the bar is not drawn again after them)
        lines = run.stderr.rstrip("\n").split("\n")  # a bar redrawn is a "\r" inside a line
        ours = lines[-2:] if every != "0" else lines[-1:]
        assert "Traceback" not in run.stderr and last in lines[-1] and "\r" not in "".join(ours), run.stderr[-500:]
        assert run.values("charts/episodic_return") and any(tag.startswith("losses/") for tag in run.scalars)
        assert (run.run_dir / "checkpoint.pt").exists() == (every != "0")
        if every != "0":
            assert lines[-1].endswith(f"dqn.py --resume runs/{run.run_dir.name}"), lines[-1]
            assert re.match(r"stopped at step \d+, its whole state saved in runs/.+/checkpoint.pt; go on with:$", lines[-2])


def test_a_mistake_stops_a_real_process_in_one_line(tmp_path):
    """As a user sees it, in a real process: one line naming the flag, exit code 2, no stack trace, no run folder.
    (One script stands for all; test_contract.py runs each script's checks in-process.)"""
    from helpers import assert_user_error, run_script

    run = run_script("sac_continuous_action", "--env-id", "NoSuchEnv-v9", cwd=tmp_path)
    assert_user_error(run, "--env-id")
    assert run.returncode == 2


# Runs the harness as a script's run does (run, pick_device, make_writer, Progress, log_losses, use_jax_device) in a
# process of its own, on a MuJoCo -v4 task and a busy machine, and prints, as JSON, what it did to the process: the
# calls that change it (recorded) and the settings that differ after (inductor's, dynamo's, torch's numerics).
TOUCHED = r"""
import atexit, json, logging, os, signal, sys, warnings
import torch
from dataclasses import dataclass
from leanrl_utils import harness

touched, settings = set(), {}
def record(owner, name, what):
    real = getattr(owner, name)
    def recorded(*args, **kwargs):
        touched.add(what)
        return real(*args, **kwargs)
    recorded.__wrapped__ = real
    setattr(owner, name, recorded)
record(torch, "set_num_threads", "threads")
record(warnings, "filterwarnings", "warnings")
record(warnings, "simplefilter", "warnings")
record(logging.Logger, "setLevel", "logging")
record(signal, "signal", "signals")
record(atexit, "register", "atexit")
import mujoco
record(mujoco, "set_mju_user_warning", "mujoco")
import jax
record(jax.config, "update", "jax")

def numerics():
    return dict(inductor=torch._inductor.config.get_config_copy(), dynamo=torch._dynamo.config.get_config_copy(),
                torch=dict(deterministic=torch.are_deterministic_algorithms_enabled(), grad=torch.is_grad_enabled(),
                           matmul=torch.get_float32_matmul_precision(), dtype=str(torch.get_default_dtype()),
                           cudnn=(torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)))
os.environ.pop("OMP_NUM_THREADS", None)  # the thread count the harness chooses
torch.set_num_threads.__wrapped__(2)  # two threads to cut from, whatever the test session pinned (one per worker)
before, environ = numerics(), dict(os.environ)
harness.threads_left = lambda cores, busy: 1  # a busy machine: the threads are cut

@dataclass
class Args:
    exp_name: str = "toy"
    seed: int = 1
    cuda: bool = False
    torch_deterministic: bool = True
    track: bool = False
    capture_video: bool = False
    env_id: str = "HalfCheetah-v4"
    learning_rate: float = 3e-4
    compile: bool = True

def main(args):
    harness.pick_device(args)
    harness.use_jax_device(args)
    writer = harness.make_writer(args, "run")
    progress = harness.Progress(args, writer, total=4, start_step=0, warmup_steps=1)
    for step in range(4):
        progress.tick(step)
        harness.log_losses(writer, dict(loss=torch.tensor(1.0)), step)
        progress.log(step)
    progress.close()

harness.run(main, Args, None, [])
after = numerics()
changed = [f"{part}.{key}" for part in before for key in before[part] if before[part][key] != after[part][key]]
env = sorted(k for k in set(environ) | set(os.environ) if environ.get(k) != os.environ.get(k))
print(json.dumps(dict(touched=sorted(touched | ({"environment"} if env else set())), numerics=changed, env=env)))
"""


def test_the_harness_says_all_it_does_to_a_run(tmp_path):
    """The harness's docstring lists everything it does to a run's process, and it sets nothing that changes the
    numbers or the speed of a run but the thread count the contract gives it (no inductor or dynamo option, no
    random-number fallback, no torch numerics setting): a reader of a pair sees every such choice in the scripts.
    Checked against what a run through the harness does (TOUCHED, in a process of its own)."""
    import json
    import re
    import subprocess

    from helpers import ENV

    pytest.importorskip("jax")
    out = subprocess.run([sys.executable, "-c", TOUCHED], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    done = json.loads(out.stdout.strip().splitlines()[-1])
    listed = re.findall(r"^- (\w+): ", harness.__doc__.split("Everything it does to a run's process")[1], re.M)
    assert done["numerics"] == [], "the harness changed settings a reader of a pair should see in the scripts"
    assert sorted(listed) == done["touched"], (listed, done)


LIBRARY_WARNINGS = r"""
import warnings, sys
import gymnasium as gym
import mujoco
from leanrl_utils import harness

def main(args):
    for _ in range(2):
        gym.make("HalfCheetah-v4")
    gym.vector.SyncVectorEnv([lambda: gym.make("HalfCheetah-v4")] * 2)
    warnings.warn("a warning of another kind")
    mujoco.get_mju_user_warning()("another of MuJoCo's warnings")

class Args:
    exp_name = "toy"
    env_id = "HalfCheetah-v4"
harness.parse_args = lambda Args, argv: Args()
harness.run(main, Args)
"""


def test_the_mujoco_v4_warnings_are_said_once_and_others_stay(tmp_path):
    """On a MuJoCo -v4 task, gymnasium's "out of date" warning and MuJoCo's settotalmass deprecation (once per
    environment made) are left out and said once, in one line; every other warning still shows."""
    import subprocess

    from helpers import ENV

    env = {k: v for k, v in ENV.items() if k != "PYTHONWARNINGS"}  # the user's default: warnings shown
    out = subprocess.run([sys.executable, "-c", LIBRARY_WARNINGS], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    err = out.stderr
    assert "is out of date" not in err and "compiler attribute 'settotalmass'" not in err, err
    assert err.count("HalfCheetah-v4: the version CleanRL's and LeanRL's published figures use") == 1, err
    assert "a warning of another kind" in err and "WARNING: another of MuJoCo's warnings" in err, err
