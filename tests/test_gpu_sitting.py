"""The GPU sitting rehearsed on the CPU: every command of docs/gpu.md's plan, run as the device tool runs it (`bash -c
COMMAND` in the repository root, $OUT an empty folder), in a copy of the tree holding only what would travel (the
files git tracks or does not ignore, and the carried bundle: here a made-up one, a wheel and a COMMIT file), with no
git on the PATH, CUDA hidden and SIGINT ignored, at tiny sizes (--tiny) and with a shrunken budget. Each command must come back
within the GPU machine's limits: at most 8 files in OUT, at most one folder down, names of letters, digits, '.', '_'
and '-', a console log among them, and its wall time under its budget. The first command, with GPU tests that hang
added to the copy, is stopped at its deadline and still leaves its junit file; the second continues the folder the
first one's files were committed to, and brings back only the files it changed. The speed part's rounds (whole, on
one machine, a cut one not recorded) are checked on made-up runs. The plans of issue 60 are rehearsed the same way:
docs/vs_leanrl.md's leanrl plan with a made-up LeanRL that logs as LeanRL does (and with LeanRL itself where a checkout
is given), PPO Atari's limit study (atari_split), and ours beside 4081e39's (before)."""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
from helpers import ENV, REPO

from benchmarks.gpu import gpu

SITTING = "cpu_rehearsal"  # the sitting's folder under docs/gpu/ in the copy: where a command's files are committed
COMMIT = "abc1234+rehearsal"  # the carried bundle's COMMIT: the commit every command must record
NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def planned_commands() -> list[tuple[str, int]]:
    """docs/gpu.md's plan: each command (its `bash benchmarks/gpu/gpu.sh` line) and the timeout_s it is run under."""
    text = (REPO / "docs" / "gpu.md").read_text()
    block = re.search(r"^#+ The plan\n.*?^```text\n(.*?)^```", text, re.S | re.M).group(1)
    commands, timeout = [], None
    for line in block.splitlines():
        if m := re.search(r"timeout_s=(\d+)", line):
            timeout = int(m.group(1))
        elif line.startswith("bash benchmarks/gpu/gpu.sh"):
            commands.append((line.strip(), timeout))
    return commands


def travelling_copy(dest: Path) -> Path:
    """What the device tool takes along: the files git tracks or does not ignore (git ls-files; without git, the tree
    but for .git and the names .gitignore lists), and the carried .whl/: here a made-up bundle (one pure wheel, an
    envpool-atari.tgz of a marker, the COMMIT file)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True)
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.split("\0")):
            if (REPO / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, dest / name)
    else:
        ignored = [line.strip().strip("/") for line in (REPO / ".gitignore").read_text().splitlines()
                   if line.strip() and not line.startswith("#")]
        shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(".git", *ignored))
    bundle = dest / ".whl"
    bundle.mkdir()
    with zipfile.ZipFile(bundle / "rehearsal_marker-1.0-py3-none-any.whl", "w") as whl:
        whl.writestr("rehearsal_marker.py", "BUNDLED = True\n")
        info = "rehearsal_marker-1.0.dist-info"
        whl.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: rehearsal-marker\nVersion: 1.0\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: leanrl-tests\nRoot-Is-Purelib: true\n"
                                      "Tag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")
    (dest / "marker").mkdir()
    (dest / "marker" / "README").write_text("unpacked from the bundle's tarball\n")
    subprocess.run(["tar", "czf", str(bundle / "envpool-atari.tgz"), "-C", str(dest), "marker"], check=True)
    shutil.rmtree(dest / "marker")
    (bundle / "COMMIT").write_text(COMMIT + "\n")
    return dest


def path_without_git(tmp: Path) -> str:
    """A PATH with every program of this one but git, as links in one folder. This Python's own folder (a venv's,
    where git is not) stays first as it is: a venv's python, called through a link elsewhere, would not find its
    venv."""
    first = Path(sys.executable).parent
    venv = not (first / "git").exists()
    farm = tmp / "bin"
    farm.mkdir()
    for folder in [Path(d) for d in os.environ["PATH"].split(os.pathsep) if d]:
        if folder.is_dir() and not (venv and folder == first):
            for exe in folder.iterdir():
                if exe.name != "git" and not (farm / exe.name).exists() and exe.is_file() and os.access(exe, os.X_OK):
                    (farm / exe.name).symlink_to(exe)
    path = os.pathsep.join([str(first), str(farm)] if venv else [str(farm)])
    assert shutil.which("git", path=path) is None
    return path


@pytest.fixture
def copy(tmp_path) -> Path:
    return travelling_copy(tmp_path / "tree")


def rehearse(copy: Path, command: str, out: Path, budget: float, path: str) -> tuple[subprocess.CompletedProcess, float]:
    """`command` as the device tool runs it, at tiny sizes and with `budget` seconds: its result and wall time."""
    out.mkdir()
    run_env = {k: v for k, v in ENV.items() if not k.startswith("PYTEST_") and k not in ("MUJOCO_GL", "PYTHONPATH")}
    # one thread per run (and single-threaded XLA): the runs are tiny, and spinning threads on a loaded CPU make them
    # several times slower (tests/conftest.py)
    run_env |= {"OUT": str(out), "PATH": path, "OMP_NUM_THREADS": "1", "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    tiny = f"{command.replace('<sitting>', SITTING)} --tiny --budget {budget:g} --workers 2 --grace 30"
    start = time.monotonic()
    # with SIGINT ignored, as a shell without job control starts a command in the background (the GPU machine's way
    # of starting it is not known): the sitting's Ctrl-Cs must still reach pytest and the learning run
    proc = subprocess.run(["bash", "-c", tiny], cwd=copy, env=run_env, capture_output=True, text=True,
                          timeout=budget + 60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    return proc, time.monotonic() - start


def assert_comes_back(out: Path, proc: subprocess.CompletedProcess, wall: float, budget: float) -> dict[str, Path]:
    """What the GPU machine would bring back of OUT, and the command's time: every file, within the limits."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    files = {str(p.relative_to(out)): p for p in sorted(out.rglob("*")) if p.is_file()}
    assert len(files) <= 8, f"{len(files)} files in OUT: {sorted(files)}"
    assert all(len(Path(f).parts) <= 2 for f in files), f"deeper than one folder: {sorted(files)}"
    assert all(NAME.match(p.name) for p in out.rglob("*")), f"names the machine refuses: {sorted(files)}"
    assert {"console.log", "sitting.log", "machine.json"} <= set(files), sorted(files)
    assert wall < budget, f"{wall:.1f} s against a budget of {budget:g} s"
    machine = json.loads(files["machine.json"].read_text())
    assert machine["commands"][-1]["commit"] == COMMIT, machine["commands"]  # from the bundle's file: no git here
    console = files["console.log"].read_text()  # all that the command printed, the bundle's install to the end
    assert "gpu.sh: the bundle installed" in console and "sitting: done" in console, console[-2000:]
    return files


