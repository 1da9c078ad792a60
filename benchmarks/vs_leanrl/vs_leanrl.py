"""This project's best mode against LeanRL's modes that run, interleaved rounds, same task and step budget.

    python -m benchmarks.vs_leanrl --leanrl PATH [--pydeps PATH] --pairs sac,ppo_continuous --rounds 3 --out DIR

PATH is a LeanRL checkout (github.com/pytorch-labs/LeanRL), kept outside this repository, with the few
local fixes it needs to run on gymnasium 1.x, envpool 1.x and tensordict 0.15 (docs/vs_leanrl.md lists
them), or the folder `python -m benchmarks.vs_leanrl.fixes CHECKOUT PATH` makes of a clean checkout;
`--pydeps` is a folder put on its PYTHONPATH for what it imports and this project does not install
(torchrl, stable-baselines3). LeanRL logs only to Weights & Biases: its runs go offline and their `speed`
values are read back from the run file. How LeanRL times a run differs per script: most log the fps
since a start step S0 (cumulative); then the fps over the same window as ours (from step `frm` to the
last log) is recovered exactly from the logged values, t = (step - S0) / speed. Its Atari PPO logs the
fps of the last 10 iterations; then the rate over the windows after the first (the warm-up) is used.
Ours is `charts/SPS`, as benchmarks/sps.py reads it. Every round runs every configuration once. A LeanRL
configuration that fails (its run stops with an error) is recorded as failed, with the exception its traceback ends
with, left out of the later rounds, and the rest go on.
"""

import argparse
import glob
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import error_line, write_results
from benchmarks.sps import run_once, verdict
from leanrl_utils.events import wandb_history

# pair: (our best mode, our flags, total steps, [(name, LeanRL script, its flags, S0 or None, from-step or None)])
PAIRS = {
    "sac": ("sac_continuous_action_torchcompile --compile", "--env-id HalfCheetah-v4 --learning-starts 5000", 15000,
            [("leanrl eager", "sac_continuous_action_torchcompile", "", 5003, 6000),
             ("leanrl --compile", "sac_continuous_action_torchcompile", "--compile", 5003, 6000)]),
    "td3": ("td3_continuous_action_torchcompile --compile", "--env-id HalfCheetah-v4 --learning-starts 5000", 15000,
            [("leanrl eager", "td3_continuous_action_torchcompile", "--learning-starts 5000", 5003, 6000),
             ("leanrl --compile", "td3_continuous_action_torchcompile", "--compile --learning-starts 5000", 5003, 6000)]),
    "ppo_continuous": ("ppo_continuous_action_torchcompile --compile", "--env-id HalfCheetah-v4", 81920,
                       [("leanrl eager", "ppo_continuous_action_torchcompile", "", 4096, 20480),
                        ("leanrl --compile", "ppo_continuous_action_torchcompile", "--compile", 4096, 20480)]),
    "ppo_atari": ("ppo_atari_envpool_torchcompile --compile", "--env-id Breakout-v5", 40960,
                  [("leanrl eager", "ppo_atari_envpool_torchcompile", "", None, None),
                   ("leanrl --compile", "ppo_atari_envpool_torchcompile", "--compile", None, None)]),
    "dqn": ("dqn_torchcompile --compile", "--env-id CartPole-v1", 60000,
            [("leanrl eager", "dqn_torchcompile", "", 10003, 20000),
             ("leanrl --compile", "dqn_torchcompile", "--compile", 10003, 20000)]),
}


def settled(path: Path, quiet: float = 1.0, timeout: float = 60.0) -> Path:
    """Wait until the file has not grown for `quiet` seconds: wandb's writer (a service process) can still be
    flushing the last records after the run that logged them has finished."""
    size, since, start = -1, time.monotonic(), time.monotonic()
    while time.monotonic() - start < timeout:
        now = path.stat().st_size
        if now != size:
            size, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        time.sleep(0.1)
    return path


def logged_speeds(path: Path) -> list[tuple[int, float]]:
    """(step, speed) of every wandb.log call that logged `speed`."""
    return [(int(row["_step"]), float(row["speed"])) for row in wandb_history(settled(path)) if "speed" in row]


