"""The machine a measurement runs on, written beside every committed figure (by the benchmarks) and every
report (by run.sh), and a free port on its loopback (for the process groups of the benchmarks and tests); it
needs nothing but the standard library, and torch if it is installed."""

import platform
import socket
from pathlib import Path


def describe_machine() -> dict:
    """The machine a benchmark runs on: the CPU (with its family, model and widest vector instructions),
    cores, GPU, and the versions of the packages that decide its speed."""
    import importlib.metadata as md
    import os

    cpu, fields = platform.processor() or "unknown CPU", {}
    try:
        for line in Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    if fields:
        # the model name alone can hide the generation ("AMD EPYC"): family and model tell it, and the widest
        # vector instructions tell what a compiler can use
        flags = fields.get("flags", "").split()
        simd = next((f for f in ("amx_tile", "avx512_bf16", "avx512f", "avx2") if f in flags), "none of AVX2/AVX-512")
        cpu = f"{fields.get('model name', cpu)} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}, {simd})"
    info = {"cpu": cpu, "cores": os.cpu_count(), "gpu": "none", "python": platform.python_version()}
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    for package in ("torch", "tensordict", "gymnasium", "envpool", "mujoco", "jax", "flax", "optax"):
        try:
            info[package] = md.version(package)
        except md.PackageNotFoundError:
            info[package] = "not installed"
    return info


def free_port() -> int:
    """A TCP port free on loopback now, for a process group's rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
