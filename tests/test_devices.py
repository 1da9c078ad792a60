"""Where a run runs, said and checked on the CPU: the line that says why --cuda runs on the CPU, the refusal of
--no-cuda --cudagraphs on a machine with CUDA, and the inductor setting that follows the installed torch.

A machine with CUDA is played by patching `torch.cuda.is_available` (and `torch.version.cuda`): the scripts decide
their device before they touch CUDA, and each run here stops before its writer is made, so nothing else of CUDA
is reached.
"""

import sys
import warnings

import pytest
import torch
from helpers import CHECKED, SPECS, assert_user_error, load_script, run_in_process

TORCH_SCRIPTS = [s for s in CHECKED if not s.endswith("_jax")]
JAX_SCRIPTS = [s for s in CHECKED if s.endswith("_jax")]
COMPILED = [s for s in CHECKED if s.endswith("_torchcompile")]
OLD_DRIVER = ("CUDA initialization: The NVIDIA driver on your system is too old (found version 11040). Please "
              "update your GPU driver by downloading and installing a new version from the URL: "
              "http://www.nvidia.com/Download/index.aspx")


class _Started(Exception):
    """Raised where a run would make its writer: the device is decided by then."""


def started(script: str, *args: str, cwd, monkeypatch):
    """The script run in this process up to its writer (where it stops), as a user runs it."""
    module = load_script(script)

    def stop(*_, **__):
        raise _Started
    monkeypatch.setattr(module, "make_writer", stop)
    monkeypatch.setenv("RANK", "0")
    return run_in_process(script, *SPECS[script].short, *args, cwd=cwd)


@pytest.mark.parametrize("script", TORCH_SCRIPTS + JAX_SCRIPTS)
def test_a_run_asked_for_cuda_that_runs_on_the_cpu_says_so(script, tmp_path, monkeypatch):
    """--cuda is the default: where it cannot be had, the run says why in one line (here a CPU build of torch, or
    CUDA hidden from the CPU suite on a GPU machine; the JAX twins a jaxlib without a GPU), then runs."""
    run = started(script, cwd=tmp_path, monkeypatch=monkeypatch)
    lines = [line for line in run.stderr.splitlines() if line.startswith(f"{script}.py: --cuda: ")]
    assert len(lines) == 1 and lines[0].endswith("; running on the CPU"), run.stderr[-2000:]


EAGER_AND_COMPILED = [s for s in TORCH_SCRIPTS if "multigpu" not in s]


def test_the_torch_scripts_share_one_pick_device():
    import inspect

    sources = {inspect.getsource(load_script(s).pick_device) for s in EAGER_AND_COMPILED}
    assert len(EAGER_AND_COMPILED) == 12 and len(sources) == 1, f"{len(sources)} versions of pick_device"


@pytest.mark.parametrize("script", ["sac_continuous_action", "ppo_atari_envpool_multigpu",
                                    "ppo_atari_envpool_multigpu_torchcompile"])
def test_pick_device_says_why_cuda_is_not_used(script, monkeypatch, capsys):
    """torch's own reason where it gives one (a driver too old for this build), else what is known; nothing where
    --no-cuda asked for the CPU."""
    module = load_script(script)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(sys, "argv", [f"leanrl/{script}.py"])  # the name the line starts with
    pick = (lambda args: module.pick_device(args, 0)) if "multigpu" in script else module.pick_device

    def too_old():
        warnings.warn(OLD_DRIVER)
        return False
    cases = [(None, lambda: False, f"torch {torch.__version__} is a CPU build"),
             ("13.0", too_old, OLD_DRIVER.splitlines()[0]),
             ("13.0", lambda: False, "no CUDA device is visible")]
    for cuda_version, available, why in cases:
        monkeypatch.setattr(torch.version, "cuda", cuda_version)
        monkeypatch.setattr(torch.cuda, "is_available", available)
        assert pick(module.Args()) == torch.device("cpu")
        assert capsys.readouterr().err == f"{script}.py: --cuda: {why}; running on the CPU\n"
        assert pick(module.Args(cuda=False)) == torch.device("cpu")
        assert capsys.readouterr().err == ""


def test_a_jax_twin_asked_for_no_gpu_says_nothing(capsys):
    module = load_script("dqn_jax")
    module.use_device(module.Args(cuda=False))
    assert "--cuda:" not in capsys.readouterr().err


