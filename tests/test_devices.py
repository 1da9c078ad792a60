"""Where each script runs, checked on the CPU: every script asks the harness for its device (so that where --cuda
cannot be had it says why in one line), every optimized script refuses --no-cuda --cudagraphs on a machine with
CUDA, and SAC's and TD3's updates are compiled with the inductor settings the harness gives for the installed
torch and device. How the harness decides is tested once in test_harness.py.

A machine with CUDA is played by patching `torch.cuda.is_available`: the scripts decide their device before they
touch CUDA, and each run here stops before its writer is made, so nothing else of CUDA is reached.
"""

import pytest
import torch
from helpers import CHECKED, SPECS, assert_user_error, run_in_process

from leanrl_utils import harness

COMPILED = [s for s in CHECKED if s.endswith("_torchcompile")]


class _Started(Exception):
    """Raised where a run would make its writer: the device is decided by then."""


def started(script: str, *args: str, cwd, monkeypatch):
    """The script run in this process up to its writer (where it stops), as a user runs it."""
    def stop(*_, **__):
        raise _Started
    monkeypatch.setattr(harness, "make_writer", stop)
    monkeypatch.setenv("RANK", "0")
    return run_in_process(script, *SPECS[script].short, *args, cwd=cwd)


@pytest.mark.parametrize("script", CHECKED)
def test_a_run_asked_for_cuda_that_runs_on_the_cpu_says_so(script, tmp_path, monkeypatch):
    """--cuda is the default: where it cannot be had, the run says why in one line (here a CPU build of torch, or
    CUDA hidden from the CPU suite on a GPU machine; the JAX twins a jaxlib without a GPU), then runs."""
    if script.endswith("_jax"):
        pytest.importorskip("jax")
    run = started(script, cwd=tmp_path, monkeypatch=monkeypatch)
    lines = [line for line in run.stderr.splitlines() if line.startswith(f"{script}.py: --cuda: ")]
    assert len(lines) == 1 and lines[0].endswith("; running on the CPU"), run.stderr[-2000:]


@pytest.mark.parametrize("script", COMPILED)
def test_no_cuda_with_cudagraphs_on_a_cuda_machine_is_refused(script, tmp_path, monkeypatch):
    """On a machine with CUDA, --no-cuda --cudagraphs would capture graphs from CPU tensors: one line refuses it,
    before any run folder is written. (Without CUDA the same flags run, saying once that there are no graphs:
    the flag-combination tests count that warning.)"""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    run = run_in_process(script, *SPECS[script].short, "--no-cuda", "--cudagraphs", cwd=tmp_path)
    assert_user_error(run, "--cudagraphs")
    assert "--no-cuda" in run.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("script", ["sac_continuous_action_torchcompile", "td3_continuous_action_torchcompile"])
def test_the_update_is_compiled_with_the_harness_s_inductor_settings(script, tmp_path, monkeypatch):
    """pytorch/pytorch#176591 (fixed in 2.12) crashes the compilation of SAC's and TD3's update on CUDA with older
    torch: main() hands torch.compile, for the update, what harness.inductor_options gives for its device (with
    the installed torch on this CPU: nothing; played as torch 2.11 on CUDA: loop ordering off)."""
    handed = []

    def recording_compile(fn, *args, **kwargs):
        handed.append(kwargs.get("options"))
        raise _Started
    monkeypatch.setattr(torch, "compile", recording_compile)
    run_in_process(script, *SPECS[script].short, "--compile", cwd=tmp_path)
    assert handed == [None]
    monkeypatch.setattr(harness, "inductor_options", lambda device: {"loop_ordering_after_fusion": device.type})
    run_in_process(script, *SPECS[script].short, "--compile", cwd=tmp_path / "again")
    assert handed == [None, {"loop_ordering_after_fusion": "cpu"}]
