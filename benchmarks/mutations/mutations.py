"""Planted bugs that the tests must see: each a small, plausible change to an update, a loss or a buffer, applied
(a) to the optimized twin alone, (b) to the eager script and its twin together, in a copy of the repository; the
tests that hold its family run on the copy, and the mutant is caught when one of them fails.

    python -m benchmarks.mutations --out docs/mutations              # every mutant, both ways
    python -m benchmarks.mutations --only td3-noise-clip --ways twin  # one

A twin-only bug must fail a test: the twin is compared with its eager script (their runs, which draw the same random
numbers) and its JAX twin with the eager script's update. A bug in both PyTorch scripts leaves them agreeing: the
JAX twin, a third implementation, is compared with the eager script's update from the same weights, batch and random
draws, so a common-mode bug there is seen, where the update's numbers show it; where they cannot (a change with no
effect on what is computed), the page says why. The tests of a family run with `-x` (the first failure ends them),
the quick tier first and, for a mutant it did not catch, the slow tier (the learning checks). Nothing is timed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Mutant:
    name: str
    family: str
    what: str
    eager: tuple[str, str]  # (old, new) in the eager script
    twin: tuple[str, str]  # (old, new) in the optimized twin (None: the same as the eager script's)
    # why no test can see it, where the change computes exactly what the script computed (a run's logs identical)
    equivalent: str = ""

    def patches(self, way: str) -> dict[str, tuple[str, str]]:
        eager, twin = FAMILIES[self.family][0], FAMILIES[self.family][0] + "_torchcompile"
        out = {twin: self.twin or self.eager}
        if way == "both":
            out[eager] = self.eager
        return out


# family: (eager script, the tests that hold it: files and -k)
FAMILIES = {
    "sac": ("sac_continuous_action", ["tests/test_offpolicy.py", "tests/test_jax_offpolicy.py"], "sac"),
    "td3": ("td3_continuous_action", ["tests/test_offpolicy.py", "tests/test_jax_offpolicy.py"], "td3"),
    "dqn": ("dqn", ["tests/test_dqn.py", "tests/test_jax_dqn.py"], "not atari"),
    "ppo_continuous": ("ppo_continuous_action", ["tests/test_ppo_continuous.py", "tests/test_jax_ppo.py"],
                       "not atari and not Atari"),
    "ppo_atari": ("ppo_atari_envpool", ["tests/test_ppo_atari.py", "tests/test_jax_ppo.py"], "atari or Atari"),
    "dqn_atari": ("dqn_atari_envpool", ["tests/test_dqn.py", "tests/test_jax_dqn.py"], "atari"),
}

MUTANTS = [
    Mutant("sac-log-std-max", "sac", "a constant in its third significant digit: LOG_STD_MAX 2 -> 2.01",
           ("LOG_STD_MAX = 2\n", "LOG_STD_MAX = 2.01\n"), None),
    Mutant("sac-alpha-loss-sign", "sac", "the temperature's loss with its sign flipped",
           ("alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()",
            "alpha_loss = (log_alpha.exp() * (log_pi + target_entropy)).mean()"), None),
    Mutant("sac-policy-period", "sac", "the delayed actor step's period: one actor step fewer per policy step",
           ("for _ in range(args.policy_frequency):", "for _ in range(args.policy_frequency - 1):"), None),
    Mutant("sac-buffer-off-by-one", "sac", "an off-by-one in the buffer's index: a batch may hold the unwritten row",
           ("idx = torch.randint(0, self.size if self.full else self.pos, (batch_size,))",
            "idx = torch.randint(0, self.size if self.full else self.pos + 1, (batch_size,))"),
           ("return torch.randint(0, self.size if self.full else self.pos, (batch_size,))",
            "return torch.randint(0, self.size if self.full else self.pos + 1, (batch_size,))")),
    Mutant("sac-detach-removed", "sac", "a detach removed: alpha carries the temperature's graph into the actor's loss",
           ("alpha = log_alpha.exp().item() if args.autotune else args.alpha",
            "alpha = log_alpha.exp() if args.autotune else args.alpha"),
           ("alpha = log_alpha.detach().exp() if args.autotune else args.alpha",
            "alpha = log_alpha.exp() if args.autotune else args.alpha"),
           "equivalent: the optimized script takes each optimizer's gradients with torch.autograd.grad over that "
           "optimizer's own weights, and the eager script zeroes the temperature's gradient before its backward pass, "
           "so the graph left attached reaches no step; the twin's run with it logged exactly the twin's numbers "
           "(Pendulum-v1, 600 steps, seed 3)"),
    Mutant("td3-noise-clip", "td3", "the target smoothing noise clipped at twice --noise-clip",
           ("-args.noise_clip, args.noise_clip", "-2 * args.noise_clip, 2 * args.noise_clip"), None),
    Mutant("td3-policy-noise", "td3", "a constant in its third significant digit: the smoothing noise's scale x 1.01",
           ("* args.policy_noise).clamp(", "* args.policy_noise * 1.01).clamp("), None),
    Mutant("td3-actor-target-skipped", "td3", "the actor's target network never updated",
           ("            for param, target_param in zip(actor.parameters(), target_actor.parameters()):\n"
            "                target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)\n", ""),
           ("                torch._foreach_lerp_(list(target_actor.parameters()), list(actor.parameters()), args.tau)\n",
            "")),
    Mutant("dqn-gamma", "dqn", "a constant in its third significant digit: the TD target's discount x 0.99",
           ("args.gamma * target_max", "args.gamma * 0.99 * target_max"), None),
    Mutant("dqn-target-skipped-once", "dqn", "the first target update skipped",
           ("    def update_target():  # the target network moves toward the Q-network by tau (tau = 1: a hard copy)\n",
            "    skipped = []\n\n"
            "    def update_target():  # the target network moves toward the Q-network by tau (tau = 1: a hard copy)\n"
            "        if not skipped:\n            return skipped.append(True)\n"), None),
    Mutant("dqn-mean-not-max", "dqn", "the target's max over actions taken as a mean",
           ("target_max, _ = target_network(data[\"next_observations\"]).max(dim=1)",
            "target_max = target_network(data[\"next_observations\"]).mean(dim=1)"), None),
    Mutant("ppo-gae-lambda-gamma", "ppo_continuous", "GAE's lambda swapped for gamma",
           ("return delta, gamma * gae_lambda * nextnonterminal", "return delta, gamma * gamma * nextnonterminal"), None),
    Mutant("ppo-vf-coef", "ppo_continuous", "the value loss's coefficient x 1.01",
           ("v_loss * args.vf_coef", "v_loss * args.vf_coef * 1.01"), None),
    Mutant("ppo-normalization-frozen", "ppo_continuous", "the observation normalization's statistics never updated",
           ("        env = gym.wrappers.NormalizeObservation(env)\n",
            "        env = gym.wrappers.NormalizeObservation(env)\n        env.update_running_mean = False\n"), None),
    Mutant("ppo-value-clip", "ppo_continuous", "the value clipping's bound x 1.01",
           ("                -args.clip_coef,\n                args.clip_coef,\n",
            "                -args.clip_coef * 1.01,\n                args.clip_coef * 1.01,\n"), None),
    Mutant("ppo-atari-gae-lambda-gamma", "ppo_atari", "GAE's lambda swapped for gamma",
           ("advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam",
            "advantages[t] = lastgaelam = delta + gamma * gamma * nextnonterminal * lastgaelam"),
           ("return delta, gamma * gae_lambda * nextnonterminal", "return delta, gamma * gamma * nextnonterminal")),
    Mutant("ppo-atari-ent-coef", "ppo_atari", "the entropy's coefficient x 1.01",
           ("pg_loss - args.ent_coef * entropy_loss", "pg_loss - args.ent_coef * 1.01 * entropy_loss"), None),
    Mutant("ppo-atari-reset-steps-counted", "ppo_atari", "envpool's reset steps weighed in the losses (0.01 of one)",
           ("mb_valid = 1.0 - mb[\"dones\"]", "mb_valid = 1.0 - 0.99 * mb[\"dones\"]"), None),
    Mutant("dqn-atari-next-stack-off-by-one", "dqn_atari", "an off-by-one in the frame buffer: the next observation's "
           "stack one slot late", ("next_observations=self.stacks((slots + 1) % self.size)",
                                   "next_observations=self.stacks((slots + 2) % self.size)"), None),
    Mutant("dqn-atari-gamma", "dqn_atari", "a constant in its third significant digit: the TD target's discount x 0.99",
           ("args.gamma * target_max", "args.gamma * 0.99 * target_max"), None),
]


def copy_repo(dest: Path) -> None:
    """The working tree's tracked and untracked (not ignored) files, copied to `dest`."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def apply(copy: Path, patches: dict[str, tuple[str, str]]) -> None:
    for script, (old, new) in patches.items():
        path = copy / "leanrl" / f"{script}.py"
        text = path.read_text()
        if text.count(old) < 1:
            raise SystemExit(f"{script}.py: the mutant's text is not there: {old[:80]!r}")
        path.write_text(text.replace(old, new))


