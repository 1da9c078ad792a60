"""run.sh and the report builder (leanrl_utils/report.py)."""

import importlib.util
import json
import os
import signal
import subprocess

import pytest
from helpers import ENV, REPO, load_script
from torch.utils.tensorboard import SummaryWriter

from leanrl_utils import report
from leanrl_utils.presets import read as read_presets


def fake_run(root, exp_name, seed, sps=(), returns=(), warmup=None, compile=False, cudagraphs=False,
             env_id="HalfCheetah-v4", started=None, t0=1000.0):
    """A run folder as the scripts write it: the hyperparameter table, then scalars at known wall times:
    `charts/start` at `started` (if given), the warm-up at t0 + 5, the i-th episode at t0 + 10 (i + 1), then
    each fps value 10 s after the last episode."""
    writer = SummaryWriter(str(root / "runs" / f"{env_id}__{exp_name}__{seed}__{compile:d}{cudagraphs:d}"))
    params = {"exp_name": exp_name, "seed": seed, "env_id": env_id}
    if exp_name.endswith("_torchcompile"):
        params |= {"compile": compile, "cudagraphs": cudagraphs}
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n%s" % "\n".join(f"|{k}|{v}|" for k, v in params.items()))
    if started is not None:
        writer.add_scalar("charts/start", 0, 0, walltime=started)
    for i, r in enumerate(returns):
        writer.add_scalar("charts/episodic_return", r, 1000 * (i + 1), walltime=t0 + 10 * (i + 1))
    if warmup is not None:
        writer.add_scalar("charts/warmup_time", warmup, 100, walltime=t0 + 5)
    for i, s in enumerate(sps):
        writer.add_scalar("charts/SPS", s, 200 * (i + 1), walltime=t0 + 10 * (len(returns) + i + 1))
    writer.close()


EAGER, FAST = "sac_continuous_action", "sac_continuous_action_torchcompile"
HAS_JAX = importlib.util.find_spec("jax") is not None  # run.sh runs the JAX twins where JAX is installed


def test_table_values_from_known_runs(tmp_path):
    # eager: fps 50, 60, 40 (median 50); returns: the last 5 episodes average 10, 20, 30 (20 ± 10)
    fake_run(tmp_path, EAGER, 1, sps=[10, 50], returns=[-500, 10, 10, 10, 10, 10], warmup=1.0)
    fake_run(tmp_path, EAGER, 2, sps=[60], returns=[20] * 5, warmup=2.0)
    fake_run(tmp_path, EAGER, 3, sps=[40], returns=[30] * 5, warmup=3.0)
    fake_run(tmp_path, FAST, 1, sps=[55], returns=[1] * 5, warmup=1.0)
    fake_run(tmp_path, FAST, 2, sps=[65], returns=[3] * 5, warmup=1.0)
    fake_run(tmp_path, FAST, 1, sps=[100], returns=[7] * 5, warmup=10.0, compile=True)
    fake_run(tmp_path, FAST, 2, sps=[80], returns=[7] * 5, warmup=12.0, compile=True)
    fake_run(tmp_path, FAST, 3, sps=[90], returns=[7] * 5, warmup=14.0, compile=True)
    text = report.build(tmp_path, tmp_path).read_text()
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert rows["| eager script"].startswith("| eager script | 3 | 50.0 | 40.0-60.0 | 1.00x | 20.0 ± 10.0 (1: 10.0, 2: 20.0, 3: 30.0) |")
    assert rows["| optimized, no flag"].startswith("| optimized, no flag | 2 | 60.0 | 55.0-65.0 | 1.20x | 2.0 ± 1.4 (1: 1.0, 2: 3.0) |")
    assert rows["| --compile"].startswith("| --compile | 3 | 90.0 | 80.0-100.0 | 1.80x | 7.0 ± 0.0 (1: 7.0, 2: 7.0, 3: 7.0) |")
    assert rows["| eager script"].endswith(" | 2.0 |") and rows["| --compile"].endswith(" | 12.0 |")  # warm-up
    assert "final return (last 5 episodes; mean ± std over seeds (seed: value))" in text
    assert "--cudagraphs |" not in text  # no such runs: no row
    assert "## sac_continuous_action (HalfCheetah-v4)" in text
    for png in ("fps.png", "return_vs_steps.png", "return_vs_time.png"):
        assert (tmp_path / png).stat().st_size > 1000