def commit_into(copy: Path, out: Path) -> None:
    """What the caller does with what came back: its files replace the sitting folder's, in the tree that travels."""
    folder = copy / "docs" / "gpu" / SITTING
    for f in out.rglob("*"):
        if f.is_file():
            (folder / f.relative_to(out)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, folder / f.relative_to(out))


HANGING = '''"""GPU tests that hang: the rehearsal's way to make the sitting stop pytest at its deadline."""
import subprocess

import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("i", range(40))
def test_a_gpu_test_that_hangs(i):
    subprocess.run(["sleep", "{seconds}"])
'''


@pytest.mark.slow
def test_a_sitting_rehearsed_stops_at_its_deadline_and_resumes(copy, tmp_path):
    """The plan's first two commands, as a sitting runs them. The first, with GPU tests that hang added to the copy:
    each is stopped by the per-test timeout, then pytest by its SIGINT at the deadline kept for the main job, and its
    junit.xml is there, with the hanging tests that ran and the real GPU tests (skipped: no CUDA); the main job then
    runs. Its files are committed into docs/gpu/<sitting>; the second command continues that folder (its logs go on
    from the first's) and brings back only the files it changed, its speed rounds whole, each on its machine."""
    path = path_without_git(tmp_path)
    (first, _), (second, _) = planned_commands()[:2]
    seconds = f"1234.{os.getpid()}"  # this test's mark on the hanging tests' processes
    (copy / "tests" / "test_zz_hanging.py").write_text(HANGING.format(seconds=seconds))
    proc, wall = rehearse(copy, first, tmp_path / "out1", 160, path)
    files = assert_comes_back(tmp_path / "out1", proc, wall, 160)
    assert {"junit.xml", "pytest.log", "main_job.json"} <= set(files), sorted(files)
    log = files["sitting.log"].read_text()
    assert "tests: stopped at its time limit by a SIGINT" in log, log
    cases = ET.parse(files["junit.xml"]).getroot().iter("testcase")
    outcomes = {(case.get("name").split("[")[0], child.tag) for case in cases for child in case}
    assert ("test_a_gpu_test_that_hangs", "failure") in outcomes, outcomes  # over pytest-timeout's --timeout
    assert ("test_every_mode_runs_on_cuda_logs_and_replays_its_graphs", "skipped") in outcomes, outcomes
    messages = [child.get("message", "") for case in ET.parse(files["junit.xml"]).getroot().iter("testcase") for child in case]
    assert any("Timeout (>8.0s) from pytest-timeout" in m for m in messages), messages
    assert not subprocess.run(["pgrep", "-f", f"sleep {seconds}"], capture_output=True).stdout  # none is left
    main = json.loads(files["main_job.json"].read_text())
    assert main["returncode"] == 0 and main["fps"] and main["machine"], main

    commit_into(copy, tmp_path / "out1")
    (copy / "tests" / "test_zz_hanging.py").unlink()
    assert "--resume docs/gpu/<sitting>" in second
    proc, wall = rehearse(copy, second, tmp_path / "out2", 100, path)
    again = assert_comes_back(tmp_path / "out2", proc, wall, 100)
    assert set(again) == {"console.log", "sitting.log", "machine.json", "speed.json", "speed.md"}, sorted(again)
    for name in ("console.log", "sitting.log"):  # the first command's, continued
        assert again[name].read_text().startswith(files[name].read_text()), name
    assert [c["plan"] for c in json.loads(again["machine.json"].read_text())["commands"]] == ["check", "headline"]
    # every pair ran a whole round, on this machine, or was left for the next command or cut short, said so (how far
    # a budget goes depends on the CPU's load: test_the_speed_rounds_are_whole_and_on_one_machine checks the rules)
    speed = json.loads(again["speed.json"].read_text())["pairs"]
    log = again["sitting.log"].read_text()
    for pair in gpu.HEADLINE["pairs"].split(","):
        rounds = speed.get(pair, {}).get("rounds", [])
        assert all(set(r["runs"]) == {"eager", "compile+cudagraphs", "jax"} and r["machine"] for r in rounds), rounds
        assert all(run.get("sps", 0) > 0 for r in rounds for run in r["runs"].values()), rounds
        assert rounds or re.search(rf"speed: {pair} round 1 .*(left for the next command|cut short)", log), log


