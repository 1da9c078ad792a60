"""Turn a folder of runs into a report: a markdown table per algorithm and PNG plots.

    python benchmarks/report.py results/            # what `bash run.sh` calls at its end
    python benchmarks/report.py runs/ --out report/  # any folder holding runs/… event files

Every TensorBoard run folder found under the given folder counts (a folder holding
`events.out.tfevents.*` files). A run's algorithm and mode come from the
hyperparameters it logged: the script (`exp_name`, the eager twin's name without
`_torchcompile`), `compile` and `cudagraphs`. Per algorithm and mode the table gives:

- fps: `charts/SPS`, the last value a run logged (the average over its whole
  measured window, after the warm-up), median over seeds with min-max;
- speed-up: that median over the eager script's median;
- final return: per run, the mean of its last 5 `charts/episodic_return`
  values; mean ± std over seeds;
- warm-up: `charts/warmup_time` (compilation, CUDA-graph capture; for the eager
  script the same window, so the difference is what compiling costs), median.

Runs that logged no fps (stopped early, failed) are listed apart, as are the
failures `run.sh` recorded (`*.failed` files beside the runs).
"""

import argparse
import json
import platform
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.events import RunLog, read_run  # noqa: E402

MODES = ["eager", "none", "compile", "cudagraphs", "compile+cudagraphs"]
MODE_LABELS = {
    "eager": "eager script",
    "none": "optimized, no flag",
    "compile": "--compile",
    "cudagraphs": "--cudagraphs",
    "compile+cudagraphs": "--compile --cudagraphs",
}
LAST_EPISODES = 5


@dataclass
class Run:
    path: Path
    algo: str
    mode: str
    env_id: str
    seed: str
    log: RunLog

    @property
    def sps(self) -> float | None:
        values = self.log.values("charts/SPS")
        return values[-1] if values else None

    @property
    def warmup(self) -> float | None:
        values = self.log.values("charts/warmup_time")
        return values[-1] if values else None

    @property
    def final_return(self) -> float | None:
        values = self.log.values("charts/episodic_return")[-LAST_EPISODES:]
        return sum(values) / len(values) if values else None


def mode_of(hparams: dict[str, str]) -> str:
    if not hparams.get("exp_name", "").endswith("_torchcompile"):
        return "eager"
    flags = [f for f in ("compile", "cudagraphs") if hparams.get(f) == "True"]
    return "+".join(flags) or "none"


def find_runs(root: Path) -> tuple[list[Run], list[Path]]:
    """Every run under `root`, and the run folders that could not be read as one of ours."""
    runs, unreadable = [], []
    for run_dir in sorted({p.parent for p in root.rglob("events.out.tfevents.*")}):
        log = read_run(run_dir)
        if "exp_name" not in log.hparams:
            unreadable.append(run_dir)
            continue
        algo = log.hparams["exp_name"].removesuffix("_torchcompile")
        runs.append(Run(run_dir, algo, mode_of(log.hparams), log.hparams.get("env_id", "?"),
                        log.hparams.get("seed", "?"), log))
    return runs, unreadable


def hardware(root: Path) -> dict:
    """The machine the runs were made on: `run.sh` records it in hardware.json; else this one."""
    recorded = root / "hardware.json"
    if recorded.exists():
        return json.loads(recorded.read_text())
    return describe_machine() | {"note": "no hardware.json in the folder: this describes the machine "
                                         "that built the report"}


def describe_machine() -> dict:
    import importlib.metadata as md
    import os

    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "gpu": "none", "python": platform.python_version()}
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    for package in ("torch", "tensordict", "gymnasium", "envpool", "mujoco"):
        try:
            info[package] = md.version(package)
        except md.PackageNotFoundError:
            info[package] = "not installed"
    return info


