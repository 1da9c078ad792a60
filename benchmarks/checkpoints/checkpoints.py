"""What a checkpoint costs (docs/checkpoints.md): for every script, at its default sizes (replay buffer, rollout,
frame buffer), the checkpoint file's size, the time to write it (the whole of `harness.Checkpoint.save`: the
TensorBoard flush, the state gathered, written and synced to the disk) and to read it back, and the share of a run's
wall-clock that writing one every --checkpoint-every steps (100000, the default) takes at the run's own fps.

    python -m benchmarks.checkpoints --out docs/checkpoints            # every script, one at a time
    python -m benchmarks.checkpoints --only dqn dqn_torchcompile       # some

Each script runs a short run of its default task at its default sizes (fewer steps before learning, so that the run's
fps is the learning loop's) with a checkpoint every few thousand steps; the writes after the first are timed (the
first pays one-time costs: imports, the first allocation of the file's pages). share = write seconds x fps / 100000:
the seconds writing over the seconds the run spends on those steps.
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

from benchmarks.common import REPO, write_results
from leanrl_utils.events import read_scalars

DEFAULT_EVERY = 100_000  # RunFlags.checkpoint_every

# the runner: harness.Checkpoint.save timed, each write appended to a JSON-lines file, then the script as __main__
TIMED = """
import json, os, runpy, sys, time
from leanrl_utils import harness
save, record = harness.Checkpoint.save, sys.argv[1]
def timed(self, step, values, done=False):
    start = time.perf_counter()
    save(self, step, values, done)
    seconds = time.perf_counter() - start
    if self.rank == 0:
        with open(record, "a") as f:
            f.write(json.dumps({"step": step, "seconds": seconds, "bytes": os.path.getsize(self.path)}) + "\\n")
harness.Checkpoint.save = timed
script, sys.argv = sys.argv[2], sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""

OFF_POLICY = ["--total-timesteps", "4000", "--learning-starts", "1000", "--checkpoint-every", "1000"]
PPO_CONTINUOUS = ["--total-timesteps", str(5 * 2048), "--checkpoint-every", "2048"]  # a checkpoint per iteration
PPO_ATARI = ["--total-timesteps", str(8 * 1024), "--checkpoint-every", "1024"]
DQN = ["--total-timesteps", "25000", "--learning-starts", "5000", "--checkpoint-every", "5000"]
DQN_ATARI = ["--total-timesteps", "8000", "--learning-starts", "2000", "--checkpoint-every", "2000"]

# name (the script and its mode flag): (script, flags); every other flag at its default
CONFIGS = {}
for _family, _flags in (("sac_continuous_action", OFF_POLICY), ("td3_continuous_action", OFF_POLICY),
                        ("ppo_continuous_action", PPO_CONTINUOUS), ("ppo_atari_envpool", PPO_ATARI), ("dqn", DQN),
                        ("dqn_atari_envpool", DQN_ATARI)):
    for _script, _mode in ((_family, []), (f"{_family}_torchcompile", []), (f"{_family}_torchcompile", ["--compile"]),
                           (f"{_family}_jax", [])):
        if not _mode or _family in ("sac_continuous_action", "td3_continuous_action"):  # the main job's mode
            CONFIGS[" ".join([_script, *_mode])] = (_script, _flags + _mode)


def measure(name: str, workdir: Path, timeout: float) -> dict:
    """One configuration's short run: its writes (after the first), the file's size, one read back, its fps."""
    script, flags = CONFIGS[name]
    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    times = run_dir / "writes.jsonl"
    cmd = [sys.executable, "-c", TIMED, str(times), str(REPO / "leanrl" / f"{script}.py"), *flags]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, cwd=run_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    writes = [json.loads(line) for line in times.read_text().splitlines()]
    if len(writes) < 3:
        raise SystemExit(f"{name}: {len(writes)} checkpoints written; give it more steps")
    folder = next(run_dir.glob("runs/*"))
    from leanrl_utils import checkpoints

    start = time.perf_counter()
    checkpoints.read(str(folder / checkpoints.FILE))
    read = time.perf_counter() - start
    sps = read_scalars(folder)["charts/SPS"][-1][1]
    seconds = [w["seconds"] for w in writes[1:]]
    write = statistics.median(seconds)
    return {"script": script, "flags": flags, "bytes": writes[-1]["bytes"], "write_s": write,
            "write_s_all": [round(s, 4) for s in seconds], "read_s": read, "sps": sps,
            "share": write * sps / DEFAULT_EVERY}


def table(runs: dict) -> str:
    lines = ["| script | file (MB) | write (s), median | writes (s) | read (s) | fps | share of wall-clock at "
             f"--checkpoint-every {DEFAULT_EVERY} |", "|---|---|---|---|---|---|---|"]
    for name, r in runs.items():
        lines.append(f"| {name} | {r['bytes'] / 1e6:.1f} | {r['write_s']:.3f} | "
                     f"{' '.join(f'{s:.3f}' for s in r['write_s_all'])} | {r['read_s']:.3f} | {r['sps']:.0f} | "
                     f"{100 * r['share']:.2f}% |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(prog="python -m benchmarks.checkpoints", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(CONFIGS), help="configurations (default: every one)")
    parser.add_argument("--out", type=Path, help="write results.md and results.json there")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one run may take")
    opts = parser.parse_args()
    runs = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in opts.only or CONFIGS:
            runs[name] = measure(name, Path(workdir), opts.timeout)
            print(f"{name}: {runs[name]['bytes'] / 1e6:.1f} MB, {runs[name]['write_s']:.3f} s, "
                  f"{100 * runs[name]['share']:.2f}%", flush=True)
    write_results(opts.out, table(runs), {"default_every": DEFAULT_EVERY, "runs": runs})


if __name__ == "__main__":
    main()
