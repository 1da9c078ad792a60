"""PPO Atari on torch.distributed, on the CPU: gloo, loopback only, every run bounded in time.

Two ranks keep bit-identical weights after every update, in every mode; the averaged gradient is the mean
of the ranks' own; the optimized script gives the eager script's numbers; two ranks learn as one rank with
twice the envs; two torchrun launchers meet through c10d rendezvous; a killed rank ends the run of the
other with one line; a batch too small for the world size, NCCL without CUDA, and NCCL ranks that would
share a GPU are refused; after the updates' all-reduces, a watched collective comes before any host read.
On a machine with two GPUs or more (`pytest -m gpu`), the same over NCCL, one rank per GPU."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from helpers import ENV, GPU_ENV, MODES, SCRIPT_DIR, Run, RunCache, assert_close_logs, cuda_device_count, load_script, \
    run_script, tier, with_flag

from leanrl_utils import harness
from leanrl_utils.machine import free_port

EAGER, FAST = "ppo_atari_envpool_multigpu", "ppo_atari_envpool_multigpu_torchcompile"
# 2 ranks x 2 envs x 32 steps per iteration, 3 iterations, 2 epochs of 2 minibatches: 12 updates
SHORT = ("--env-id", "Breakout-v5", "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "384",
         "--num-minibatches", "2", "--update-epochs", "2", "--seed", "7", "--dist-timeout", "60")
UPDATES = 12
TIMEOUT = 600

# Runs a script under torchrun, recording on each rank:
# - digests{rank}.txt: a digest of every parameter after each optimizer step (an eager step calls the
#   optimizer's hooks; a step replayed from a CUDA graph does not);
# - iterations{rank}.txt: the same digest at each gather of the games, once per iteration after the
#   updates, in every mode;
# - around the first all-reduce, the gradients each rank had and what the all-reduce returned, then the
#   gradients the first step used;
# - events{rank}.txt: the order of the all-reduces, the gathers and the host reads (.item, .cpu, .numpy).
PROBE = """
import hashlib, os, runpy, sys
import torch, torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook

rank = int(os.environ.get("RANK", "0"))
digests, iterations, events = (open(f"{name}{rank}.txt", "w") for name in ("digests", "iterations", "events"))
all_reduce, all_gather_object, adam_init = dist.all_reduce, dist.all_gather_object, torch.optim.Adam.__init__
optimizers = []


def log(file, line):
    file.write(line + "\\n")
    file.flush()


probing = []  # non-empty while the probe itself reads tensors: those reads are not the script's


def digest(params):
    probing.append(True)
    try:
        return hashlib.sha1(b"".join(p.detach().cpu().contiguous().numpy().tobytes() for p in params)).hexdigest()
    finally:
        probing.pop()


def recorded_all_reduce(tensor, *args, **kwargs):
    # the gradients' all-reduce moves a flat buffer; a one-number all-reduce is the watched collective
    log(events, "all_reduce" if tensor.numel() > 1 else "watched_all_reduce")
    before = tensor.detach().clone()
    result = all_reduce(tensor, *args, **kwargs)
    if not os.path.exists(f"allreduce{rank}.pt"):
        probing.append(True)
        torch.save({"before": before.cpu(), "after": tensor.detach().cpu()}, f"allreduce{rank}.pt")
        probing.pop()
    return result


def recorded_all_gather_object(*args, **kwargs):
    log(events, "gather")
    if optimizers:
        log(iterations, digest([p for group in optimizers[0].param_groups for p in group["params"]]))
    return all_gather_object(*args, **kwargs)


def recorded_adam_init(self, *args, **kwargs):
    optimizers.append(self)
    adam_init(self, *args, **kwargs)


def after_step(optimizer, args, kwargs):
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return  # the step inside a CUDA graph's capture: a host read there would break the capture
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not os.path.exists(f"grads{rank}.pt"):
        probing.append(True)
        torch.save([p.grad.detach().cpu() for p in params], f"grads{rank}.pt")
        probing.pop()
    log(digests, digest(params))


def host_read(name):
    method = getattr(torch.Tensor, name)

    def read(self, *args, **kwargs):
        if not probing:
            log(events, "read")
        return method(self, *args, **kwargs)
    return read


dist.all_reduce, dist.all_gather_object, torch.optim.Adam.__init__ = \\
    recorded_all_reduce, recorded_all_gather_object, recorded_adam_init
