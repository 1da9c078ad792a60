"""A GPU sitting in one command: the GPU tests, the main job, the speed table and the learning run, within a time
budget, every output in one folder that is committed as it is (docs/gpu/<sitting>/).

    bash benchmarks/gpu.sh docs/gpu/h100_2026-12-01 --parts tests,main,speed --budget 560
    python -m benchmarks.gpu --out DIR [--parts ...] [--budget SECONDS]      (the same, bundle already installed)
    python -m benchmarks.gpu --summary DIR                                 (speed.md again from speed.json)

`benchmarks/gpu.sh` first installs the offline bundle of `benchmarks/gpu_bundle.sh` (a GPU machine often has its
own torch and no package index), then runs this. The parts, in the order given, each writing into --out:
- tests: `pytest -m gpu -n <cores>` with a junit file (junit.xml, pytest.log);
- main: the README's main job (`sac_continuous_action_torchcompile.py --compile --cudagraphs`) for a few thousand
  steps: does it run, log and reach its fps (main_job.json);
- speed: the six pairs in every mode (eager, optimized with no flag, --compile, --cudagraphs, both) and the JAX
  twin, a pair's configurations back to back in rounds, as many rounds as the budget allows; speed.json holds
  every run and is read back when the folder is given again, so a second command adds rounds to the same
  sitting (speed.md: the table, from every round so far);
- learn: the main job learning (SAC, HalfCheetah-v4, --compile --cudagraphs, --learn-steps steps), then the
  eager script for the same wall-clock time, stopped with a Ctrl-C (which keeps its logs): both runs' returns
  against wall-clock time and their raw scalars (learning.json);
- limits: the GPU limit study (`python -m benchmarks.gpu_limits`, its docstring) into limits/, in what is left
  of the budget.
machine.json (GPU, driver, CPU, versions, commit) and sitting.log (what ran, how long, how it ended) are
written every time. The budget counts from the start: a part or a run that would not fit is left out and
sitting.log says so. On a machine without CUDA everything runs on the CPU (the GPU tests skip): the dry run
that tests/test_benchmarks.py makes of this file.
"""

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, command_line
from benchmarks.sps import run_once, verdict
from leanrl_utils.events import read_run
from leanrl_utils.machine import describe_machine

# the speed table's pairs: task, steps and flags (those of benchmarks/speed.sh, with budgets sized for a GPU)
PAIRS = {
    "sac": ("sac_continuous_action", "HalfCheetah-v4", 7000, "--learning-starts 5000 --measure-after 50"),
    "td3": ("td3_continuous_action", "HalfCheetah-v4", 8000, "--learning-starts 5000 --measure-after 50"),
    "ppo_continuous": ("ppo_continuous_action", "HalfCheetah-v4", 8192, ""),
    "ppo_atari": ("ppo_atari_envpool", "Breakout-v5", 16384, ""),
    "dqn": ("dqn", "CartPole-v1", 40000, ""),
    "dqn_atari": ("dqn_atari_envpool", "Breakout-v5", 12000, "--learning-starts 8000 --buffer-size 100000"),
}
MODES = ["eager", "no flag", "--compile", "--cudagraphs", "--compile --cudagraphs", "JAX"]
MAIN_JOB = ["sac_continuous_action_torchcompile", "--compile", "--cudagraphs"]
MAIN_TASK: list[str] = []  # the README's main job runs on its default task
LEARN_TASK = ["--env-id", "HalfCheetah-v4"]  # that task, said for the learning run and its eager twin
FIRST_GUESS = 90.0  # seconds a run not yet timed is expected to take (compilation included)


def config(pair: str, mode: str) -> str:
    """The configuration of benchmarks.sps for a pair's mode: the script and its flags."""
    eager = PAIRS[pair][0]
    return {"eager": eager, "no flag": f"{eager}_torchcompile", "JAX": f"{eager}_jax"}.get(
        mode, f"{eager}_torchcompile {mode}")


