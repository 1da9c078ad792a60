"""The CUDA path of the optimized scripts: `pytest -m gpu` on a machine with an NVIDIA GPU.

Where CUDA is absent (CI, the CPU machines) every test here is skipped, with the reason. On a GPU,
each optimized script runs in each mode (no flag, --compile, --cudagraphs, both) on CUDA, and:
- it logs its losses and `charts/SPS`;
- its first updates' numbers match its eager twin's, run on the same GPU with the same seed;
- the comparison catches a CUDA graph that replays stale inputs (a run with the input copies of
  tensordict's CudaGraphModule switched off must fail it);
- SAC and continuous PPO learn their CI tasks with --compile --cudagraphs.

The runs that compare numbers go through a small launcher (`LAUNCH`): on a GPU the scripts leave
inductor's own random-number generator on (`fallback_random` serves CPU reproducibility only), so the
launcher turns `fallback_random` on for the compiled modes, and keeps cuDNN off TF32, as the eager
twin is run. Nothing else differs from a user's run.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import ENV, MODES, PPO_LOSSES, SCRIPTS, Run, assert_close_logs
from test_dqn import ATARI_GREEDY as DQN_ATARI_GREEDY, GREEDY as DQN_GREEDY

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: run `pytest -m gpu` on a GPU")]

Q_LOSSES = ["losses/qf1_values", "losses/qf2_values", "losses/qf1_loss", "losses/qf2_loss", "losses/qf_loss",
            "losses/actor_loss"]
OFF_POLICY = ("--env-id", "Pendulum-v1", "--total-timesteps", "600", "--learning-starts", "200", "--seed", "3")
PAIRS = {  # eager script, optimized script, short run, tags compared, the last step of the comparison
    "sac": ("sac_continuous_action", "sac_continuous_action_torchcompile", OFF_POLICY,
            Q_LOSSES + ["losses/alpha", "losses/alpha_loss"], 300),
    "td3": ("td3_continuous_action", "td3_continuous_action_torchcompile", OFF_POLICY, Q_LOSSES, 300),
    "ppo_continuous": ("ppo_continuous_action", "ppo_continuous_action_torchcompile",
                       ("--env-id", "Pendulum-v1", "--total-timesteps", "1024", "--num-steps", "256",
                        "--num-minibatches", "4", "--update-epochs", "2", "--seed", "5"), PPO_LOSSES, None),
    "ppo_atari": ("ppo_atari_envpool", "ppo_atari_envpool_torchcompile",
                  ("--env-id", "Breakout-v5", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512",
                   "--num-minibatches", "2", "--update-epochs", "2", "--seed", "7"), PPO_LOSSES, None),
    # DQN greedy (ε = 0): every step runs the acting graph
    "dqn": ("dqn", "dqn_torchcompile", DQN_GREEDY, ["losses/td_loss", "losses/q_values"], None),
    "dqn_atari": ("dqn_atari_envpool", "dqn_atari_envpool_torchcompile", DQN_ATARI_GREEDY,
                  ["losses/td_loss", "losses/q_values"], None),
}
# GPU kernels round differently from one another (vmapped against separate matmuls, fused optimizer
# steps, other reduction orders), and training amplifies it: over the first 100 off-policy updates,
# and over the 4 PPO iterations (32 and 16 minibatch updates), every logged value agrees within 1%.
TOL = dict(rtol=1e-2, atol=1e-4)

LAUNCH = """
import runpy, sys, types
import torch
torch.backends.cudnn.allow_tf32 = False  # full fp32 convolutions, in the eager twin too
torch._inductor.config.fallback_random = True  # compiled code draws eager's random numbers
if sys.argv[1] == "stale":  # CUDA graphs that replay the inputs they were captured with, forever
    import tensordict.nn.cudagraphs as cudagraphs

    class StaleTorch(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def _foreach_copy_(*args, **kwargs):
            pass

    cudagraphs.torch = StaleTorch("torch")
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run(script: str, *args: str, cwd: Path, stale: bool = False, timeout: float = 1800) -> Run:
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", LAUNCH, "stale" if stale else "fresh", str(SCRIPTS / f"{script}.py"), *args]
    proc = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, cwd)


@pytest.fixture(scope="module")
def gpu_runs(tmp_path_factory):
    """Runs shared by the tests of this module: each (script, args) runs once."""
    root, runs = tmp_path_factory.mktemp("gpu"), {}

    def get(script: str, *args: str) -> Run:
        if (script, *args) not in runs:
            runs[(script, *args)] = run(script, *args, cwd=root / f"run{len(runs)}")
        return runs[(script, *args)]

    return get


CASES = [(pair, mode) for pair in PAIRS for mode in MODES]
IDS = [f"{pair} {' '.join(mode) or 'no flag'}" for pair, mode in CASES]


@pytest.mark.parametrize("pair,mode", CASES, ids=IDS)
def test_every_mode_runs_on_cuda_and_logs(pair, mode, gpu_runs):
    _, fast, short, tags, _ = PAIRS[pair]
    result = gpu_runs(fast, *short, *mode).check()
    assert "needs a CUDA device" not in result.stderr  # the graphs really ran
    assert result.values("charts/SPS") and min(result.values("charts/SPS")) > 0
    assert all(result.values(tag) for tag in tags), sorted(result.scalars)


@pytest.mark.parametrize("pair,mode", CASES, ids=IDS)
def test_first_updates_match_the_eager_twin(pair, mode, gpu_runs):
    eager, fast, short, tags, upto = PAIRS[pair]
    reference, optimized = gpu_runs(eager, *short).check(), gpu_runs(fast, *short, *mode).check()
    assert_close_logs(optimized, reference, tags, upto_step=upto, **TOL)


@pytest.mark.parametrize("pair", ["sac", "ppo_continuous"])
def test_a_graph_that_replays_stale_inputs_fails_the_comparison(pair, gpu_runs, tmp_path):
    """The comparison above can fail: with the graphs' input copies switched off, each update replays the
    batch it was captured with, and the numbers leave the eager twin's."""
    eager, fast, short, tags, upto = PAIRS[pair]
    stale = run(fast, *short, "--cudagraphs", cwd=tmp_path, stale=True).check()
    with pytest.raises(AssertionError):
        assert_close_logs(stale, gpu_runs(eager, *short).check(), tags, upto_step=upto, **TOL)


LEARN = {  # the CPU learning tests' tasks and thresholds (see test_offpolicy.py, test_ppo_continuous.py)
    "sac_continuous_action_torchcompile": (("--env-id", "Pendulum-v1", "--total-timesteps", "5000",
                                            "--learning-starts", "1000"), -400),
    "ppo_continuous_action_torchcompile": (("--env-id", "InvertedPendulum-v4", "--total-timesteps", "28672"), 500),
}


@pytest.mark.parametrize("script", LEARN)
def test_learns_on_cuda_with_compile_and_cudagraphs(script, tmp_path):
    args, threshold = LEARN[script]
    cmd = [sys.executable, str(SCRIPTS / f"{script}.py"), *args, "--compile", "--cudagraphs"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=1800)
    result = Run(proc.returncode, proc.stdout, proc.stderr, tmp_path).check()
    last = result.values("charts/episodic_return")[-5:]
    assert sum(last) / len(last) > threshold, f"last episodes: {last}"