def test_the_table_recomputes_from_the_raw_csvs(tmp_path):
    """The report's raw data (scalars/*.csv) holds all its table reads: the same table, rebuilt from the CSVs
    alone, threshold times and wall-clocks included."""
    from leanrl_utils.presets import load

    (tmp_path / "preset.json").write_text(json.dumps(load("cpu")))
    returns = [20.0] * 10 + [300.0] * 10
    fake_run(tmp_path, "dqn", 1, sps=[3000, 3100], returns=returns, warmup=0.1)
    fake_run(tmp_path, "dqn", 2, sps=[2900], returns=returns[::-1], warmup=0.2)
    fake_run(tmp_path, "dqn_torchcompile", 1, sps=[4000], returns=returns, warmup=3.0, compile=True, started=970.0)
    report.build(tmp_path, tmp_path / "out")
    runs, _ = report.find_runs(tmp_path / "runs")
    csvs = sorted((tmp_path / "out" / "scalars").glob("*.csv"))
    assert [p.name for p in csvs] == ["dqn__compile__seed1.csv", "dqn__eager__seed1.csv", "dqn__eager__seed2.csv"]
    again = [report.read_scalars_csv(p) for p in csvs]
    for mode in ("eager", "compile"):
        original = sorted((r for r in runs if r.mode == mode), key=lambda r: r.seed)
        rebuilt = sorted((r for r in again if r.mode == mode), key=lambda r: r.seed)
        assert report.algo_table(rebuilt, 10, 200) == report.algo_table(original, 10, 200)
        assert [r.wall_clock for r in rebuilt] == [r.wall_clock for r in original]


def test_time_to_threshold_and_wall_clock_count_from_the_run_s_start(tmp_path):
    """DQN under the cpu preset (threshold 200 over the last 10 episodes): 10 episodes of 20, then 10 of 300,
    one every 10 s from t0 + 10 s. The mean of the last 10 first reaches 200 at the 17th episode (7 x 300 +
    3 x 20 = 2160), logged at t0 + 170 s; the last log (fps) is at t0 + 210 s. A run that logged its start
    (`charts/start`) 30 s before t0, as a compiling one would, counts from there: 200 and 240 s; a run without
    the marker (older runs) counts from its first log, the warm-up at t0 + 5 s: 165 and 205 s."""
    from leanrl_utils.presets import load

    (tmp_path / "preset.json").write_text(json.dumps(load("cpu")))
    returns = [20.0] * 10 + [300.0] * 10
    fake_run(tmp_path, "dqn", 1, sps=[3000], returns=returns, warmup=0.1)
    fake_run(tmp_path, "dqn_torchcompile", 1, sps=[4000], returns=returns, warmup=3.0, compile=True, started=970.0)
    rows = {line.split(" | ")[0]: line for line in report.build(tmp_path, tmp_path).read_text().splitlines()
            if line.startswith("| ")}
    assert rows["| eager script"].endswith("| 1/1 | 165 | 205 | 0.1 |"), rows["| eager script"]
    assert rows["| --compile"].endswith("| 1/1 | 200 | 240 | 3.0 |"), rows["| --compile"]


def test_unfinished_run_sh_runs_are_left_out(tmp_path):
    """A run in run.sh's layout without its `done` marker (still going, or stopped) is listed, not
    tabled: its curve ends early and would pass for a finished seed."""
    seed = tmp_path / "runs" / EAGER / "eager"
    fake_run(seed / "seed1", EAGER, 1, sps=[50], returns=[1.0] * 5)
    (seed / "seed1" / "done").touch()
    fake_run(seed / "seed2", EAGER, 2, sps=[70], returns=[2.0] * 5)
    text = report.build(tmp_path, tmp_path).read_text()
    assert "| eager script | 1 | 50.0 |" in text
    incomplete = text.split("## Failed or incomplete runs")[1]
    assert "runs/sac_continuous_action/eager/seed2/runs/" in incomplete and "unfinished" in incomplete


