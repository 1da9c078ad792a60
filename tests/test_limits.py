"""benchmarks/limits.py's split, without py-spy: a sample's frames go to the category of what the script's
main() was doing, read from the script's own lines. Checked on every single-process script (eager,
optimized, JAX): the line that steps the environments is environment time, the lines that log losses are
logging, the eager scripts' backward passes are update time; frames inside a library decide first."""

import re

import pytest
from helpers import SCRIPT_DIR

from benchmarks.limits import Main, classify
from leanrl_utils.scripts import PAIRS

SCRIPTS = [name for eager in PAIRS.values() for name in (eager, f"{eager}_torchcompile", f"{eager}_jax")
           if (SCRIPT_DIR / f"{name}.py").exists()]


def lines_matching(main: Main, pattern: str) -> list[int]:
    """Lines of main() (not of its closures) whose statement matches."""
    return [n for n, path in main.paths.items() if n == path[-1].lineno and re.search(pattern, main.text(path[-1]))]


def category(script: str, main: Main, line: int, inner: tuple[str, ...] = ()) -> str:
    return classify(["<module> (runpy.py:1)", f"main ({script}.py:{line})", *inner], f"{script}.py", main)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_sample_goes_where_main_was(script):
    main = Main(SCRIPT_DIR / f"{script}.py")
    steps = lines_matching(main, r"\benvs?\.step\(|= rollout\(")
    assert steps, "no line steps the environments"
    expected = "environment + acting" if script == "ppo_atari_envpool_jax" else "environment"
    assert {category(script, main, n) for n in steps} == {expected}
    losses = lines_matching(main, r"writer\.add_scalar\(f?\"losses/")
    assert losses and {category(script, main, n) for n in losses} == {"logging"}
    if script in PAIRS.values():  # CleanRL's layout: the update is written out in main()
        backward = lines_matching(main, r"\.backward\(\)")
        assert backward and {category(script, main, n) for n in backward} == {"update"}
    updates = lines_matching(main, r"= update\(")  # a jitted update, with the JAX DQN twins' buffer writes fused in
    assert {category(script, main, n) for n in updates} <= {"update"}
    if script in ("dqn_jax", "dqn_atari_envpool_jax"):
        assert updates, "the JAX DQN twin's update call was not found"
    # a library's frame decides, wherever main() was
    first = steps[0]
    assert category(script, main, losses[0], ("step (gymnasium/core.py:300)",)) == "environment"
    assert category(script, main, first, ("add_scalar (torch/utils/tensorboard/writer.py:10)",)) == "logging"
    assert classify(["<module> (other.py:1)"], f"{script}.py", main) == "other"