@pytest.mark.slow
@pytest.mark.parametrize("n", range(2, 7))
def test_a_later_command_rehearsed(n, copy, tmp_path):
    """Each later command of the plan, resumed from a committed folder (the first command's files, made up), with a
    budget that lets little run: it comes back within the limits and in time, continues the folder's log, brings back
    only the files it changed, and says what it left for the next command or what it ran."""
    command, timeout = planned_commands()[n]
    assert "--resume docs/gpu/<sitting>" in command and timeout <= 600
    folder = copy / "docs" / "gpu" / SITTING
    folder.mkdir(parents=True)
    (folder / "sitting.log").write_text("00:00:00 sitting: the first command\n")
    (folder / "console.log").write_text("=== the first command\n")
    (folder / "machine.json").write_text(json.dumps({"machines": {}, "commands": [{"plan": "check"}]}))
    for name in ("junit.xml", "pytest.log", "main_job.json"):  # the first command's own: not this one's to bring back
        (folder / name).write_text("made up\n")
    budget = 80 if "learn" in command else 15
    proc, wall = rehearse(copy, command, tmp_path / "out", budget, path_without_git(tmp_path))
    files = assert_comes_back(tmp_path / "out", proc, wall, budget)
    assert files["sitting.log"].read_text().startswith("00:00:00 sitting: the first command\n")
    assert files["console.log"].read_text().startswith("=== the first command\n")
    log = files["sitting.log"].read_text()
    common = {"console.log", "sitting.log", "machine.json"}
    if "learn" in command:
        assert set(files) == common | {"learning.json"}, sorted(files)
        learning = json.loads(files["learning.json"].read_text())
        assert learning["compiled"]["returncode"] == 0 and learning["eager"]["last_step"] > 0, learning
    elif "limits" in command:
        limits = {f"limits/{name}" for name in ("results.json", "results.md", "busy.png", "sitting.log")}
        assert set(files) == common | limits, sorted(files)
    else:
        assert set(files) == common | {"speed.json", "speed.md"}, sorted(files)
        assert "left for the next command" in log, log


# A made-up LeanRL script: LeanRL's flags (unknown ones refused, as tyro does), its wandb calls and its speed logging,
# on a made-up clock: the steps before FAST_FROM take 2 ms each, those after FAST[script] ms; nothing is run.
FAKE_LEANRL = '''"""A made-up LeanRL script (tests/test_gpu_sitting.py): it logs its speed as LeanRL's does."""
import argparse
import os

import wandb

name = os.path.basename(__file__)[:-3]
FAST = {"sac_continuous_action_torchcompile": 1.0, "td3_continuous_action_torchcompile": 0.8,
        "ppo_continuous_action_torchcompile": 0.5, "ppo_atari_envpool_torchcompile": 0.25}[name] / 1000
parser = argparse.ArgumentParser()
parser.add_argument("--env-id")
parser.add_argument("--total-timesteps", type=int)
parser.add_argument("--learning-starts", type=int, default=5000)
parser.add_argument("--num-envs", type=int, default=8 if "atari" in name else 1)
parser.add_argument("--num-steps", type=int, default=128 if "atari" in name else 2048)
parser.add_argument("--num-minibatches", type=int)
parser.add_argument("--update-epochs", type=int)
parser.add_argument("--compile", action="store_true")
parser.add_argument("--cudagraphs", action="store_true")
args = parser.parse_args()
wandb.init(project=name, name=name, config=vars(args), save_code=True)
clock, start = 0.0, None
if name.startswith(("sac", "td3")):  # cumulative, since 3 steps after the learning start; a log every 100 steps
    fast_from = args.learning_starts + 100
    for global_step in range(args.total_timesteps):
        if global_step == args.learning_starts + 3:
            start, burnin = clock, global_step
        clock += 0.002 if global_step <= fast_from else FAST
        if global_step > args.learning_starts and global_step % 100 == 0 and start is not None:
            wandb.log({"speed": (global_step - burnin) / (clock - start), "qf_loss": 0.5}, step=global_step)
else:  # per iteration; continuous PPO cumulative since its third, Atari PPO over the last 10; a log every 10
    batch, global_step = args.num_envs * args.num_steps, 0
    for iteration in range(1, args.total_timesteps // batch + 1):
        if iteration == 3:
            start, burnin = clock, global_step
        global_step += batch
        clock += batch * (0.002 if iteration <= 10 and "atari" in name else FAST)
        if start is not None and iteration % 10 == 0:
            wandb.log({"speed": (global_step - burnin) / (clock - start), "episode_return": 1.0}, step=global_step)
            if "atari" in name:
                start, burnin = clock, global_step
'''
# the fps read from it: each script's fast rate (Atari PPO: its windows after the first; the others: the window
# gpu.TINY_LEANRL_READ names, all in the fast steps)
FAKE_FPS = {"sac": 1000.0, "td3": 1250.0, "ppo_continuous": 2000.0, "ppo_atari": 4000.0}


