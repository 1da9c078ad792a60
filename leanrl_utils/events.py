"""Read a run's TensorBoard event files (shared by the benchmark, the report and the tests)."""

import re
from dataclasses import dataclass, field
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

SIZE_GUIDANCE = {"scalars": 0, "tensors": 0}


@dataclass
class RunLog:
    """What one run logged: scalars as (step, wall time, value) and the hyperparameter table."""

    scalars: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)
    hparams: dict[str, str] = field(default_factory=dict)

    def values(self, tag: str) -> list[float]:
        return [v for _, _, v in self.scalars.get(tag, [])]


def _accumulators(run_dir: Path):
    for event_file in sorted(Path(run_dir).glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(event_file), size_guidance=SIZE_GUIDANCE)
        acc.Reload()
        yield acc


def read_run(run_dir: str | Path) -> RunLog:
    log = RunLog()
    for acc in _accumulators(Path(run_dir)):
        for tag in acc.Tags()["scalars"]:
            log.scalars.setdefault(tag, []).extend((e.step, e.wall_time, e.value) for e in acc.Scalars(tag))
        if "hyperparameters/text_summary" in acc.Tags().get("tensors", []):
            text = acc.Tensors("hyperparameters/text_summary")[0].tensor_proto.string_val[0].decode()
            rows = re.findall(r"^\|([^|]+)\|([^|]*)\|$", text, flags=re.M)
            log.hparams.update((k, v) for k, v in rows if (k, v) not in {("param", "value"), ("-", "-")})
    return log


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """All scalars logged under `run_dir`, as {tag: [(step, value), ...]} in logging order."""
    return {tag: [(s, v) for s, _, v in points] for tag, points in read_run(run_dir).scalars.items()}