# Tests of a family that cannot see a change in what an update computes, left out of a mutant's run: a script's runs
# with every flag (they check that each runs and logs), the same seed's numbers twice (a bug is deterministic), the
# buffer's size in memory, a checkpoint's conversion
BLIND = "not every_flag_combination and not same_seed_same_numbers and not fits_in_8_gb and not checkpoint_conversion"


def run_tests(copy: Path, family: str, tier: str, workers: int) -> tuple[bool, str, float]:
    """The family's tests on the copy (tier "quick" or "slow"): (caught, the first failure's line, seconds)."""
    _, files, selection = FAMILIES[family]
    marks = "not slow and not gpu" if tier == "quick" else "slow and not gpu"
    cmd = [sys.executable, "-m", "pytest", *files, "-k", f"({selection}) and {BLIND}", "-m", marks, "-x", "-q",
           "-p", "no:cacheprovider",
           "-p", "no:randomly", "--durations=0"] + (["-n", str(workers), "--dist", "loadfile"] if workers > 1 else [])
    env = {**os.environ, "PYTHONPATH": str(copy)}
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    failed = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    if proc.returncode not in (0, 1, 5):  # 5: nothing selected (no slow test of the family)
        raise SystemExit(f"pytest could not run the tests of {family} ({proc.returncode}):\n{proc.stdout[-3000:]}")
    return bool(failed), (failed[0] if failed else ""), seconds


