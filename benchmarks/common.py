"""What the benchmarks (and the tests) share: the scripts of leanrl/ as modules, and one timing helper."""

import time
from pathlib import Path

import numpy as np
import torch

from leanrl_utils.evals import SCRIPT_DIR as SCRIPTS  # noqa: F401  (the scripts' folder, for the tests)
from leanrl_utils.evals import script as load_script  # noqa: F401  (one loader for evals, benchmarks, tests)

REPO = Path(__file__).resolve().parent.parent


def device_sync(device: str | torch.device):
    """A function that waits for the device's queued work (nothing to wait for on the CPU)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def time_calls(fn, calls: int, sync=lambda: None) -> list[float]:
    """Wall-clock seconds of each of `calls` calls of `fn`, each followed by `sync`: the latency a
    caller sees, host overhead included (device events alone would miss it)."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return times


def interleaved(arms: dict, rounds: int, round_time: float = 0.2, min_calls: int = 1, max_calls: int = 10_000,
                sync=lambda: None) -> dict[str, list[float]]:
    """Per-call times of each arm (name -> function of no argument), the arms taking turns for `rounds`
    rounds of about `round_time` seconds each, so that the drift of a shared machine falls on all of
    them. Each arm's calls per round come from one call timed first (after the caller's warm-up)."""
    per_round = {}
    for name, fn in arms.items():
        t = time_calls(fn, 1, sync)[0]
        per_round[name] = max(min_calls, min(max_calls, int(round_time / max(t, 1e-7))))
    times = {name: [] for name in arms}
    for _ in range(rounds):
        for name, fn in arms.items():
            times[name] += time_calls(fn, per_round[name], sync)
    return times


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) of `values`, by linear interpolation (numpy's default)."""
    return float(np.percentile(values, q))
