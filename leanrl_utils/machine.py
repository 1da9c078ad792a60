"""The machine a measurement runs on, written beside every committed figure (by the benchmarks) and every
report (by run.sh), what tells two machines apart and which commit ran there (for the GPU sitting, whose
machines start bare and whose copy of the tree has no git), and a free port on its loopback (for the process
groups of the benchmarks and tests); it needs nothing but the standard library, and torch if it is installed."""

import os
import platform
import shutil
import socket
import subprocess
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


def machine_id() -> str:
    """What tells this machine apart from the next one lent: its host name and its boot (a lent GPU machine is a
    fresh one each time, possibly the same host name). LEANRL_MACHINE_ID replaces it (the CPU rehearsal of the GPU
    sitting plays a second machine so)."""
    if os.environ.get("LEANRL_MACHINE_ID"):
        return os.environ["LEANRL_MACHINE_ID"]
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        boot = "unknown-boot"
    return f"{platform.node() or 'unknown-host'}-{boot}"


def commit(repo: Path) -> str:
    """The commit the tree at `repo` is at: LEANRL_COMMIT where it is set (the GPU sitting sets it from its bundle's
    COMMIT file), else git's answer where git and the repository's .git are there, else "unknown". Never fails: a
    copy of the tree without git is the GPU machine's case."""
    if os.environ.get("LEANRL_COMMIT"):
        return os.environ["LEANRL_COMMIT"]
    if shutil.which("git") and (repo / ".git").exists():
        try:
            out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                                 timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return "unknown"