def standin_speeds(path: Path) -> list[tuple[int, float]]:
    """(step, speed) of every wandb.log call that logged `speed`, from the lines the stand-in for wandb writes
    (benchmarks/vs_leanrl/wandb.py, where wandb is not installed: the GPU machine)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [(int(row["_step"]), float(row["speed"])) for row in rows if "speed" in row]


def window_fps(rows: list[tuple[int, float]], s0: int | None, frm: int | None) -> float:
    """LeanRL's fps over the window from step `frm` (None: from S0) to its last log, from its logged (step, speed)
    values (see the docstring: cumulative since S0, or, with S0 None, windowed, the windows after the first)."""
    if s0 is None:  # windowed values: the mean rate over the windows after the first
        speeds = [s for _, s in rows[1:]]
        if not speeds:
            raise SystemExit(f"LeanRL logged {len(rows)} speed values, the first its warm-up's: give it more steps")
        return len(speeds) / sum(1 / s for s in speeds)
    times = {s0: 0.0} | {step: (step - s0) / speed for step, speed in rows}
    frm = s0 if frm is None else frm
    if frm not in times or not rows or rows[-1][0] <= frm:
        raise SystemExit(f"LeanRL logged its speed at steps {[s for s, _ in rows]}: none at {frm} and after it, "
                         "where its window starts: give it more steps")
    last = rows[-1][0]
    return (last - frm) / (times[last] - times[frm])


class PeerFailed(Exception):
    """A LeanRL configuration whose run failed: what it said, in one line."""


def leanrl_fps(leanrl: Path, pydeps: str, script: str, flags: str, env_id: str, total: int, s0, frm) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": pydeps, "WANDB_MODE": "offline", "WANDB_DIR": tmp}
        cmd = [sys.executable, str(leanrl / "leanrl" / f"{script}.py"), "--env-id", env_id, "--total-timesteps",
               str(total), *shlex.split(flags)]
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise PeerFailed(f"exit code {proc.returncode}: {error_line(proc.stderr)[:200]}")
        rows = logged_speeds(Path(glob.glob(f"{tmp}/wandb/offline-run-*/run-*.wandb")[0]))
    return window_fps(rows, s0, frm)


def checkout(leanrl: Path, pydeps: str) -> dict:
    """What was run as LeanRL: its commit, the local commits on top of the upstream one (the fixes) or, in a folder
    of benchmarks/vs_leanrl/fixes.py, the fixes it applied, changes left uncommitted, and the packages put on its
    path."""
    deps = sorted(p.name.removesuffix(".dist-info") for p in Path(pydeps).glob("*.dist-info")) if pydeps else []
    if (leanrl / "FIXES.json").exists():
        fixed = json.loads((leanrl / "FIXES.json").read_text())
        return {"commit": fixed["commit"], "upstream": fixed["commit"], "local commits": [],
                "fixes": fixes_applied(fixed), "uncommitted": fixed["local changes"], "pydeps": deps}

    def git(*args):
        proc = subprocess.run(["git", "-C", str(leanrl), *args], capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""
    local = git("log", "--format=%h %s", "HEAD", "--not", "--remotes").splitlines()
    return {"commit": git("rev-parse", "HEAD"), "upstream": git("rev-parse", f"HEAD~{len(local)}") if local else "",
            "local commits": local, "uncommitted": git("status", "--porcelain").splitlines(), "pydeps": deps}


def fixes_applied(fixed: dict) -> list[str]:
    """The fixes a FIXES.json of benchmarks/vs_leanrl/fixes.py lists, one line each: 'script: why'."""
    return [f"{script}: {why}" for script, whys in fixed["fixes"].items() for why in whys]


def describe(state: dict) -> list[str]:
    fixes = state["local commits"] or state.get("fixes", [])
    lines = [f"LeanRL: upstream commit {state['upstream'][:7] or state['commit'][:7]}, run at {state['commit'][:7]}"
             + (" with these local fixes:" if fixes else " (no local commit)")]
    lines += [f"- {c}" for c in fixes]
    lines += [f"Uncommitted changes: {', '.join(state['uncommitted']) or 'none'}. On its path: "
              f"{', '.join(state['pydeps']) or 'nothing'}.", ""]
    return lines


def main():
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leanrl", type=Path, required=True, help="a LeanRL checkout, fixed to run (see above)")
    parser.add_argument("--pydeps", default="", help="PYTHONPATH for LeanRL's runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", default=",".join(PAIRS))
    parser.add_argument("--out", type=Path, default=None, help="also write results.md and results.json here")
    opts = parser.parse_args()
    unknown = [p for p in opts.pairs.split(",") if p not in PAIRS]
    if unknown or not (opts.leanrl / "leanrl").is_dir() or opts.rounds < 1:
        parser.error(f"unknown pairs {unknown}" if unknown else "--rounds must be at least 1" if opts.rounds < 1
                     else f"--leanrl {opts.leanrl}: not a LeanRL checkout (no leanrl/ folder)")
    state = checkout(opts.leanrl, opts.pydeps)
    lines, data = describe(state), {}
    for pair in opts.pairs.split(","):
        ours, args, total, theirs = PAIRS[pair]
        env_id, common = shlex.split(args)[1], shlex.split(args)[2:]
        fps, failed = {ours: []} | {name: [] for name, *_ in theirs}, {}
        for rnd in range(opts.rounds):
            with tempfile.TemporaryDirectory() as tmp:
                fps[ours].append(run_once(ours, common, total, env_id, Path(tmp))["sps"])
            for name, script, flags, s0, frm in theirs:
                if name in failed:
                    continue
                try:
                    fps[name].append(leanrl_fps(opts.leanrl, opts.pydeps, script, flags, env_id, total, s0, frm))
                except PeerFailed as err:  # recorded, and the rest go on
                    failed[name] = str(err)
            print(f"{pair} round {rnd + 1}: " + ", ".join(f"{k}: {v[-1]:.1f}" for k, v in fps.items() if v)
                  + "".join(f", {k}: failed" for k in failed), file=sys.stderr, flush=True)
        lines += [f"## {pair} ({env_id}, {total} steps, {opts.rounds} rounds)", "",
                  "| configuration | fps (median) | per round |", "|---|---|---|"]
        lines += [f"| {k} | failed | {failed[k]} |" if k in failed else
                  f"| {k} | {statistics.median(v):.1f} | {', '.join(f'{x:.1f}' for x in v)} |" for k, v in fps.items()]
        ran = [n for n, *_ in theirs if n not in failed]
        if ran:
            best = max(ran, key=lambda n: statistics.median(fps[n]))
            ratios = [x / y for x, y in zip(fps[ours], fps[best])]  # same round
            lines += ["", f"ours / LeanRL's best that ran ({best}): median {statistics.median(ratios):.2f}x, per round "
                      + ", ".join(f"{x:.2f}" for x in ratios) + f"; by the tie rule (min-max ranges), "
                      f"{verdict(fps[ours], fps[best])}", ""]
        else:
            lines += ["", "no LeanRL configuration ran", ""]
        data[pair] = {k: v for k, v in fps.items() if k not in failed} | {k: {"failed": why} for k, why in failed.items()}
    write_results(opts.out, "\n".join(lines), {"leanrl": state, "fps": data})


if __name__ == "__main__":
    main()