def test_partial_failed_and_foreign_runs_are_reported(tmp_path, monkeypatch):
    """A run that logged no fps is listed apart and left out of the table and of the plots (its curve
    would also cut short the plots' common time grid)."""
    fake_run(tmp_path, EAGER, 1, sps=[50], returns=[1, 2])
    fake_run(tmp_path, FAST, 1, returns=[1, 2])  # stopped before its fps window
    (tmp_path / "runs" / "x.failed").write_text("sac_continuous_action_torchcompile (mode compile, seed 1) failed\n")
    writer = SummaryWriter(str(tmp_path / "runs" / "someone_elses_run"))
    writer.add_scalar("loss", 1.0, 0)
    writer.close()
    drawn = []
    plot = report.plot
    monkeypatch.setattr(report, "plot", lambda by_algo, *args: drawn.append(by_algo) or plot(by_algo, *args))
    text = report.build(tmp_path, tmp_path / "out").read_text()
    assert "| eager script | 1 | 50.0 |" in text and "optimized, no flag |" not in text
    assert [(algo, [r.mode for r in runs]) for algo, runs in drawn[0].items()] == [(EAGER, ["eager"])]
    failures = text.split("## Failed or incomplete runs")[1]
    assert "sac_continuous_action none seed 1: no fps logged" in failures
    assert "(mode compile, seed 1) failed" in failures
    assert "someone_elses_run: not a leanrl run" in failures