def leanrl_commands() -> list[tuple[str, int]]:
    """docs/vs_leanrl.md's GPU plan: its commands (`bash benchmarks/gpu/gpu.sh` lines) and their timeout_s."""
    text = (REPO / "docs" / "vs_leanrl.md").read_text()
    block = re.search(r"^## On a GPU.*?^```text\n(.*?)^```", text, re.S | re.M).group(1)
    return [(line.strip(), int(re.search(r"timeout_s=(\d+)", block).group(1))) for line in block.splitlines()
            if line.startswith("bash benchmarks/gpu/gpu.sh")]


def rehearse_leanrl(copy: Path, tmp_path: Path, budget: float) -> tuple[dict, dict]:
    """docs/vs_leanrl.md's command, rehearsed: what came back, and leanrl.json. Its rounds: every pair's, whole."""
    (command, timeout), = leanrl_commands()
    assert "--plan leanrl" in command and timeout <= 560  # one command of at most 560 s for a round of the four
    assert gpu.PLANS["leanrl"]["budget"] <= timeout - 30
    proc, wall = rehearse(copy, command, tmp_path / "out", budget, path_without_git(tmp_path))
    files = assert_comes_back(tmp_path / "out", proc, wall, budget)
    assert set(files) == {"console.log", "sitting.log", "machine.json", "leanrl.json", "leanrl.md"}, sorted(files)
    data = json.loads(files["leanrl.json"].read_text())
    assert list(data["pairs"]) == list(gpu.LEANRL_PAIRS) == ["ppo_atari", "sac", "td3", "ppo_continuous"]
    for pair, entry in data["pairs"].items():
        assert len(entry["rounds"]) == 1 and entry["steps"] == gpu.TINY_LEANRL_PAIRS[pair][2], (pair, entry)
        runs = entry["rounds"][0]["runs"]
        assert set(runs) == {"compile+cudagraphs", "leanrl", "leanrl_eager"}, runs
        assert all("error" not in run and run["sps"] > 0 for run in runs.values()), runs
        for mode in ("leanrl", "leanrl_eager"):  # the task's steps and flags, but ours alone; --tiny: no mode flag
            assert runs[mode]["command"] == shlex.join([
                "python", f".whl/leanrl/leanrl/{gpu.TINY_LEANRL_PAIRS[pair][0]}_torchcompile.py",
                "--env-id", entry["env_id"], "--total-timesteps", str(entry["steps"]),
                *[w for w in shlex.split(entry["args"]) if w not in ("--measure-after", "20")]]), runs[mode]["command"]
            assert runs[mode]["logged_speed"], runs[mode]
    table = files["leanrl.md"].read_text()
    assert all(f"| {pair} ({data['pairs'][pair]['steps']} steps) | none |" in table for pair in data["pairs"]), table
    return files, data