def fmt(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def algo_table(runs: list[Run]) -> list[str]:
    by_mode = defaultdict(list)
    for r in runs:
        if r.sps is not None:
            by_mode[r.mode].append(r)
    eager = [r.sps for r in by_mode.get("eager", [])]
    eager_median = statistics.median(eager) if eager else None
    lines = ["| mode | seeds | fps (median) | fps min-max | speed-up vs eager | final return (mean ± std) "
             "| warm-up s (median) |", "|---|---|---|---|---|---|---|"]
    for mode in MODES:
        rs = by_mode.get(mode)
        if not rs:
            continue
        sps = [r.sps for r in rs]
        med = statistics.median(sps)
        speedup = f"{med / eager_median:.2f}x" if eager_median else "n/a"
        rets = [r.final_return for r in rs if r.final_return is not None]
        ret = "n/a" if not rets else (f"{statistics.mean(rets):.1f} ± "
                                      f"{statistics.stdev(rets) if len(rets) > 1 else 0.0:.1f}")
        warm = [r.warmup for r in rs if r.warmup is not None]
        lines.append(f"| {MODE_LABELS[mode]} | {len(rs)} | {med:.1f} | {min(sps):.1f}-{max(sps):.1f} | {speedup} "
                     f"| {ret} | {fmt(statistics.median(warm)) if warm else 'n/a'} |")
    return lines


def build(root: Path, out: Path) -> Path:
    runs, unreadable = find_runs(root)
    failures = sorted(root.rglob("*.failed"))
    if not runs and not failures:
        raise SystemExit(f"report: no runs found under {root} (expected TensorBoard event files "
                         "written by the scripts of leanrl/)")
    out.mkdir(parents=True, exist_ok=True)
    hw = hardware(root)
    lines = ["# leanrl: eager vs optimized", ""]
    lines += ["Hardware: " + ", ".join(f"{k} {v}" for k, v in hw.items() if k != "note"), ""]
    if "note" in hw:
        lines += [f"Note: {hw['note']}.", ""]
    if hw.get("gpu", "none") == "none":
        lines += ["No CUDA device: the `--cudagraphs` modes were not run (on a CPU they fall back to "
                  "the modes without it).", ""]
    lines += ["fps: `charts/SPS` after the warm-up, median over seeds. Final return: mean of each run's last "
              f"{LAST_EPISODES} episodes, mean ± std over seeds. Warm-up: seconds before the fps window "
              "(compilation; for the eager script the same window).", ""]
    by_algo = defaultdict(list)
    for r in runs:
        by_algo[r.algo].append(r)
    for algo in sorted(by_algo):
        envs = sorted({r.env_id for r in by_algo[algo]})
        lines += [f"## {algo} ({', '.join(envs)})", ""] + algo_table(by_algo[algo]) + [""]
    partial = [r for r in runs if r.sps is None]
    if partial or failures or unreadable:
        lines += ["## Failed or incomplete runs", ""]
        lines += [f"- {r.path.relative_to(root)}: {r.algo} {r.mode} seed {r.seed}: no fps logged "
                  "(stopped before its measured window)" for r in partial]
        lines += [f"- {f.relative_to(root)}: {f.read_text().strip().splitlines()[0] if f.read_text().strip() else 'failed'}"
                  for f in failures]
        lines += [f"- {p.relative_to(root)}: not a leanrl run (no hyperparameters)" for p in unreadable]
        lines += [""]
    if any(r.sps is not None for r in runs):
        plots = plot(by_algo, out)
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report


def plot(by_algo: dict[str, list[Run]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    algos = sorted(by_algo)
    colors = {m: c for m, c in zip(MODES, ["tab:gray", "tab:blue", "tab:orange", "tab:green", "tab:red"])}
    paths = []

    # fps per mode, one panel per algorithm
    fig, axes = plt.subplots(1, len(algos), figsize=(max(6.0, 3.2 * len(algos) + 1), 3.6), squeeze=False)
    for ax, algo in zip(axes[0], algos):
        modes = [m for m in MODES if any(r.mode == m and r.sps is not None for r in by_algo[algo])]
        med, lo, hi = [], [], []
        for m in modes:
            sps = [r.sps for r in by_algo[algo] if r.mode == m and r.sps is not None]
            med.append(statistics.median(sps))
            lo.append(med[-1] - min(sps))
            hi.append(max(sps) - med[-1])
        ax.bar(range(len(modes)), med, yerr=[lo, hi], capsize=3, color=[colors[m] for m in modes])
        ax.set_xticks(range(len(modes)), [MODE_LABELS[m].replace(" ", "\n", 1) for m in modes], fontsize=7)
        ax.set_title(algo, fontsize=9)
        ax.set_ylabel("env steps per second (median, min-max)", fontsize=7)
    fig.suptitle("Steady-state fps per mode (higher is better)", fontsize=10)
    fig.tight_layout()
    paths.append(out / "fps.png")
    fig.savefig(paths[-1], dpi=80)
    plt.close(fig)

    # episodic return against steps and against wall-clock time
    for xaxis, name, label in [("step", "return_vs_steps.png", "environment steps"),
                               ("time", "return_vs_time.png", "wall-clock time (s, from the first log)")]:
        fig, axes = plt.subplots(1, len(algos), figsize=(max(6.0, 3.6 * len(algos) + 1), 3.6), squeeze=False)
        for ax, algo in zip(axes[0], algos):
            for m in MODES:
                curves = []
                for r in by_algo[algo]:
                    pts = r.log.scalars.get("charts/episodic_return", [])
                    if r.mode != m or not pts:
                        continue
                    start = min(w for pts_ in r.log.scalars.values() for _, w, _ in pts_)
                    xs = np.array([s if xaxis == "step" else w - start for s, w, _ in pts])
                    curves.append((xs, np.array([v for _, _, v in pts])))
                label_ = f"{MODE_LABELS[m]} ({len(curves)})"
                lines = [c for c in curves if len(c[0]) >= 2]
                if lines:  # mean over seeds on a common grid, up to where the shortest run ends
                    grid = np.linspace(0, min(xs[-1] for xs, _ in lines), 50)
                    ys = np.array([np.interp(grid, xs, ys) for xs, ys in lines])
                    ax.plot(grid, ys.mean(0), color=colors[m], label=label_)
                    ax.fill_between(grid, ys.min(0), ys.max(0), color=colors[m], alpha=0.2)
                dots = [c for c in curves if len(c[0]) == 1]
                if dots:  # a run with a single finished episode is a point, not a curve
                    ax.scatter([xs[0] for xs, _ in dots], [ys[0] for _, ys in dots], color=colors[m], s=14,
                               label=None if lines else label_)
            ax.set_title(algo, fontsize=9)
            ax.set_xlabel(label, fontsize=7)
            ax.set_ylabel("episodic return", fontsize=7)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
            else:
                ax.text(0.5, 0.5, "no episode finished", transform=ax.transAxes, ha="center", fontsize=8)
        fig.suptitle(f"Episodic return vs {label.split(' (')[0]}: mean over seeds, min-max shaded", fontsize=10)
        fig.tight_layout()
        paths.append(out / name)
        fig.savefig(paths[-1], dpi=80)
        plt.close(fig)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="folder holding the runs (searched recursively)")
    parser.add_argument("--out", type=Path, default=None, help="where report.md and the plots go (default: root)")
    opts = parser.parse_args()
    if not opts.root.is_dir():
        raise SystemExit(f"report: {opts.root} is not a folder")
    print(build(opts.root, opts.out or opts.root))


if __name__ == "__main__":
    main()
