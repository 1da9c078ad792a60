"""Read a run's logs: its TensorBoard event files, and its offline Weights & Biases file (shared by the
benchmarks, the report and the tests)."""

import json
import logging
import re
import struct
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
    """The run's folder read as TensorBoard reads it: its event files in order, as one, so that a resumed run's
    file (which starts with a `purge_step` mark) drops the points the run logged after its checkpoint."""
    if not any(Path(run_dir).glob("events.out.tfevents.*")):
        return
    acc = EventAccumulator(str(run_dir), size_guidance=SIZE_GUIDANCE)
    quiet = logging.getLogger("tensorboard")  # its warning for each purge says what the mark is there to do
    level, quiet.level = quiet.level, logging.ERROR
    try:
        acc.Reload()
    finally:
        quiet.level = level
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


def wandb_records(path: str | Path):
    """The raw records of a `.wandb` file, in order. The file is a LevelDB-style log: a 7-byte W&B header, then
    32 KiB blocks of records, each with a 7-byte header (crc, length, type); a record too long for its block is
    split as FIRST, MIDDLE..., LAST; a block's tail too short for a header is padding. wandb ships no reader."""
    data, pos, buf, block = Path(path).read_bytes(), 7, b"", 32768
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a .wandb file")
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the block's trailer
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:  # zero-filled: the rest of the block is unused
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:  # FULL
            yield chunk
        elif kind == 2:  # FIRST
            buf = chunk
        elif kind == 3:  # MIDDLE
            buf += chunk
        elif kind == 4:  # LAST
            yield buf + chunk
            buf = b""


def wandb_history(path: str | Path) -> list[dict]:
    """Every `wandb.log` call recorded in a `.wandb` file, in order, as {key: value} (nested keys joined by
    "/", values decoded from JSON)."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for raw in wandb_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item})
    return rows
