"""The GPU sitting's offline bundle: what travels to the GPU machine, measured against what it takes."""

import os
import re
import subprocess

import pytest
from helpers import REPO


def test_the_bundle_check_adds_up_what_travels_and_fails_above_its_limit(tmp_path):
    """benchmarks/gpu_bundle.sh --check: the bundle's size plus the tree's (git archive HEAD) and the untracked files
    git does not ignore, in MiB, and a failure in one line above the limit (56 MiB, or GPU_TRAVEL_LIMIT_MIB)."""
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: the check measures the tree with git archive")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "some-1.0-py3-none-any.whl").write_bytes(b"\0" * 3 * 2**20)
    check = ["bash", "benchmarks/gpu_bundle.sh", "--check", str(bundle)]
    ok = subprocess.run(check, cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    sizes = re.fullmatch(r"bundle ([\d.]+) MiB \+ tree \(git archive HEAD\) ([\d.]+) MiB \+ untracked ([\d.]+) MiB = "
                         r"([\d.]+) MiB \(limit 56 MiB; the GPU machine takes 64\)", ok.stdout.splitlines()[-1])
    assert sizes, ok.stdout
    bundle_mib, tree_mib, untracked_mib, total = map(float, sizes.groups())
    archive = len(subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True).stdout)
    assert bundle_mib == 3.0 and tree_mib == round(archive / 2**20, 1)
    assert abs(bundle_mib + tree_mib + untracked_mib - total) <= 0.15
    over = subprocess.run(check, cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "GPU_TRAVEL_LIMIT_MIB": str(int(total))})
    assert over.returncode == 1 and over.stderr == f"gpu_bundle: {total} MiB would travel, over {int(total)} MiB: " \
        "cut the bundle or the tree\n", over.stderr
