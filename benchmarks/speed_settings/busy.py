"""The first run and the main job on a busy machine and on an idle one, for the thread settings that matter.

    python -m benchmarks.speed_settings.busy --rounds 2 --out docs/speed_settings/busy

A busy machine is the newcomer's usual one (a laptop doing other work, a shared server): here, `--load`
processes that each spin a core in a Python loop, started before a run and stopped after it (two on a 2-core
machine: every core taken). Each task runs in each setting, idle and busy in turn, round after round (each
round starting its settings one further along, so that no setting always follows the same one):
- `2 threads (before)`: `OMP_NUM_THREADS` pinned to the cores, what the scripts ran with before they chose
  their threads (torch's default: one thread per core);
- `1 thread`: `OMP_NUM_THREADS=1`;
- `default`: nothing set: the harness's `pick_threads` (every script's), which cuts torch's threads to the cores other programs
  leave free when the run starts.
The tasks: the README's first run (SAC on Pendulum-v1 with `--compile`, learning from step 1000) and its main
job (SAC on HalfCheetah-v4 with `--compile --cudagraphs`, learning from step 5000), each for `--updates`
updates; fps is `charts/SPS` after the warm-up, the warm-up is `charts/warmup_time` (compilation). Every run
compiles from a cold cache (a fresh `TORCHINDUCTOR_CACHE_DIR`), as a first run on a fresh machine does.
Then the README's first run whole, as written, in the default setting, idle and busy (`--whole-rounds` times
each): its wall-clock time from start to exit, the figure the README quotes.
Writes results.md and results.json into --out; `--rerender FOLDER` rewrites a folder's results.md from its
results.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import header, write_results
from benchmarks.sps import run_once, verdict

TASKS = {  # task: (script and flags, --env-id, steps before learning)
    "first run": ("sac_continuous_action_torchcompile --compile", "Pendulum-v1", 1000),
    "main job": ("sac_continuous_action_torchcompile --compile --cudagraphs", "HalfCheetah-v4", 5000),
}
FIRST_RUN = ["--compile", "--env-id", "Pendulum-v1", "--total-timesteps", "5000", "--learning-starts", "1000"]


def settings(cores: int) -> dict[str, dict]:
    return {f"{cores} threads (before)": {"OMP_NUM_THREADS": str(cores)}, "1 thread": {"OMP_NUM_THREADS": "1"},
            "default": {}}


class Load:
    """`n` processes that each keep a core busy, for as long as the context lasts."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        time.sleep(1.0)  # running before the measured run starts (and reads /proc/stat)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def cold_env(extra: dict, tmp: Path) -> dict:
    """The run's environment: this one, less any thread setting of ours, plus the setting, with an empty
    compile cache of its own."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    return {**env, **extra, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(dir=tmp)}


def whole_first_run(env: dict, workdir: Path) -> float:
    """The README's first run as written: its seconds from start to exit."""
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[2] / "leanrl" /
                                           "sac_continuous_action_torchcompile.py"), *FIRST_RUN],
                          cwd=run_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the first run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return time.perf_counter() - start


def table(data: dict) -> str:
    lines = [f"{data['rounds']} rounds, idle and busy in turn; busy: {data['load']} processes spinning a core each; "
             f"{data['updates']} updates per run after the warm-up's", "",
             "| task | machine | setting | fps (median) | min-max | vs the first setting (median of the rounds' "
             "ratios) | vs the first setting (tie rule) | warm-up (s, median) |", "|---|---|---|---|---|---|---|---|"]
    for task, by_state in data["runs"].items():
        for state, by_setting in by_state.items():
            first = next(iter(by_setting))
            base = [r["sps"] for r in by_setting[first]]
            for setting, runs in by_setting.items():
                sps = [r["sps"] for r in runs]
                ratio = statistics.median(x / y for x, y in zip(sps, base))
                lines.append(f"| {task} | {state} | {setting} | {statistics.median(sps):.1f} | {min(sps):.1f}-"
                             f"{max(sps):.1f} | {ratio:.2f}x | {'first' if setting == first else verdict(sps, base)} | "
                             f"{statistics.median(r['warmup'] for r in runs):.1f} |")
    if data.get("whole"):
        lines += ["", "The README's first run whole, as written, default setting (seconds from start to exit):", "",
                  "| machine | seconds (median) | min-max | runs |", "|---|---|---|---|"]
        for state, walls in data["whole"].items():
            lines.append(f"| {state} | {statistics.median(walls):.1f} | {min(walls):.1f}-{max(walls):.1f} | {len(walls)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--updates", type=int, default=400, help="updates per run after learning starts")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help="busy processes (default: one per core)")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--whole-rounds", type=int, default=2, help="runs of the whole first run per machine state")
    parser.add_argument("--states", default="idle,busy", help="the machine's states to measure, of idle and busy")
    parser.add_argument("--settings", default=None, help="the settings to compare (default: all), comma-separated")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rerender", type=Path, default=None, metavar="FOLDER",
                        help="rewrite FOLDER/results.md from its results.json (its command and machine kept), and stop")
    opts = parser.parse_args()
    if opts.rerender:
        data = json.loads((opts.rerender / "results.json").read_text())
        (opts.rerender / "results.md").write_text(f"{header(data)}\n\n{table(data)}\n")
        return
    cores = os.cpu_count() or 1
    states = {s: {"idle": 0, "busy": opts.load}[s] for s in opts.states.split(",")}
    chosen = {name: env for name, env in settings(cores).items()
              if opts.settings is None or name in opts.settings.split(",")}
    runs = {t: {s: {name: [] for name in chosen} for s in states} for t in opts.tasks.split(",")}
    whole = {s: [] for s in states}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for rnd in range(opts.rounds):
            for state, load in states.items():
                for task in runs:
                    config, env_id, starts = TASKS[task]
                    names = list(chosen)
                    names = names[rnd % len(names):] + names[:rnd % len(names)]  # each round starts with another
                    for name in names:
                        extra = chosen[name]
                        with Load(load):
                            r = run_once(config, ["--learning-starts", str(starts), "--measure-after", "20"],
                                         starts + opts.updates, env_id, tmp, env=cold_env(extra, tmp))
                        runs[task][state][name].append(r)
                        print(f"round {rnd + 1} {state} {task} {name}: {r['sps']:.1f} fps, warm-up {r['warmup']:.1f} s",
                              file=sys.stderr)
        for rnd in range(opts.whole_rounds):
            for state, load in states.items():
                with Load(load):
                    whole[state].append(whole_first_run(cold_env({}, tmp), tmp))
                print(f"whole first run {rnd + 1} {state}: {whole[state][-1]:.1f} s", file=sys.stderr)
    data = {"rounds": opts.rounds, "updates": opts.updates, "load": opts.load, "runs": runs,
            "whole": {s: w for s, w in whole.items() if w}}
    write_results(opts.out, table(data), data)


if __name__ == "__main__":
    main()
