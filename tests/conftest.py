import os

# The CPU suite runs on the CPU on every machine (see helpers.ENV): CUDA is hidden from the test processes
# before torch looks for it, and the user's setting kept for the GPU tests (helpers.GPU_ENV). An xdist
# worker inherits both from the process that started it.
os.environ.setdefault("LEANRL_TEST_CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
os.environ["CUDA_VISIBLE_DEVICES"] = ""
# Every test process, and every run it starts, on a pinned thread count, set before torch starts: under
# pytest-xdist its share of the cores (N torch processes with a thread per core each would fight over them,
# and spinning OpenMP threads make an oversubscribed run several times slower), and pinned in any case: the
# scripts otherwise choose theirs from the machine's load (pick_threads), and a thread count can change the last
# digits of a run, which the same-seed and eager-against-optimized comparisons would see.
workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))

import pytest  # noqa: E402

from helpers import RunCache  # noqa: E402


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