@pytest.mark.slow
def test_the_leanrl_plan_rehearsed_with_a_made_up_leanrl(copy, tmp_path):
    """docs/vs_leanrl.md's command with a made-up LeanRL in the bundle (what CI can run: LeanRL is not there): our
    runs, and LeanRL's scripts found in the bundle's leanrl/, run with the stand-in for wandb on their path, given our
    task, steps and flags but ours alone; a round of each pair whole, within the machine's limits and the budget;
    LeanRL's fps read back from what it logged, exactly the made-up clock's rate over the window; LeanRL's commit and
    fixes in leanrl.json's head and leanrl.md."""
    leanrl = copy / ".whl" / "leanrl"
    (leanrl / "leanrl").mkdir(parents=True)
    for eager, *_ in gpu.LEANRL_PAIRS.values():
        (leanrl / "leanrl" / f"{eager}_torchcompile.py").write_text(FAKE_LEANRL)
    shutil.copyfile(REPO / "benchmarks" / "vs_leanrl" / "wandb.py", leanrl / "wandb.py")
    made_up = {"commit": "f" * 40, "local changes": [], "fixes": {"sac_continuous_action_torchcompile": ["made up"]}}
    (leanrl / "FIXES.json").write_text(json.dumps(made_up))
    files, data = rehearse_leanrl(copy, tmp_path, 150)
    for pair, fps in FAKE_FPS.items():
        runs = data["pairs"][pair]["rounds"][0]["runs"]
        assert runs["leanrl"]["sps"] == pytest.approx(fps) and runs["leanrl_eager"]["sps"] == pytest.approx(fps), runs
    assert data["leanrl"] == made_up | {"on its path": []}, data["leanrl"]
    table = files["leanrl.md"].read_text()
    assert "LeanRL fffffff " in table and "- sac_continuous_action_torchcompile: made up" in table, table
    assert "| ppo_atari (1280 steps) | none |" in table and "| 6809 |" in table, table


@pytest.mark.slow
@pytest.mark.skipif(not (os.environ.get("LEANRL_CHECKOUT") and os.environ.get("LEANRL_TORCHRL_WHEEL")),
                    reason="no LeanRL to run: LEANRL_CHECKOUT (a clean checkout of github.com/pytorch-labs/LeanRL) and "
                    "LEANRL_TORCHRL_WHEEL (torchrl 0.14.1's wheel for this Python) are not both given; CI has neither")
def test_the_leanrl_plan_rehearsed_with_leanrl(copy, tmp_path):
    """docs/vs_leanrl.md's command with LeanRL itself in the bundle, as benchmarks/gpu/bundle.sh --leanrl puts it
    there (its scripts fixed by benchmarks/vs_leanrl/fixes.py, the stand-in for wandb, torchrl's wheel): every run of
    LeanRL's four scripts runs and logs its speed past its window's start, torchrl installed for them."""
    from benchmarks.vs_leanrl import fixes as vs_leanrl_fixes

    leanrl = copy / ".whl" / "leanrl"
    state = vs_leanrl_fixes.build(Path(os.environ["LEANRL_CHECKOUT"]), leanrl)
    shutil.copy(os.environ["LEANRL_TORCHRL_WHEEL"], leanrl)
    files, data = rehearse_leanrl(copy, tmp_path, 300)
    assert data["leanrl"]["commit"] == state["commit"] and data["leanrl"]["on its path"] == ["torchrl-0.14.1"]
    assert "- ppo_atari_envpool_torchcompile: gymnasium in place of gym" in files["leanrl.md"].read_text()


@pytest.mark.slow
def test_the_atari_split_rehearsed(copy, tmp_path):
    """The atari_split plan (PPO Atari's limit study), resumed from a sitting folder, at tiny sizes with the modes a CPU
    runs within a rehearsal's budget (eager, --cudagraphs: --compile takes minutes on a CPU): the environment alone at
    the script's 8 envs, each row's split with GAE apart, the graphed pieces (the policy step, GAE, the update) and
    the bound from them, within the machine's limits."""
    folder = copy / "docs" / "gpu" / SITTING
    folder.mkdir(parents=True)
    (folder / "sitting.log").write_text("00:00:00 sitting: the first command\n")
    command = ('bash benchmarks/gpu/gpu.sh "$OUT" --plan atari_split --resume docs/gpu/<sitting> '
               '--limits-modes eager,cudagraphs')
    proc, wall = rehearse(copy, command, tmp_path / "out", 120, path_without_git(tmp_path))
    files = assert_comes_back(tmp_path / "out", proc, wall, 120)
    limits = {f"limits/{name}" for name in ("results.json", "results.md", "busy.png", "sitting.log")}
    assert set(files) == {"console.log", "sitting.log", "machine.json"} | limits, sorted(files)
    data = json.loads(files["limits/results.json"].read_text())
    assert sorted(data["rows"]) == ["ppo_atari cudagraphs", "ppo_atari eager"], data["rows"].keys()
    assert data["env_sps"]["ppo_atari"] > 0 and data["bounds"]["ppo_atari"]["bound_fps"] > 0, data["bounds"]
    for row in data["rows"].values():
        assert "error" not in row and "GAE" in row["shares"], row
    pieces = data["rows"]["ppo_atari cudagraphs"]["pieces"]
    assert {f"main.<locals>.{name}" for name in ("policy", "gae", "update")} <= set(pieces), pieces
    assert "--pairs ppo_atari --modes eager,cudagraphs" in files["sitting.log"].read_text()


