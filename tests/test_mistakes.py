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
    ("dqn_jax", ["--end-e", "1.5"], "--end-e must be in [0, 1], got 1.5"),
    # the sizes of the first hour's table (issue 59): each against the others, before any work
    ("td3_continuous_action", ["--buffer-size", "10"], "--buffer-size (10) must be >= --batch-size (256)"),
    ("sac_continuous_action_torchcompile", ["--buffer-size", "10"], "--buffer-size (10) must be >= --batch-size (256)"),
    ("dqn", ["--exploration-fraction", "2"], "--exploration-fraction must be in (0, 1], got 2.0"),
    ("ppo_continuous_action", ["--batch-size", "64"], "--batch-size is computed by the script from other flags: leave "
                                                      "it out"),
    ("dqn_atari_envpool", ["--exp-name", "a/b"], "--exp-name 'a/b': it names the run's folder: a name without '/', "
                                                 "'\\' or NUL, of at most 200 bytes"),
    ("td3_continuous_action_jax", ["--seed", "-3"], "--seed must be in [0, 2**32 - 1] (numpy's and gymnasium's seeds), got -3"),
    ("ppo_atari_envpool_torchcompile", ["--async-envs", "--num-envs", "3", "--total-timesteps", "3840"],
     "--async-envs steps the envs in two halves: --num-envs must be even, not 3"),
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


def test_a_pair_stops_a_diverged_run_where_the_contract_says(tmp_path):
    """When each script of a pair stops a run that diverged (CONTRIBUTING.md, "A user's mistakes"): the eager SAC
    samples from a torch.distributions object, whose argument check refuses a NaN parameter at the first sample
    that has one; its optimized twin, whose sample is written out ([no-distribution]) and whose loop reads nothing
    back but at logging steps ([no-sync]), stops at the next logging step, when its losses are read. Both in one
    line, exit code 3; the same weights and draws make the same NaN at the same update."""
    import re

    stops = {}
    for script in ("sac_continuous_action", "sac_continuous_action_torchcompile"):
        run = run_script(script, *SPECS[script].short, *RATES["sac_continuous_action"], cwd=tmp_path / script)
        last = run.stderr.strip().splitlines()[-1]
        assert run.returncode == 3 and ONE_LINE_ERROR.match(last), run.stderr[-2000:]
        stops[script] = (int(re.search(r"error: step (\d+): ", last).group(1)), last)
    (eager, eager_line), (fast, fast_line) = stops.values()
    assert "a distribution's parameters are not finite numbers" in eager_line, eager_line
    assert re.search(r"losses/\w+ is nan", fast_line) and fast % 100 == 0 and eager <= fast < eager + 100, stops


def test_a_budget_that_is_not_whole_batches_says_how_many_steps_run(monkeypatch, capsys, tmp_path):
    """A step budget that is not a whole number of an on-policy iteration's batches runs the whole ones: one line
    says how many steps, before any work (it ran 1920 of 2048 steps without a word)."""
    from leanrl_utils import harness

    module = load_script("ppo_atari_envpool")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["leanrl/ppo_atari_envpool.py"])
    argv = ["--num-envs", "3", "--num-minibatches", "4", "--total-timesteps", "2048"]
    harness.run(lambda args: None, module.Args, module.check_args, argv)
    assert capsys.readouterr().err == ("ppo_atari_envpool.py: --total-timesteps 2048 is not a whole number of batches "
                                       "of 384: 5 iterations, 1920 steps, will run\n")