class Sitting:
    """The folder, the clock and the log of one command."""

    def __init__(self, out: Path, budget: float):
        self.out, self.deadline = out, time.monotonic() + budget
        out.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}  # headless MuJoCo needs no GL here

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def log(self, line: str) -> None:
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        print(stamped, file=sys.stderr, flush=True)
        with open(self.out / "sitting.log", "a") as f:
            f.write(stamped + "\n")

    def run(self, cmd: list[str], timeout: float, **kwargs) -> tuple[subprocess.CompletedProcess | None, float]:
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=kwargs.pop("cwd", REPO), env=kwargs.pop("env", self.env), text=True,
                                  timeout=max(1.0, timeout), **kwargs)
        except subprocess.TimeoutExpired:
            return None, time.monotonic() - start
        return proc, time.monotonic() - start


def machine(sitting: Sitting) -> None:
    info = describe_machine()
    try:
        query = "name,driver_version,memory.total,power.limit"
        smi = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
        info["nvidia-smi"] = dict(zip(query.split(","), (x.strip() for x in smi.split(","))))
    except (OSError, subprocess.TimeoutExpired):
        info["nvidia-smi"] = "not found"
    try:
        import torch

        info["torch cuda"] = torch.version.cuda
    except ImportError:
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    info["commit"] = commit.stdout.strip() or "unknown"
    info["date"] = time.strftime("%Y-%m-%d", time.gmtime())
    (sitting.out / "machine.json").write_text(json.dumps(info, indent=1) + "\n")


def tests(sitting: Sitting, workers: int) -> None:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q", "-rfE",
           f"--junitxml={sitting.out / 'junit.xml'}"] + (["-n", str(workers)] if workers > 1 else [])
    sitting.log(f"tests: {shlex.join(cmd[1:])}")
    with open(sitting.out / "pytest.log", "w") as log:
        proc, took = sitting.run(cmd, sitting.left(), stdout=log, stderr=subprocess.STDOUT)
    lines = (sitting.out / "pytest.log").read_text().strip().splitlines()
    sitting.log(f"tests: {'ran out of time' if proc is None else lines[-1] if lines else 'no output'} ({took:.0f} s)")


def main_job(sitting: Sitting, steps: int) -> None:
    cmd = [sys.executable, str(REPO / "leanrl" / f"{MAIN_JOB[0]}.py"), *MAIN_JOB[1:], *MAIN_TASK,
           "--total-timesteps", str(steps)]
    sitting.log(f"main: {shlex.join(cmd[1:])}")
    with tempfile.TemporaryDirectory() as tmp:
        proc, took = sitting.run(cmd, sitting.left(), cwd=tmp, capture_output=True)
        runs = list(Path(tmp).glob("runs/*"))
        log = read_run(runs[0]) if runs else None
    result = {"command": shlex.join(["python", *cmd[1:]]).replace(str(REPO) + "/", ""), "seconds": round(took, 1),
              "returncode": None if proc is None else proc.returncode,
              "stderr_tail": "" if proc is None else proc.stderr[-3000:]}
    if log is not None:
        result |= {"fps": log.values("charts/SPS")[-1:], "warmup_time": log.values("charts/warmup_time"),
                   "logged": {tag: len(points) for tag, points in sorted(log.scalars.items())}}
    (sitting.out / "main_job.json").write_text(json.dumps(result, indent=1) + "\n")
    sitting.log(f"main: exit {result['returncode']}, fps {result.get('fps')}, {took:.0f} s")


