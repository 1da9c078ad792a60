"""benchmarks/limits/matmul.py: the matmuls of SAC's and TD3's updates, recorded from the calls (torch's dispatch,
XLA's compiled HLO), named by layout, timed in both frameworks, and each update's profile split into parts that
add up to the call. The pieces are checked on small known cases (a linear layer, whose three matmuls have known
layouts in each framework); the whole command on TD3 at a small size (marked slow: it compiles the update twice)."""

import json
import statistics
import subprocess
import sys

import pytest
import torch
from helpers import ENV, REPO

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from benchmarks.limits import matmul as lm  # noqa: E402


def linear_layer_calls() -> list[dict]:
    """The matmuls of a linear layer (24 -> 48, batch 64) forward and backward, and of a twin ensemble of such
    layers vmapped over stacked weights on one shared input (as the scripts run their two critics)."""
    layer, x = torch.nn.Linear(24, 48), torch.randn(64, 24, requires_grad=True)
    weights = torch.randn(2, 48, 24, requires_grad=True)
    with lm.MatmulRecorder() as rec:
        torch.tanh(layer(x)).sum().backward()
        torch.vmap(lambda w: x.detach() @ w.t())(weights).sum().backward()
    return rec.calls


def linear_layer_dots() -> list[dict]:
    """The dots of the same layer in XLA, its weight stored in x in (flax's kernel), forward and both gradients."""
    def loss(x, w):
        return jnp.sum(jnp.tanh(x @ w))

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    dots, _ = lm.xla_matmuls(grad.lower(jnp.ones((64, 24)), jnp.ones((24, 48))).compile().as_text())
    return dots


def test_layouts_are_named_from_the_calls():
    """nn.Linear's forward is NT (its weight stored out x in), its input's gradient NN, its weight's TN; the
    vmapped ensemble runs batched matmuls of 2 with the common input broadcast (stride 0); in XLA, with the weight
    stored in x out, the forward is NN and the two gradients NT and TN. Each call carries 2 x batch x m x n x k
    FLOPs, and torch's its autograd role."""
    calls = {(c["name"], c["role"]) for c in linear_layer_calls()}
    assert ("addmm 64x24 @ 24x48 NT", "forward") in calls
    assert ("mm 64x48 @ 48x24 NN", "backward of AddmmBackward0") in calls  # the input's gradient
    assert ("mm 48x64 @ 64x24 TN", "backward of AddmmBackward0") in calls  # the weight's gradient
    batched = [c for c in linear_layer_calls() if c["op"] == "bmm"]
    assert batched and batched[0]["batch"] == 2 and "A shared" in batched[0]["name"], batched
    for call in linear_layer_calls():
        assert call["flops"] == 2 * call["batch"] * call["m"] * call["n"] * call["k"]
    dots = linear_layer_dots()
    assert sorted(d["name"] for d in dots) == ["dot 24x64 @ 64x48 TN", "dot 64x24 @ 24x48 NN", "dot 64x48 @ 48x24 NT"]
    assert all(d["flops"] == 2 * 64 * 24 * 48 and d["thunk"] and d["runs as"] for d in dots)


def test_every_layout_is_timed_in_both_frameworks():
    """Every layout recorded (torch's and XLA's) is a row, timed in torch and in XLA in each round; a row's
    GFLOP/s are 2 x batch x m x n x k over the median of its rounds' times, its ratio the median of the rounds'
    torch/XLA rates, and the table shows both."""
    calls, dots = linear_layer_calls(), linear_layer_dots()
    rows = lm.layout_rows({"lin": {"eager": {"v": calls}, "compiled": {"v": []}, "jax": {"v": dots}}})
    names = {r["name"] for r in rows}
    assert {c["name"] for c in calls} <= names
    for d in dots:  # an XLA layout is its own row, or a torch row of the same batch, sizes and letters
        assert d["name"] in names or any((r["batch"], r["m"], r["n"], r["k"], r["layout"]) ==
                                         (d["batch"], d["m"], d["n"], d["k"], d["layout"]) for r in rows)
    assert sum(r["found"]["lin"]["eager"] for r in rows) == len(calls)
    assert sum(r["found"]["lin"]["jax"] for r in rows) == len(dots)
    lm.time_layouts(rows, rounds=2, min_run_time=0.001, threads=torch.get_num_threads())
    data = {"cpu": {"vendor": "v", "family": "f", "model": "m", "vector": "x"}, "threads": 1, "cores": 1, "env": {},
            "rounds": 2, "min_run_time": 0.001, "profile_calls": 1, "pairs": {"lin": {"variants": []}}, "layouts": rows}
    table = lm.render(data)
    for row in rows:
        assert len(row["torch_s"]) == len(row["xla_s"]) == 2 and min(row["torch_s"] + row["xla_s"]) > 0, row
        flops = 2 * row["batch"] * row["m"] * row["n"] * row["k"]
        torch_rate = flops / statistics.median(row["torch_s"]) / 1e9
        xla_rate = flops / statistics.median(row["xla_s"]) / 1e9
        ratio = statistics.median([x / t for t, x in zip(row["torch_s"], row["xla_s"])])
        assert f"| {torch_rate:.1f} | {xla_rate:.1f} | {ratio:.2f}x |" in table, (row["name"], table)


