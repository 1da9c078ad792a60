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


def pytest_collection_modifyitems(config, items):
    """The GPU tests run only when asked for by name (`pytest -m gpu`): a plain `pytest`, or `-m "not slow"`, is
    the CPU suite on every machine, a GPU machine included, where it would otherwise run them beside the CPU
    tests, on the same GPUs, two files at a time."""
    if "gpu" in (config.getoption("markexpr") or ""):
        return
    deselected = [item for item in items if item.get_closest_marker("gpu")]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not item.get_closest_marker("gpu")]
