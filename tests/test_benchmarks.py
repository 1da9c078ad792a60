"""Smoke tests of the benchmark commands whose figures the README quotes: each runs at a tiny size
and prints the table it is read for, so that a refactor cannot silently break one."""

import json
import re
import statistics
import subprocess
import sys

import pytest
from helpers import ENV, REPO

from benchmarks.optimizations import parts
from benchmarks.compile_scope.compile_scope import DDP_VARIANTS


def bench(*args, timeout=600):
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def table_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("|") and not line.startswith("|---")]


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_sps_benchmark(tmp_path):
    """Two configurations, two rounds: the table's fps is the median of what the runs logged, its ratio the
    median of the rounds' ratios (each round's fps over the first configuration's in the same round), and
    every run's logged fps and warm-up are in results.json."""
    out = bench("-m", "benchmarks.sps", "--rounds", "2", "--steps", "256", "--env-id", "Pendulum-v1",
                "--args=--num-steps 64 --num-minibatches 2 --update-epochs 1", "--out", str(tmp_path),
                "ppo_continuous_action", "OMP_NUM_THREADS=1 ppo_continuous_action_torchcompile")
    rows = table_rows(out)  # a configuration may start with NAME=value words: its run's environment
    fast_name = "OMP_NUM_THREADS=1 ppo_continuous_action_torchcompile"
    assert [r[0] for r in rows[1:]] == ["`ppo_continuous_action`", f"`{fast_name}`"], out
    runs = json.loads((tmp_path / "results.json").read_text())["runs"]
    eager, fast = ([r["sps"] for r in runs[c]] for c in ("ppo_continuous_action", fast_name))
    assert len(eager) == len(fast) == 2 and min(eager + fast) > 0
    assert float(rows[2][1]) == round(statistics.median(fast), 1)
    assert rows[2][3] == f"{statistics.median([f / e for f, e in zip(fast, eager)]):.2f}x"
    assert rows[2][4] == ", ".join(f"{f / e:.2f}" for f, e in zip(fast, eager))
    assert rows[1][5] == "first" and rows[2][5] in ("faster", "tie", "slower")
    assert (tmp_path / "results.md").read_text().startswith("Command: `python -m benchmarks.sps --rounds 2")


def test_speed_summary_is_computed_from_the_rounds(tmp_path):
    """docs/speed.md's table, from a sitting's results.json: each mode's median fps, its median ratio to eager
    over the rounds and its verdict by the tie rule, and --compile against JAX the same way (a made-up
    sitting of one family, where --compile ties with eager and beats JAX on every round)."""
    from benchmarks.sps import summary

    def runs(*fps):
        return [{"sps": x, "warmup": 1.5, "wall": 9.0} for x in fps]
    data = {"runs": {"sac_continuous_action": runs(100, 110, 90), "sac_continuous_action_torchcompile": runs(120, 99, 95),
                     "sac_continuous_action_torchcompile --compile": runs(200, 220, 210),
                     "sac_continuous_action_jax": runs(150, 230, 140)}}
    (tmp_path / "sac").mkdir()
    (tmp_path / "sac" / "results.json").write_text(json.dumps(data))
    row = table_rows(summary(tmp_path))[1]
    assert row[:2] == ["SAC", "100.0"]
    assert row[2] == "99.0 (1.06x, tie)"  # ratios 1.20, 0.90, 1.06: their median
    assert row[3] == "210.0 (2.00x, faster)" and row[5] == "150.0 (1.56x, faster)"
    assert row[7] == "1.33x" and row[8] == "tie"  # 200/150, 220/230, 210/140; the ranges overlap


