"""benchmarks/limits/limits.py's split: a sample's frames go to the category of what the script's main() was doing,
read from the script's own lines. Checked on every single-process script (eager, optimized, JAX): the line that
steps the environments is environment time, the lines that log losses are logging, the eager scripts' backward
passes are update time; frames inside a library decide first. And, where py-spy is installed (in the README's
install, requirements-all.txt), one short run sampled from outside as the study samples it."""

import ast
import re
import shutil

import pytest
import torch
from helpers import REPO, SCRIPT_DIR

from benchmarks.limits.limits import CATEGORIES, Main, classify, profile
from leanrl_utils.scripts import PAIRS

SCRIPTS = [name for eager in PAIRS.values() for name in (eager, f"{eager}_torchcompile", f"{eager}_jax")
           if (SCRIPT_DIR / f"{name}.py").exists()]


def lines_matching(main: Main, pattern: str) -> list[int]:
    """Lines of main() (not of its closures, whose own lines are sampled in their frames) whose statement matches."""
    return [n for n, path in main.paths.items() if n == path[-1].lineno and re.search(pattern, main.text(path[-1]))
            and not isinstance(path[-1], (ast.FunctionDef, ast.ClassDef))]


def category(script: str, main: Main, line: int, inner: tuple[str, ...] = ()) -> str:
    return classify(["<module> (runpy.py:1)", f"main ({script}.py:{line})", *inner], f"{script}.py", main)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_sample_goes_where_main_was(script):
    main = Main(SCRIPT_DIR / f"{script}.py")
    steps = lines_matching(main, r"\benvs?\.step\(|= rollout\(")
    assert steps, "no line steps the environments"
    expected = "environment + acting" if script == "ppo_atari_envpool_jax" else "environment"
    assert {category(script, main, n) for n in steps} == {expected}
    losses = lines_matching(main, r"harness\.log_losses\(")
    assert losses and {category(script, main, n) for n in losses} == {"logging"}
    # the update: written out in main() (CleanRL's layout: its backward pass there), or called as a function (the
    # optimized and JAX twins: compiled, jitted, the JAX DQN twins' buffer writes fused in; an eager script shaped
    # as its twin): every such line is update time, and there is one
    backward = lines_matching(main, r"\.backward\(\)") if script in PAIRS.values() else []
    updates = lines_matching(main, r"(?<![\w.])(?<!def )((run_)?update\w*|updates\[[^\]]*\]|train_step)\(")
    if script not in PAIRS.values():
        assert updates, "no call of the update was found in main()"
    assert backward or updates, "no update was found in main(): neither its backward pass nor a call of it"
    assert {category(script, main, n) for n in backward + updates} == {"update"}, \
        {main.lines[n - 1].strip(): category(script, main, n) for n in backward + updates}
    # a library's frame decides, wherever main() was
    first = steps[0]
    assert category(script, main, losses[0], ("step (gymnasium/core.py:300)",)) == "environment"
    assert category(script, main, first, ("add_scalar (torch/utils/tensorboard/writer.py:10)",)) == "logging"
    assert classify(["<module> (other.py:1)"], f"{script}.py", main) == "other"
    # the harness: its run() calls main() (an outer frame that decides nothing), and its writer and progress bar,
    # called from main(), are logging
    outer = ["<module> (runpy.py:1)", "run (leanrl_utils/harness.py:400)", f"main ({script}.py:{first})"]
    assert classify(outer, f"{script}.py", main) == category(script, main, first)
    assert classify(outer + ["tick (leanrl_utils/harness.py:350)"], f"{script}.py", main) == "logging"


def test_hard_bound_and_attainable_reference():
    """The two figures per pair and mode, from their definitions: seconds per step add up, fps is their
    inverse (here 1 ms of environment, then 10 ms of FLOPs at the peak or 2 pieces' best times)."""
    from benchmarks.limits.limits import attainable, hard_bound

    assert hard_bound(env_sps=1000, flops=1e9, peak=1e11) == pytest.approx(1 / (1e-3 + 1e-2))
    pieces = {"update(policy_step=True)": {"calls_per_step": 0.5, "best_s": 8e-3},
              "update(policy_step=False)": {"calls_per_step": 0.5, "best_s": 4e-3}, "act": {"calls_per_step": 1, "best_s": 1e-4}}
    assert attainable(1000, pieces) == pytest.approx(1 / (1e-3 + 4e-3 + 2e-3 + 1e-4))


