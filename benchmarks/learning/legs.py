"""A long run in legs: a script run to its end with SIGKILLs at chosen steps, each leg going on with `--resume`.

What a preempted machine or an out-of-memory kill does to a run, on purpose: leg 1 starts the run; once its
progress bar passes the first `--kill-at` step, the run is killed with SIGKILL (no checkpoint, no cleanup: what
it did since its last periodic checkpoint is lost); leg 2 goes on with `--resume` from that checkpoint, and so on
until a leg ends the run. Every leg's command, start, end, exit code, the step it was killed at and the step it
resumed from go into `legs_<script>.json`; every leg's raw scalars (the event file it wrote, as a CSV: tag, step,
wall time, value) into `legs/<script>_leg<N>.csv.gz`; and the whole run's scalars as TensorBoard reads them (each leg's points
after the checkpoint it resumed from dropped) into `scalars/`, in the report's layout. The report and its curves
come from the run folders: `python -m leanrl_utils.report ROOT --out OUT`, ROOT the folder above the workdirs, with
a preset.json there for the final return's window and the thresholds (docs/learning/offpolicy_1m/preset.json).

    python -m benchmarks.learning.legs --out docs/learning/offpolicy_1m --workdir /tmp/legs \\
        --script sac_continuous_action_torchcompile --kill-at 347000 --kill-at 712000 -- --compile

The driver can itself be stopped and started again with the same arguments: it goes on with the leg it was at
(a leg whose process is gone is resumed from its checkpoint).
"""

import argparse
import csv
import gzip
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from leanrl_utils.events import read_run
from leanrl_utils.machine import describe_machine
from leanrl_utils.scripts import SCRIPT_DIR


def leg_command(script: str, flags: list[str], resume: str | None) -> tuple[list[str], str]:
    """The leg's command, and the script's path as a user in the repository's root types it."""
    path = os.path.relpath(SCRIPT_DIR / f"{script}.py", SCRIPT_DIR.parent)
    return [sys.executable, str(SCRIPT_DIR / f"{script}.py"), *(["--resume", resume] if resume else flags)], path


def run_leg(cmd: list[str], cwd: Path, kill_at: int | None, env: dict) -> tuple[int, int | None, str]:
    """One leg: the command, killed with SIGKILL once its progress bar passes `kill_at`; (exit code, the step
    it was killed at, the head and the tail of its stderr: the resume line is at its start)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    head, tail, killed = [""], [""], [None]

    def read():
        for chunk in iter(lambda: proc.stderr.read(512), ""):
            head[0] = (head[0] + chunk)[:20000]
            tail[0] = (tail[0] + chunk)[-20000:]
            if kill_at is not None and killed[0] is None:
                steps = [int(m) for m in re.findall(r"(\d+)/\d+ \[", tail[0][-2000:])]
                if steps and max(steps) >= kill_at:
                    killed[0] = max(steps)
                    proc.send_signal(signal.SIGKILL)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait()
    reader.join(timeout=60)
    return code, killed[0], head[0] + "\n" + tail[0]


def write_events_csv(points: dict, path: Path, compress: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if compress else open
    with opener(path, "wt", newline="") as f:
        rows = csv.writer(f)
        rows.writerow(["tag", "step", "wall_time", "value"])
        for tag, values in sorted(points.items()):
            for step, wall, value in values:
                rows.writerow([tag, step, repr(wall), repr(value)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", required=True, help="a script of leanrl/, by name")
    parser.add_argument("--kill-at", type=int, action="append", default=[],
                        help="a step past which the leg's run is killed (SIGKILL); one per leg but the last")
    parser.add_argument("--out", type=Path, required=True, help="where legs.json, legs/ and scalars/ go")
    parser.add_argument("--workdir", type=Path, required=True, help="where the run's folder (runs/) is made")
    parser.add_argument("flags", nargs="*", help="the script's flags (after --)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    record = args.out / f"legs_{args.script}.json"
    state = json.loads(record.read_text()) if record.exists() else {
        "script": args.script, "flags": args.flags, "kill_at": args.kill_at, "legs": [],
        "machine": describe_machine(), "workdir": str(args.workdir),
        "command": "python -m benchmarks.learning.legs " + shlex.join(sys.argv[1:])}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")  # every leg on the same thread count: the same numbers
    state["omp_num_threads"] = env["OMP_NUM_THREADS"]
    while not state["legs"] or state["legs"][-1]["returncode"] != 0:
        n = len(state["legs"])
        runs = sorted((args.workdir / "runs").glob("*")) if (args.workdir / "runs").exists() else []
        resume = f"runs/{runs[-1].name}" if n and runs else None
        cmd, shown = leg_command(args.script, args.flags, resume)
        kill_at = args.kill_at[n] if n < len(args.kill_at) else None
        leg = {"leg": n + 1, "command": shlex.join(["python", shown, *cmd[2:]]), "kill_at": kill_at,
               "started": time.time()}
        print(f"leg {n + 1}: {leg['command']}" + (f" (killed past step {kill_at})" if kill_at else ""), flush=True)
        code, killed, tail = run_leg(cmd, args.workdir, kill_at, env)
        leg |= {"ended": time.time(), "returncode": code, "killed_at_step": killed}
        resumed = re.search(r"resumed runs/\S+ at step (\d+)", tail)
        leg["resumed_from_step"] = int(resumed.group(1)) if resumed else (0 if n == 0 else None)
        if code != 0 and killed is None:
            leg["stderr_tail"] = tail[-3000:]
        state["legs"].append(leg)
        args.out.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(state, indent=1) + "\n")
        print(f"leg {n + 1}: exit code {code}" + (f", killed at step {killed}" if killed else ""), flush=True)
        if code != 0 and killed is None:
            sys.exit(f"leg {n + 1} failed:\n{tail[-3000:]}")
    run_dir = sorted((args.workdir / "runs").glob("*"))[-1]
    # each leg's own event file, raw (the points a later leg's resume drops included)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for i, events in enumerate(sorted(run_dir.glob("events.out.tfevents.*"))):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        points = {tag: [(e.step, e.wall_time, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
        write_events_csv(points, args.out / "legs" / f"{args.script}_leg{i + 1}.csv.gz", compress=True)
    # the whole run as TensorBoard shows it, in the report's layout
    from leanrl_utils import report

    log = read_run(run_dir)
    run = report.Run(run_dir, args.script.removesuffix("_torchcompile").removesuffix("_jax"), report.mode_of(log.hparams),
                     log.hparams.get("env_id", "?"), log.hparams.get("seed", "?"), log)
    report.write_scalars_csv(run, args.out / "scalars" / f"{run.algo}__{run.mode}__seed{run.seed}.csv")
    print(f"done: {record}", flush=True)


if __name__ == "__main__":
    main()
