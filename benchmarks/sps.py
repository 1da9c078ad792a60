"""Steady-state fps of the scripts, measured the way the contract defines it.

Runs each configuration in turn, `--rounds` times interleaved (so that drift of a
shared machine spreads over all of them), reads `charts/SPS` (the last value: the
average over the whole window after the warm-up) and `charts/warmup_time` from each
run's event file, and prints a table: median fps, min-max, the ratio to the first
configuration (the median over rounds of each round's ratio: both taken in the same round,
so that the machine's drift between rounds cancels), each round's ratio, the verdict against
the first configuration by the tie rule of docs/ (faster or slower when the min-max ranges do not
overlap, a tie when they do), median warm-up. With --out, the table and every run's figures are
also written there (results.md, results.json); --rerender FOLDER rewrites a folder's results.md
from its results.json (its recorded command and machine kept); --summary FOLDER writes the families'
table of docs/speed.md (FOLDER/summary.md) from a sitting of benchmarks/speed/speed.sh.

    python -m benchmarks.sps --rounds 3 --steps 7000 --args="--learning-starts 5000" \
        sac_continuous_action sac_continuous_action_torchcompile \
        "sac_continuous_action_torchcompile --compile"

Each positional argument is a script name in leanrl/ followed by its own flags, optionally after
NAME=value words that set the run's environment ("TORCHINDUCTOR_MAX_AUTOTUNE=1 sac_... --compile"), or,
where NAME is a constant the script declares (SURFACE in leanrl_utils/scripts.py), that constant: a
tuple of the value's comma-separated words, set on the script loaded by its declared loader before its
main() runs. A flag-free choice is compared so, without editing the script:

    python -m benchmarks.sps --rounds 5 --steps 8000 --env-id HalfCheetah-v4 \
        --args="--learning-starts 5000 --measure-after 50" \
        "COMPILED_ACTING=cuda,cpu td3_continuous_action_torchcompile --compile" \
        "COMPILED_ACTING=cuda td3_continuous_action_torchcompile --compile"
"""

import argparse
import itertools
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
from benchmarks.common import header, write_results
from leanrl_utils.events import read_scalars


# Runs a script with some of its declared constants set: loaded by the declared loader, the constants set, then
# run as `python leanrl/<script>.py` runs it (argv: the script's name, the constants as a dict literal, its flags).
WITH_CONSTANTS = """
import ast, sys
from leanrl_utils import harness
from leanrl_utils.scripts import load_script
module = load_script(sys.argv[1])
for name, value in ast.literal_eval(sys.argv[2]).items():
    setattr(module, name, value)
sys.argv[0] = sys.argv[1] + ".py"
harness.run(module.main, module.Args, module.check_args, sys.argv[3:])
"""


def split_config(config: str) -> tuple[dict, dict, str, list[str]]:
    """A configuration's parts: the run's environment and the script's constants (its leading NAME=value words: a
    constant where the script declares NAME, a tuple of the value's comma-separated words), the script, its flags."""
    from leanrl_utils.scripts import SURFACE

    words = shlex.split(config)
    settings = dict(w.split("=", 1) for w in itertools.takewhile(lambda w: re.match(r"^[A-Z_][A-Z0-9_]*=", w), words))
    script, *flags = words[len(settings):]
    constants = {name: tuple(settings.pop(name).split(",")) for name in list(settings) if name in SURFACE.get(script, ())}
    return settings, constants, script, flags