def test_the_peak_is_above_what_this_machine_measures():
    """The hard bound's peak (cores x FLOPs per cycle x clock) holds: a float32 matmul timed here, with the
    scripts' threads, runs under it (a peak below a measurement would be no bound)."""
    from torch.utils.benchmark import Timer

    from benchmarks.limits.limits import theoretical_peak

    peak = theoretical_peak()
    a = torch.randn(512, 512)
    seconds = Timer("a @ a", globals={"a": a}, num_threads=torch.get_num_threads()).blocked_autorange(min_run_time=0.5).median
    assert 2 * 512**3 / seconds < peak["flops"], peak
    assert peak["clock_hz"] > 5e8 and peak["flops_per_cycle"] >= 8, peak


def test_the_clock_probe_reads_the_clock_a_second_way():
    """The peak's clock, from a chain of dependent additions of a register (one a cycle), agrees with a chain
    of dependent multiplications (three cycles each on x86 cores): additions of a constant, which some cores
    fold several to a cycle, read 19 GHz on one of them and made the peak five times too high."""
    import platform
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    from benchmarks.limits.limits import CLOCK_PROBE, theoretical_peak

    if platform.machine() not in ("x86_64", "AMD64") or not shutil.which("gcc"):
        pytest.skip("the probe is x86 assembly built with gcc")
    multiply = CLOCK_PROBE.replace("add %1, %0", "imul %1, %0").replace("8.0 * n", "3 * 8.0 * n")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "mul.c").write_text(multiply)
        subprocess.run(["gcc", "-O2", "-o", f"{tmp}/mul", f"{tmp}/mul.c"], check=True)
        by_multiplying = max(float(subprocess.run([f"{tmp}/mul"], capture_output=True, text=True).stdout) for _ in range(3))
    clock = theoretical_peak()["clock_hz"]
    assert 0.8 < clock / by_multiplying < 1.25, (clock, by_multiplying)


def test_pieces_are_timed_per_kind_of_call(tmp_path):
    """The attainable reference's recorder: run as a script's launcher, it times every call of every function
    the script compiles, apart per kind of call (the arguments that are not tensors), with each call's start."""
    import json
    import subprocess
    import sys
    import time

    from benchmarks.limits.limits import LAUNCHER

    script = tmp_path / "script.py"
    script.write_text("import time, torch\n"
                      "def step(x, twice: bool):\n    time.sleep(0.01 if twice else 0.002)\n    return x * 2 if twice else x + 1\n"
                      "step = torch.compile(step)\n"
                      "for i in range(6):\n    step(torch.ones(3), twice=i % 3 == 0)\n")
    out, before = tmp_path / "calls.json", time.time()
    subprocess.run([sys.executable, "-c", LAUNCHER, str(out), str(script)], check=True, cwd=tmp_path, timeout=300)
    calls = json.loads(out.read_text())
    assert {k: len(v) for k, v in calls.items()} == {"step(twice=True)": 2, "step(twice=False)": 4}
    starts = sorted(wall for v in calls.values() for wall, _ in v)
    assert before < starts[0] and starts == sorted(set(starts)) and starts[-1] < time.time()
    # each call's duration holds its sleep (the compiled function's first call holds its compilation too)
    assert min(s for _, s in calls["step(twice=True)"]) >= 0.01 and min(s for _, s in calls["step(twice=False)"]) >= 0.002


def test_fps_and_pieces_come_from_one_window():
    """The profiled run's fps over the py-spy window from its own charts/SPS points, and its pieces' calls per
    step and best times from the calls that started between the same two points."""
    from benchmarks.limits.limits import pieces_in_window, window_fps

    sps = [(100, 9.0, 0.0), (200, 10.0, 0.0), (400, 12.0, 0.0), (700, 14.0, 0.0), (800, 20.0, 0.0)]
    fps, (first, last) = window_fps(sps, start=9.5, end=15.0)  # the points at 10 s and 14 s
    assert fps == pytest.approx((700 - 200) / (14 - 10)) and first == (200, 10.0) and last == (700, 14.0)
    calls = {"update": [(9.9, 1.0), (10.5, 0.004), (11.0, 0.003), (13.9, 0.005), (14.5, 0.001)],
             "act": [(12.0, 0.0002)] * 50}
    pieces = pieces_in_window(calls, first, last)
    assert pieces == {"update": {"calls_per_step": 3 / 500, "best_s": 0.003}, "act": {"calls_per_step": 50 / 500, "best_s": 0.0002}}
    with pytest.raises(SystemExit, match="fewer than two"):
        window_fps(sps, start=10.5, end=13.0)


