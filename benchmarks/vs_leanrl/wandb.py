"""A stand-in for Weights & Biases, put on LeanRL's path as the module `wandb` where wandb is not installed (the GPU
machine): LeanRL's scripts log only through `wandb.init` and `wandb.log`, and their speed measurement is a value they
log. benchmarks/vs_leanrl/fixes.py copies this file beside the fixed scripts as `wandb.py`.

Each `wandb.log` call becomes one JSON line in the file that LEANRL_WANDB_LOG names: {"_step": the step, key: value}
for the values that are numbers (a one-element tensor is read on the host, as wandb reads it: the same device
synchronisation at each log), the others left out. benchmarks/vs_leanrl/vs_leanrl.py reads the lines back as it reads a real
offline run's history. What wandb does beside (a service process that writes the run's file) is left out: if
anything, LeanRL runs a little faster with this stand-in than with wandb."""

import json
import os

config: dict = {}
_log = None
_step = 0


def init(*args, **kwargs):
    global _log
    config.update(kwargs.get("config") or {})
    _log = open(os.environ["LEANRL_WANDB_LOG"], "a", buffering=1)  # a line at a time: a killed run keeps its rows
    return None


def log(data: dict, step: int | None = None, commit: bool | None = None) -> None:
    global _step
    _step = _step if step is None else int(step)
    row = {"_step": _step}
    for key, value in data.items():
        try:
            row[key] = float(value)
        except (TypeError, ValueError, RuntimeError):  # not a number (a tensor of several values, a string)
            pass
    _log.write(json.dumps(row) + "\n")
    if step is None:
        _step += 1


def finish(*args, **kwargs) -> None:
    if _log is not None:
        _log.close()
