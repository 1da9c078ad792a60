"""The tests' own machinery for running scripts: a run forked by a fork server (forkserver.py, helpers.run_script's
launcher) is what a subprocess would be, and its server forks no process that has threads running; the session's
XLA cache (conftest.py) serves a computation that an earlier run compiled."""

import os
import re
import signal
import subprocess
import sys
import uuid

import forkserver
import pytest
from helpers import CHECKED, DQN_SHORT, ENV, Run, assert_identical_logs, run_script, script_cmd, short_run

# A script and the module it imports first (beside it, so found as a package would be): the module prints while it
# is imported, adds to the environment and remembers the process that imported it
LOUD = """
import os, sys
print("loud: imported")
print("loud: on stderr", file=sys.stderr)
os.environ["PROBE_SET"] = "by an import"
PID = os.getpid()
"""
PROBE = '''"""A probe of what a run sees."""
import os
import signal
import sys
import time

import loud

print("argv", sys.argv, "path0", sys.path[0], "cwd", os.getcwd())
print("main", __name__, __file__, __spec__, type(__loader__).__name__, __cached__, __package__)
print("env", os.environ.get("PROBE_SET"), os.environ.get("PROBE_GIVEN"))
print("sigint", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
print("parent", os.getppid() == int(sys.argv[2]))
print("modules", sorted(m for m in ("torch", "jax", "numpy") if m in sys.modules))
print("forked", loud.PID != os.getpid(), flush=True)
sys.stderr.write("a bar\\r 50%\\r100%\\r\\n")
mode = sys.argv[1]
if mode == "raise":
    def fail():
        raise ValueError("boom")
    fail()
elif mode == "exit":
    sys.exit(3)
elif mode == "ctrl-c":
    raise KeyboardInterrupt
elif mode == "wait":
    time.sleep(120)
'''


@pytest.fixture
def probe(tmp_path):
    folder = tmp_path / f"probe-{uuid.uuid4().hex[:8]}"  # a server of its own: its path is the server's sys.path[0]
    folder.mkdir()
    (folder / "loud.py").write_text(LOUD)
    (folder / "probe.py").write_text(PROBE)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return folder / "probe.py", cwd, {**ENV, "PROBE_GIVEN": "given"}


@pytest.mark.parametrize("mode", ["runs", "raise", "exit", "ctrl-c"])
def test_a_forked_run_is_what_a_subprocess_is(mode, probe):
    """The same command, forked and as a subprocess: the same exit code (1 for an exception, and a KeyboardInterrupt
    kills the process with SIGINT as Python does), the same stdout and stderr to the byte but for the line that says
    which it was (what the imports printed, the traceback from the script's first frame, the newlines translated),
    the same argv, sys.path[0], cwd, __main__, environment (what an import added in), modules, SIGINT handler, and
    the test process as its parent."""
    script, cwd, env = probe
    cmd = [sys.executable, str(script), mode, str(os.getpid())]
    forked = forkserver.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    started = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert "forked True" in forked.stdout and "forked False" in started.stdout, (forked.stdout, started.stdout)
    assert forked.returncode == started.returncode == {"runs": 0, "raise": 1, "exit": 3, "ctrl-c": -signal.SIGINT}[mode]
    assert forked.stdout.replace("forked True", "forked False") == started.stdout
    assert forked.stderr == started.stderr
    assert "parent True" in forked.stdout and "sigint True" in forked.stdout
    assert "env by an import given" in forked.stdout
    assert forked.stdout.startswith("loud: imported\n") and forked.stderr.startswith("loud: on stderr\n")
    if mode in ("raise", "ctrl-c"):  # the server's frames left out
        assert f'Traceback (most recent call last):\n  File "{script}", line' in forked.stderr, forked.stderr


def test_a_forked_run_is_the_test_process_s_child_for_signals_and_timeouts(probe):
    """A forked run's pid is the test process's child (subprocess waits for it, signals it, kills it at a timeout):
    SIGINT raises KeyboardInterrupt in it, as in a new interpreter; a run past its timeout is killed."""
    script, cwd, env = probe
    proc = forkserver.popen([sys.executable, str(script), "wait", str(os.getpid())], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(8)]
        assert lines[-1] == "forked True\n", lines
        status = open(f"/proc/{proc.pid}/status").read()
        assert f"\nPPid:\t{os.getpid()}\n" in status, status
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGINT and err.rstrip().endswith("KeyboardInterrupt"), err
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run([sys.executable, str(script), "wait", str(os.getpid())], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=3)


THREADED = {
    "the JAX backend started": "import jax\njax.devices()\n",
    "torch's parallel work done": "import torch\ntorch.set_num_threads(2)\ntorch.ones(10**6).sin().sum()\n",
}