def test_envpool_async_benchmark(tmp_path):
    out = bench("-m", "benchmarks.optimizations.envpool_async", "--steps", "32", "--rounds", "2", "--num-envs", "2", "--out", str(tmp_path))
    rows = table_rows(out)
    assert [r[0] for r in rows[1:]] == ["sync (step all, then act)", "async (two halves)"]
    fps = json.loads((tmp_path / "results.json").read_text())["fps"]
    sync, both = fps["sync (step all, then act)"], fps["async (two halves)"]
    assert float(rows[2][1]) == round(statistics.median(both)) and min(sync + both) > 0
    assert rows[2][3] == f"{statistics.median([a / s for a, s in zip(both, sync)]):.2f}x"


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_same_run_benchmark(tmp_path):
    """The halves against one pool, and the twin without and with --async-envs, tiny: every step and every logged value
    counted, the runs' tags all there."""
    bench("-m", "benchmarks.optimizations.same_run", "--num-envs", "2", "--steps", "100", "--run-steps", "128",
          "--num-steps", "32", "--out", str(tmp_path))
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["envs"] == {"steps": 100, "agreed": 100}  # at 20 steps two alike-seeded games may not part yet
    rows = data["runs"][""]
    assert {"losses/value_loss", "charts/learning_rate"} <= set(rows) and "charts/SPS" not in rows, sorted(rows)
    assert all(r["values"] == r["values_async"] > 0 and 0 <= r["identical"] <= r["values"] for r in rows.values()), rows


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_checkpoints_benchmark(tmp_path):
    """DQN's row, measured as the study measures every script: the writes after the first, each timed around the
    run's own Checkpoint.save; the file's size that of the checkpoint the run left; the share the write's median
    seconds over the seconds the run's fps takes for --checkpoint-every's default steps."""
    from leanrl_utils import checkpoints

    out = bench("-m", "benchmarks.checkpoints", "--only", "dqn", "--out", str(tmp_path))
    data = json.loads((tmp_path / "results.json").read_text())
    row = data["runs"]["dqn"]
    assert len(row["write_s_all"]) >= 3 and row["write_s"] == pytest.approx(statistics.median(row["write_s_all"]), abs=1e-4)
    assert row["share"] == pytest.approx(row["write_s"] * row["sps"] / data["default_every"])
    assert data["default_every"] == checkpoints_default()
    assert 1e5 < row["bytes"] < 1e7 and row["sps"] > 0 and row["read_s"] > 0, row  # DQN's buffer of 10000 rows
    assert table_rows(out)[1][0] == "dqn" and checkpoints.FILE