@pytest.mark.slow
def test_the_levers_plan_rehearsed(copy, tmp_path):
    """The levers plan (docs/gpu.md: PPO Atari's --async-envs beside the --compile --cudagraphs it changes), resumed
    from a sitting folder, at tiny sizes, one round: both modes ran in it, back to back, and levers.md gives the lever
    over its base mode with the verdict, within the machine's limits."""
    folder = copy / "docs" / "gpu" / SITTING
    folder.mkdir(parents=True)
    (folder / "sitting.log").write_text("00:00:00 sitting: the first command\n")
    command = 'bash benchmarks/gpu/gpu.sh "$OUT" --plan levers --resume docs/gpu/<sitting> --rounds 1'
    proc, wall = rehearse(copy, command, tmp_path / "out", 90, path_without_git(tmp_path))
    files = assert_comes_back(tmp_path / "out", proc, wall, 90)
    assert set(files) == {"console.log", "sitting.log", "machine.json", "levers.json", "levers.md"}, sorted(files)
    rounds = json.loads(files["levers.json"].read_text())["pairs"]["ppo_atari"]["rounds"]
    assert len(rounds) == 1 and set(rounds[0]["runs"]) == {"compile+cudagraphs", "async"}, rounds
    assert all(run["sps"] > 0 for run in rounds[0]["runs"].values()), rounds
    row = files["levers.md"].read_text().splitlines()[2]
    assert "`--compile --cudagraphs --async-envs`" in row and re.search(r"\| \d+\.\d\dx \| (faster|slower|tie) \|$", row), row


@pytest.mark.slow
def test_the_before_plan_rehearsed(copy, tmp_path):
    """The before plan with 4081e39's leanrl/ and leanrl_utils/ in the bundle, as benchmarks/gpu/bundle.sh --before
    puts them there: a round of SAC and TD3 now and at that commit, that commit's scripts run from the bundle, within
    the machine's limits; before.md names both commits."""
    if subprocess.run(["git", "cat-file", "-e", "4081e39^{commit}"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip("commit 4081e39 is not in this checkout's history (a shallow clone)")
    before = copy / ".whl" / "before"
    before.mkdir()
    archive = subprocess.run(["git", "archive", "4081e39", "leanrl", "leanrl_utils"], cwd=REPO, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "x", "-C", str(before)], input=archive, check=True)
    (before / "COMMIT").write_text("4081e39\n")
    for pair in ("sac", "td3"):  # each leaves a mark where it runs: the bundle's scripts are the ones run
        script = before / "leanrl" / f"{gpu.TINY_PAIRS[pair][0]}_torchcompile.py"
        mark = f"__import__('pathlib').Path({str(tmp_path / pair)!r}).touch()\n"
        script.write_text(mark + script.read_text())
    command = 'bash benchmarks/gpu/gpu.sh "$OUT" --plan before'
    proc, wall = rehearse(copy, command, tmp_path / "out", 120, path_without_git(tmp_path))
    files = assert_comes_back(tmp_path / "out", proc, wall, 120)
    assert set(files) == {"console.log", "sitting.log", "machine.json", "before.json", "before.md"}, sorted(files)
    data = json.loads(files["before.json"].read_text())
    assert data["before"] == {"commit": "4081e39", "now": COMMIT}, data["before"]
    for pair in ("sac", "td3"):
        runs = data["pairs"][pair]["rounds"][0]["runs"]
        assert set(runs) == {"compile+cudagraphs", "before"} and all(r["sps"] > 0 for r in runs.values()), runs
        assert (tmp_path / pair).exists(), f"{pair}: 4081e39's script did not run"
    assert f"| `--compile --cudagraphs` at {COMMIT} | at 4081e39 |" in files["before.md"].read_text()


@pytest.mark.parametrize("plan,said", [
    ("leanrl", "leanrl: no LeanRL in the bundle (.whl/leanrl/): build it with bash benchmarks/gpu/bundle.sh --leanrl "),
    ("before", "before: no earlier commit in the bundle (.whl/before/): build it with bash benchmarks/gpu/bundle.sh "
               "--before COMMIT"),
])
def test_a_plan_whose_bundle_lacks_its_part_says_so(plan, said, copy, tmp_path):
    """The leanrl and before plans with a bundle built without --leanrl or --before: the part says in one line how to
    build the bundle, runs nothing, and the command ends within the limits."""
    command = f'bash benchmarks/gpu/gpu.sh "$OUT" --plan {plan}'
    proc, wall = rehearse(copy, command, tmp_path / "out", 30, os.environ["PATH"])
    files = assert_comes_back(tmp_path / "out", proc, wall, 30)
    assert set(files) == {"console.log", "sitting.log", "machine.json"}, sorted(files)
    assert re.search(r"^\d\d:\d\d:\d\d " + re.escape(said), files["sitting.log"].read_text(), re.M), \
        files["sitting.log"].read_text()


def test_a_broken_bundle_stops_the_command_in_one_line(copy, tmp_path):
    """A wheel of the bundle that pip cannot install: one line says so, and the command fails before any part."""
    (copy / ".whl" / "broken-1.0-py3-none-any.whl").write_text("not a wheel")
    out = tmp_path / "out"
    proc, _ = rehearse(copy, 'bash benchmarks/gpu/gpu.sh "$OUT" --plan check', out, 30, os.environ["PATH"])
    assert proc.returncode == 1, proc.stdout
    lines = [line for line in (out / "console.log").read_text().splitlines() if not line.startswith("===")]
    assert len(lines) == 1 and lines[0].startswith("gpu.sh: the bundle in .whl/ did not install: ERROR"), lines
    assert not (out / "sitting.log").exists()


@pytest.mark.parametrize("args,said", [
    (["--plan", "headline", "--pairs", "sac,ppo"], "benchmarks.gpu: --pairs: no such pair 'ppo'; the pairs are "),
    (["--plan", "nope"], "benchmarks.gpu: argument --plan: invalid choice: 'nope'"),
    (["--plan", "leanrl", "--pairs", "sac,dqn"],
     "benchmarks.gpu: --pairs: the leanrl part has no pair 'dqn'; its pairs are "),
    (["--plan", "modes", "--resume", "docs/gpu/nowhere"], "gpu.sh: --resume docs/gpu/nowhere: no such folder"),
    (["--budget", "0"], "benchmarks.gpu: --budget must be positive"),
])
def test_a_mistake_in_a_command_is_one_line(args, said, copy, tmp_path):
    """A command's mistake stops it before any part, in one line, with a non-zero exit (in the travelling copy, with
    its made-up bundle: a real .whl/ in the checkout is built for the GPU machine's Python and need not install
    here)."""
    proc = subprocess.run(["bash", "benchmarks/gpu/gpu.sh", str(tmp_path / "out"), *args], cwd=copy, capture_output=True,
                          text=True, env={**ENV, "PYTHONPATH": str(copy)}, timeout=120)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines()  # less its header and the bundle's line
             if not line.startswith(("=== ", "gpu.sh: the bundle installed"))]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(said), proc.stdout + proc.stderr
    assert not (tmp_path / "out" / "sitting.log").exists()


