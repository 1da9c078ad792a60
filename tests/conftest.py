import os

# The CPU suite runs on the CPU on every machine (see helpers.ENV): CUDA is hidden from the test processes
# before torch looks for it, and the user's setting kept for the GPU tests (helpers.GPU_ENV). An xdist
# worker inherits both from the process that started it.
os.environ.setdefault("LEANRL_TEST_CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import pytest  # noqa: E402
import torch  # noqa: E402

from helpers import ENV, WORKERS, RunCache  # noqa: E402

if WORKERS > 1:  # this process's share of the cores too (see helpers.ENV)
    torch.set_num_threads(int(ENV["OMP_NUM_THREADS"]))


@pytest.fixture(scope="session")
def cached_run(tmp_path_factory) -> RunCache:
    """Runs shared by several tests: each (script, args) runs once per session."""
    return RunCache(tmp_path_factory.mktemp("runs"))