def speed(sitting: Sitting, pairs: list[str], rounds: int) -> None:
    """Rounds of every pair's configurations back to back, resumed from speed.json; a run starts only if its
    expected time (its last run's, or a first guess) fits in what is left of the budget."""
    path = sitting.out / "speed.json"
    data = json.loads(path.read_text()) if path.exists() else {"pairs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(rounds):
            for pair in pairs:
                _, env_id, steps, flags = PAIRS[pair]
                entry = data["pairs"].setdefault(pair, {"env_id": env_id, "steps": steps, "args": flags,
                                                        "runs": {m: [] for m in MODES}})
                for mode in MODES:
                    runs = entry["runs"].setdefault(mode, [])
                    if len(runs) > rnd:  # done by an earlier command of this sitting
                        continue
                    expected = runs[-1]["wall"] if runs and "wall" in runs[-1] else FIRST_GUESS
                    if sitting.left() < expected:
                        sitting.log(f"speed: {pair} {mode}: left out, {sitting.left():.0f} s left, ~{expected:.0f} s needed")
                        continue
                    try:
                        r = run_once(config(pair, mode), shlex.split(flags), steps, env_id, Path(tmp),
                                     env=sitting.env, timeout=sitting.left())
                        sitting.log(f"speed: round {rnd + 1} {pair} {mode}: {r['sps']:.1f} fps, warm-up "
                                    f"{r['warmup']:.1f} s, {r['wall']:.0f} s")
                    except subprocess.TimeoutExpired:
                        r = {"error": "ran out of the budget", "wall": sitting.left()}
                        sitting.log(f"speed: {pair} {mode}: stopped, out of the budget")
                    except SystemExit as failure:
                        r = {"error": str(failure)[-1500:]}
                        sitting.log(f"speed: {pair} {mode}: failed: {str(failure).splitlines()[0]}")
                    runs.append(r)
                    path.write_text(json.dumps(data, indent=1) + "\n")
    path.write_text(json.dumps(data, indent=1) + "\n")
    (sitting.out / "speed.md").write_text(speed_table(data) + "\n")


def speed_table(data: dict) -> str:
    """Per pair and mode: the median fps over the rounds that measured it (and how many), its median ratio to the
    eager script over the rounds that measured both, and --compile --cudagraphs against the JAX twin (the median
    of the rounds' ratios, and the verdict by the tie rule)."""
    modes = list(dict.fromkeys(m for entry in data["pairs"].values() for m in entry["runs"]))
    best, twin = "--compile --cudagraphs", "JAX"
    lines = ["| pair | " + " | ".join(f"`{m}`" if m.startswith("--") else m for m in modes) +
             f" | `{best}` / JAX | `{best}` against JAX |", "|---|" + "---|" * (len(modes) + 2)]
    for pair, entry in data["pairs"].items():
        sps = {m: [r.get("sps") for r in entry["runs"].get(m, [])] for m in modes}

        def rounds_of(a, b):  # the rounds that measured both
            return [(x, y) for x, y in zip(sps[a], sps[b]) if x is not None and y is not None]

        def cell(mode):
            got = [x for x in sps[mode] if x is not None]
            if not got:
                errors = [r["error"].strip().splitlines()[0][:80] for r in entry["runs"].get(mode, []) if "error" in r]
                return f"failed: {errors[0]}" if errors else "not run"
            both = rounds_of(mode, "eager") if "eager" in sps and mode != "eager" else []
            ratio = f", {statistics.median(x / e for x, e in both):.2f}x eager" if both else ""
            return f"{statistics.median(got):.1f} ({len(got)} round{'s' * (len(got) > 1)}{ratio})"
        both = rounds_of(best, twin) if best in sps and twin in sps else []
        against = [f"{statistics.median(x / j for x, j in both):.2f}x",
                   verdict([x for x, _ in both], [j for _, j in both])] if both else ["", ""]
        lines.append(f"| {pair} ({entry['steps']} steps) | " + " | ".join(cell(m) for m in modes) + " | " +
                     " | ".join(against) + " |")
    return "\n".join(lines)


def learn(sitting: Sitting, steps: int) -> None:
    """The main job learning, then the eager script for as long: returns against wall-clock time, raw scalars."""
    common = LEARN_TASK
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {name: Path(tmp) / name for name in ("compiled", "eager")}
        for folder in folders.values():
            folder.mkdir()
        fast = [sys.executable, str(REPO / "leanrl" / f"{MAIN_JOB[0]}.py"), *MAIN_JOB[1:], *common,
                "--total-timesteps", str(steps)]
        sitting.log(f"learn: {shlex.join(fast[1:])}")
        proc, took = sitting.run(fast, sitting.left() / 2, cwd=folders["compiled"], capture_output=True)
        result["compiled"] = _learning_record(fast, proc, took, folders["compiled"])
        eager = [sys.executable, str(REPO / "leanrl" / "sac_continuous_action.py"), *common,
                 "--total-timesteps", str(steps)]
        budget = min(took, sitting.left() - 30)
        sitting.log(f"learn: {shlex.join(eager[1:])}, stopped by a Ctrl-C after {budget:.0f} s")
        proc = subprocess.Popen(eager, cwd=folders["eager"], env=sitting.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate(timeout=max(1.0, budget))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        result["eager"] = _learning_record(eager, subprocess.CompletedProcess(eager, proc.returncode, "", err), budget,
                                           folders["eager"])
    (sitting.out / "learning.json").write_text(json.dumps(result) + "\n")
    sitting.log("learn: " + ", ".join(f"{k}: exit {v['returncode']}, {v['last_step']} steps" for k, v in result.items()))


def _learning_record(cmd, proc, took, cwd: Path) -> dict:
    runs = list(cwd.glob("runs/*"))
    log = read_run(runs[0]) if runs else None
    scalars = {} if log is None else {tag: [[s, round(w, 3), v] for s, w, v in points] for tag, points in log.scalars.items()}
    steps = [s for points in scalars.values() for s, _, _ in points]
    return {"command": shlex.join(["python", *cmd[1:]]).replace(str(REPO) + "/", ""), "seconds": round(took, 1),
            "returncode": None if proc is None else proc.returncode, "last_step": max(steps, default=0),
            "stderr_tail": "" if proc is None else (proc.stderr or "")[-1500:], "scalars": scalars}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="the sitting's folder (docs/gpu/<gpu>_<date>)")
    parser.add_argument("--parts", default="tests,main,speed", help="of tests, main, speed, learn, limits; in this order")
    parser.add_argument("--budget", type=float, default=560.0, help="seconds for the whole command")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="pytest-xdist workers for the tests")
    parser.add_argument("--main-steps", type=int, default=8000, help="--total-timesteps of the main job's run")
    parser.add_argument("--pairs", default=",".join(PAIRS), help="the speed table's pairs")
    parser.add_argument("--rounds", type=int, default=3, help="the speed table's rounds, as far as the budget goes")
    parser.add_argument("--learn-steps", type=int, default=200_000, help="--total-timesteps of the learning run")
    parser.add_argument("--summary", type=Path, default=None, metavar="FOLDER",
                        help="write FOLDER/speed.md from FOLDER/speed.json, and nothing else")
    opts = parser.parse_args()
    if opts.summary:
        text = speed_table(json.loads((opts.summary / "speed.json").read_text()))
        (opts.summary / "speed.md").write_text(text + "\n")
        print(text)
        return
    if opts.out is None:
        parser.error("give --out (or --summary FOLDER)")
    parts = opts.parts.split(",")
    if unknown := set(parts) - {"tests", "main", "speed", "learn", "limits"}:
        parser.error(f"--parts: no such part {sorted(unknown)}; the parts are tests, main, speed, learn, limits")
    if unknown := set(opts.pairs.split(",")) - set(PAIRS):
        parser.error(f"--pairs: no such pair {sorted(unknown)}; the pairs are {', '.join(PAIRS)}")
    sitting = Sitting(opts.out, opts.budget)
    sitting.log(f"sitting: {command_line()}")
    machine(sitting)
    for part in parts:
        if sitting.left() <= 0:
            sitting.log(f"{part}: left out, the budget is spent")
            continue
        if part == "tests":
            tests(sitting, opts.workers)
        elif part == "main":
            main_job(sitting, opts.main_steps)
        elif part == "speed":
            speed(sitting, opts.pairs.split(","), opts.rounds)
        elif part == "learn":
            learn(sitting, opts.learn_steps)
        elif part == "limits":  # the GPU limit study (benchmarks/gpu_limits.py) into <out>/limits, in what is left
            sitting.log("limits: python -m benchmarks.gpu_limits")
            proc, took = sitting.run([sys.executable, "-m", "benchmarks.gpu_limits", "--out", str(sitting.out / "limits"),
                                      "--budget", f"{sitting.left() - 20:.0f}"], sitting.left())
            sitting.log(f"limits: {'ran out of time' if proc is None else f'exit {proc.returncode}'} ({took:.0f} s)")
    sitting.log(f"sitting: done, {sitting.left():.0f} s of the budget left")


if __name__ == "__main__":
    main()
