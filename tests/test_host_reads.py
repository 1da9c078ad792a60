"""Where the optimized twins read a value back to the host (the `no .item() in the hot loop` item of their lists, and
issue 60's update epochs without a host sync): a short run of each twin without flags, in this process, under a
dispatch mode that sees every `aten._local_scalar_dense` (what `.item()`, `float()`, `bool()` and `if tensor:` run)
and notes the line of the script it came from. On the CPU a `.cpu()` or `.numpy()` of a CPU tensor dispatches nothing,
so what is seen is the reads that would wait for a GPU in the middle of the work: none may come from a line that is
not a logging step's (or, in PPO, the `--target-kl` check, once an epoch, when asked for)."""

import ast
import linecache
import traceback
from pathlib import Path

import pytest
import torch
from helpers import SCRIPT_DIR, SPECS, run_in_process
from torch.utils._python_dispatch import TorchDispatchMode

# the lines a logging step reads on (the loss values, the explained variance, the progress bar's figures)
LOGGING = ("harness.log_losses", "progress.log", "explained_var", "writer.add_scalar")
TWINS = ["sac_continuous_action_torchcompile", "td3_continuous_action_torchcompile",
         "ppo_continuous_action_torchcompile", "ppo_atari_envpool_torchcompile"]


class HostReads(TorchDispatchMode):
    """Each `_local_scalar_dense` call made from inside the training loop of `script`'s main() (a line of the loop on
    the stack: the loop's own lines and what they call): the innermost line of the script (its number and text)."""

    def __init__(self, script: str):
        super().__init__()
        self.path, self.reads = str(SCRIPT_DIR / f"{script}.py"), []
        main = next(n for n in ast.parse(Path(self.path).read_text()).body if getattr(n, "name", "") == "main")
        loop = next(n for n in main.body if isinstance(n, ast.For) and n.target.id in ("global_step", "iteration"))
        self.loop = range(loop.lineno, loop.end_lineno + 1)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            lines = [f.lineno for f in traceback.extract_stack() if f.filename == self.path]
            if any(line in self.loop for line in lines):
                self.reads.append((lines[-1], linecache.getline(self.path, lines[-1]).strip()))
        return func(*args, **(kwargs or {}))


def reads_of(script: str, argv: list[str], tmp_path) -> list[tuple[int, str]]:
    """The reads of a run of `script` with `argv`, in this process (helpers.run_in_process: its writers closed)."""
    mode = HostReads(script)
    with mode:
        run_in_process(script, *argv, cwd=tmp_path).check()
    return mode.reads


@pytest.mark.parametrize("script", TWINS)
def test_a_twin_reads_values_back_at_logging_steps_only(script, tmp_path):
    reads = reads_of(script, SPECS[script].short, tmp_path)
    assert reads, "no read seen at all: the logging steps read the losses back"
    assert [r for r in reads if not any(name in r[1] for name in LOGGING)] == []


def test_ppo_atari_s_epochs_read_only_the_kl_check_and_only_when_asked_for(tmp_path):
    """--target-kl stops the epochs on a value of the update: one read an epoch (the script's only way to decide), on
    its own line; without it the epochs read nothing (the test above)."""
    script = "ppo_atari_envpool_torchcompile"
    argv = ["--env-id", "Breakout-v5", "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "128",
            "--num-minibatches", "2", "--update-epochs", "3", "--target-kl", "1000"]
    reads = [text for _, text in reads_of(script, argv, tmp_path) if not any(n in text for n in LOGGING)]
    check = 'if args.target_kl is not None and losses["approx_kl"] > args.target_kl:'
    assert reads == [check] * (3 * 2)  # 3 epochs in each of the 2 iterations
