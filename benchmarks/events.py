"""Read the scalars of a run's TensorBoard event files (shared by the benchmark, the report and the tests)."""

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """All scalars logged under `run_dir`, as {tag: [(step, value), ...]} in logging order."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    for event_file in sorted(Path(run_dir).glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(event_file), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return scalars
