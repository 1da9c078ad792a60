"""Does the PPO Atari twin's `--async-envs` play the synchronous loop's run? Two checks, from the twin's own code:

1. the twin's EnvHalves (two envpools seeded as one pool's halves) against one pool of all the envs, both stepped
   with the same random actions: the steps whose frames, rewards and done flags all came out equal;
2. the twin run twice on one seed, without and with `--async-envs` (each time with the flags of one `--flags`
   word, none by default): per logged tag (timings aside), the values logged, how many are identical, and the
   largest absolute difference.

    python -m benchmarks.optimizations.same_run --num-envs 8 --steps 300 --run-steps 2048 --flags "" --flags=--compile
"""

import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import REPO, load_script, write_results
from leanrl_utils.events import read_scalars

SCRIPT = "ppo_atari_envpool_torchcompile"
TIMINGS = ("charts/SPS", "charts/warmup_time", "charts/start")


def envs_agree(env_id: str, num_envs: int, steps: int, seed: int) -> int:
    """The steps, of `steps` random ones, on which the halves returned what one pool returned."""
    twin = load_script(SCRIPT)
    args = twin.Args(env_id=env_id, num_envs=num_envs, seed=seed)
    one, halves = twin.make_envs(args), twin.EnvHalves(args, seed)  # EnvHalves resets its halves itself
    one.reset()
    rng, agreed = np.random.default_rng(seed), 0
    for _ in range(steps):
        actions = rng.integers(0, one.single_action_space.n, num_envs)
        whole = one.step(actions)[:4]
        for pool, sl in zip(halves.pools, halves.slices):
            pool.send(actions[sl])
        parts = [pool.recv()[:4] for pool in halves.pools]
        agreed += all(np.array_equal(w, np.concatenate([p[i] for p in parts])) for i, w in enumerate(whole))
    return agreed


def logged(argv: list[str], folder: Path) -> dict:
    """The scalars of one run of the twin (timings aside), run in `folder`."""
    folder.mkdir(parents=True)
    proc = subprocess.run([sys.executable, str(REPO / "leanrl" / f"{SCRIPT}.py"), *argv], cwd=folder,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{SCRIPT} {shlex.join(argv)}: exit code {proc.returncode}: {proc.stderr[-500:]}")
    run, = (folder / "runs").iterdir()
    return {tag: points for tag, points in read_scalars(run).items() if tag not in TIMINGS}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-id", default="Breakout-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=300, help="random steps of the environments' check")
    parser.add_argument("--run-steps", type=int, default=2048, help="--total-timesteps of each run")
    parser.add_argument("--num-steps", type=int, default=64, help="the runs' --num-steps")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--flags", action="append", help="the runs' extra flags, one set a word (default: none)")
    parser.add_argument("--out", type=Path, default=None, help="also write results.md and results.json here")
    opts = parser.parse_args()
    if opts.num_envs < 2 or opts.num_envs % 2:
        parser.error("--num-envs must be even and at least 2")

    agreed = envs_agree(opts.env_id, opts.num_envs, opts.steps, opts.seed)
    lines = [f"Environments ({opts.env_id}, {opts.num_envs} envs, seed {opts.seed}): the halves returned one pool's "
             f"frames, rewards and done flags on {agreed} of {opts.steps} random steps.", ""]
    data = {"envs": {"steps": opts.steps, "agreed": agreed}, "runs": {}}
    base = ["--env-id", opts.env_id, "--num-envs", str(opts.num_envs), "--num-steps", str(opts.num_steps),
            "--total-timesteps", str(opts.run_steps), "--num-minibatches", "2", "--update-epochs", "2",
            "--seed", str(opts.seed)]
    with tempfile.TemporaryDirectory() as tmp:
        for i, flags in enumerate(opts.flags or [""]):
            sync = logged(base + shlex.split(flags), Path(tmp) / f"{i}-sync")
            halves = logged(base + shlex.split(flags) + ["--async-envs"], Path(tmp) / f"{i}-async")
            rows = {}
            for tag in sorted(set(sync) | set(halves)):
                a, b = [v for _, v in sync.get(tag, [])], [v for _, v in halves.get(tag, [])]
                same = sum(x == y for x, y in zip(a, b)) if len(a) == len(b) else 0
                rows[tag] = {"values": len(a), "values_async": len(b), "identical": same,
                             "max_abs_diff": max((abs(x - y) for x, y in zip(a, b)), default=0.0)}
            data["runs"][flags] = rows
            lines += [f"Runs: `{SCRIPT}.py {shlex.join(base + shlex.split(flags))}` without and with `--async-envs`", "",
                      "| tag | values | identical | largest absolute difference |", "|---|---|---|---|"]
            lines += [f"| {tag} | {r['values']} | {r['identical']} | {r['max_abs_diff']:.3g} |" for tag, r in rows.items()]
            lines.append("")
    write_results(opts.out, "\n".join(lines), data)


if __name__ == "__main__":
    main()
