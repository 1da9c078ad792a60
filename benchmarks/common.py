"""What the benchmarks share: the scripts of leanrl/ as modules, their networks built as the scripts build them,
and timing helpers."""

import json
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

from leanrl_utils import machine
from leanrl_utils.scripts import load_script  # noqa: F401  (one loader for evals, benchmarks, tests)

REPO = Path(__file__).resolve().parent.parent
# a TCP port free on loopback now (leanrl_utils/machine.py's), for the process groups of torchrun.py,
# rpc_serving.py and compile_scope.py
free_port = machine.free_port


def built(module_cls, *args, device) -> torch.nn.Module:
    """A network of a script, built as the scripts build it: on the CPU (initial weights from the CPU
    generator), then moved to `device`."""
    return module_cls(*args).to(device)


def shell(module_cls, *args) -> torch.nn.Module:
    """A weightless shell of a script's network, built on "meta": it runs the weights put into it."""
    with torch.device("meta"):
        return module_cls(*args)


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


def dynamo_counts() -> tuple[int, int]:
    """Dynamo's counts so far in this process: graphs compiled, graph breaks."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


class NoCompiling:
    """A context in which compiled functions must run the graphs they compiled before: any compilation, a
    recompilation or a first one, raises (torch.compiler.set_stance("fail_on_recompile"): dynamo's cache misses
    fail). For timings that must be those of graphs compiled earlier. `check()` is kept for callers that ask
    between rounds (the stance has already raised if anything compiled)."""

    def __enter__(self):
        self.stance = torch.compiler.set_stance("fail_on_recompile")
        self.stance.__enter__()
        return self

    def check(self) -> None:
        """Nothing compiled so far in the context (the stance raises at a compilation)."""

    def __exit__(self, kind, value, tb):
        self.stance.__exit__(kind, value, tb)


def error_line(text: str) -> str:
    """A failure's one line: the exception its stderr's traceback ends with (`Name: message`), else its first line
    (what failed and its exit code, where the tail kept holds it)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()] or ["?"]
    return next((line for line in reversed(lines) if re.match(r"[\w.]+(Error|Exception|Interrupt)\b", line)),
                lines[0])


def one_line(err: BaseException, limit: int = 240) -> str:
    """An error on one line, for a table's cell or a message: its root cause (a compiler's failure is wrapped in
    another, such as BackendCompilerFailed), its type and the first line of what it says."""
    while err.__cause__ is not None:
        err = err.__cause__
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:limit]


def command_line() -> str:
    """The command that is running, as it would be typed from the repository root: a module of the repository
    (a benchmark) as `python -m benchmarks.X.part`, a study's package run by its __main__.py as `python -m benchmarks.X`."""
    script = Path(sys.argv[0]).resolve()
    if script.is_relative_to(REPO) and script.suffix == ".py":
        module = script.relative_to(REPO).with_suffix("").parts
        module = module[:-1] if module[-1] == "__main__" else module
        return "python " + shlex.join(["-m", ".".join(module), *sys.argv[1:]])
    return "python " + shlex.join(sys.argv)


def provenance() -> tuple[dict, str]:
    """The machine and the command: what every committed output is written under."""
    return machine.describe_machine(), command_line()


def save(out: Path, markdown: str, data: dict, stem: str = "results") -> None:
    """out/<stem>.md and out/<stem>.json, the folder made if needed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(markdown)
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1))


def header(data: dict) -> str:
    """The lines a results.md starts with: the command, the machine and, where the data has it, the day it ran
    (what tells two sittings apart)."""
    lines = f"Command: `{data['command']}`\n\nMachine: " + ", ".join(f"{k} {v}" for k, v in data["machine"].items())
    return lines + (f"\n\nDate: {data['date']} (UTC)" if data.get("date") else "")


def write_results(out: Path | None, text: str, data: dict) -> None:
    """Print a benchmark's result (`text`, markdown); with `out`, also write it to out/results.md and `data`
    to out/results.json, each under the command that made them, the machine they ran on and the day: the
    committed file that a figure in docs/ points to."""
    print(text)
    if out is None:
        return
    machine, command = provenance()
    data = {"command": command, "machine": machine, "date": time.strftime("%Y-%m-%d", time.gmtime()), **data}
    save(out, f"{header(data)}\n\n{text.strip()}\n", data)
