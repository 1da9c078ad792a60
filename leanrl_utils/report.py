"""Turn a folder of runs into a report: a markdown table per algorithm and PNG plots.

    python -m leanrl_utils.report results/            # what `bash run.sh` calls at its end
    python -m leanrl_utils.report runs/ --out report/  # any folder holding runs/… event files

Every TensorBoard run folder found under the given folder counts (a folder holding
`events.out.tfevents.*` files). A run's algorithm and mode come from the
hyperparameters it logged: the script (`exp_name`, the eager twin's name without
`_torchcompile` or `_jax`), `compile` and `cudagraphs`; a JAX twin's runs are the mode
"jax". Per algorithm and mode the table gives:

- fps: `charts/SPS`, the last value a run logged (the average over its whole
  measured window, after the warm-up), median over seeds with min-max;
- speed-up: that median over the eager script's median;
- final return: per run, the mean of its last N `charts/episodic_return` values
  (N = 5, or the preset's `last_episodes`); mean ± sample std over seeds, and each seed's;
- with a preset (`preset.json` beside the runs, written by `run.sh --preset`):
  how many runs reached the pair's learning threshold (a run that did not is
  flagged), and the median time, from the run's start, at which the mean of the
  last N episodes first reached it; the preset's pairs with no runs are listed;
- wall-clock: a run's time from its start to its last log, median.

A run's start is its `charts/start` point, logged when the script's main() begins,
so that set-up and compilation count (runs that predate it start at their first log).
- warm-up: `charts/warmup_time` (compilation, CUDA-graph capture; for the eager
  script the same window, so the difference is what compiling costs), median.

The raw data behind the table goes beside it: `scalars/<script>__<mode>__seed<N>.csv`,
one per run (tag, step, wall time, value): every point of the scalars the table and
the plots read, and the last point of every other scalar (which ends the wall-clock),
with the run's hyperparameters in a `#` line. `read_scalars_csv` reads one back as a
run, so that every figure of the table can be recomputed from the CSVs alone.

The headline plot is the return against wall-clock time: one panel per pair, the
median over seeds with the min-max band, one colour per mode. Every figure names
the command (`command.txt`, written by run.sh: one line per invocation that filled
the folder) and the hardware. Runs that logged no fps (stopped early, failed) are
listed apart and left out of the table and the plots, as are the failures `run.sh`
recorded (`*.failed` files beside the runs) and the runs it started that have not
finished (no `done` marker: still running, or stopped), which the table leaves out.
"""

import argparse
import csv
import json
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from leanrl_utils.events import RunLog, read_run
from leanrl_utils.machine import describe_machine
from leanrl_utils.presets import PAIRS

MODES = ["eager", "none", "compile", "cudagraphs", "compile+cudagraphs", "jax"]
MODE_LABELS = {
    "eager": "eager script",
    "none": "optimized, no flag",
    "compile": "--compile",
    "cudagraphs": "--cudagraphs",
    "compile+cudagraphs": "--compile --cudagraphs",
    "jax": "JAX twin",
}
LAST_EPISODES = 5  # without a preset


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

    def final_return(self, last: int) -> float | None:
        values = self.log.values("charts/episodic_return")[-last:]
        return sum(values) / len(values) if values else None

    @property
    def start(self) -> float:
        """The wall time of the run's start: its `charts/start` point, else (an older run) its first log."""
        marker = self.log.scalars.get("charts/start")
        return marker[0][1] if marker else min(w for points in self.log.scalars.values() for _, w, _ in points)

    @property
    def wall_clock(self) -> float:
        return max(w for points in self.log.scalars.values() for _, w, _ in points) - self.start

    def time_to(self, threshold: float, last: int) -> float | None:
        """Seconds from the run's start until the mean of its last `last` episodes first reached
        `threshold`; None if it never did."""
        points = self.log.scalars.get("charts/episodic_return", [])
        for i in range(len(points)):
            window = [v for _, _, v in points[max(0, i - last + 1):i + 1]]
            if len(window) == min(last, len(points)) and sum(window) / len(window) >= threshold:
                return points[i][1] - self.start
        return None


def mode_of(hparams: dict[str, str]) -> str:
    if hparams.get("exp_name", "").endswith("_jax"):
        return "jax"
    if not hparams.get("exp_name", "").endswith("_torchcompile"):
        return "eager"
    flags = [f for f in ("compile", "cudagraphs") if hparams.get(f) == "True"]
    return "+".join(flags) or "none"