def test_the_speed_rounds_are_whole_and_on_one_machine(tmp_path, monkeypatch):
    """The speed part on made-up runs and a made-up clock: a round runs a pair's modes back to back and is recorded
    with its machine; it starts only if its runs' expected time fits (the pair's last times, else the guess); a round
    that a run leaves unfinished at the budget's end is not recorded, and what did not fit is left for the next command,
    said so; a command on another machine, resumed from the folder, adds its own rounds and keeps the others."""
    times = {"eager": 1.0, "compile+cudagraphs": 3.0, "jax": 2.0}
    clock = [0.0]

    def fake_run(config, common, steps, env_id, workdir, env=None, timeout=None, folder=None):
        mode = "jax" if "_jax" in config else "compile+cudagraphs" if "_torchcompile" in config else "eager"
        if times[mode] > timeout:
            clock[0] += timeout
            raise subprocess.TimeoutExpired(config, timeout)
        clock[0] += times[mode]
        return {"sps": 100.0, "warmup": 0.5, "wall": times[mode]}

    class Clock:  # the sitting's clock, and nothing else's
        monotonic = staticmethod(lambda: clock[0])
        time, strftime, gmtime = time.time, time.strftime, time.gmtime
    monkeypatch.setattr(gpu, "run_once", fake_run)
    monkeypatch.setattr(gpu, "time", Clock)
    monkeypatch.setattr(gpu, "MARGIN", 0.0)
    modes = ["eager", "compile+cudagraphs", "jax"]

    def command(out, budget, machine, resume=None):
        clock[0] = 0.0
        monkeypatch.setenv("LEANRL_MACHINE_ID", machine)
        sitting = gpu.Sitting(out, budget, resume, start=time.time(), tiny=True)
        sitting.guess = {m: 5.0 for m in gpu.MODES}
        sitting.gpu = "made-up GPU"
        return gpu.speed(sitting, ["sac", "td3"], modes, rounds=2)

    # 12 s, nothing timed yet: a round's guess (15 s) does not fit, every round is left for the next command, each
    # pair's said once (the H100 sitting's log said td3's round 2 twice)
    assert command(tmp_path / "none", 12.0, "machine-a") == 4
    log = (tmp_path / "none" / "sitting.log").read_text()
    assert "sac rounds 1-2 (eager, --compile --cudagraphs, JAX): left for the next command, 12 s left, ~15 s needed" \
        in log and log.count("left for the next command") == 2, log

    # 20 s: sac's first round (guessed 15 s) runs in 6; td3's, expected at sac's times (6 s), runs; sac's second,
    # expected at its first's, runs; td3's second (6 s) does not fit in the 2 left
    first = tmp_path / "first"
    assert command(first, 20.0, "machine-a") == 1
    data = json.loads((first / "speed.json").read_text())["pairs"]
    assert [r["machine"] for r in data["sac"]["rounds"]] == ["machine-a", "machine-a"]
    assert [r["machine"] for r in data["td3"]["rounds"]] == ["machine-a"]
    assert "td3 round 2 (eager, --compile --cudagraphs, JAX): left for the next command, 2 s left, ~6 s needed" in \
        (first / "sitting.log").read_text()

    # resumed on another machine, 16 s: td3's second round starts and its JAX run is cut: the round is not recorded,
    # its finished runs with it
    times["jax"] = 50.0
    second = tmp_path / "second"
    assert command(second, 16.0, "machine-b", resume=first) == 1
    data = json.loads((second / "speed.json").read_text())["pairs"]
    assert len(data["td3"]["rounds"]) == 1 and len(data["sac"]["rounds"]) == 2
    assert "td3 round 2 JAX: cut short at the budget's end; the round is not recorded" in \
        (second / "sitting.log").read_text()

    # resumed again on that machine: td3's second round, on it; the first machine's rounds kept as they were
    times["jax"] = 2.0
    third = tmp_path / "third"
    assert command(third, 40.0, "machine-b", resume=first) == 0
    data = json.loads((third / "speed.json").read_text())["pairs"]
    assert [r["machine"] for r in data["td3"]["rounds"]] == ["machine-a", "machine-b"]
    assert data["sac"]["rounds"] == json.loads((first / "speed.json").read_text())["pairs"]["sac"]["rounds"]
    assert all(set(r["runs"]) == set(modes) for e in data.values() for r in e["rounds"])