def test_a_reference_that_a_run_beat_is_given_no_percentage():
    """The attainable reference is a time the pieces can reach: a run measured above it shows it is not one,
    and results.md then gives no percentage of it (the hard bound's percentage stays); the ms per step are the
    shares of the profiled run's own step, and the speed table's fps sit beside it with their share of the bound."""
    from benchmarks.limits.limits import render

    def row(fps):
        return {"pair": "p", "mode": "compile", "fractions": dict(zip(CATEGORIES, (0.5, 0.1, 0, 0.1, 0.2, 0.1, 0))),
                "fps": fps, "samples": 9, "flops_per_step": 1e6, "flops_counted_on": "s", "bound_fps": 1000.0,
                "reference_fps": 300.0, "speed_table_fps": 250.0, "pieces": {}}
    data = {"threads": 2, "peak": {"cores": 2, "flops_per_cycle": 64, "per_cycle_why": "w", "clock_hz": 4e9,
                                   "clock_how": "h", "flops": 5.12e11},
            "measured_rates": {"matmul": 1e11, "matmul_xla": 2e11, "conv": 1e11}, "env_sps": {"p": 5000.0}}
    below = render(data | {"rows": [row(240.0)]}, speed=True)
    # 240 fps: 4.167 ms a step, half of it the environment, a fifth the update
    assert "| 300 | 240 | 24% | 80% | 250 | 25% | 2.083 | 0.417 | 0.000 | 0.417 | 0.833 | 0.417 | 0.000 | 9 |" in below
    above = render(data | {"rows": [row(330.0)]}, speed=True)
    assert "| not one | 330 | 33% | ran above it: no reference | 250 | 25% |" in above
    assert "110%" not in above


def test_the_split_is_a_grid_with_one_legend_and_no_bar_touching_the_frame(tmp_path, monkeypatch):
    """--replot draws split.png again from a committed results.json alone: the six pairs three to a row, one
    legend for the figure (none inside a panel), and each panel's top above its tallest bar and marks."""
    import json
    import shutil

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.limits import limits

    shutil.copy(REPO / "docs" / "limits" / "results.json", tmp_path / "results.json")
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))  # keep the figure to look at
    monkeypatch.setattr("sys.argv", ["limits", "--replot", str(tmp_path)])
    limits.main()
    close("all")
    assert (tmp_path / "split.png").stat().st_size > 0 and len(figures) == 1
    fig = figures[0]
    shown = [ax for ax in fig.axes if ax.get_visible()]
    pairs = list(dict.fromkeys(r["pair"] for r in rows))
    assert [ax.get_title() for ax in shown] == pairs
    assert fig.axes[0].get_gridspec().get_geometry() == (2, 3)
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    for ax in shown:
        top = max(p.get_y() + p.get_height() for p in ax.patches)
        assert ax.get_ylim()[1] > 1.02 * top, ax.get_title()


@pytest.mark.skipif(shutil.which("py-spy") is None,
                    reason="py-spy: pip install -r requirements/requirements-all.txt")
def test_a_run_is_sampled_from_outside_by_py_spy():
    """DQN on CartPole, learning from step 500, sampled for 2 seconds once its warm-up is over, then stopped
    with a Ctrl-C: its main thread's samples split into the categories, and the window's fps come from the
    run's own charts/SPS points."""
    result = profile("dqn", ["--env-id", "CartPole-v1", "--total-timesteps", "10000000", "--learning-starts", "500"],
                     seconds=2, rate=100, timeout=120)
    assert result["samples"] > 50 and sum(result["fractions"].values()) == pytest.approx(1)
    assert result["fractions"]["environment"] > 0 and result["fractions"]["update"] > 0, result["fractions"]
    assert result["fps"] > 0 and result["window_steps"] >= 200, result