def run_once(config: str, common: list[str], steps: int, env_id: str | None, workdir: Path, env: dict | None = None,
             timeout: float | None = None, folder: Path = REPO / "leanrl") -> dict:
    """One run of a configuration: its fps (the last `charts/SPS`), warm-up and wall-clock time. `env` replaces
    this process's environment as the run's base; past `timeout` seconds, subprocess.TimeoutExpired. The script is
    in `folder` (another commit's leanrl/, for benchmarks/gpu/gpu.py's before part)."""
    # leading NAME=value words set the run's environment (a library's switch, e.g. inductor's settings), or one of
    # the script's declared constants (a flag-free choice of the script, e.g. COMPILED_ACTING)
    settings, constants, script, flags = split_config(config)
    if constants and folder != REPO / "leanrl":
        raise SystemExit(f"{config}: a script's constants are set on this checkout's scripts only, not on {folder}'s")
    run = [sys.executable, "-c", WITH_CONSTANTS, script, repr(constants)] if constants else \
        [sys.executable, str(folder / f"{script}.py")]
    cmd = [*run, "--total-timesteps", str(steps), *common, *flags]
    if env_id:
        cmd += ["--env-id", env_id]
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    start = time.perf_counter()
    # in a process group of its own, ended whole at the timeout (or when this process is interrupted): a compiling
    # run has children (inductor's compile workers) that killing the script alone would leave running
    proc = subprocess.Popen(cmd, cwd=run_dir, env={**(os.environ if env is None else env), **settings},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        kill_group(proc)
        raise
    kill_group(proc)  # what the run left behind, if anything
    proc = subprocess.CompletedProcess(cmd, proc.returncode, None, stderr)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{config} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    scalars = read_scalars(next(run_dir.glob("runs/*")))
    if "charts/SPS" not in scalars:
        raise SystemExit(f"{config}: no charts/SPS logged; give it more --steps")
    warmup = scalars.get("charts/warmup_time", [(0, float("nan"))])[-1][1]
    return {"sps": scalars["charts/SPS"][-1][1], "warmup": warmup, "wall": wall}


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the process group that `proc` leads (started with start_new_session), and wait for `proc`."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group is gone: nothing of it runs
        pass
    proc.wait()


def verdict(sps: list[float], first: list[float]) -> str:
    """The tie rule of docs/: a configuration is faster (slower) than the first only if its slowest
    (fastest) round beat (lost to) the first's fastest (slowest); overlapping min-max ranges are a tie."""
    if min(sps) > max(first):
        return "faster"
    if max(sps) < min(first):
        return "slower"
    return "tie"


def table(data: dict) -> str:
    results, configs = data["runs"], list(data["runs"])
    lines = [f"{data['rounds']} interleaved rounds, {data['steps']} steps each, {data['args'] or 'default flags'}"
             + (f", --env-id {data['env_id']}" if data["env_id"] else ""), "",
             "| configuration | fps (median) | min-max | vs first (median of the rounds' ratios) | per round | "
             "vs first (tie rule) | warm-up (s, median) |", "|---|---|---|---|---|---|---|"]
    first = [r["sps"] for r in results[configs[0]]]
    for config, rs in results.items():
        sps = [r["sps"] for r in rs]
        ratios = [x / y for x, y in zip(sps, first)]  # each round against the first configuration's same round
        warm = statistics.median(r["warmup"] for r in rs)
        lines.append(f"| `{config}` | {statistics.median(sps):.1f} | {min(sps):.1f}-{max(sps):.1f} | "
                     f"{statistics.median(ratios):.2f}x | {', '.join(f'{x:.2f}' for x in ratios)} | "
                     f"{'first' if config == configs[0] else verdict(sps, first)} | {warm:.1f} |")
    return "\n".join(lines)


FAMILIES = {"sac": "SAC", "td3": "TD3", "ppo_continuous": "PPO continuous", "ppo_atari": "PPO Atari", "dqn": "DQN",
            "dqn_atari": "DQN Atari"}


def summary(folder: Path) -> str:
    """The speed table of docs/speed.md from a sitting's folders (FOLDER/<family>/results.json, each run by
    benchmarks/speed/speed.sh with the configurations eager, optimized with no flag, --compile, JAX, in that order):
    per family the median fps, each mode's median ratio to eager and its tie-rule verdict against eager, the
    warm-ups, and --compile against the JAX twin (the median of the rounds' ratios, and the verdict)."""
    lines = ["| family | eager fps | no flag fps (x eager) | `--compile` fps (x eager) | `--compile` warm-up (s) | "
             "JAX fps (x eager) | JAX warm-up (s) | `--compile` / JAX (median of the rounds' ratios) | "
             "`--compile` against JAX | source |", "|---|---|---|---|---|---|---|---|---|---|"]
    for family, name in FAMILIES.items():
        path = folder / family / "results.json"
        if not path.exists():
            continue
        runs = json.loads(path.read_text())["runs"]
        eager, none, compiled, jax = (runs[c] for c in runs)  # speed.sh's order
        sps = {k: [r["sps"] for r in v] for k, v in dict(eager=eager, none=none, compiled=compiled, jax=jax).items()}

        def cell(key):
            ratio = statistics.median(x / y for x, y in zip(sps[key], sps["eager"]))
            return f"{statistics.median(sps[key]):.1f} ({ratio:.2f}x, {verdict(sps[key], sps['eager'])})"
        warm = {k: statistics.median(r["warmup"] for r in v) for k, v in dict(compiled=compiled, jax=jax).items()}
        against = statistics.median(x / y for x, y in zip(sps["compiled"], sps["jax"]))
        lines.append(f"| {name} | {statistics.median(sps['eager']):.1f} | {cell('none')} | {cell('compiled')} | "
                     f"{warm['compiled']:.1f} | {cell('jax')} | {warm['jax']:.1f} | {against:.2f}x | "
                     f"{verdict(sps['compiled'], sps['jax'])} | [results]({family}/results.md) |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", help="script name (in leanrl/) and its flags, quoted together; leading "
                        "NAME=value words set the run's environment, or a constant the script declares")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, help="--total-timesteps of each run")
    parser.add_argument("--env-id", default=None)
    parser.add_argument("--args", default="", help="flags passed to every run")
    parser.add_argument("--out", type=Path, default=None, help="also write results.md and results.json here")
    parser.add_argument("--rerender", type=Path, default=None, metavar="FOLDER",
                        help="rewrite FOLDER/results.md from FOLDER/results.json, and nothing else")
    parser.add_argument("--summary", type=Path, default=None, metavar="FOLDER",
                        help="write FOLDER/summary.md, the families' table, from FOLDER/<family>/results.json")
    opts = parser.parse_args()
    if opts.summary:
        text = summary(opts.summary)
        (opts.summary / "summary.md").write_text(f"Command: `python -m benchmarks.sps --summary {opts.summary}` "
                                                 f"(from the results.json of each family below)\n\n{text}\n")
        print(text)
        return
    if opts.rerender:
        data = json.loads((opts.rerender / "results.json").read_text())
        (opts.rerender / "results.md").write_text(f"{header(data)}\n\n{table(data)}\n")
        return
    if not opts.configs or opts.steps is None:
        parser.error("give the configurations and --steps (or --rerender FOLDER)")

    results: dict[str, list[dict]] = {c: [] for c in opts.configs}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(opts.rounds):
            for config in opts.configs:
                r = run_once(config, shlex.split(opts.args), opts.steps, opts.env_id, Path(tmp))
                results[config].append(r)
                print(f"round {rnd + 1}: {config}: {r['sps']:.1f} fps, warm-up {r['warmup']:.1f} s", file=sys.stderr)

    data = {"rounds": opts.rounds, "steps": opts.steps, "env_id": opts.env_id, "args": opts.args, "runs": results}
    write_results(opts.out, table(data), data)


if __name__ == "__main__":
    main()