def test_the_split_adds_up():
    """XLA's thunks (ns): the matmul thunks and the others, their overlap on two threads, and the rest of each
    call (no thunk running) add up to the call; a while loop's own thunk is left out (its body's are counted).
    torch's profile: matmuls (per layout), other aten calls and the rest add up to the call."""
    instructions = {"ynn_fusion.1": {"opcode": "fusion"}, "copy.2": {"opcode": "copy"}, "while.3": {"opcode": "while"}}
    dots = [{"name": "dot 8x8 @ 8x8 NN", "thunk": "ynn_fusion.1", "flops": 1024}]
    windows = [(0, 1_000_000), (2_000_000, 3_000_000)]
    thunks = [("ynn_fusion.1", 100_000, 500_000), ("copy.2", 400_000, 600_000), ("while.3", 50_000, 900_000),
              ("ynn_fusion.1", 2_000_000, 2_200_000)]
    split = lm.jax_split(windows, thunks, dots, instructions)
    assert split["call"] == pytest.approx(1.0)  # ms per call
    assert split["matmul"] == pytest.approx((0.4 + 0.2) / 2) and split["other thunks"] == pytest.approx(0.2 / 2)
    assert split["overlap"] == pytest.approx(0.1 / 2) and split["rest"] == pytest.approx((0.5 + 0.8) / 2)
    assert split["call"] == pytest.approx(split["matmul"] + split["other thunks"] - split["overlap"] + split["rest"])
    assert split["matmul per layout"]["dot 8x8 @ 8x8 NN"]["calls"] == 1
    assert lm.union([(0, 2), (1, 3), (5, 6)]) == 4

    a, w, b = torch.randn(32, 16), torch.randn(8, 16), torch.randn(8)
    events = lm.torch_profile(lambda: torch.relu(torch.addmm(b, a, w.t())) + torch.randn(32, 8), calls=3)
    split = lm.torch_split(events, calls=3)
    assert split["matmul calls per kind"] == {"addmm": 1}
    if lm.PROFILER_HAS_SHAPES:
        assert list(split["matmul per layout"]) == ["addmm 32x16 @ 16x8 NT"]
        assert split["matmul per layout"]["addmm 32x16 @ 16x8 NT"]["calls"] == 1
    else:  # torch 2.11's profiler records no shapes and strides: the calls count, without their layouts
        assert split["matmul per layout"] == {}
    assert {"aten::relu", "aten::randn", "aten::add"} <= set(split["other calls by name"])
    assert split["kernels"] == 0 and split["matmul"] > 0 and split["rest"] >= 0
    assert split["call"] == pytest.approx(split["matmul"] + split["kernels"] + split["other calls"] + split["rest"])


@pytest.mark.slow
@pytest.mark.skipif(not lm.PROFILER_HAS_SHAPES, reason="torch's profiler records no shapes before torch 2.12")
def test_the_benchmark_records_times_and_splits_td3(tmp_path):
    """The command, quick, on TD3 at a small size (Pendulum, batches of 32): both kinds of update; the eager
    update's forward NT and backward NN/TN matmuls, the compiled program's batched matmuls of 2 (the twin critics)
    and the JAX twin's batched dots, every one of them a timed row; the script's program (C++ wrapper) calls the
    matmuls of the Python-wrapper program; each split adds up to its call."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.limits.matmul", "--pairs", "td3", "--quick",
                           "--env-id", "Pendulum-v1", "--learning-starts", "64", "--batch-size", "32",
                           "--out", str(tmp_path)], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "results.md").read_text()
    assert text.startswith("Command: `python -m benchmarks.limits.matmul --pairs td3 --quick")
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["cpu"]["vendor"] and data["rounds"] == 1
    td3 = data["pairs"]["td3"]
    assert td3["variants"] == ["with actor step", "critic only"]
    eager = [c for calls in td3["eager"].values() for c in calls]
    compiled = [c for calls in td3["compiled"].values() for c in calls]
    dots = [d for calls in td3["jax"].values() for d in calls]
    assert {("NT", "forward")} <= {(c["layout"], c["role"]) for c in eager if c["op"] == "addmm"}
    assert {"NN", "TN"} <= {c["layout"] for c in eager if c["role"].startswith("backward")}
    assert any(c["op"] == "bmm" and c["batch"] == 2 for c in compiled), compiled
    assert any(d["batch"] == 2 for d in dots), dots
    rows = {r["name"]: r for r in data["layouts"]}
    for source, records in (("eager", eager), ("compiled", compiled)):
        for name in {c["name"] for c in records}:
            assert rows[name]["found"]["td3"][source] == sum(c["name"] == name for c in records), name
    assert sum(r["found"]["td3"]["jax"] for r in rows.values() if "td3" in r["found"]) == len(dots)
    for row in rows.values():
        assert len(row["torch_s"]) == len(row["xla_s"]) == 1 and min(row["torch_s"] + row["xla_s"]) > 0, row
        assert row["rates"]["torch_gflops"] == pytest.approx(row["flops"] / row["torch_s"][0] / 1e9)
        assert row["flops"] == 2 * row["batch"] * row["m"] * row["n"] * row["k"] and row["xla runs as"]
    assert len(td3["update_s"]) == 4 and all(len(t) == 1 and t[0] > 0 for t in td3["update_s"].values())
    for name in td3["variants"]:
        split = td3["split"][name]
        assert split["same matmuls in both wrappers"], split
        for program in ("compile", "compile (Python wrapper)"):
            s = split[program]
            assert s["matmul"] > 0 and s["kernels"] > 0 and s["rest"] > -1e-6, (program, s)
            assert s["call"] == pytest.approx(s["matmul"] + s["kernels"] + s["other calls"] + s["rest"])
        s = split["jax"]
        assert s["calls profiled"] == 3 and s["matmul"] > 0 and s["other thunks"] > 0, s
        assert s["call"] == pytest.approx(s["matmul"] + s["other thunks"] - s["overlap"] + s["rest"])
