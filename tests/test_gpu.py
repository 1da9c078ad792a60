"""The CUDA path of the optimized scripts: `pytest -m gpu` on a machine with an NVIDIA GPU.

Where CUDA is absent (CI, the CPU machines) every test here is skipped, with the reason. On a GPU,
each optimized script runs in each mode (no flag, --compile, --cudagraphs, both) on CUDA, and:
- run as a user runs it, it logs its losses and `charts/SPS`, and under --cudagraphs it captured each of
  its graphs and replayed every one at least twice (counted by the launcher below); without the flag it
  captured none;
- its first updates' numbers match its eager twin's, run on the same GPU with the same seed;
- that comparison catches CUDA graphs that replay stale inputs: in both graph modes of every optimized
  script, a run with the input copies of tensordict's CudaGraphModule switched off logs at the same steps
  as the eager twin, and some value leaves the tolerance;
- SAC and continuous PPO learn their CI tasks with --compile --cudagraphs;
- a --compile --cudagraphs run killed between two checkpoints and resumed logs, over the updates that follow its
  checkpoint, what the unbroken run logs within the tolerance of the comparison with the eager twin (GPU kernels
  need not repeat their roundings from one process to the next; on the CPU the resume is exact).

Every run goes through a small launcher (`LAUNCH`) that counts CUDA-graph captures and replays. The runs
that compare numbers ("fallback") also turn inductor's `fallback_random` on (the scripts leave inductor's
own generator on on a GPU: `fallback_random` serves CPU reproducibility) and keep cuDNN off TF32, as the
eager twin is run; the other runs are a user's run, inductor's random numbers under capture included.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import GPU_ENV, GPU_RUNS as RUNS, GPU_TOL as TOL, MODES, OFF_POLICY_LEARN, OFF_POLICY_THRESHOLD, \
    PPO_CONTINUOUS_LEARN, PPO_CONTINUOUS_THRESHOLD, SCRIPT_DIR, Run, RunCache, assert_close_logs, cuda_device_count, \
    log_differences

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(cuda_device_count() == 0, reason="needs a CUDA device: run `pytest -m gpu` on a GPU")]


# RUNS (each pair's runs, tags compared and graphs) and TOL: helpers.py's, where test_contract.py's CPU check of
# the comparison reads them too
GRAPH_MODES = [mode for mode in MODES if "--cudagraphs" in mode]

LAUNCH = """
import atexit, json, runpy, sys, types
import torch

mode = sys.argv[1]
if mode in ("fallback", "stale"):
    torch.backends.cudnn.allow_tf32 = False  # full fp32 convolutions, in the eager twin too
    torch._inductor.config.fallback_random = True  # compiled code draws eager's random numbers