for name in ("item", "cpu", "numpy"):
    setattr(torch.Tensor, name, host_read(name))
register_optimizer_step_post_hook(after_step)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def torchrun(script, *args, cwd, nproc=2, probe=True, timeout=TIMEOUT, env=ENV) -> Run:
    cwd.mkdir(parents=True, exist_ok=True)
    target = [str(SCRIPT_DIR / f"{script}.py")]
    if probe:
        (cwd / "probe.py").write_text(PROBE)
        target = [str(cwd / "probe.py"), *target]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={nproc}",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", *target, *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, cwd)


def lines(run: Run, name: str, rank: int) -> list[str]:
    return (run.cwd / f"{name}{rank}.txt").read_text().split()


CONFIGS = [(EAGER,)] + [(FAST, *mode) for mode in MODES]


@pytest.fixture(scope="module")
def two_ranks(cached_run):
    """One 2-rank run per configuration (gloo, CPU), shared by the tests of this module (in the session's
    shared runs, conftest.py's `cached_run`: whichever test process asks first makes it)."""
    runs = RunCache(cached_run.root, torchrun, name="torchrun")
    return lambda config: runs(*config, *SHORT).check()


@pytest.mark.parametrize("config", [pytest.param(c, marks=tier(c), id=" ".join(c)) for c in CONFIGS])
def test_two_ranks_keep_identical_weights(config, two_ranks):
    run = two_ranks(config)
    digests = [lines(run, "digests", rank) for rank in (0, 1)]
    assert len(digests[0]) == UPDATES and digests[0] == digests[1]
    assert len(set(digests[0])) == UPDATES  # and every update changed them
    assert lines(run, "iterations", 0) == lines(run, "iterations", 1) == digests[0][3::4]  # after each iteration
    # rank 0 logged, counting the steps of both ranks: 3 iterations of 2 ranks x 2 envs x 32 steps
    assert run.values("charts/SPS") and run.scalars["losses/value_loss"][-1][0] == 384


@pytest.mark.parametrize("config", [pytest.param(c, marks=tier(c), id=" ".join(c))
                                    for c in [(EAGER,), (FAST, "--compile")]])
def test_the_averaged_gradient_is_the_mean_of_the_ranks_gradients(config, two_ranks):
    """At the first update: the all-reduce returns the sum of the two ranks' flattened gradients, and the
    optimizer steps with their mean, clipped to the gradient norm 0.5, on both ranks (within the rounding
    of the division and of the norm, which clip_grad_norm_ takes per tensor first)."""
    run = two_ranks(config)
    saved = [torch.load(run.cwd / f"allreduce{rank}.pt") for rank in (0, 1)]
    total = saved[0]["before"] + saved[1]["before"]
    assert not torch.equal(saved[0]["before"], saved[1]["before"])  # the ranks had gradients of their own
    for s in saved:
        torch.testing.assert_close(s["after"], total, rtol=1e-6, atol=1e-7)
    mean = total / 2
    clipped = mean * min(1.0, 0.5 / (mean.norm().item() + 1e-6))
    for rank in (0, 1):
        grads = torch.load(run.cwd / f"grads{rank}.pt")
        torch.testing.assert_close(torch.cat([g.reshape(-1) for g in grads]), clipped, rtol=1e-4, atol=1e-6)