def main():
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mutations", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="mutants by name (default: every one)")
    parser.add_argument("--ways", nargs="*", default=["twin", "both"], choices=["twin", "both"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", action="store_true", help="only write --out's results.md from its results.json")
    opts = parser.parse_args()
    if opts.report:
        return render(opts.out)
    chosen = [m for m in MUTANTS if not opts.only or m.name in opts.only]
    for family in dict.fromkeys(m.family for m in chosen):  # each family's tests pass on the unchanged copy first
        with tempfile.TemporaryDirectory() as tmp:
            copy_repo(Path(tmp))
            failed, line, seconds = run_tests(Path(tmp), family, "quick", opts.workers)
        if failed:
            raise SystemExit(f"{family}: the tests fail without a mutant ({line}); nothing is measured")
        print(f"{family}: its tests pass unchanged ({seconds:.0f} s)", flush=True)
    for mutant in chosen:
        for way in opts.ways:
            with tempfile.TemporaryDirectory() as tmp:
                copy = Path(tmp)
                copy_repo(copy)
                apply(copy, mutant.patches(way))
                caught, line, seconds = run_tests(copy, mutant.family, "quick", opts.workers)
                tier = "quick"
                if not caught:
                    caught, line, more = run_tests(copy, mutant.family, "slow", opts.workers)
                    seconds, tier = seconds + more, "slow"
            result = {"family": mutant.family, "what": mutant.what, "way": way, "caught": caught, "by": line,
                      "tier": tier, "seconds": round(seconds)}
            print(f"{mutant.name} ({way}): {'caught by ' + line if caught else 'NOT CAUGHT'} ({seconds:.0f} s)",
                  flush=True)
            if opts.out:
                write(opts.out, f"{mutant.name} | {way}", result)


def write(out: Path, key: str, result: dict) -> None:
    """One mutant's result into out/results.json (and results.md), merged with what is there under a lock: several
    commands (each with its --only) may share a folder, each listed with its machine and day."""
    import fcntl

    from benchmarks.common import command_line
    from leanrl_utils.machine import describe_machine

    out.mkdir(parents=True, exist_ok=True)
    lock = os.open(out, os.O_RDONLY)  # the folder itself is the lock
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = out / "results.json"
        data = json.loads(path.read_text()) if path.exists() else {"commands": [], "mutants": {}}
        command = {"command": command_line(), "machine": describe_machine().get("cpu", "?"),
                   "day": time.strftime("%Y-%m-%d")}
        if command not in data["commands"]:
            data["commands"].append(command)
        data["mutants"][key] = result
        data["mutants"] = {f"{m.name} | {way}": data["mutants"][f"{m.name} | {way}"] for m in MUTANTS
                           for way in ("twin", "both") if f"{m.name} | {way}" in data["mutants"]}  # the list's order
        path.write_text(json.dumps(data, indent=1) + "\n")
        render(out)
    finally:
        os.close(lock)  # and the lock with it


def render(out: Path) -> None:
    """out/results.md from out/results.json."""
    data = json.loads((out / "results.json").read_text())
    same = {m.name for m in MUTANTS if m.equivalent}
    done = {way: [r for k, r in data["mutants"].items() if r["way"] == way and k.split(" | ")[0] not in same]
            for way in ("twin", "both")}
    runs = {}  # a command over midnight is listed once, with both days
    for c in data["commands"]:
        runs.setdefault((c["command"], c["machine"]), []).append(c["day"])
    lines = [*(f"Command: `{command}` ({machine}, {' to '.join(sorted(set(days)))})"
               for (command, machine), days in runs.items()), "",
             *(f"Caught, {label}: {sum(r['caught'] for r in done[way])} of {len(done[way])}" for way, label in
               (("twin", "the optimized twin alone"), ("both", "both PyTorch scripts"))),
             f"Equivalent mutants (no change in what is computed), apart: {len(same)}", "",
             "| mutant | family | what | way | caught | by | tests run (s, wall-clock) |",
             "|---|---|---|---|---|---|---|"]
    for k, r in data["mutants"].items():
        by = r["by"].removeprefix("FAILED ").removeprefix("ERROR ").split(" - ")[0] or "-"
        seen = "yes" if r["caught"] else "no, equivalent" if k.split(" | ")[0] in same else "no"
        lines.append(f"| {k.split(' | ')[0]} | {r['family']} | {r['what']} | {r['way']} | {seen} | {by} | "
                     f"{r['seconds']} ({r['tier']}) |")
    (out / "results.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
