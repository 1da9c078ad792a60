"""benchmarks/rpc_serving/rpc_serving.py: serving a policy over torch.distributed.rpc, on loopback, bounded in time."""

import json
import subprocess
import sys
import time

import pytest
import torch
from helpers import ENV, REPO

from benchmarks.rpc_serving import rpc_serving


def serve(*args, timeout=600):
    cmd = [sys.executable, "-m", "benchmarks.rpc_serving", *args]
    return subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow  # an end-to-end command: the full suite's
def test_a_small_world_batched_and_not_eager_and_compiled(tmp_path):
    """2 observers, every combination of batching and compilation: the report holds every metric at every
    percentile; as many requests as observers x episodes x steps; batched, one policy call on the states of
    both observers per step, and one call per request otherwise; the policy call never takes longer than the
    agent latency it is part of, and the wait for the batch is the rest of it (none without batching)."""
    proc = serve("--world-size", "4", "--batch", "true,false", "--compile", "false,true", "--episodes", "2",
                 "--steps", "5", "--rpc-timeout", "60", "--timeout", "300", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    results = report["benchmark_results"]
    assert {(r["batch"], r["compile"]) for r in results} == {(True, True), (True, False), (False, True), (False, False)}
    for r in results:
        metrics = r["metrics"]
        assert metrics["requests"] == 2 * 2 * 5
        assert metrics["batches"] == (2 * 5 if r["batch"] else 2 * 2 * 5)
        assert metrics["batch sizes"] == ([2] if r["batch"] else [1])
        at = lambda name: [metrics[name][f"p{p}"] for p in rpc_serving.PERCENTILES]  # noqa: E731
        for metric in rpc_serving.METRICS + rpc_serving.SPLIT:  # percentiles rise with p
            assert at(metric) == sorted(at(metric)), (metric, metrics[metric])
        assert at("agent latency (seconds)")[0] > 0 and at("policy time (seconds)")[0] > 0
        # each call's policy time is part of its agent latency: so is every percentile
        assert all(p <= a for p, a in zip(at("policy time (seconds)"), at("agent latency (seconds)")))
        if r["batch"]:
            assert at("waiting for the batch (seconds)")[-1] > 0
        else:
            assert at("waiting for the batch (seconds)") == [0.0] * len(rpc_serving.PERCENTILES)
            assert at("policy time (seconds)") == at("agent latency (seconds)")
    assert "x_axis_name : world_size" in proc.stdout and (tmp_path / "metrics.png").exists()
    # report.md: the machine, and every time in ms as the JSON has it (the policy time's p50 of each row)
    text = (tmp_path / "report.md").read_text()
    assert "Machine: cpu " in text and report["machine"]["cores"] >= 1
    column = 3 + len(rpc_serving.PERCENTILES) * (rpc_serving.METRICS + rpc_serving.SPLIT).index("policy time (seconds)")
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| 4 |")]
    assert [row[column].strip() for row in rows] == [
        f"{r['metrics']['policy time (seconds)']['p50'] * 1e3:.3f} ms" for r in results], rows


@pytest.mark.parametrize("policy", ["mlp", "atari-cnn"])
def test_batched_serving_acts_as_one_forward_pass_per_request(policy):
    """The batched path answers each observer with the action that the policy gives its state alone (the
    mode of the action distribution, so that no random draw differs): no state goes to another
    observer, and no future completes before the batch is full."""
    torch.manual_seed(0)
    server = rpc_serving.Server(policy, observers=3, device="cpu", compile=False, cudagraphs=False, greedy=True)
    states = [torch.randint(0, 256, server.states.shape[1:], dtype=server.states.dtype) if policy == "atari-cnn"
              else torch.randn(server.states.shape[1:]) for _ in range(3)]
    futures = []
    for i in (2, 0, 1):  # in any order
        assert all(not f.done() for _, f in futures)
        futures.append((i, server.request(i, states[i])))
    for i, future in futures:
        torch.testing.assert_close(future.wait(), server.act_one(states[i]), rtol=1e-5, atol=1e-6)
    assert server.take_metrics()["sizes"] == [3, 1, 1, 1]  # one policy call on the 3 states, then one per request


def test_an_observer_that_dies_ends_the_run_with_an_error(tmp_path):
    """Observer 0 exits abruptly at its 3rd step: the others' requests time out (--rpc-timeout 5) and the
    run stops with a one-line error instead of waiting forever."""
    start = time.monotonic()
    proc = serve("--world-size", "4", "--batch", "true", "--episodes", "2", "--steps", "5", "--crash-observer-at", "3",
                 "--rpc-timeout", "5", "--timeout", "120", "--out", str(tmp_path), timeout=200)
    assert proc.returncode == 1 and time.monotonic() - start < 100
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("rpc_serving: error: world size 4, batched, eager:"), proc.stderr[-2000:]