@pytest.mark.parametrize("imports", THREADED.values(), ids=list(THREADED))
def test_a_server_that_has_threads_after_its_imports_forks_nothing(imports, probe):
    """A server whose imports leave a thread running (the JAX backend's, torch's OpenMP pool) would fork a process
    whose copy holds one thread of them: it says so, and its runs are started as subprocesses."""
    script, cwd, env = probe
    (script.parent / "loud.py").write_text(LOUD + imports)
    with pytest.warns(UserWarning, match=r"is not used: \d+ threads after the imports"):
        run = forkserver.run([sys.executable, str(script), "runs", str(os.getpid())], env=env, cwd=cwd,
                             capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "forked False" in run.stdout, run.stderr[-2000:]


# a progress bar's line, drawn as often as the time allows, or its erasure (spaces, as long as the bar was)
def test_a_server_that_is_gone_is_not_used_again(probe):
    """A server killed between two runs (or stuck) is not asked again: the next run starts as a subprocess."""
    script, cwd, env = probe
    cmd = [sys.executable, str(script), "runs", str(os.getpid())]
    assert "forked True" in forkserver.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120).stdout
    server = forkserver.server_for(env, [str(script)])
    assert server is not None
    server.proc.kill()
    server.proc.wait()
    again = forkserver.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "forked False" in again.stdout, again.stderr[-2000:]
    unused = forkserver.server_for(env, [str(script)]) is None
    assert unused, "a server that is gone is asked again"


BAR = re.compile(r"^(\S+: +\d+%\|.*|\s*)$")
SECONDS = re.compile(r"\b\d+(\.\d+)? s\b")  # a time said ("warm-up done in 1.4 s")


def same_but_the_bars(a: Run, b: Run) -> None:
    """Two runs said the same: the same stdout, and the same lines on stderr but for the progress bars and the
    seconds a line gives."""
    assert a.returncode == b.returncode == 0, (a.stderr[-2000:], b.stderr[-2000:])
    assert a.stdout == b.stdout
    said = [[SECONDS.sub("<t> s", line) for line in run.stderr.splitlines() if not BAR.match(line)] for run in (a, b)]
    assert said[0] == said[1]


def test_the_private_popen_names_the_fork_server_leans_on_are_there():
    """ForkedPopen overrides subprocess.Popen._execute_child (no public way gives a Popen a process it did not
    start) and calls `_close_pipe_fds` and sets `_child_created`: the parameters it takes by position, and the
    names it uses, are CPython's still."""
    import inspect
    import subprocess

    params = list(inspect.signature(subprocess.Popen._execute_child).parameters)
    assert params[:17] == ["self", "args", "executable", "preexec_fn", "close_fds", "pass_fds", "cwd", "env",
                           "startupinfo", "creationflags", "shell", "p2cread", "p2cwrite", "c2pread", "c2pwrite",
                           "errread", "errwrite"], params
    assert callable(subprocess.Popen._close_pipe_fds)
    assert "self._child_created = True" in inspect.getsource(subprocess.Popen)


def test_run_script_forks_and_logs_what_a_subprocess_logs(tmp_path):
    """helpers.run_script forks its run: DQN's short run, forked, logs exactly what it logs as a subprocess, and says
    the same (progress bars aside)."""
    forked = len(forkserver.forked)
    run = run_script("dqn", *DQN_SHORT, cwd=tmp_path / "forked")
    assert len(forkserver.forked) == forked + 1, "run_script started no forked run"
    started = tmp_path / "started"
    started.mkdir()
    proc = subprocess.run(script_cmd("dqn", *DQN_SHORT), cwd=started, env=ENV, capture_output=True, text=True,
                          timeout=900)
    subprocess_run = Run(proc.returncode, proc.stdout, proc.stderr, started)
    same_but_the_bars(run, subprocess_run)
    assert_identical_logs(run, subprocess_run, ["losses/td_loss", "charts/episodic_return"])


@pytest.mark.slow
@pytest.mark.parametrize("script", CHECKED)
def test_every_script_forked_logs_what_it_logs_as_a_subprocess(script, cached_run, tmp_path):
    """Each script's short run (its family's tests', forked) and the same run as a subprocess log exactly the same
    numbers and say the same: the server of each kind of script imports what the script does, nothing that would
    change its numbers."""
    forked = cached_run(script, *short_run(script)).check()
    proc = subprocess.run(script_cmd(script, *short_run(script)), cwd=tmp_path, env=ENV, capture_output=True,
                          text=True, timeout=900)
    started = Run(proc.returncode, proc.stdout, proc.stderr, tmp_path)
    same_but_the_bars(forked, started)
    assert_identical_logs(forked, started)


JITTED = """
import sys
import jax, jax.numpy as jnp
from jax import monitoring
events = []
monitoring.register_event_listener(lambda event, **kwargs: events.append(event))
jax.jit(lambda x: x * float(sys.argv[1]) + 1.0)(jnp.ones(3)).block_until_ready()
print(events.count("/jax/compilation_cache/cache_hits"), events.count("/jax/compilation_cache/cache_misses"))
"""


def test_a_computation_compiled_by_a_run_is_read_back_by_the_next(tmp_path):
    """The session's XLA cache (conftest.py, in ENV): a computation compiled by one run is read back from it by the
    next run that compiles it."""
    assert os.path.isdir(ENV.get("JAX_COMPILATION_CACHE_DIR", "")), "no compilation cache in ENV"
    constant = str(uuid.uuid4().int % 10**6)  # a computation this session has not compiled
    said = [forkserver.run([sys.executable, "-c", JITTED, constant], env=ENV, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    assert [s.returncode for s in said] == [0, 0], said[-1].stderr[-2000:]
    (hits, misses), (hits_again, misses_again) = (map(int, s.stdout.split()) for s in said)
    assert hits == 0 and misses >= 1 and hits_again >= 1 and misses_again == 0, [s.stdout for s in said]
