"""The honest differences the comparison tests absorb, measured: `tests/tolerances.json`, `tests/tolerances.md`.

Each comparison of helpers.COMPARISONS, between two runs that draw the same random numbers (an optimized script
against its eager twin, `--compile` against no flag), is run here on several seeds, with the flags of its test, and
every logged value of the two runs is compared: per window (the first updates, up to the step its test compares
tightly; then the whole run), the largest relative difference (where the reference value is at least helpers.SMALL
in size) and the largest absolute one (where it is smaller). The tests allow helpers.MULTIPLE times the largest
of these (`helpers.measured`), so that a bug that moves a logged value by more than rounding does is seen.

Rounding depends on the CPU's kernels: `--avx2` runs with ATen's, inductor's, oneDNN's and MKL's AVX2 kernels on a
machine with AVX-512 (the CI machine may have either), and the table holds both.

    python tests/measure_tolerances.py                  # seeds 3 4 and its test's, one thread per run (as the suite's 2 workers)
    python tests/measure_tolerances.py --avx2           # the same with AVX2 kernels: merged into the table
    python tests/measure_tolerances.py --table          # tests/tolerances.md from tests/tolerances.json

Runs go one at a time, each in a temporary folder; nothing here is timed.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
if "--avx2" in sys.argv:  # before torch and the fork server start: what every run's kernels are chosen from
    os.environ.update(AVX2)
    # and a compile cache of their own: inductor's cache read back the kernels compiled for AVX-512 into AVX2's runs
    # (SAC's --compile then logged NaN at step 300; with a cache of its own it learns as without AVX2)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="leanrl-inductor-avx2-")

import helpers  # noqa: E402
from helpers import ABS_FLOOR, COMPARISONS, CONV_FLOOR, MULTIPLE, REL_FLOOR, SMALL, TOLERANCES, measured, run_script, with_flag  # noqa: E402

from leanrl_utils.machine import describe_machine  # noqa: E402

def differences(a: dict, b: dict, tags: list[str], upto: int) -> dict:
    """Per window ("first", "rest"), the largest relative and absolute differences of `a` against `b`."""
    out = {w: {"rel": 0.0, "abs": 0.0, "points": 0} for w in ("first", "rest")}  # rest: after the first window
    for tag in tags:
        xs, ys = a.get(tag, []), b.get(tag, [])
        assert [s for s, _ in xs] == [s for s, _ in ys], f"{tag}: logged at different steps"
        for (step, x), (_, y) in zip(xs, ys):
            w = out["first" if step <= upto else "rest"]
            w["points"] += 1
            if abs(y) >= SMALL:
                w["rel"] = max(w["rel"], abs(x - y) / abs(y))
            else:
                w["abs"] = max(w["abs"], abs(x - y))
    return out


# The comparisons of a JAX twin's update with the eager script's, from the same weights, batch and random draws: their
# tests, run once each (their own seeds) with every np.testing.assert_allclose recording what it saw (conftest.py);
# not the whole runs compared (a twin draws its own random numbers) nor a seed's run twice (compared exactly)
UPDATE_TESTS = ["tests/test_jax_offpolicy.py", "tests/test_jax_dqn.py", "tests/test_jax_ppo.py"]


def measure_updates(kernels: str) -> dict:
    """Per test and line: the tolerance it allows and the largest differences it saw (over its calls)."""
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "closeness.jsonl"
        env = {**os.environ, "LEANRL_RECORD_CLOSENESS": str(record), "OMP_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-m", "pytest", *UPDATE_TESTS, "-q", "-m", "not slow", "-k",
                               "not short_run_logs and not same_seed_same_numbers", "-p",
                               "no:cacheprovider"], cwd=TOLERANCES.parent.parent, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"the update tests failed:\n{proc.stdout[-3000:]}")
        out = {}
        for line in record.read_text().splitlines():
            r = json.loads(line)
            # a helper's line serves callers with different tolerances: one row per tolerance
            key = f"{r['test'].split('::', 1)[1]} | {r['site']} rtol {r['rtol']:g} atol {r['atol']:g} | {kernels}"
            seen = out.setdefault(key, {"rtol": r["rtol"], "atol": r["atol"], "rel": 0.0, "abs": 0.0, "used": 0.0,
                                        "calls": 0})
            seen["rel"], seen["abs"] = max(seen["rel"], r["rel"]), max(seen["abs"], r["abs"])
            seen["used"] = max(seen["used"], r["used"])
            seen["calls"] += 1
    return out


def table(data: dict) -> str:
    """tests/tolerances.md: per comparison, the largest differences measured and the tolerances the tests allow."""
    lines = ["# Tolerances of the comparison tests, from measurement", "",
             f"Made by `python tests/measure_tolerances.py --seeds 3 4` (then with `--avx2`) on {data['day']}, machine: "
             + ", ".join(f"{k} {v}" for k, v in data["machine"].items()) + ".", "",
             f"Largest difference over seeds {', '.join(map(str, data['seeds']))}, one thread per run, this CPU's "
             f"kernels and AVX2's; relative where the reference value is at least {SMALL} in size, absolute below. "
             f"The first updates (up to the step given) allow {MULTIPLE} times the largest measured there "
             f"(helpers.measured; floors: relative {REL_FLOOR:g}, absolute {ABS_FLOOR:g}, and DQN Atari's {CONV_FLOOR:g}: "
             "other CPUs' convolution kernels); the whole run allows what it "
             f"is there for (helpers.Comparison.whole) or {MULTIPLE} times the largest measured over it, the looser "
             "(training amplifies rounding, by how much depends on the CPU).", "",
             "| comparison | first updates: up to step | measured rel / abs | allowed rel / abs | whole run: measured "
             "rel / abs | allowed rel / abs | runs |", "|---|---|---|---|---|---|---|"]
    for name, comparison in COMPARISONS.items():
        found = [m for key, m in data["measurements"].items() if key.split(" | ")[0] == name]
        if not found:
            continue
        first, whole = measured(name, "first"), measured(name, "whole")
        worst = {"first": (max(m["first"]["rel"] for m in found), max(m["first"]["abs"] for m in found)),
                 "whole": (max(m[w]["rel"] for m in found for w in ("first", "rest")),
                           max(m[w]["abs"] for m in found for w in ("first", "rest")))}
        lines.append(f"| {name} | {comparison.upto} | {worst['first'][0]:.1e} / {worst['first'][1]:.1e} | "
                     f"{first['rtol']:.1e} / {first['atol']:.1e} | {worst['whole'][0]:.1e} / {worst['whole'][1]:.1e} | "
                     f"{whole['rtol']:.1e} / {whole['atol']:.1e} | {len(found)} |")
    updates = {}
    for key, u in data.get("updates", {}).items():
        test, site, _ = key.split(" | ")
        seen = updates.setdefault((test, site), dict(u))
        seen["rel"], seen["abs"], seen["used"] = max(seen["rel"], u["rel"]), max(seen["abs"], u["abs"]), \
            max(seen["used"], u["used"])
    if updates:
        lines += ["", "## A JAX twin's update against the eager script's", "",
                  "Made by `python tests/measure_tolerances.py --updates` (then with `--avx2`): the tests of "
                  + ", ".join(f"`{t}`" for t in UPDATE_TESTS) + " (the quick tier), run at their own seeds, every "
                  "`np.testing.assert_allclose` recording the largest difference it saw over its calls (relative where "
                  f"the expected value is at least {SMALL} in size, absolute below) beside the tolerance it allows, and "
                  "the share of that tolerance the largest difference used (|a - b| / (atol + rtol |b|); 0 where "
                  "exact). XLA chooses its CPU kernels itself, so `--avx2` varies the eager side only; these tolerances "
                  "were set by hand and are kept (no second set of XLA's kernels says how another CPU rounds), and "
                  "the planted bugs (docs/mutations.md) show what they catch.", "",
                  "| test | line and tolerance | measured rel / abs | share of the tolerance used |", "|---|---|---|---|"]
        for (test, site), u in sorted(updates.items()):
            lines.append(f"| {test} | {site} | {u['rel']:.1e} / {u['abs']:.1e} | {u['used']:.2g} |")
    return "\n".join(lines) + "\n"


def save(measurements: dict | None = None, updates: dict | None = None) -> dict:
    """Merges into tests/tolerances.json as it is now (another measurement may be writing it too) and writes it."""
    data = json.loads(TOLERANCES.read_text()) if TOLERANCES.exists() else {}
    data.setdefault("measurements", {}).update(measurements or {})
    if updates:
        data.setdefault("updates", {}).update(updates)
    data |= {"machine": describe_machine(), "day": time.strftime("%Y-%m-%d"),
             "seeds": sorted({int(k.split(" | ")[1].split()[1]) for k in data["measurements"]})}
    TOLERANCES.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--avx2", action="store_true", help="ATen's, inductor's, oneDNN's and MKL's AVX2 kernels")
    parser.add_argument("--only", nargs="*", help="comparisons to measure (default: all)")
    parser.add_argument("--table", action="store_true", help="only write tests/tolerances.md from the JSON")
    parser.add_argument("--updates", action="store_true", help="the JAX twins' update comparisons (UPDATE_TESTS)")
    args = parser.parse_args()
    if args.updates:
        save(updates=measure_updates("avx2" if args.avx2 else "native"))
    elif not args.table:
        helpers.ENV["OMP_NUM_THREADS"] = str(args.threads)
        kernels = "avx2" if args.avx2 else "native"
        with tempfile.TemporaryDirectory() as tmp:
            for name, (ref, cmp, run, tags, upto, *_) in COMPARISONS.items():
                if args.only and name not in args.only:
                    continue
                for seed in sorted({*args.seeds, int(run[run.index("--seed") + 1])}):  # and its test's seed
                    flags = with_flag(run, "--seed", str(seed))
                    runs = [run_script(script, *extra, *flags, cwd=Path(tmp) / f"{name}-{seed}-{i}").check()
                            for i, (script, *extra) in enumerate((ref, cmp))]
                    got = differences(runs[1].scalars, runs[0].scalars, tags, upto)
                    key = f"{name} | seed {seed} | {args.threads} thread{'s' * (args.threads > 1)} | {kernels}"
                    print(key, json.dumps(got), flush=True)
                    save(measurements={key: got})  # kept as it goes
    data = json.loads(TOLERANCES.read_text())
    TOLERANCES.with_suffix(".md").write_text(table(data))


if __name__ == "__main__":
    main()