def test_empty_folder_gives_a_clear_message(tmp_path):
    with pytest.raises(SystemExit, match="no runs found"):
        report.build(tmp_path, tmp_path)
    proc = subprocess.run(["python", "-m", "leanrl_utils.report", str(tmp_path)], cwd=REPO, env=ENV,
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "no runs found" in proc.stderr and "Traceback" not in proc.stderr


def run_sh(*args, timeout=900):
    """run.sh in its own process group, so that a timeout also ends the runs it started."""
    proc = subprocess.Popen(["bash", "run.sh", *args], cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("args,message", [
    (["--frobnicate"], "unknown option '--frobnicate'"),
    (["--scripts", "a2c"], "unknown script 'a2c'"),
    (["--preset", "gpu9"], "unknown preset 'gpu9'"),
    (["--preset", "halfcheetah_1m", "--scripts", "dqn"], "the preset 'halfcheetah_1m' has no 'dqn'"),
    (["--preset", "cpu", "--quick"], "--preset and --quick do not go together"),
    (["--seeds", "one"], "--seeds: 'one' is not"),
    (["--steps", "0"], "--steps: '0' is not a positive integer"),
    (["--out"], "--out needs a value"),
])
def test_run_sh_bad_input(args, message):
    proc = run_sh(*args, timeout=60)  # an input check that lets a run start fails here, not after a run
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_run_sh_refuses_a_missing_report_dependency_before_any_run(tmp_path):
    """matplotlib (the report's plots) hidden from run.sh's Python: one line naming it, exit code 2, before any run
    (before its output folder is made)."""
    hidden = tmp_path / "hidden"
    (hidden / "matplotlib").mkdir(parents=True)
    (hidden / "matplotlib" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = dict(ENV, PYTHONPATH=f"{hidden}:{ENV.get('PYTHONPATH', '')}")
    out = tmp_path / "it's here"
    proc = subprocess.run(["bash", "run.sh", "--quick", "--scripts", "dqn", "--seeds", "1", "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "cannot import matplotlib, which the report needs" in lines[0]
    assert not out.exists()


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_run_sh_takes_an_output_folder_with_a_quote_in_its_name(tmp_path):
    """No value of the command line is pasted into code: a folder named with a quote gets its files (each run
    refused at once here: fewer steps than learning starts)."""
    out = tmp_path / "it's here"
    proc = subprocess.run(["bash", "run.sh", "--quick", "--scripts", "dqn", "--seeds", "1", "--steps", "100", "--out",
                           str(out)], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert json.loads((out / "hardware.json").read_text())["cores"] and (out / "report.md").exists(), proc.stderr


@pytest.mark.slow
def test_run_sh_quick_end_to_end(tmp_path):
    out = tmp_path / "results"
    proc = run_sh("--quick", "--scripts", "ppo_continuous", "--seeds", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (out / "report.md").read_text()
    for row in ("| eager script | 1 |", "| optimized, no flag | 1 |", "| --compile | 1 |") + (("| JAX twin | 1 |",) * HAS_JAX):
        assert row in text, text
    assert "the `--cudagraphs` modes were not run" in text and "skipped (no CUDA device)" in proc.stdout
    assert all((out / p).exists() for p in ("fps.png", "return_vs_steps.png", "return_vs_time.png"))
    again = run_sh("--quick", "--scripts", "ppo_continuous_action", "--seeds", "1", "--out", str(out))
    assert again.returncode == 0 and f"0 runs done, {3 + HAS_JAX} already complete" in again.stdout


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_run_sh_goes_on_with_a_run_stopped_short(tmp_path):
    """Ctrl-C on run.sh (SIGINT to its process group, as a terminal sends it) while its first run, DQN's eager
    script, is past step 3000: the run writes a checkpoint and stops, and run.sh with it (exit code 130). run.sh
    run again goes on with that run from its checkpoint instead of starting it over, and the run ends with the
    logs of a run never stopped."""
    import re
    import time

    from helpers import Run, assert_identical_logs, resumed_step, run_script

    out = tmp_path / "results"
    args = ("--quick", "--scripts", "dqn", "--seeds", "1", "--steps", "20000", "--out", str(out))
    proc = subprocess.Popen(["bash", "run.sh", *args], cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    log, deadline = out / "logs" / "dqn__eager__seed1.log", time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            steps = [int(m) for m in re.findall(r"(\d+)/20000 \[", log.read_text()[-2000:] if log.exists() else "")]
            if steps and max(steps) >= 3000:
                os.killpg(proc.pid, signal.SIGINT)
                break
            time.sleep(0.1)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "stopped at step" in log.read_text(), stdout + stderr + log.read_text()[-2000:]
    again = run_sh(*args)
    assert again.returncode == 0 and "dqn: going on with runs/" in again.stdout, again.stdout + again.stderr
    folder = out / "runs" / "dqn" / "eager" / "seed1"
    assert 3000 <= resumed_step(Run(0, "", log.read_text(), folder)) < 20000
    unbroken = run_script("dqn", "--seed", "1", "--learning-starts", "1000", "--total-timesteps", "20000",
                          cwd=tmp_path / "unbroken").check()
    assert_identical_logs(unbroken, Run(0, "", "", folder))


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_run_sh_reports_failed_runs_and_goes_on(tmp_path):
    out = tmp_path / "results"
    # fewer steps than one PPO batch: every run stops with a usage error
    proc = run_sh("--quick", "--scripts", "ppo_continuous", "--seeds", "1", "--steps", "100", "--out", str(out))
    assert proc.returncode == 1
    runs = 3 + HAS_JAX  # eager, optimized without a flag and with --compile, the JAX twin
    assert proc.stdout.count("--seed ") == runs and "--total-timesteps 2048" not in proc.stdout  # every run was tried
    failures = (out / "report.md").read_text().split("## Failed or incomplete runs")[1]
    assert failures.count("failed with exit code 2") == runs


@pytest.mark.parametrize("name", read_presets())
def test_every_preset_parses(name):
    """Every pair of every preset has a reason, a threshold, and flags that every script of its family that
    the preset runs accepts (tyro parses them, the scripts' input checks pass)."""
    import shlex

    import tyro

    from leanrl_utils.presets import PAIRS, load

    preset = load(name)
    assert preset["description"]
    assert preset["modes"][:2] == ["eager", "compile"] and set(preset["modes"]) <= {"eager", "compile", "jax"}
    assert preset["last_episodes"] >= 5
    twins = ["_torchcompile"] + ["_jax"] * ("jax" in preset["modes"] and HAS_JAX)
    for pair, spec in preset["pairs"].items():
        assert spec["why"] and spec["threshold"] > 0
        for script in [PAIRS[pair]] + [PAIRS[pair] + twin for twin in twins]:
            module = load_script(script)
            args = tyro.cli(module.Args, args=shlex.split(spec["args"]))
            module.check_args(args)  # exits on a bad value
            assert args.env_id in spec["args"]


def test_report_with_the_preset_flags_runs_that_did_not_learn(tmp_path):
    """Synthetic DQN runs under the cpu preset (threshold 200, last 10 episodes): two seeds of each mode
    end above the threshold, one eager seed below it; the table says so, with the time the others took
    to reach it, and the headline plot is the return against wall-clock time."""
    from leanrl_utils.presets import load

    # a pair the preset leaves out, with its reason (the cpu preset itself now runs every pair)
    cpu = load("cpu")
    pairs = {pair: spec for pair, spec in cpu["pairs"].items() if pair != "dqn_atari"}
    preset = {**cpu, "pairs": pairs, "skipped": {"dqn_atari": "too slow here"}}
    (tmp_path / "preset.json").write_text(json.dumps(preset))
    (tmp_path / "command.txt").write_text("bash run.sh --preset cpu --scripts dqn\n")
    for seed, final in ((1, 300.0), (2, 250.0), (3, 50.0)):
        fake_run(tmp_path, "dqn", seed, sps=[3000], returns=[20.0] * 10 + [final] * 10, warmup=0.1)
        fake_run(tmp_path, "dqn_torchcompile", seed, sps=[4000], returns=[20.0] * 10 + [max(final, 220.0)] * 10,
                 warmup=3.0, compile=True)
    text = report.build(tmp_path, tmp_path).read_text()
    assert "Command: `bash run.sh --preset cpu --scripts dqn`" in text and "Preset `cpu`" in text
    # a folder filled by two invocations names both, in order
    (tmp_path / "command.txt").write_text("bash run.sh --preset cpu --scripts dqn\n"
                                          "bash run.sh --preset cpu --scripts dqn --seeds 4\n")
    assert ("Commands, in this order: `bash run.sh --preset cpu --scripts dqn`, then "
            "`bash run.sh --preset cpu --scripts dqn --seeds 4`") in report.build(tmp_path, tmp_path).read_text()
    assert "final return (last 10 episodes; mean ± std over seeds (seed: value)) | reached 200 |" in text
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert "| 2/3 ⚠ not learned: seed 3 (50.0) |" in rows["| eager script"]
    assert "| 3/3 |" in rows["| --compile"]
    assert "Why this task:" in text and "## Not in this preset\n\n- dqn_atari: too slow here" in text
    not_run = text.split("## In the preset, not run")[1].split("##")[0]  # only dqn ran
    assert "- sac (`--env-id InvertedDoublePendulum-v4" in not_run and "dqn" not in not_run
    assert text.index("![return_vs_time]") < text.index("## dqn")


def test_plots_are_a_grid_with_one_legend_outside_the_panels(tmp_path):
    """The report's plots put their panels three to a row (five pairs: two rows) and one legend for all of them
    above the panels, not inside one; --replot draws a committed report's plots again from its CSVs alone."""
    import shutil

    import matplotlib

    matplotlib.use("Agg")
    fig, axes = report.panels(5)
    assert len(axes) == 5 and fig.axes[0].get_gridspec().get_geometry() == (2, 3)
    assert [ax.get_visible() for ax in fig.axes] == [True] * 5 + [False]
    folder = tmp_path / "zen5"
    shutil.copytree(REPO / "docs" / "learning" / "zen5", folder)
    for png in folder.glob("*.png"):
        png.unlink()
    legends, axes_legend = [], matplotlib.axes.Axes.legend
    figure_legend = matplotlib.figure.Figure.legend

    def recording(self, *args, **kwargs):
        legends.append(type(self).__name__)
        return (figure_legend if isinstance(self, matplotlib.figure.Figure) else axes_legend)(self, *args, **kwargs)
    matplotlib.figure.Figure.legend = matplotlib.axes.Axes.legend = recording
    try:
        paths = report.replot(folder)
    finally:
        matplotlib.figure.Figure.legend, matplotlib.axes.Axes.legend = figure_legend, axes_legend
    assert sorted(p.name for p in paths) == ["fps.png", "return_vs_steps.png", "return_vs_time.png"]
    assert all(p.stat().st_size > 0 for p in paths) and legends == ["Figure"] * 3  # one per plot, none in a panel