def checkpoints_default() -> int:
    """--checkpoint-every's default, as the scripts' flags declare it."""
    from leanrl_utils.harness import RunFlags

    return RunFlags().checkpoint_every


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_inference_benchmark(tmp_path):
    """One tiny configuration per policy: eager, inductor, and a backend that does not exist. Every row
    has its fields; inductor's outputs equal eager's (same seed; on the CPU compiled code draws eager's
    random numbers); the failing arm is a row with its error, and the sweep goes on."""
    bench("-m", "benchmarks.inference", "--batch-sizes", "2", "--dtypes", "float32", "--arms", "eager,inductor default,no_such_backend",
          "--extra-backends", "no_such_backend", "--rounds", "1", "--min-calls", "3", "--round-time", "0.01",
          "--out", str(tmp_path), timeout=1200)
    result = json.loads((tmp_path / "results.json").read_text())
    rows = {(r["policy"], r["arm"]): r for r in result["rows"]}
    policies = ("atari", "ppo_mlp", "sac", "td3", "dqn", "dqn_module")
    assert {p for p, _ in rows} == set(policies)
    for policy in policies:
        eager, compiled, broken = (rows[policy, arm] for arm in ("eager", "inductor default", "no_such_backend"))
        for row in (eager, compiled):
            assert row["status"] == "ok" and row["calls"] >= 3 and row["matches_eager"] == "yes", row
        # the compiled arm compiled a graph at its first call, and the timed calls ran it: its first call
        # (the compilation) took far longer than its timed calls; eager compiled nothing
        assert eager["graphs"] == 0 and compiled["graphs"] >= 1, (eager, compiled)
        assert compiled["compile_s"] > 10 * compiled["p50_ms"] / 1e3, compiled
        assert all(r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] for r in (eager, compiled)), (eager, compiled)
        # the table shows the compiled arm's p50 and its speed-up over eager's p50, as the raw rows have them
        cell = f"{compiled['p50_ms']:.3g} ({eager['p50_ms'] / compiled['p50_ms']:.2f}x)"
        assert cell in (tmp_path / "results.md").read_text(), (policy, cell)
        assert broken["status"] == "failed" and "no_such_backend" in broken["error"], broken
    assert "## atari, float32" in (tmp_path / "results.md").read_text() and (tmp_path / "speedup.png").exists()


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_compile_scope_benchmark(tmp_path):
    """Every question's variants at a tiny size: SAC's critic update on batches of 4 (its scope table has the
    variants that patch dynamo's settings), compiled with aot_eager (seconds per variant; the study uses
    inductor). Every variant ran, its loss and gradients match eager's, each compiled variant compiled a
    graph of its own at its first call (a variant handed another's graph, as when all ran in one process,
    compiles none), and none compiled while it was timed (the benchmark stops if one does); the DDP
    question's processes end by themselves within their timeout."""
    bench("-m", "benchmarks.compile_scope", "--workloads", "sac_critic", "--batch", "4", "--backend", "aot_eager",
          "--rounds", "2", "--min-calls", "4", "--round-time", "0.01", "--variant-timeout", "300", "--out", str(tmp_path),
          timeout=900)
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    variants = {(r["question"], r["variant"]): r for r in rows}
    assert {v for q, v in variants if q == "ddp"} == set(DDP_VARIANTS)
    assert {q for q, _ in variants} == {"scope", "amp", "device", "ddp"}
    for (question, name), r in variants.items():
        if "CUDA" in r["detail"] or name == "the networks: torch.compile(module)":  # the latter fails on SAC's critic
            assert r["status"] == ("not measured" if "CUDA" in r["detail"] else "failed"), r
            continue
        assert r["status"] == "ok" and r["calls"] >= 4, r
        assert r["matches_eager"].startswith(("yes", "not compared")), r
        compiled = question != "scope" or name.strip().startswith(("the loss", "loss +", "same", "whole step"))
        if compiled and name not in ("no DDP (each process alone)", "eager DDP (the reference)"):
            assert r["graphs"] >= 1, f"{name}: compiled no graph of its own"
    table = (tmp_path / "results.md").read_text()
    assert all(f"| {name} |" in table for _, name in variants)


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_parts_benchmark(tmp_path):
    """Every piece's variants are timed, and each row of the table is what its raw times in results.json
    say: the median per call, the min-max, the median over the first variant's median."""
    out = bench("-m", "benchmarks.optimizations.parts", "--rounds", "2", "--round-time", "0.01", "--frames", "4", "--out", str(tmp_path))
    raw = json.loads((tmp_path / "results.json").read_text())["seconds per call"]
    names = [list(v) for v in raw.values()]  # the default thread count is the test process's (ENV may set it)
    assert names[0] == ["eager", "compiled"] and names[2] == ["contiguous (NCHW)", "channels-last (the script)"]
    assert names[1][0].endswith("(torch's default)") and names[1][1] == "1 thread", names
    expected = []
    for title, variants in raw.items():
        first = statistics.median(next(iter(variants.values())))
        expected.append([title, "median per call", "min-max", "vs first"])
        for name, times in variants.items():
            assert len(times) >= 2 and all(t > 0 for t in times), (name, times)
            med = statistics.median(times)
            expected.append([name, parts.fmt(med), f"{parts.fmt(min(times))}-{parts.fmt(max(times))}",
                             f"{med / first:.2f}x"])
    assert table_rows(out) == expected
    assert table_rows((tmp_path / "results.md").read_text()) == expected


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_torchrun_benchmark(tmp_path):
    """One rank and two (torchrun on loopback, tiny runs), then the pieces measured in 1 and 2 spawned
    processes: the scaling efficiency of 2 ranks is their median fps over twice the median of 1 rank."""
    out = bench("-m", "benchmarks.torchrun", "--ranks", "1,2", "--modes", "eager", "--iterations", "2",
                "--rounds", "1", "--num-envs", "2", "--num-steps", "16", "--env-steps", "16", "--out", str(tmp_path),
                timeout=600)
    rows = table_rows(out)
    scaling = {r[0]: r for r in rows if len(r) == 5 and r[1] == "eager"}
    fps = json.loads((tmp_path / "results.json").read_text())["fps"]
    one, two = statistics.median(fps["1 eager"]), statistics.median(fps["2 eager"])
    assert scaling["1"][4] == "1.00" and scaling["2"][4] == f"{two / (2 * one):.2f}" and one > 0 and two > 0
    pieces = {r[0]: r for r in rows if len(r) == 4 and r[0] in ("1", "2")}
    assert set(pieces) == {"1", "2"} and all(float(v) > 0 for v in pieces["2"][1:])