def unfinished(run_dir: Path, root: Path) -> bool:
    """Whether `run_dir` lies in a folder of run.sh (`runs/<script>/<mode>/seed<N>/`) that has no `done`
    marker: the run is still going, or was stopped, and its curve ends early."""
    for folder in run_dir.relative_to(root).parents:
        if re.fullmatch(r"seed\d+", folder.name) and len(folder.parts) == 4 and folder.parts[0] == "runs":
            return not (root / folder / "done").exists()
    return False


def find_runs(root: Path) -> tuple[list[Run], list[Path]]:
    """Every run under `root`, and the run folders that could not be read as one of ours."""
    runs, unreadable = [], []
    for run_dir in sorted({p.parent for p in root.rglob("events.out.tfevents.*")}):
        if unfinished(run_dir, root):
            unreadable.append(run_dir)
            continue
        log = read_run(run_dir)
        if "exp_name" not in log.hparams:
            unreadable.append(run_dir)
            continue
        algo = log.hparams["exp_name"].removesuffix("_torchcompile").removesuffix("_jax")
        runs.append(Run(run_dir, algo, mode_of(log.hparams), log.hparams.get("env_id", "?"),
                        log.hparams.get("seed", "?"), log))
    return runs, unreadable


RAW_TAGS = ("charts/start", "charts/episodic_return", "charts/SPS", "charts/warmup_time")  # what the table reads


def write_scalars_csv(run: Run, path: Path) -> None:
    """The run's raw data, compact: all points of RAW_TAGS, the last point of every other tag."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        f.write("# " + json.dumps(run.log.hparams) + "\n")
        rows = csv.writer(f)
        rows.writerow(["tag", "step", "wall_time", "value"])
        for tag, points in sorted(run.log.scalars.items()):
            for step, wall, value in (points if tag in RAW_TAGS else points[-1:]):
                rows.writerow([tag, step, repr(wall), repr(value)])


def read_scalars_csv(path: Path) -> Run:
    """A run as write_scalars_csv left it: the report's figures for it are those of the original run."""
    with path.open(newline="") as f:
        log = RunLog(hparams=json.loads(f.readline().removeprefix("# ")))
        for row in csv.DictReader(f):
            log.scalars.setdefault(row["tag"], []).append((int(row["step"]), float(row["wall_time"]), float(row["value"])))
    h = log.hparams
    return Run(path, h["exp_name"].removesuffix("_torchcompile").removesuffix("_jax"), mode_of(h), h.get("env_id", "?"),
               h.get("seed", "?"), log)


def hardware(root: Path) -> dict:
    """The machine the runs were made on: `run.sh` records it in hardware.json; else this one."""
    recorded = root / "hardware.json"
    if recorded.exists():
        return json.loads(recorded.read_text())
    return describe_machine() | {"note": "no hardware.json in the folder: this describes the machine "
                                         "that built the report"}