@pytest.mark.parametrize("script", COMPILED)
def test_no_cuda_with_cudagraphs_on_a_cuda_machine_is_refused(script, tmp_path, monkeypatch):
    """On a machine with CUDA, --no-cuda --cudagraphs would capture graphs from CPU tensors: one line refuses it,
    before any run folder is written. (Without CUDA the same flags run, saying once that there are no graphs:
    the flag-combination tests count that warning.)"""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    run = run_in_process(script, *SPECS[script].short, "--no-cuda", "--cudagraphs", cwd=tmp_path)
    assert_user_error(run, "--cudagraphs")
    assert "--no-cuda" in run.stderr.strip().splitlines()[-1]


LOOP_ORDERING_OFF = {"loop_ordering_after_fusion": False}


@pytest.mark.parametrize("script", ["sac_continuous_action_torchcompile", "td3_continuous_action_torchcompile"])
def test_loop_ordering_is_switched_off_only_where_torch_lacks_the_fix(script, tmp_path, monkeypatch):
    """pytorch/pytorch#176591 (fixed in 2.12) crashes the compilation of SAC's and TD3's update on CUDA: on
    torch 2.11 with CUDA the update is compiled with inductor's loop ordering after fusion off; on 2.12 and
    later, or on the CPU, inductor's settings are left alone."""
    options = load_script(script).update_options
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert options("2.11.0+cu130", cuda) == LOOP_ORDERING_OFF
    assert options("2.11.1", cuda) == LOOP_ORDERING_OFF
    for version in ("2.12.0", "2.12.1+cu128", "2.13.0", "2.13.0+cpu", "2.14.0"):
        assert options(version, cuda) is None, version
    assert options("2.11.0", cpu) is None
    # inductor knows the setting's name (a misspelt one would raise when compiling)
    doubled = torch.compile(lambda x: x * 2, options=options("2.11.0", cuda))
    assert doubled(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]

    # what main() hands torch.compile for the update, with the installed torch on this CPU: nothing
    module = load_script(script)
    handed = []

    def recording_compile(fn, *args, **kwargs):
        handed.append(kwargs.get("options"))
        raise _Started
    monkeypatch.setattr(module.torch, "compile", recording_compile)
    run_in_process(script, *SPECS[script].short, "--compile", cwd=tmp_path)
    assert handed == [None]


def test_the_torch_scripts_share_one_pick_threads():
    import inspect

    sources = {inspect.getsource(load_script(s).pick_threads) for s in TORCH_SCRIPTS}
    assert len(TORCH_SCRIPTS) == 14 and len(sources) == 1, f"{len(sources)} versions of pick_threads"


@pytest.mark.parametrize("script", ["sac_continuous_action_torchcompile", "ppo_atari_envpool_multigpu"])
def test_a_busy_machine_gets_fewer_threads(script, monkeypatch, capsys):
    """The CPUs other programs keep busy (read from /proc/stat twice) are taken from torch's threads, at least one
    left, and said in one line; an idle machine keeps torch's default, and a user's OMP_NUM_THREADS wins."""
    import io
    import time

    module = load_script(script)
    readings, chosen = [], []

    def proc_stat(path, *args, **kwargs):
        assert path == "/proc/stat"
        return io.StringIO(readings.pop(0))
    monkeypatch.setattr(module, "open", proc_stat, raising=False)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    monkeypatch.setattr(module.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    monkeypatch.setattr(torch, "set_num_threads", chosen.append)
    monkeypatch.setattr(sys, "argv", [f"leanrl/{script}.py"])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    # 60% of four CPUs busy over the reading (user 300 + idle 200 of 500 jiffies): 2.4 CPUs, 2 threads left
    readings[:] = ["cpu  100 0 100 800 0 0 0 0 0 0\n", "cpu  400 0 100 1000 0 0 0 0 0 0\n"]
    module.pick_threads()
    assert chosen == [2]
    assert capsys.readouterr().err == (f"{script}.py: other programs keep 2.4 of 4 CPUs busy: torch runs on 2 threads, "
                                       "not 4 (OMP_NUM_THREADS sets it)\n")
    # everything busy: still one thread
    readings[:] = ["cpu  0 0 0 1000 0 0 0 0 0 0\n", "cpu  500 0 0 1000 0 0 0 0 0 0\n"]
    module.pick_threads()
    assert chosen == [2, 1] and "torch runs on 1 thread, not 4" in capsys.readouterr().err
    # idle: torch's default, nothing said
    readings[:] = ["cpu  0 0 0 1000 0 0 0 0 0 0\n", "cpu  5 0 0 1495 0 0 0 0 0 0\n"]
    module.pick_threads()
    assert chosen == [2, 1] and capsys.readouterr().err == ""
    # a user's OMP_NUM_THREADS: /proc/stat is not even read
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    module.pick_threads()
    assert chosen == [2, 1] and readings == []