def test_dqn_atari_buffer_benchmark():
    rows = table_rows(bench("-m", "benchmarks.dqn_atari_buffer", "--size", "20000"))
    assert rows[1][:3] == ["dqn_atari_envpool", "20000", "7081"], rows
    assert float(rows[1][4].split()[0]) >= 0.9 * float(rows[1][3].split()[0]) > 0  # the pages were written


def test_sps_verdict_follows_the_tie_rule():
    """Faster or slower only when the min-max ranges do not overlap; overlapping ranges are a tie."""
    from benchmarks.sps import verdict

    assert verdict([3.0, 4.0], [1.0, 2.0]) == "faster"
    assert verdict([1.0, 1.2], [2.0, 3.0]) == "slower"
    assert verdict([1.0, 2.5], [2.0, 3.0]) == "tie" and verdict([2.0, 2.1], [1.0, 3.0]) == "tie"
    assert verdict([2.0, 3.0], [1.0, 2.0]) == "tie"  # touching ranges are not apart


def test_sps_sets_a_constant_the_script_declares_not_the_environment():
    """A configuration's leading NAME=value words set the run's environment, but for a constant its script declares
    (COMPILED_ACTING: a flag-free choice, compared without editing the script), set on the script as a tuple of the
    value's comma-separated words; the script then runs with that value (its main() is handed the flags)."""
    import subprocess
    import sys

    from benchmarks.sps import WITH_CONSTANTS, split_config

    assert split_config("OMP_WAIT_POLICY=PASSIVE COMPILED_ACTING=cuda,cpu td3_continuous_action_torchcompile --compile") \
        == ({"OMP_WAIT_POLICY": "PASSIVE"}, {"COMPILED_ACTING": ("cuda", "cpu")}, "td3_continuous_action_torchcompile",
            ["--compile"])
    assert split_config("COMPILED_ACTING=cuda dqn --seed 2") == ({"COMPILED_ACTING": "cuda"}, {}, "dqn", ["--seed", "2"])
    seen = ("from leanrl_utils import harness\nharness.run = lambda main, Args, check, argv: "
            "print(main.__globals__['COMPILED_ACTING'], argv)\n")
    out = subprocess.run([sys.executable, "-c", seen + WITH_CONSTANTS, "td3_continuous_action_torchcompile",
                          repr({"COMPILED_ACTING": ("cuda", "cpu")}), "--compile"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.stdout.strip() == "('cuda', 'cpu') ['--compile']", out.stderr[-2000:]


def test_one_name_per_study():
    """A study X is the package benchmarks/X/ (its modules and shell scripts), its outputs in docs/X/ and its page
    docs/X.md: every page has its folder of outputs and its package, and every folder of outputs and every package its
    page (but quoted.md, which measures nothing, and rules.md, which gathers the studies' rules); benchmarks/ holds
    nothing else but the modules the studies share."""
    docs = REPO / "docs"
    pages = {p.stem for p in docs.glob("*.md")}
    folders = {p.name for p in docs.iterdir() if p.is_dir()}
    assert folders - pages == set(), "an output folder with no page of its name"
    assert pages - folders == {"quoted", "rules"}, "a page with no output folder of its name"
    bench = REPO / "benchmarks"
    studies = {p.name for p in bench.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert studies - pages == set(), "a study's package with no page of its name"
    assert pages - studies == {"quoted", "rules"}, "a page with no study's package of its name"
    assert {p.name for p in bench.iterdir() if p.is_file()} == {"__init__.py", "common.py", "sps.py"}, \
        "a file in benchmarks/ that is neither a study's (in its package) nor shared"
    for study in studies:
        assert (bench / study / "__init__.py").is_file(), f"benchmarks/{study}/ is no package"
        kept = [p.name for p in (bench / study).iterdir() if p.name != "__pycache__"]
        assert all(name.endswith((".py", ".sh")) for name in kept), f"benchmarks/{study}/: {sorted(kept)}"


def test_a_results_file_records_the_command_as_typed(monkeypatch):
    """A study run as its package (`python -m benchmarks.X`, whose __main__.py Python runs) records that command, not
    `benchmarks.X.__main__`; a part records its own module, the arguments quoted as a shell reads them."""
    from benchmarks import common

    for path, typed in (("benchmarks/gpu/__main__.py", "python -m benchmarks.gpu"),
                        ("benchmarks/limits/step.py", "python -m benchmarks.limits.step"),
                        ("benchmarks/sps.py", "python -m benchmarks.sps")):
        monkeypatch.setattr(sys, "argv", [str(REPO / path), "--out", "a b"])
        assert common.command_line() == f"{typed} --out 'a b'"


QUOTED_MODULE = re.compile(r"python3? -m\s+(benchmarks[\w.]*)")  # a command, as the pages and outputs quote it
QUOTED_PATH = re.compile(r"(?<![\w/.-])(benchmarks/[\w/.-]*?\.(?:py|sh))\b")  # a file: `bash benchmarks/X/X.sh`, ...


def quoted_benchmarks() -> list[tuple[str, str, bool]]:
    """(where, what, is_module) for every benchmark module run with `python -m` and every file of benchmarks/ named in
    README.md, CONTRIBUTING.md, the pages and the committed outputs under docs/ (their .md, .json and .sh files; not
    their logs, which keep what was printed), placeholders left out (`benchmarks.X`, `benchmarks/X/X.sh`,
    `benchmarks.X.<part>`)."""
    docs = REPO / "docs"
    files = [REPO / "README.md", REPO / "CONTRIBUTING.md",
             *sorted(p for p in docs.rglob("*") if p.suffix in (".md", ".json", ".sh"))]
    quoted = []
    for path in files:
        text = path.read_text()
        for pattern, is_module in ((QUOTED_MODULE, True), (QUOTED_PATH, False)):
            for m in pattern.finditer(text):
                name = m.group(1).rstrip(".")
                if name.lower() != name or text[m.end(1):m.end(1) + 1] == "<":
                    continue
                line = text.count("\n", 0, m.start()) + 1
                quoted.append((f"{path.relative_to(REPO)}:{line}", name, is_module))
    return quoted


def test_quoted_benchmarks_exist():
    """Every `python -m benchmarks...` that the README, CONTRIBUTING.md, a page or a committed output quotes names a
    module that `python -m` runs (a package by its __main__.py), and every file of benchmarks/ they name (`bash
    benchmarks/gpu/gpu.sh`, ...) is there: a study moved or renamed leaves no command that no longer runs. (An output
    made by a module under an earlier name quotes the module's name of today: the command that makes it again.)"""
    import importlib.util

    def runnable(module: str) -> bool:
        try:
            spec = importlib.util.find_spec(module)
            return spec is not None and (spec.submodule_search_locations is None or
                                         importlib.util.find_spec(f"{module}.__main__") is not None)
        except ModuleNotFoundError:  # a parent package that is not there
            return False

    quoted = quoted_benchmarks()
    assert len({name for _, name, is_module in quoted if is_module}) >= 10, quoted  # the pages' commands were read
    stale = [f"{where}: {'python -m ' if is_module else ''}{name}" for where, name, is_module in quoted
             if not (runnable(name) if is_module else (REPO / name).is_file())]
    assert stale == [], f"{len(stale)} quoted benchmarks that are not there:\n" + "\n".join(stale)


@pytest.mark.slow
def test_gpu_learning_run_stops_only_a_run_still_running(tmp_path, monkeypatch):
    """The GPU sitting's learn part (benchmarks/gpu/gpu.py) on the CPU, tiny, twice. An eager run that cannot end within
    the compiled run's time (ten times its steps) is stopped with a Ctrl-C once its writer is open, and exits by
    itself, its logs kept (exit 130); an eager run that ends well before its time (fewer steps, two minutes allowed)
    is never signalled (exit 0). Both are certain whatever the machine's speed: the old part signalled a run that
    had just finished, and it died of the SIGINT in its shutdown (exit -2), once in CI. This process ignores SIGINT
    meanwhile, as a command started in the background by a shell without job control does: the runs get it back."""
    import signal

    from benchmarks.gpu import gpu

    monkeypatch.setattr(gpu, "MAIN_JOB", ["sac_continuous_action_torchcompile", "--cudagraphs"])  # no compiling
    monkeypatch.setattr(gpu, "TINY_TASK", ["--env-id", "Pendulum-v1", "--learning-starts", "100"])
    sitting = gpu.Sitting(tmp_path, budget=900, tiny=True)
    # no CUDA, one thread: tiny runs, which spinning threads on a loaded CPU slow down several times
    sitting.env = {k: v for k, v in ENV.items() if k != "MUJOCO_GL"} | {"OMP_NUM_THREADS": "1"}
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        gpu.learn(sitting, steps=250, eager_steps=2500)
        stopped = json.loads((tmp_path / "learning.json").read_text())
        gpu.learn(sitting, steps=250, eager_steps=150, stop_after=120)
        ended = json.loads((tmp_path / "learning.json").read_text())
    finally:
        signal.signal(signal.SIGINT, previous)
    for run in (stopped["compiled"], ended["compiled"]):
        assert run["returncode"] == 0 and not run["stopped"] and run["last_step"] >= 200, run
        assert "charts/episodic_return" in run["scalars"] and run["scalars"]["charts/start"]
    assert stopped["eager"]["stopped"] and stopped["eager"]["returncode"] == 130, stopped["eager"]["stderr_tail"]
    assert stopped["eager"]["scalars"]["charts/start"] and stopped["eager"]["last_step"] < 2500
    assert not ended["eager"]["stopped"] and ended["eager"]["returncode"] == 0, ended["eager"]["stderr_tail"]
    log = (tmp_path / "sitting.log").read_text()
    assert "sac_continuous_action.py --env-id Pendulum-v1 --learning-starts 100 --total-timesteps 2500, stopped by " \
           "a Ctrl-C after" in log, log
    assert "eager: exit 130 after its Ctrl-C" in log and "eager: exit 0, " in log, log


def test_gpu_speed_table_is_computed_from_the_rounds():
    """The GPU speed table from made-up rounds: per pair and GPU, medians over the rounds that measured a mode, ratios
    to eager over the rounds that measured both (each round on one machine), --compile --cudagraphs against JAX by
    the tie rule, a failure named, LeanRL's H100 figures beside; another GPU's rounds in a row of their own."""
    from benchmarks.gpu.gpu import speed_table

    def rnd(gpu, eager, best, jax, compiled=None):
        runs = {"eager": {"sps": eager}, "compile+cudagraphs": {"sps": best}, "jax": {"sps": jax},
                "compile": {"sps": compiled} if compiled else {"error": "boom\nmore"}}
        return {"machine": f"{gpu}-host", "gpu": gpu, "runs": runs}
    data = {"pairs": {"sac": {"steps": 7000, "rounds": [rnd("H100", 100, 300, 200), rnd("H100", 120, 480, 210),
                                                        rnd("H200", 150, 600, 300, compiled=450)]}}}
    rows = table_rows(speed_table(data))
    assert rows[0][2:] == ["eager", "`--compile`", "`--compile --cudagraphs`", "JAX", "`--compile --cudagraphs` / JAX",
                           "`--compile --cudagraphs` against JAX",
                           "LeanRL, one H100: eager / `--compile` / `--compile --cudagraphs`"], rows[0]
    h100, h200 = rows[1], rows[2]
    assert h100[:3] == ["sac (7000 steps)", "H100", "110.0 (2 rounds)"] and h100[3] == "failed: boom"
    assert h100[4] == "390.0 (2 rounds, 3.50x eager)"  # 300/100 and 480/120: their median
    assert h100[6:9] == ["1.89x", "faster", "130 / 255 / 725"]  # the rounds' 1.50 and 2.29; 300 and 480 above 210
    assert h200[1:5] == ["H200", "150.0 (1 round)", "450.0 (1 round, 3.00x eager)", "600.0 (1 round, 4.00x eager)"]


def test_busy_machine_table_and_load():
    """speed_settings.busy: the table's medians, per-round ratios to the setting before and verdicts, per task and
    machine state, from made-up rounds; its load spins the cores it is asked for, and stops with its context."""
    import os

    from benchmarks.speed_settings.busy import Load, table

    def runs(*fps):
        return [{"sps": x, "warmup": 30.0, "wall": 60.0} for x in fps]
    data = {"rounds": 2, "updates": 400, "load": 2, "whole": {"idle": [50.0, 54.0], "busy": [70.0, 90.0]},
            "runs": {"first run": {"busy": {"2 threads (before)": runs(10, 12), "1 thread": runs(80, 84),
                                            "default": runs(79, 90)}}}}
    rows = table_rows(table(data))
    assert rows[1][:8] == ["first run", "busy", "2 threads (before)", "11.0", "10.0-12.0", "1.00x", "first", "30.0"]
    assert rows[2][3:7] == ["82.0", "80.0-84.0", "7.50x", "faster"]  # 8.0 and 7.0
    assert rows[3][5] == "7.70x" and rows[-2] == ["idle", "52.0", "50.0-54.0", "2"]
    with Load(2) as load:
        assert [p.poll() for p in load.procs] == [None, None]
        pids = [p.pid for p in load.procs]
    assert all(not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z" for pid in pids)


def test_no_compiling_lets_a_compiled_graph_run_and_refuses_any_compilation():
    """benchmarks.common.NoCompiling (torch.compiler.set_stance("fail_on_recompile")): inside it a function runs the
    graph it compiled before; a recompilation (a new shape) and a first compilation both raise, so a timing never
    times the compiler."""
    import torch

    from benchmarks.common import NoCompiling

    def f(x):
        return x * 2 + 1

    compiled = torch.compile(f, backend="eager")
    compiled(torch.ones(3))
    with NoCompiling():
        assert compiled(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
    for call in (lambda: compiled(torch.ones(3, 4)), lambda: torch.compile(lambda x: x - 1, backend="eager")(torch.ones(2))):
        with pytest.raises(Exception, match="fail_on_recompile"), NoCompiling():
            call()


def test_every_planted_bug_applies_to_the_scripts_as_they_are():
    """benchmarks/mutations: each mutant's text is found exactly once in each script it changes (a script edited since
    would leave a mutant that changes nothing, and counts as not caught, or one that changes two places), both ways,
    and its family's tests exist; the twin-only way leaves the eager script as it is."""
    from benchmarks.mutations.mutations import FAMILIES, MUTANTS

    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    for mutant in MUTANTS:
        eager, files, _ = FAMILIES[mutant.family]
        assert all((REPO / f).is_file() for f in files), files
        assert set(mutant.patches("twin")) == {f"{eager}_torchcompile"}
        assert set(mutant.patches("both")) == {eager, f"{eager}_torchcompile"}
        for script, (old, new) in mutant.patches("both").items():
            text = (REPO / "leanrl" / f"{script}.py").read_text()
            assert text.count(old) == 1 and old != new, (mutant.name, script, text.count(old))