def test_optimized_script_learns_what_the_eager_one_learns(two_ranks):
    # the same random numbers and formulas on both ranks; only the rounding of the channels-last
    # convolutions and fused kernels differs: every value logged over 12 updates agrees within 1e-4
    eager, fast = two_ranks((EAGER,)), two_ranks((FAST,))
    tags = ["losses/value_loss", "losses/policy_loss", "losses/entropy", "losses/approx_kl"]
    assert_close_logs(fast, eager, tags, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_two_ranks_learn_as_one_rank_with_twice_the_envs(tmp_path):
    """Two ranks of 4 envs against one rank of 8: the same global batch (256 steps), minibatch and
    hyperparameters, but other environment streams (each rank's envs are seeded seed + rank) and other
    action samples, so the two runs can agree only as statistics. Over 24 iterations of Breakout, for 4
    seeds of each setup (measured), the games logged numbered 28-34, their mean length 156-186 steps,
    the mean value loss 0.018-0.030 and the policy's entropy 1.33-1.386 (ln 4, uniform) at every
    iteration. The test asks for agreement within those spreads: games within 8, mean length within 15%,
    value loss within a factor 1.7, entropy within 0.06 at every iteration. Rank 0 logging only its own
    games (half of them), or ranks that learn apart, would leave these bounds."""
    args = ("--env-id", "Breakout-v5", "--num-steps", "32", "--num-minibatches", "4", "--update-epochs", "4",
            "--total-timesteps", str(24 * 8 * 32), "--seed", "1")
    two = torchrun(EAGER, *args, "--num-envs", "4", cwd=tmp_path / "two", probe=False).check()
    one = torchrun(EAGER, *args, "--num-envs", "8", cwd=tmp_path / "one", nproc=1, probe=False).check()
    g2, g1 = (run.values("charts/episodic_length") for run in (two, one))
    assert abs(len(g2) - len(g1)) <= 8 and abs(np.mean(g2) / np.mean(g1) - 1) < 0.15, (g2, g1)
    v2, v1 = (np.mean(run.values("losses/value_loss")) for run in (two, one))
    assert 1 / 1.7 < v2 / v1 < 1.7, (v2, v1)
    e2, e1 = (np.array(run.values("losses/entropy")) for run in (two, one))
    assert len(e2) == len(e1) == 24 and np.abs(e2 - e1).max() < 0.06, (e2, e1)


def test_two_launchers_meet_through_c10d_rendezvous(tmp_path):
    """Multi-node launch on one machine: two torchrun launchers (one process each), c10d rendezvous on
    127.0.0.1, train 3 iterations and exit 0."""
    endpoint = f"127.0.0.1:{free_port()}"
    launchers = []
    for node in (0, 1):
        cwd = tmp_path / f"node{node}"
        cwd.mkdir()
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
               "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", "--rdzv-id=leanrl-test",
               str(SCRIPT_DIR / f"{EAGER}.py"), *SHORT]
        launchers.append(subprocess.Popen(cmd, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for node, p in enumerate(launchers):
        _, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 0, f"launcher {node}: {err[-3000:]}"
    # one of the two became rank 0 and logged
    assert sum(len(list((tmp_path / f"node{n}" / "runs").glob("*"))) for n in (0, 1)) == 1


def kill_rank_1(script: str, mode: tuple[str, ...], cwd, env=ENV, timeout: float = 20) -> tuple[int, str, float]:
    """Two ranks started by hand (no torchrun, which would stop the survivor itself), rank 1 killed once rank 0
    has shown its fps (its warm-up, compilation and CUDA-graph captures included, is over: the kill lands in
    the steady state, replayed all-reduces and all): rank 0's exit code, its stderr, and how long it ran after
    the kill."""
    import threading

    port, procs = free_port(), []
    args = with_flag(with_flag(SHORT, "--dist-timeout", str(timeout)), "--total-timesteps", "100000")
    for rank in (0, 1):
        rank_env = {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2", "RANK": str(rank),
                    "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2"}
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT_DIR / f"{script}.py"), *args, *mode], cwd=cwd,
                                      env=rank_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: procs[0].stderr.read(256), "")), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while "fps=" not in "".join(err)[-4000:] and procs[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "fps=" in "".join(err), "rank 0 never showed its fps:\n" + "".join(err)[-3000:]
        os.kill(procs[1].pid, signal.SIGKILL)
        killed_at = time.monotonic()
        procs[0].wait(timeout=timeout + 60)
        waited = time.monotonic() - killed_at
        reader.join(timeout=30)
        return procs[0].returncode, "".join(err), waited
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_killed_rank_ends_the_other_with_one_line(tmp_path):
    """Rank 1 is killed mid-run; rank 0 stops with exit code 1 and a one-line error within --dist-timeout
    (20 s)."""
    code, err, waited = kill_rank_1(EAGER, (), tmp_path)
    assert code == 1 and waited < 20 + 5, (code, waited)
    assert "error: lost contact with another rank" in err and "Traceback" not in err, err[-2000:]


def test_a_batch_too_small_for_the_world_size_is_refused(tmp_path):
    # one rank's batch is 2 envs x 64 steps = 128, two ranks' 256: more than the 200 steps asked for
    args = with_flag(with_flag(SHORT, "--total-timesteps", "200"), "--num-steps", "64")
    run = torchrun(EAGER, *args, cwd=tmp_path, probe=False)
    assert run.returncode != 0 and not (tmp_path / "runs").exists()
    assert "error: --total-timesteps (200) is less than one batch (--num-envs x --num-steps x 2 ranks = 256)" \
        in run.stderr


@pytest.mark.parametrize("mode", [pytest.param(m, marks=tier(m), id=" ".join(m) or "no flag") for m in MODES])
def test_a_watched_collective_comes_between_the_updates_and_any_host_read(mode, two_ranks):
    """Under --cudagraphs with NCCL, the all-reduces inside the update's graph are replayed, and NCCL's
    watchdog does not watch a replay: if a rank died mid-update, the next wait on the device would last
    forever. The optimized script enqueues a plain all-reduce of a preallocated tensor (watched, it times
    out) after its updates, before any host read and before the gather of the games (an object collective,
    which copies to the device and waits first). Checked here in the order of the calls, in every mode."""
    run = two_ranks((FAST, *mode))
    for rank in (0, 1):
        events, pending = lines(run, "events", rank), False
        assert events.count("all_reduce") == UPDATES and events.count("watched_all_reduce") == 3, events
        assert events.count("gather") == 3 and "read" in events, events  # one of each per iteration, and reads
        for i, event in enumerate(events):
            if event == "all_reduce":
                pending = True
            elif event == "watched_all_reduce":
                pending = False
            # an object collective copies to the device and waits: it counts as a read here
            assert not (pending and event in ("read", "gather")), \
                f"rank {rank}: event {i} ({event}) waits on the device after an all-reduce, before the watched one"


@pytest.mark.parametrize("script", [EAGER, FAST])
def test_nccl_without_cuda_is_refused_in_one_line(script, tmp_path):
    """A single rank and two ranks under torchrun: each stops with one line naming --backend, exit code 2,
    before any collective (torch's 'Distributed package doesn't have NCCL built in' never shows)."""
    args = (*SHORT, "--backend", "nccl")
    single = run_script(script, *args, cwd=tmp_path, timeout=TIMEOUT)
    assert single.returncode == 2 and "Traceback" not in single.stderr, single.stderr[-2000:]
    assert single.stderr.strip().splitlines()[-1].startswith(f"{script}.py: error: --backend nccl:")
    both = torchrun(script, *args, cwd=tmp_path / "torchrun", probe=False)
    assert both.returncode != 0 and not (tmp_path / "torchrun" / "runs").exists()
    assert both.stderr.count(f"{script}.py: error: --backend nccl:") == 2, both.stderr[-3000:]
    assert "NCCL built in" not in both.stderr


@pytest.mark.parametrize("script", [EAGER, FAST])
def test_nccl_ranks_that_would_share_a_gpu_are_refused(script, monkeypatch, capsys):
    """The device choice (the harness's pick_rank_device, which the script calls), in this process with a
    machine of 1 GPU modelled: 2 local ranks over NCCL would share it (NCCL refuses that at the first
    collective), so the choice stops with one line saying what to do; with gloo they may share it; 2 GPUs
    give one each."""
    module = load_script(script)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(SystemExit) as stop:
        harness.pick_rank_device(module.Args(world_size=2), local_rank=1)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and "--backend nccl:" in last and "one rank per GPU" in last, last
    gloo = module.Args(world_size=2, backend="gloo")
    assert harness.pick_rank_device(gloo, local_rank=1) == torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert harness.pick_rank_device(module.Args(world_size=2), local_rank=1) == torch.device("cuda", 1)


@pytest.mark.gpu
@pytest.mark.skipif(cuda_device_count() < 1, reason="needs a CUDA device: run `pytest -m gpu` on a GPU")
@pytest.mark.parametrize("config", CONFIGS, ids=" ".join)
def test_one_nccl_rank_on_one_gpu(config, tmp_path):
    """One GPU is enough to run the multi-process scripts' CUDA path: a world of one NCCL rank, each mode
    (the all-reduce, the watched one, graphs captured at their 4th call and replayed). It runs, logs its
    steps, and every iteration changes the weights."""
    run = torchrun(*config, *with_flag(SHORT, "--total-timesteps", str(8 * 64)), cwd=tmp_path, nproc=1,
                   env=GPU_ENV).check()
    digests = lines(run, "iterations", 0)
    assert len(digests) == 8 and len(set(digests)) == 8, digests
    assert run.values("charts/SPS") and run.scalars["losses/value_loss"][-1][0] == 8 * 64


def test_one_rank_under_torchrun_runs_its_collectives(tmp_path):
    """torchrun with one process makes a process group of one, and the script runs every collective in it (the
    gradients' all-reduce, the watched one, the gather of the games), as the GPU test of one NCCL rank on one
    GPU expects: here with gloo, 8 iterations, the weights' digest at each gather, each one new."""
    run = torchrun(FAST, *with_flag(SHORT, "--total-timesteps", str(8 * 64)), cwd=tmp_path, nproc=1).check()
    digests = lines(run, "iterations", 0)
    assert len(digests) == 8 and len(set(digests)) == 8, digests
    events = lines(run, "events", 0)
    assert events.count("all_reduce") == 8 * 4 and events.count("watched_all_reduce") == 8, events
    assert events.count("gather") == 8, events
    assert run.values("charts/SPS") and run.scalars["losses/value_loss"][-1][0] == 8 * 64


# NCCL on GPUs, one rank per GPU: `pytest -m gpu` on a machine with two GPUs or more.
two_gpus = pytest.mark.skipif(cuda_device_count() < 2, reason="needs two CUDA devices (NCCL, one rank per GPU): "
                              "run `pytest -m gpu` on a machine with two GPUs")


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("config", CONFIGS, ids=" ".join)
def test_nccl_ranks_keep_identical_weights(config, tmp_path):
    """After each iteration's updates (8 iterations: under --compile --cudagraphs each graph is captured at its
    4th call, then replayed), the parameters of both ranks are bit-identical, and every iteration changed them."""
    run = torchrun(*config, *with_flag(SHORT, "--total-timesteps", str(8 * 128)), cwd=tmp_path, env=GPU_ENV).check()
    digests = [lines(run, "iterations", rank) for rank in (0, 1)]
    assert len(digests[0]) == 8 and digests[0] == digests[1] and len(set(digests[0])) == 8


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("mode", [(), ("--cudagraphs",), ("--compile", "--cudagraphs")], ids=" ".join)
def test_a_killed_nccl_rank_ends_the_other_within_the_timeout(mode, tmp_path):
    """Rank 1 killed in the steady state: rank 0 stops with an error within --dist-timeout (20 s) and a margin,
    graphs replaying their all-reduces included (NCCL's watchdog may end it with its own report, not our
    line). After a timeout, ProcessGroupNCCL's watchdog may first ask every rank for a debug dump and sleep
    4 x TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC (60 s at its default) before it aborts: the dump is turned off and
    that wait set to 1 s, and the error handling is set to tear the process down (1), so the bound is the
    timeout, 4 s, and 10 s for the watchdog's polling and the exit."""
    env = {**GPU_ENV, "TORCH_NCCL_DUMP_ON_TIMEOUT": "0", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "1000",
           "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    code, err, waited = kill_rank_1(FAST, mode, tmp_path, env=env)
    assert code != 0 and waited < 20 + 4 + 10, (code, waited, err[-2000:])


@pytest.mark.slow
def test_two_ranks_go_on_from_their_checkpoint(tmp_path):
    """Two ranks with a checkpoint at each iteration: --resume on two ranks with a larger budget goes on from the run's
    last state (rank 0 wrote it, with every rank's random generators), logs each step once from there, and the ranks'
    weights stay identical; on one rank, the same --resume is refused in one line."""
    first = torchrun(EAGER, *SHORT, "--checkpoint-every", "128", cwd=tmp_path, probe=False).check()
    name = first.run_dir.name
    one = torchrun(EAGER, "--resume", f"runs/{name}", "--total-timesteps", "768", cwd=tmp_path, nproc=1, probe=False)
    assert one.returncode != 0 and "the run had 2 processes; resume it with as many" in one.stderr, one.stderr[-2000:]
    resumed = torchrun(EAGER, "--resume", f"runs/{name}", "--total-timesteps", "768", cwd=tmp_path).check()
    assert "at step 384; envpool cannot save its games" in resumed.stderr
    steps = [s for s, _ in resumed.scalars["losses/value_loss"]]
    assert steps == [128, 256, 384, 512, 640, 768]
    assert lines(resumed, "iterations", 0) == lines(resumed, "iterations", 1)  # the ranks' weights, each iteration