def test_the_bundle_check_adds_up_what_travels_and_fails_above_its_limit(tmp_path):
    """benchmarks/gpu/bundle.sh --check: the bundle's size plus the tree's (git archive HEAD) and the untracked files
    git does not ignore, in MiB, and a failure in one line above the limit (56 MiB, or GPU_TRAVEL_LIMIT_MIB)."""
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: the check measures the tree with git archive")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "some-1.0-py3-none-any.whl").write_bytes(b"\0" * 3 * 2**20)
    check = ["bash", "benchmarks/gpu/bundle.sh", "--check", str(bundle)]
    ok = subprocess.run(check, cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    sizes = re.fullmatch(r"bundle ([\d.]+) MiB \+ tree \(git archive HEAD\) ([\d.]+) MiB \+ untracked ([\d.]+) MiB = "
                         r"([\d.]+) MiB \(limit 56 MiB; the GPU machine takes 64\)", ok.stdout.splitlines()[-1])
    assert sizes, ok.stdout
    bundle_mib, tree_mib, untracked_mib, total = map(float, sizes.groups())
    archive = len(subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True).stdout)
    assert bundle_mib == 3.0 and tree_mib == round(archive / 2**20, 1)
    assert abs(bundle_mib + tree_mib + untracked_mib - total) <= 0.15
    over = subprocess.run(check, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "GPU_TRAVEL_LIMIT_MIB": str(int(total))})
    assert over.returncode == 1 and over.stderr == f"gpu_bundle: {total} MiB would travel, over {int(total)} MiB: " \
        "cut the bundle or the tree\n", over.stderr


@pytest.mark.parametrize("args,said", [
    (["--leanrl", "nowhere"], "gpu_bundle: --leanrl {repo}/nowhere: not a LeanRL checkout (no leanrl/ folder)"),
    (["--before", "0000000"], "gpu_bundle: --before 0000000: no such commit here"),
    (["--check", "--leanrl", "."],
     "usage: bash benchmarks/gpu/bundle.sh [--check] [--leanrl CHECKOUT] [--before COMMIT] [OUT_DIR]"),
])
def test_a_mistake_in_the_bundles_options_is_one_line(args, said, tmp_path):
    """benchmarks/gpu/bundle.sh refuses a LeanRL that is no checkout, a commit it does not have, and the check with a
    build's options, in one line, exit code 2, before it downloads anything."""
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: the bundle script reads commits with git")
    proc = subprocess.run(["bash", "benchmarks/gpu/bundle.sh", *args, str(tmp_path / "bundle")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [said.format(repo=REPO)], proc.stderr
    assert not (tmp_path / "bundle").exists()


def test_a_failed_run_is_told_by_the_exception_its_traceback_ends_with():
    """A table cell and the sitting's log name a failed run by its exception, not by the first line of the stderr
    tail kept (the H100 sitting's LeanRL SAC cell read 'failed: ^^^^^^^^^^^^^^^^^')."""
    tail = ("^^^^^^^^^^^^^^^^^\n  File \"guards.py\", line 1213, in get_value\n    value = eval(name)\n"
            "torch._dynamo.exc.InternalTorchDynamoError: NameError: name 'SYNTHETIC_LOCAL' is not defined\n\n")
    assert gpu.error_line(tail) == ("torch._dynamo.exc.InternalTorchDynamoError: NameError: name 'SYNTHETIC_LOCAL' "
                                    "is not defined")
    assert gpu.error_line("run.py failed (1):\nno such flag\n") == "run.py failed (1):"
    rounds = [{"runs": {"leanrl": {"error": tail}}}]
    assert gpu.fps_cell(rounds, "leanrl").startswith("failed: torch._dynamo.exc.InternalTorchDynamoError: NameError")
