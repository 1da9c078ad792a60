import pytest

from helpers import RunCache


@pytest.fixture(scope="session")
def cached_run(tmp_path_factory) -> RunCache:
    """Runs shared by several tests: each (script, args) runs once per session."""
    return RunCache(tmp_path_factory.mktemp("runs"))