def fmt(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def algo_table(runs: list[Run], last: int, threshold: float | None) -> list[str]:
    by_mode = defaultdict(list)
    for r in runs:
        if r.sps is not None:
            by_mode[r.mode].append(r)
    eager = [r.sps for r in by_mode.get("eager", [])]
    eager_median = statistics.median(eager) if eager else None
    learned = [] if threshold is None else [f"reached {threshold:g}", "time to reach it (s, median)"]
    lines = ["| " + " | ".join(["mode", "seeds", "fps (median)", "fps min-max", "speed-up vs eager",
                                 f"final return (last {last} episodes; mean ± std over seeds (seed: value))", *learned,
                                 "wall-clock (s, median)", "warm-up s (median)"]) + " |",
             "|" + "---|" * (8 + len(learned))]
    for mode in MODES:
        rs = by_mode.get(mode)
        if not rs:
            continue
        sps = [r.sps for r in rs]
        med = statistics.median(sps)
        speedup = f"{med / eager_median:.2f}x" if eager_median else "n/a"
        finals = sorted(((r.seed, f) for r in rs if (f := r.final_return(last)) is not None),
                        key=lambda sf: (len(sf[0]), sf[0]))  # seeds in numeric order
        rets = [f for _, f in finals]
        ret = "n/a" if not rets else (f"{statistics.mean(rets):.1f} ± "
                                      f"{statistics.stdev(rets) if len(rets) > 1 else 0.0:.1f} ("
                                      + ", ".join(f"{seed}: {f:.1f}" for seed, f in finals) + ")")
        cells = []
        if threshold is not None:
            missed = [r for r in rs if (r.final_return(last) or float("-inf")) < threshold]
            flag = "" if not missed else " ⚠ not learned: " + ", ".join(
                f"seed {r.seed} ({fmt(r.final_return(last))})" for r in missed)
            times = [t for r in rs if (t := r.time_to(threshold, last)) is not None]
            cells = [f"{len(rs) - len(missed)}/{len(rs)}{flag}", fmt(statistics.median(times), 0) if times else "never"]
        warm = [r.warmup for r in rs if r.warmup is not None]
        lines.append(f"| {MODE_LABELS[mode]} | {len(rs)} | {med:.1f} | {min(sps):.1f}-{max(sps):.1f} | {speedup} | "
                     f"{ret} | " + "".join(f"{c} | " for c in cells) +
                     f"{fmt(statistics.median(r.wall_clock for r in rs), 0)} | {fmt(statistics.median(warm)) if warm else 'n/a'} |")
    return lines


def build(root: Path, out: Path) -> Path:
    runs, unreadable = find_runs(root)
    failures = sorted(root.rglob("*.failed"))
    if not runs and not failures:
        raise SystemExit(f"report: no runs found under {root} (expected TensorBoard event files "
                         "written by the scripts of leanrl/)")
    out.mkdir(parents=True, exist_ok=True)
    hw = hardware(root)
    preset = json.loads((root / "preset.json").read_text()) if (root / "preset.json").exists() else None
    thresholds = {} if preset is None else {PAIRS[p]: spec["threshold"] for p, spec in preset["pairs"].items()}
    last = preset.get("last_episodes", LAST_EPISODES) if preset else LAST_EPISODES
    recorded = (root / "command.txt").read_text() if (root / "command.txt").exists() else ""
    commands = [c.strip() for c in recorded.splitlines() if c.strip()]
    if len(commands) > 1:  # run.sh records each invocation that filled the folder
        command = "Commands, in this order: " + ", then ".join(f"`{c}`" for c in commands)
    else:
        command = f"Command: `{commands[0]}`" if commands else "Command: (not recorded)"
    machine = ", ".join(f"{k} {v}" for k, v in hw.items() if k != "note")
    lines = ["# leanrl: eager vs optimized", "", command, "", f"Hardware: {machine}", ""]
    if "note" in hw:
        lines += [f"Note: {hw['note']}.", ""]
    if preset:
        lines += [f"Preset `{preset['name']}`: {preset['description']}", ""]
    if hw.get("gpu", "none") == "none":
        lines += ["No CUDA device: the `--cudagraphs` modes were not run (on a CPU they fall back to "
                  "the modes without it).", ""]
    lines += ["fps: `charts/SPS` after the warm-up, median over seeds. Final return: the mean of each run's last "
              f"{last} episodes, mean ± sample std over seeds, then each seed's. Wall-clock: a run's time from its start "
              "(`charts/start`, when its main() began: set-up and compilation count) to its last log. "
              "Warm-up: seconds before the fps window (compilation; for the eager script the same window).", ""]
    by_algo = defaultdict(list)
    for r in runs:
        by_algo[r.algo].append(r)
    measured = {algo: [r for r in rs if r.sps is not None] for algo, rs in by_algo.items()}
    measured = {algo: rs for algo, rs in measured.items() if rs}  # the runs of the table: the plots draw them alone
    if measured:
        plots = plot(measured, out, f"{command} | {hw.get('cpu', '?')}, {hw.get('cores', '?')} cores, GPU: "
                                   f"{hw.get('gpu', 'none')}, torch {hw.get('torch', '?')}", last)
        lines += [f"![{p.stem}]({p.name})" for p in plots[:1]] + [""]
    else:
        plots = []
    for algo in sorted(by_algo):
        envs = sorted({r.env_id for r in by_algo[algo]})
        lines += [f"## {algo} ({', '.join(envs)})", ""]
        pair = next((p for p, script in PAIRS.items() if script == algo), None)
        if preset and pair in preset["pairs"]:
            lines += [f"Why this task: {preset['pairs'][pair]['why']} Learning threshold: a final return of "
                      f"{preset['pairs'][pair]['threshold']:g}.", ""]
        lines += algo_table(by_algo[algo], last, thresholds.get(algo)) + [""]
    if preset:
        missing = [p for p in preset["pairs"] if PAIRS[p] not in by_algo]
        if missing:  # a preset run cut short, or one given --scripts: say what the report lacks
            lines += ["## In the preset, not run", ""] + [
                f"- {p} (`{preset['pairs'][p]['args']}`): no finished runs under this folder" for p in missing] + [""]
    if preset and preset.get("skipped"):
        lines += ["## Not in this preset", ""] + [f"- {p}: {why}" for p, why in preset["skipped"].items()] + [""]
    partial = [r for r in runs if r.sps is None]
    if partial or failures or unreadable:
        lines += ["## Failed or incomplete runs", ""]
        lines += [f"- {r.path.relative_to(root)}: {r.algo} {r.mode} seed {r.seed}: no fps logged "
                  "(stopped before its measured window)" for r in partial]
        lines += [f"- {f.relative_to(root)}: {f.read_text().strip().splitlines()[0] if f.read_text().strip() else 'failed'}"
                  for f in failures]
        lines += [f"- {p.relative_to(root)}: " + ("unfinished (no `done` marker from run.sh: still running, or "
                                                  "stopped); left out" if unfinished(p, root) else
                                                  "not a leanrl run (no hyperparameters)") for p in unreadable]
        lines += [""]
    if plots:
        lines += ["## More plots", ""] + [f"![{p.stem}]({p.name})" for p in plots[1:]] + [""]
    for r in runs:  # the raw data of every figure above
        write_scalars_csv(r, out / "scalars" / f"{r.algo}__{r.mode}__seed{r.seed}.csv")
    if runs:
        lines += ["Raw data: `scalars/`, one CSV per run (what the table and the plots read).", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report


def panels(n: int, width: float = 3.6, height: float = 3.0):
    """A grid of `n` panels, three to a row (a page shows them without zooming), the unused ones hidden."""
    import math

    import matplotlib.pyplot as plt

    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(7.0, width * cols + 0.6), height * rows + 1.4), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def seeds_said(runs: list[Run], modes: list[str]) -> str:
    """How many seeds each mode of a panel has: one number if they agree."""
    counts = {m: sum(r.mode == m for r in runs) for m in modes if any(r.mode == m for r in runs)}
    if len(set(counts.values())) == 1:
        n = next(iter(counts.values()))
        return f"{n} seed{'s' * (n > 1)} per mode"
    return "seeds: " + ", ".join(f"{MODE_LABELS[m]} {n}" for m, n in counts.items())


def plot(by_algo: dict[str, list[Run]], out: Path, caption: str, last: int) -> list[Path]:
    """return_vs_time.png (the headline), fps.png, return_vs_steps.png; each names `caption`. A panel per pair
    in a grid, one legend for all, below the panels (outside the data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    algos = sorted(by_algo)
    colors = {m: c for m, c in zip(MODES, ["tab:gray", "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"])}
    paths = []

    def finish(fig, title, name, modes=()):
        fig.suptitle(title, fontsize=10, y=0.995)
        if modes:  # one legend for every panel, under the title: the modes drawn, by colour
            handles = [plt.Line2D([], [], color=colors[m], lw=6) for m in modes]
            fig.legend(handles, [MODE_LABELS[m] for m in modes], loc="upper center", ncol=min(len(modes), 6),
                       fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.965))
        fig.text(0.5, 0.005, caption, ha="center", va="bottom", fontsize=6, wrap=True)
        fig.tight_layout(rect=(0, 0.07, 1, 0.93 if modes else 0.96))
        paths.append(out / name)
        fig.savefig(paths[-1], dpi=80)
        plt.close(fig)

    # episodic return against wall-clock time (the headline) and against steps
    for xaxis, name, label in [("time", "return_vs_time.png", "wall-clock time (s, from the run's start)"),
                               ("step", "return_vs_steps.png", "environment steps")]:
        fig, axes = panels(len(algos))
        drawn = []
        for ax, algo in zip(axes, algos):
            for m in MODES:
                curves = []
                for r in by_algo[algo]:
                    pts = r.log.scalars.get("charts/episodic_return", [])
                    if r.mode != m or not pts:
                        continue
                    xs = np.array([s if xaxis == "step" else w - r.start for s, w, _ in pts])
                    curves.append((xs, np.array([v for _, _, v in pts])))
                lines = [c for c in curves if len(c[0]) >= 2]
                if lines:  # median over seeds on a common grid, up to where the shortest run ends
                    grid = np.linspace(0, min(xs[-1] for xs, _ in lines), 60)
                    ys = np.array([np.interp(grid, xs, smooth(ys, last)) for xs, ys in lines])
                    ax.plot(grid, np.median(ys, 0), color=colors[m])
                    ax.fill_between(grid, ys.min(0), ys.max(0), color=colors[m], alpha=0.2)
                dots = [c for c in curves if len(c[0]) == 1]
                if dots:  # a run with a single finished episode is a point, not a curve
                    ax.scatter([xs[0] for xs, _ in dots], [ys[0] for _, ys in dots], color=colors[m], s=14)
                if curves and m not in drawn:
                    drawn.append(m)
            env = ", ".join(sorted({r.env_id for r in by_algo[algo]}))
            ax.set_title(f"{algo} ({env})\n{seeds_said(by_algo[algo], MODES)}", fontsize=8)
            ax.set_xlabel(label, fontsize=7)
            ax.set_ylabel(f"episodic return (mean of the last {last})", fontsize=7)
            ax.tick_params(labelsize=7)
            if not ax.has_data():
                ax.text(0.5, 0.5, "no episode finished", transform=ax.transAxes, ha="center", fontsize=8)
        finish(fig, f"Episodic return vs {label.split(' (')[0]}: median over seeds, min-max shaded", name,
               [m for m in MODES if m in drawn])
        if xaxis == "time":  # fps after the headline
            fps_plot(by_algo, algos, colors, finish)
    return paths


def smooth(values, n: int):
    """The mean of the last `n` values at each point (fewer at the start)."""
    import numpy as np

    c = np.cumsum(np.insert(np.asarray(values, float), 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    return (c[idx] - c[np.maximum(idx - n, 0)]) / np.minimum(idx, n)


def fps_plot(by_algo, algos, colors, finish):
    fig, axes = panels(len(algos), height=2.8)
    drawn = []
    for ax, algo in zip(axes, algos):
        modes = [m for m in MODES if any(r.mode == m and r.sps is not None for r in by_algo[algo])]
        med, lo, hi = [], [], []
        for m in modes:
            sps = [r.sps for r in by_algo[algo] if r.mode == m and r.sps is not None]
            med.append(statistics.median(sps))
            lo.append(med[-1] - min(sps))
            hi.append(max(sps) - med[-1])
        ax.bar(range(len(modes)), med, yerr=[lo, hi], capsize=3, color=[colors[m] for m in modes])
        ax.set_xticks(range(len(modes)), [MODE_LABELS[m].replace(" ", "\n", 1) for m in modes], fontsize=6)
        ax.set_title(algo, fontsize=9)
        ax.set_ylabel("env steps per second (median, min-max)", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        drawn += [m for m in modes if m not in drawn]
    finish(fig, "Steady-state fps per mode (higher is better)", "fps.png", [m for m in MODES if m in drawn])


def replot(folder: Path) -> list[Path]:
    """The plots of a committed report again, from its raw data alone (scalars/*.csv) and the command, hardware
    and episode count its report.md names: for a report made before the plots changed."""
    runs = [read_scalars_csv(p) for p in sorted((folder / "scalars").glob("*.csv"))]
    text = (folder / "report.md").read_text()
    command = next(line for line in text.splitlines() if line.startswith(("Command: ", "Commands, in this order: ")))
    said = next(line for line in text.splitlines() if line.startswith("Hardware: "))[len("Hardware: "):]
    # "cpu <model (family, model, ...)>, cores 2, gpu none, ...": split before each key, not inside the CPU's name
    keys = "|".join(describe_machine())
    hw = dict(item.split(" ", 1) for item in re.split(rf", (?=(?:{keys}) )", said) if " " in item)
    last = int(re.search(r"the mean of each run's last (\d+)\s+episodes", text).group(1))
    by_algo = defaultdict(list)
    for r in runs:
        if r.sps is not None:
            by_algo[r.algo].append(r)
    return plot(by_algo, folder, f"{command} | {hw.get('cpu', '?')}, {hw.get('cores', '?')} cores, GPU: "
                                 f"{hw.get('gpu', 'none')}, torch {hw.get('torch', '?')}", last)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="folder holding the runs (searched recursively)")
    parser.add_argument("--out", type=Path, default=None, help="where report.md and the plots go (default: root)")
    parser.add_argument("--replot", action="store_true",
                        help="only redraw the plots of a report folder (root) from its scalars/*.csv and report.md")
    opts = parser.parse_args()
    if not opts.root.is_dir():
        raise SystemExit(f"report: {opts.root} is not a folder")
    if opts.replot:
        print("\n".join(str(p) for p in replot(opts.root)))
        return
    print(build(opts.root, opts.out or opts.root))


if __name__ == "__main__":
    main()