@pytest.mark.parametrize("where", ["a file", "not writable"])
def test_a_folder_the_run_cannot_write_is_refused_before_the_environment(where, tmp_path):
    """runs/ a file, or a folder the run cannot write (a link to /sys here, which not even root may write): one line
    naming the folder, exit code 2, before the environment is made (no TensorBoard stack trace after it)."""
    runs = tmp_path / "runs"
    if where == "a file":
        runs.write_text("not a folder")
    else:
        runs.symlink_to("/sys")
    run = run_script("dqn", *SPECS["dqn"].short, cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
    last = run.stderr.strip().splitlines()
    assert len(last) == 1 and ONE_LINE_ERROR.match(last[0]) and str(runs) in last[0], run.stderr


def test_a_checkpoint_that_is_not_one_is_refused_in_one_line(tmp_path, capsys):
    """load_policy, and its command line (python -m leanrl_utils.evals), on a file that is no checkpoint (cut short)
    or not one of this project's: one line naming the file, not torch's zip reader's stack trace."""
    import subprocess

    import torch
    from helpers import ENV
    from leanrl_utils import evals

    cut = tmp_path / "cut.pt"
    torch.save({"algo": "dqn", "args": {}}, cut)
    cut.write_bytes(cut.read_bytes()[:100])
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    for path, why in ((cut, "cannot be read"), (foreign, "not a checkpoint of this project"),
                      (tmp_path / "missing.pt", "cannot be read")):
        with pytest.raises(evals.CheckpointError, match=why) as refused:
            evals.load_policy(str(path))
        assert str(path) in str(refused.value) and "\n" not in str(refused.value)
        out = subprocess.run([sys.executable, "-m", "leanrl_utils.evals", str(path)], env=ENV, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert ONE_LINE_ERROR.match(out.stderr) and str(path) in out.stderr, out.stderr


# The command line fuzzed (issue 59): for every script, hypothesis draws values for its flags (numbers at and past
# their declared ranges, nan and infinities, empty and odd strings, unknown tasks), and each command line goes
# through the script's checks (harness.run up to main(), stopped there): each either passes them, within every
# declared range, or ends in one line and exit code 2. Never a stack trace.
class Stopped(Exception):
    """Raised where main() would start: the checks are over."""


def through_the_checks(module, script: str, argv: list[str]):
    """(the parsed args or None, exit code or None, what was said on stderr) of one command line, in-process."""
    import contextlib
    import io

    from leanrl_utils import harness

    def stop(args):
        raise Stopped(args)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            harness.run(stop, module.Args, module.check_args, argv)
        except Stopped as passed:
            return passed.args[0], None, err.getvalue()
        except SystemExit as refused:
            return None, refused.code, err.getvalue()
    raise AssertionError(f"{script} {argv}: main() was reached without the checks' stop")


def within(args, clause: str) -> bool:
    """A declared clause, evaluated here on its own (not by the harness's code, which this checks)."""
    import re

    interval = re.fullmatch(r"in ([\[(])(.+), (.+)([\])])", clause)
    if interval:
        low, high = float(interval[2]), float(interval[3])
        return (low < args[0] if interval[1] == "(" else low <= args[0]) and \
            (args[0] < high if interval[4] == ")" else args[0] <= high)
    op, bound = clause.split(" ")
    limit = args[1].get(bound[2:].replace("-", "_")) if bound.startswith("--") else float(bound)
    return limit is None or eval(f"{args[0]!r} {op} {limit!r}")


def fuzz(script: str, module, examples: int) -> None:
    """Hypothesis over the script's command line; raises on a stack trace, a refusal that is not one line with exit
    code 2, a value outside its declared range that passes, or a number flag that declares no range."""
    import dataclasses

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from leanrl_utils import harness

    ranges = harness.declared_ranges(module.Args)
    fields = {f.name: str(f.type) for f in dataclasses.fields(module.Args)}
    numbers = [n for n, kind in fields.items() if ("int" in kind or "float" in kind) and "list" not in kind]
    bare = [n for n in numbers if n not in ranges and n != "seed"]
    assert not bare, f"{script}: {', '.join(harness.flag(n) for n in bare)} declare(s) no range"
    odd_numbers = ["nan", "inf", "-inf", "-1", "0", "-0.0", "1", "2", "3", "0.5", "1.0000001", "1e-300", "1e300",
                   "255", "256", "2048", "4294967295", "4294967296", "-9999999999", "x", "", "None"]
    odd_strings = ["", " ", "x", "a/b", "a\\b", "\x00", "ü", "x" * 300, "NoSuchEnv-v9", "CartPole-v1", "Pendulum-v1",
                   "HalfCheetah-v4", "Breakout-v5", "Pong-v5", "gloo", "nccl", "-1"]
    value = {name: st.one_of(st.sampled_from(odd_numbers), st.integers(-10**6, 10**6).map(str),
                             st.floats(-1e6, 1e6, allow_nan=False).map(repr))
             if name in numbers else st.sampled_from(odd_strings)
             for name, kind in fields.items() if "bool" not in kind}

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.dictionaries(st.sampled_from(sorted(value)), st.none(), min_size=1, max_size=3).flatmap(
        lambda chosen: st.fixed_dictionaries({name: value[name] for name in chosen})))
    def one(given_values):
        argv = [arg for name, v in given_values.items() for arg in (harness.flag(name), v)]
        args, code, said = through_the_checks(module, script, argv)
        if args is None:
            lines = said.strip().splitlines()
            assert code == 2 and len(lines) == 1 and ONE_LINE_ERROR.match(lines[0]), (argv, code, said)
            return
        assert "Traceback" not in said, (argv, said)
        values = vars(args)
        for name, clauses in ranges.items():
            for clause in clauses:
                if clause != "computed" and values[name] is not None:
                    assert within((values[name], values), clause), f"{script} {argv}: {name}={values[name]} passed, " \
                                                                   f"outside its range ({clause})"

    one()


@pytest.mark.parametrize("script", sorted(SPECS))
def test_the_command_line_fuzzed_ends_in_one_line_or_runs(script, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [f"leanrl/{script}.py"])
    fuzz(script, load_script(script), examples=40)


def test_the_fuzz_finds_a_planted_gap(monkeypatch, tmp_path):
    """The fuzz fails on a script with a planted gap: a flag whose declared range was taken out of its docstring
    (DQN's --exploration-fraction), and a range the harness stopped checking (intervals)."""
    import importlib.util

    from helpers import SCRIPT_DIR
    from leanrl_utils import harness

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["leanrl/dqn.py"])
    text = (SCRIPT_DIR / "dqn.py").read_text()
    planted = tmp_path / "dqn.py"
    planted.write_text(text.replace('go end-e (in (0, 1])"""', 'go end-e"""'))
    assert planted.read_text() != text
    spec = importlib.util.spec_from_file_location("planted_dqn", planted)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # where inspect finds its source (the ranges' docstrings)
    spec.loader.exec_module(module)
    with pytest.raises(AssertionError, match="--exploration-fraction declare"):
        fuzz("dqn", module, examples=5)
    out_of_range = harness.out_of_range
    monkeypatch.setattr(harness, "out_of_range",
                        lambda args, name, clause: None if clause.startswith("in ") else out_of_range(args, name, clause))
    with pytest.raises(AssertionError, match="outside its range"):
        fuzz("dqn", load_script("dqn"), examples=200)
