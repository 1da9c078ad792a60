"""A user's mistakes on the scripts' own command lines, each stopped in one line with a non-zero exit: the rows a
new user met (flags that do not exist, named with the nearest real ones; values out of range, each flag named
alone; a seed numpy would refuse), and training that diverges in a real run (a loss, or a distribution's
parameters, that is not a finite number: the run stops itself, keeping what it logged). How the harness says
each kind of mistake is tested once, in test_harness.py."""

import math
import sys

import pytest
from helpers import ONE_LINE_ERROR, SPECS, load_script, run_script


def one_line(code: int, err: str, script: str) -> str:
    assert code == 2, f"exit code {code}: {err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ONE_LINE_ERROR.match(lines[0]) and lines[0].startswith(f"{script}.py: error: "), err
    return lines[0]


# the rows of the table, as a new user met them
@pytest.mark.parametrize("script,argv,expected", [
    ("sac_continuous_action", ["--learning-rate", "nan"],
     "--learning-rate: no such flag; did you mean --policy-lr, --q-lr or --learning-starts?"),
    ("sac_continuous_action_torchcompile", ["--num-envs", "0"], "--num-envs: no such flag; --help lists the flags"),
    ("ppo_continuous_action", ["--tau", "0"], "--tau: no such flag; --help lists the flags"),
    ("sac_continuous_action", ["--tau", "0"], "--tau must be in (0, 1], got 0.0"),
    ("ppo_atari_envpool_torchcompile", ["--gae-lambda", "2"], "--gae-lambda must be in [0, 1], got 2.0"),
    ("dqn_jax", ["--end-e", "1.5"], "--end-e must be a probability, in [0, 1], got 1.5"),
    ("td3_continuous_action_jax", ["--seed", "-3"], "--seed must be in [0, 2**32 - 1] (numpy's and gymnasium's seeds), got -3"),
])
def test_each_mistake_names_its_own_flag(script, argv, expected, monkeypatch, capsys, tmp_path):
    """Unknown flags are the parser's; ranges are the harness's and the script's check_args (before any work): the
    range checks name the one flag that is out of range, not a pair of them."""
    from leanrl_utils import harness

    module = load_script(script)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [f"leanrl/{script}.py", *argv])
    with pytest.raises(SystemExit) as stopped:
        harness.run(module.main, module.Args, module.check_args, argv)
    assert one_line(stopped.value.code, capsys.readouterr().err, script).endswith(expected)
    assert not (tmp_path / "runs").exists()


RATES = {"sac_continuous_action": ["--q-lr", "1e9", "--policy-lr", "1e9"]}


@pytest.mark.parametrize("script", ["sac_continuous_action", "ppo_continuous_action", "dqn_torchcompile"])
def test_a_run_that_diverges_stops_itself_in_one_line(script, tmp_path):
    """A learning rate of 1e9 turns the weights into NaN at the first updates: the run stops at once (a loss logged
    as NaN, or a distribution that refuses NaN parameters), with one line naming the step, what is not a finite
    number and the learning rates, exit code 3, and what it logged kept on disk. Real runs of three scripts (the
    eager SAC and PPO sample from torch.distributions; the optimized DQN logs its loss from a compiled update);
    the harness's two ways of seeing it are tested on their own in test_harness.py."""
    family = script.removesuffix("_torchcompile").removesuffix("_jax")
    rates = RATES.get(family, ["--learning-rate", "1e9"])
    run = run_script(script, *SPECS[script].short, *rates, cwd=tmp_path)
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 3 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert ONE_LINE_ERROR.match(last) and last.startswith(f"{script}.py: error: step "), last
    assert "training diverged; a smaller learning rate (" in last and all(r in last for r in rates[::2]), last
    logged = run.scalars
    assert "charts/start" in logged, sorted(logged)
    if "losses/" in last:  # the loss that stopped it was written before the run stopped
        tag = next(part for part in last.split(": ") if part.startswith("losses/")).split(" is ")[0]
        assert not math.isfinite(logged[tag][-1][1]), logged[tag]
