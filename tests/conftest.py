import pytest
import torch

from helpers import ENV, WORKERS, RunCache

if WORKERS > 1:  # this process's share of the cores too (see helpers.ENV)
    torch.set_num_threads(int(ENV["OMP_NUM_THREADS"]))


@pytest.fixture(scope="session")
def cached_run(tmp_path_factory) -> RunCache:
    """Runs shared by several tests: each (script, args) runs once per session."""
    return RunCache(tmp_path_factory.mktemp("runs"))