if mode == "stale":  # CUDA graphs that replay the inputs they were captured with, forever
    import tensordict.nn.cudagraphs as cudagraphs

    class StaleTorch(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def _foreach_copy_(*args, **kwargs):
            pass

    cudagraphs.torch = StaleTorch("torch")

# count the CUDA graphs captured and the replays of each
replays = {}
capture_begin, replay = torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.replay


def counted_capture_begin(self, *args, **kwargs):
    replays[id(self)] = 0
    return capture_begin(self, *args, **kwargs)


def counted_replay(self, *args, **kwargs):
    replays[id(self)] = replays.get(id(self), 0) + 1
    return replay(self, *args, **kwargs)


torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.replay = counted_capture_begin, counted_replay
if mode.startswith("kill-at-"):  # a SIGKILL once the loop is at that step (after the step's checkpoint, if due)
    import os, signal
    from leanrl_utils import harness

    at, tick = int(mode.removeprefix("kill-at-")), harness.Progress.tick

    def tick_or_kill(self, step):
        tick(self, step)
        if step >= at:
            os.kill(os.getpid(), signal.SIGKILL)

    harness.Progress.tick = tick_or_kill
atexit.register(lambda: open("graphs.json", "w").write(json.dumps(list(replays.values()))))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def launch(mode: str, script: str, *args: str, cwd: Path, timeout: float = 1800) -> Run:
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", LAUNCH, mode, str(SCRIPT_DIR / f"{script}.py"), *args]
    proc = subprocess.run(cmd, cwd=cwd, env=GPU_ENV, capture_output=True, text=True, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, cwd)


def replays(run: Run) -> list[int]:
    """The replays of each CUDA graph the run captured."""
    return json.loads((run.cwd / "graphs.json").read_text())


@pytest.fixture(scope="module")
def gpu_runs(tmp_path_factory):
    """Runs shared by the tests of this module, by launcher mode: each (script, args) runs once per mode."""
    root = tmp_path_factory.mktemp("gpu")
    return {mode: RunCache(root / mode, lambda script, *args, cwd, mode=mode: launch(mode, script, *args, cwd=cwd))
            for mode in ("user", "fallback")}


CASES = [(pair, mode) for pair in RUNS for mode in MODES]
IDS = [f"{pair} {' '.join(mode) or 'no flag'}" for pair, mode in CASES]


@pytest.mark.parametrize("pair,mode", CASES, ids=IDS)
def test_every_mode_runs_on_cuda_logs_and_replays_its_graphs(pair, mode, gpu_runs):
    _, fast, args, tags, _, graphs = RUNS[pair]
    result = gpu_runs["user"](fast, *args, *mode).check()
    assert all(result.values(tag) for tag in tags + ["charts/SPS"]), sorted(result.scalars)
    counts = replays(result)
    if "--cudagraphs" in mode:
        assert len(counts) == graphs and min(counts) >= 2, f"replays of each captured graph: {counts}"
    else:
        assert counts == [], f"graphs captured without --cudagraphs: {counts}"


@pytest.mark.parametrize("pair,mode", CASES, ids=IDS)
def test_first_updates_match_the_eager_twin(pair, mode, gpu_runs):
    eager, fast, args, tags, upto, _ = RUNS[pair]
    reference, optimized = gpu_runs["fallback"](eager, *args).check(), gpu_runs["fallback"](fast, *args, *mode).check()
    assert_close_logs(optimized, reference, tags, upto_step=upto, **TOL)


STALE = [(pair, mode) for pair in RUNS for mode in GRAPH_MODES]


@pytest.mark.parametrize("pair,mode", STALE, ids=[f"{p} {' '.join(m)}" for p, m in STALE])
def test_a_graph_that_replays_stale_inputs_fails_the_comparison(pair, mode, gpu_runs, tmp_path):
    """The comparison above can fail: with the graphs' input copies switched off, each replay reads the
    inputs it was captured with. The stale run logs every tag at the eager twin's steps (it ran), and some
    value leaves the tolerance."""
    eager, fast, args, tags, upto, _ = RUNS[pair]
    stale = launch("stale", fast, *args, *mode, cwd=tmp_path).check()
    assert max(replays(stale)) >= 2
    differences = log_differences(stale, gpu_runs["fallback"](eager, *args).check(), tags, upto_step=upto, **TOL)
    assert differences, "stale inputs went unnoticed"


LEARN = {  # the CPU learning tests' tasks and thresholds (test_offpolicy.py, test_ppo_continuous.py)
    "sac_continuous_action_torchcompile": (OFF_POLICY_LEARN["sac"], OFF_POLICY_THRESHOLD),
    "ppo_continuous_action_torchcompile": (PPO_CONTINUOUS_LEARN, PPO_CONTINUOUS_THRESHOLD),
}


@pytest.mark.parametrize("script", LEARN)
def test_learns_on_cuda_with_compile_and_cudagraphs(script, tmp_path):
    args, threshold = LEARN[script]
    result = launch("user", script, *args, "--compile", "--cudagraphs", cwd=tmp_path).check()
    assert replays(result) and min(replays(result)) >= 2
    last = result.values("charts/episodic_return")[-5:]
    assert sum(last) / len(last) > threshold, f"last episodes: {last}"


# pair: (--checkpoint-every, the step the run is killed at, the step it goes on from, the last step compared)
RESUME = {"sac": (333, 450, 333, 450), "td3": (333, 450, 333, 450), "ppo_continuous": (500, 600, 512, 1280),
          "dqn": (333, 1100, 999, 1500)}


@pytest.mark.parametrize("pair", RESUME)
def test_a_killed_run_goes_on_within_the_tolerance(pair, gpu_runs, tmp_path):
    _, fast, args, tags, _, _ = RUNS[pair]
    every, kill_at, expected, upto = RESUME[pair]
    mode = ("--compile", "--cudagraphs")
    unbroken = gpu_runs["user"](fast, *args, *mode).check()
    killed = launch(f"kill-at-{kill_at}", fast, *args, *mode, "--checkpoint-every", str(every), cwd=tmp_path)
    assert killed.returncode == -9, killed.stderr[-3000:]
    resumed = launch("user", fast, "--resume", f"runs/{killed.run_dir.name}", cwd=tmp_path).check()
    assert f"at step {expected}" in resumed.stderr and replays(resumed) and min(replays(resumed)) >= 2
    assert_close_logs(Run(0, "", "", tmp_path), unbroken, tags, upto_step=upto, **TOL)
