import os
import signal

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
# A Ctrl-C reaches the runs: a session started with SIGINT ignored (a shell without job control starts a
# background command so) would pass the ignoring on to every run and fork server, and the tests of Ctrl-C and of
# what a forked run sees would fail for the session's way of being started, not for the code.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# JAX's compilation cache on disk, for this session only: a computation that a run (or a test process) compiled is
# read back by the next run that compiles it (a twin's short run and its run with SAVED compile the same updates: a
# second run of SAC's twin takes half the CPU time of the first), each cached whatever its compile time. An
# executable read back is the one compiled for the same computation and XLA flags (both are in the key). Made by the
# session's first process, before any test process or run imports JAX; a JAX_COMPILATION_CACHE_DIR of the user's
# is kept.
XLA_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile

    XLA_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="leanrl-xla-")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"

import pytest  # noqa: E402

from helpers import SMALL, RunCache  # noqa: E402

# tests/measure_tolerances.py --updates: every np.testing.assert_allclose of the tests run records, to the file
# LEANRL_RECORD_CLOSENESS names, its test, its line, the tolerance it allows and the largest difference it saw
# (relative where the expected value is at least SMALL in size, absolute below), then checks as it does.
if os.environ.get("LEANRL_RECORD_CLOSENESS"):
    import inspect
    import json

    import numpy as np

    _assert_allclose = np.testing.assert_allclose

    def _recording_assert_allclose(actual, desired, rtol=1e-7, atol=0, *args, **kwargs):
        a, d = np.broadcast_arrays(np.asarray(actual, dtype=np.float64), np.asarray(desired, dtype=np.float64))
        diff, big = np.abs(a - d), np.abs(d) >= SMALL
        caller = inspect.stack()[1]
        record = {"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                  "site": f"{os.path.basename(caller.filename)}:{caller.lineno}", "rtol": rtol, "atol": atol,
                  "rel": float((diff[big] / np.abs(d[big])).max()) if big.any() else 0.0,
                  "abs": float(diff[~big].max()) if (~big).any() else 0.0,
                  # the share of its tolerance the largest difference used (assert_allclose's own measure)
                  "used": float((diff / np.maximum(atol + rtol * np.abs(d), 1e-300)).max()) if diff.size else 0.0}
        with open(os.environ["LEANRL_RECORD_CLOSENESS"], "a") as f:
            f.write(json.dumps(record) + "\n")
        return _assert_allclose(actual, desired, rtol, atol, *args, **kwargs)

    np.testing.assert_allclose = _recording_assert_allclose


@pytest.fixture(scope="session")
def cached_run(tmp_path_factory) -> RunCache:
    """Runs shared by several tests: each (script, args) runs once per session, whichever test process asks
    first (RunCache). Under pytest-xdist each worker's base temp is a folder of the session's (xdist's own
    layout: `<basetemp>/popen-gw0`), where the workers meet."""
    base = tmp_path_factory.getbasetemp()
    return RunCache((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-runs")


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


def pytest_unconfigure(config):
    """The fork servers (forkserver.py) end with the session: each exits, and is waited for, when its socket closes;
    the session's XLA cache is removed by the process that made it."""
    import forkserver

    forkserver.close_all()
    if XLA_CACHE:
        import shutil

        shutil.rmtree(XLA_CACHE, ignore_errors=True)
