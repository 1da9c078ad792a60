"""A user's mistakes, each stopped in one line with a non-zero exit: flags that do not exist (named with the
nearest real ones), values that cannot be read, values out of range (each flag named alone), and training that
diverges (a loss, or a distribution's parameters, that is not a finite number: the run stops itself, keeping
what it logged)."""

import inspect
import math
import sys

import pytest
from helpers import CHECKED, ONE_LINE_ERROR, SPECS, load_script, run_script


def parsed(script: str, *argv: str, monkeypatch, capsys) -> tuple[int, str]:
    """The script's own command-line parse of `argv`, as `python leanrl/<script>.py argv` starts: (exit code,
    stderr)."""
    monkeypatch.setattr(sys, "argv", [f"leanrl/{script}.py", *argv])
    with pytest.raises(SystemExit) as stopped:
        load_script(script).parse_args(list(argv))
    return stopped.value.code, capsys.readouterr().err


def one_line(code: int, err: str, script: str) -> str:
    assert code == 2, f"exit code {code}: {err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and ONE_LINE_ERROR.match(lines[0]) and lines[0].startswith(f"{script}.py: error: "), err
    return lines[0]


@pytest.mark.parametrize("script", CHECKED)
def test_an_unknown_flag_is_named_with_the_nearest_real_ones(script, monkeypatch, capsys):
    line = one_line(*parsed(script, "--total-timestep", "5000", monkeypatch=monkeypatch, capsys=capsys), script)
    assert line.endswith("--total-timestep: no such flag; did you mean --total-timesteps?"), line
    line = one_line(*parsed(script, "--no-such-thing", monkeypatch=monkeypatch, capsys=capsys), script)
    assert line.endswith("--no-such-thing: no such flag; --help lists the flags"), line
    line = one_line(*parsed(script, "--seed", "1", "stray", monkeypatch=monkeypatch, capsys=capsys), script)
    assert "'stray' is neither a flag nor a flag's value" in line, line


@pytest.mark.parametrize("script", CHECKED)
def test_a_value_that_cannot_be_read_names_its_flag(script, monkeypatch, capsys):
    line = one_line(*parsed(script, "--total-timesteps", "many", monkeypatch=monkeypatch, capsys=capsys), script)
    assert "--total-timesteps" in line and "'many'" in line, line


@pytest.mark.parametrize("script", CHECKED)
def test_help_is_still_tyros(script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [f"leanrl/{script}.py", "--help"])
    with pytest.raises(SystemExit) as stopped:
        load_script(script).parse_args(["--help"])
    assert stopped.value.code == 0 and "--total-timesteps" in capsys.readouterr().out


# the rows of the table, as a new user met them
@pytest.mark.parametrize("script,argv,expected", [
    ("sac_continuous_action", ["--learning-rate", "nan"],
     "--learning-rate: no such flag; did you mean --policy-lr, --q-lr or --learning-starts?"),
    ("sac_continuous_action_torchcompile", ["--num-envs", "0"], "--num-envs: no such flag; --help lists the flags"),
    ("ppo_continuous_action", ["--tau", "0"], "--tau: no such flag; --help lists the flags"),
    ("sac_continuous_action", ["--tau", "0"], "--tau must be in (0, 1], got 0.0"),
    ("ppo_atari_envpool_torchcompile", ["--gae-lambda", "2"], "--gae-lambda must be in [0, 1], got 2.0"),
    ("dqn_jax", ["--end-e", "1.5"], "--end-e must be a probability, in [0, 1], got 1.5"),
])
def test_each_mistake_names_its_own_flag(script, argv, expected, monkeypatch, capsys, tmp_path):
    """Unknown flags are the parser's; ranges are main()'s (before any work): the range checks name the one flag
    that is out of range, not a pair of them."""
    module = load_script(script)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [f"leanrl/{script}.py", *argv])
    with pytest.raises(SystemExit) as stopped:
        module.run(argv)
    assert one_line(stopped.value.code, capsys.readouterr().err, script).endswith(expected)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("script", CHECKED)
def test_save_model_without_the_project_package_is_refused_before_training(script, monkeypatch, capsys, tmp_path):
    """--save-model plays the policy back with leanrl_utils: where it is not installed (a script copied alone), the
    run stops in one line before any work, not after hours of training."""
    import importlib.util

    module = load_script(script)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "leanrl_utils" else find_spec(name, *a))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [f"leanrl/{script}.py", "--save-model"])
    with pytest.raises(SystemExit) as stopped:
        module.run(["--save-model"])
    line = one_line(stopped.value.code, capsys.readouterr().err, script)
    assert "--save-model" in line and "pip install -e ." in line, line
    assert not (tmp_path / "runs").exists()


RATES = {"sac_continuous_action": ["--q-lr", "1e9", "--policy-lr", "1e9"]}


@pytest.mark.parametrize("script", CHECKED)
def test_a_run_that_diverges_stops_itself_in_one_line(script, tmp_path):
    """A learning rate of 1e9 turns the weights into NaN at the first updates: the run stops at once (a loss logged
    as NaN, or a distribution that refuses NaN parameters), with one line naming the step, what is not a finite
    number and the learning rates, exit code 3, and what it logged kept on disk."""
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


def test_every_script_stops_mistakes_the_same_way():
    """One parse_args, one diverged and one stop_if_diverged for every script (the tests above check their
    behaviour on each script's own command line and run)."""
    for name in ("parse_args", "diverged", "stop_if_diverged"):
        sources = {inspect.getsource(getattr(load_script(s), name)) for s in CHECKED}
        assert len(sources) == 1, f"{len(sources)} versions of {name}"
