"""benchmarks/gpu/limits.py, the GPU limit study, on the CPU: a sitting at tiny sizes end to end (the budget leaves a
row out and says so, a second command adds it and keeps the first), the arithmetic of its outputs recomputed from
their raw figures, a row that fails kept with its error, and the GPU's figures (the split's waiting and copies, the
busy fraction and its series, the pieces' GPU times) from made-up CUPTI events, since no GPU runs here."""

import functools
import importlib.util
import json
import re
import sys
import threading
import time

import numpy as np
import pytest
from helpers import ENV, SCRIPT_DIR

from benchmarks.gpu import gpu, limits as gl
from benchmarks.limits.limits import Main

TINY = {"dqn": ("dqn", "CartPole-v1", 700, "--learning-starts 200 --measure-after 5")}
CPU_ENV = {k: v for k, v in ENV.items() if k != "MUJOCO_GL"} | {"OMP_NUM_THREADS": "1"}  # no CUDA; one thread: steady
SMALL = ["--seconds", "0.5", "--plain-seconds", "0.3", "--env-steps", "500", "--env-repeats", "2"]


def table(text: str, header: str) -> list[list[str]]:
    """The rows of the markdown table whose header row starts with `header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_a_sitting_on_the_cpu_resumes_and_its_figures_add_up(tmp_path, monkeypatch):
    """DQN at tiny sizes, eager, --cudagraphs (without CUDA its graphed functions are called directly, and timed) and
    the JAX twin: the first command's budget leaves --cudagraphs out (logged), the second command runs only that row.
    Every derived figure is recomputed here from the raw ones: the shares of the split sum to 1, and times the window's
    seconds per step give its milliseconds; the fps are the windows' steps over their seconds; the hard bound is the
    environment alone plus the least work of the pieces per step over the pair's rows, the reference the environment
    alone plus the row's pieces at their best latency, and each percentage is the fps over them."""
    monkeypatch.setattr(gpu, "PAIRS", TINY)
    monkeypatch.setattr(gl, "EXPECTED", {**gl.EXPECTED, "eager": 20.0, "cudagraphs": 10_000.0, "jax": 20.0})
    out = tmp_path / "limits"
    twin = importlib.util.find_spec("jax") is not None  # the JAX twin's row where JAX is installed
    modes = ["eager", "cudagraphs", *(["jax"] if twin else [])]
    argv = ["--out", str(out), "--pairs", "dqn", "--modes", "eager/" + ",".join(modes[1:]), "--budget", "300", *SMALL]
    gl.main(argv, CPU_ENV)
    first = json.loads((out / "results.json").read_text())
    assert list(first["rows"]) == ["dqn eager"] + (["dqn jax"] if twin else [])
    log = (out / "sitting.log").read_text()
    assert re.search(r"dqn cudagraphs: left out, \d+ s left, ~10000 s needed", log), log

    monkeypatch.setattr(gl, "EXPECTED", {**gl.EXPECTED, "cudagraphs": 20.0})
    gl.main(argv, CPU_ENV)  # the second command: the row left out, and nothing again
    data = json.loads((out / "results.json").read_text())
    assert sorted(data["rows"]) == [f"dqn {m}" for m in sorted(modes)] and len(data["commands"]) == 2
    assert (out / "sitting.log").read_text().count("dqn eager: ...") == 1
    kept = [{k: v for k, v in rows["dqn eager"].items() if k not in gl.DERIVED} for rows in (first["rows"],
                                                                                         data["rows"])]
    assert kept[0] == kept[1]  # as it was (its bound and percentages now count the second command's row too)
    assert sorted(p.name for p in out.iterdir()) == ["busy.png", "results.json", "results.md", "sitting.log"]

    env_sps, floors = data["env_sps"]["dqn"], []
    for row in data["rows"].values():
        assert "error" not in row, row
        w = row["window"]
        assert row["fps"] == pytest.approx(w["steps"] / w["seconds"])
        assert row["fps_plain"] == pytest.approx(w["plain_steps"] / w["plain_seconds"])
        assert row["gpu"].startswith("no GPU") and "device" not in row and row["nvml_utilization"]["plain"] is None
        assert set(row["shares"]) == set(gl.split_categories()) and sum(row["shares"].values()) == pytest.approx(1)
        assert row["shares"][gl.WAITING] == 0 and row["shares"][gl.COPIES] == 0  # nothing waits for a GPU here
        assert row["shares"]["update"] > 0 and row["samples"] > 20
        heavy = row["heaviest_lines"]  # 'category: line: its text', the most sampled first
        assert list(heavy.values()) == sorted(heavy.values(), reverse=True) and sum(heavy.values()) <= 1 + 1e-9
        assert all(re.match(r"(%s): " % "|".join(gl.split_categories()), k) for k in heavy), heavy
        for c, share in row["shares"].items():
            assert row["ms_per_step"][c] == pytest.approx(share * 1e3 / row["fps"])
        assert row["instruments"]["cost"] == pytest.approx(1 - row["fps"] / row["fps_plain"])
        if row["mode"] == "cudagraphs":
            pieces = row["pieces"]
            assert {"main.<locals>.update", "main.<locals>.policy"} <= set(pieces), pieces
            latency = sum(p["calls_per_step"] * p["best_latency_s"] for p in pieces.values())
            assert row["reference_fps"] == pytest.approx(1 / (1 / env_sps + latency))
            floors.append(sum(p["calls_per_step"] * p["best_host_s"] for p in pieces.values()))
            # the update runs every 10 steps (DQN's train frequency), the acting step at each step that does not
            # explore (the exploration ends at the start of learning: then 5% of the steps explore)
            assert pieces["main.<locals>.update"]["calls_per_step"] == pytest.approx(0.1, abs=0.02)
            assert 0.85 < pieces["main.<locals>.policy"]["calls_per_step"] <= 1
        elif row["mode"] == "jax":  # its jitted functions are timed, but without a GPU their times are dispatches
            assert {"main.<locals>.greedy_action", "main.<locals>.update(False)"} <= set(row["pieces"]), row["pieces"]
            assert row["gpu"] == "no GPU (JAX runs on cpu)" and row["reference_fps"] is None
        else:
            assert row["pieces"] == {} and row["reference_fps"] is None
    bound = 1 / (1 / env_sps + min(floors))
    assert data["bounds"]["dqn"]["bound_fps"] == pytest.approx(bound)
    for row in data["rows"].values():
        assert row["bound_fps"] == pytest.approx(bound)
        for key in ("bound", "reference"):
            of = row[f"{key}_fps"]
            expected = 100 * row["fps"] / of if of and row["fps"] <= of else None
            assert row[f"pct_of_{key}"] == (pytest.approx(expected) if expected else None)

    text = (out / "results.md").read_text()
    ordered = [data["rows"][f"dqn {m}"] for m in modes]  # the tables' order: the modes', not the runs'
    fps_rows = table(text, "| pair | mode | fps (plain)")
    assert [r[:2] for r in fps_rows] == [["dqn", gl.MODES[m][0]] for m in modes]
    for cells, row in zip(fps_rows, ordered):
        assert cells[2:4] == [f"{row['fps_plain']:.0f}", f"{row['fps']:.0f}"] and cells[9] == row["gpu"]
        pct = f"{row['pct_of_bound']:.0f}%" if row["pct_of_bound"] else f"ran above it ({bound:.0f}): none"
        assert cells[5:7] == [f"{bound:.0f}", pct]
    for cells, row in zip(table(text, "| pair | mode | environment |"), ordered):
        ms = [float(x) for x in cells[2:-2]]
        assert ms == pytest.approx([row["ms_per_step"][c] for c in gl.split_categories()], abs=1e-3)
        assert float(cells[-2]) == pytest.approx(sum(ms), abs=0.01)  # the parts make the step


def test_a_row_that_fails_is_kept_with_its_error(tmp_path, monkeypatch):
    """A run that stops at once (a learning rate the script refuses): its row holds the script's own line, results.md
    lists it, a second command leaves it alone, and --retry-failed runs it again."""
    monkeypatch.setattr(gpu, "PAIRS", {"dqn": ("dqn", "CartPole-v1", 700, "--learning-starts 200 --learning-rate -1")})
    argv = ["--out", str(tmp_path), "--pairs", "dqn", "--modes", "eager", *SMALL]
    gl.main(argv, CPU_ENV)
    gl.main(argv, CPU_ENV)
    row = json.loads((tmp_path / "results.json").read_text())["rows"]["dqn eager"]
    assert row["error"].startswith("the run stopped: SystemExit(2)\n")
    assert "--learning-rate must be positive" in row["error"]  # the script's own line, from its stderr
    assert "Rows that failed:\n\n- dqn eager: the run stopped: SystemExit(2)\n" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "sitting.log").read_text().count("dqn eager: failed") == 1
    tries = []
    monkeypatch.setattr(gl, "run_row", lambda *args: tries.append(args[:2]) or dict(row, error="again"))
    gl.main([*argv, "--retry-failed"], CPU_ENV)
    assert tries == [("dqn", "eager")]
    assert re.search(r"dqn eager: failed after \d+ s: again", (tmp_path / "sitting.log").read_text())


def test_a_run_that_dies_is_run_again_without_the_profiler(tmp_path, monkeypatch):
    """A run that dies of a signal (a fault below Python: CUPTI attaching to captured CUDA graphs is one such
    hazard) is run once more without torch.profiler, if the budget allows, and the row says why."""
    monkeypatch.setattr(gpu, "PAIRS", TINY)
    tries = []

    def run_row(pair, mode, opts, timeout, env, why_not_profiled=None):
        tries.append(why_not_profiled)
        return {"pair": pair, "mode": mode, "error": "exit -11, no measurement:\n", "wall_s": 1.0, "crashed": True}
    monkeypatch.setattr(gl, "run_row", run_row)
    gl.main(["--out", str(tmp_path), "--pairs", "dqn", "--modes", "eager", *SMALL], CPU_ENV)
    assert tries == [None, "the run died with it (exit -11, no measurement:)"]
    assert "dqn eager: the run died (exit -11, no measurement:); once more without torch.profiler" in \
        (tmp_path / "sitting.log").read_text()


def test_a_pair_measured_on_another_machine_is_measured_again_whole(tmp_path, monkeypatch):
    """Every row and environment-alone measurement records its machine, and a pair's bound adds them up: a command on
    another machine that adds a row to a pair measures the whole pair again there (said in the log); a command on the
    same machine adds the row alone. Made-up rows and environments: what is checked is the plan."""
    import benchmarks.limits.limits

    monkeypatch.setattr(gpu, "PAIRS", TINY)
    runs, envs = [], []
    monkeypatch.setattr(gl, "run_row", lambda pair, mode, *args: runs.append(mode) or
                        {"pair": pair, "mode": mode, "error": "made up", "wall_s": 1.0})
    monkeypatch.setattr(benchmarks.limits.limits, "environment_alone", lambda pair, steps: envs.append(pair) or 1000.0)
    argv = ["--out", str(tmp_path), "--pairs", "dqn", "--modes", "eager,jax", "--budget", "60", *SMALL]

    def command(machine, jax_expected):
        monkeypatch.setenv("LEANRL_MACHINE_ID", machine)
        monkeypatch.setattr(gl, "EXPECTED", {**gl.EXPECTED, "eager": 1.0, "jax": jax_expected})
        gl.main(argv, CPU_ENV)
        return json.loads((tmp_path / "results.json").read_text())

    first = command("machine-a", 10_000.0)  # the JAX row does not fit: left out
    assert runs == ["eager"] and first["rows"]["dqn eager"]["machine"] == "machine-a"
    assert first["env_machine"] == {"dqn": "machine-a"}
    second = command("machine-b", 1.0)  # another machine adds the JAX row: the pair again, whole
    assert runs == ["eager", "eager", "jax"] and envs == ["dqn"] * 4  # twice the best of --env-repeats 2
    assert {r["machine"] for r in second["rows"].values()} == {"machine-b"} and second["env_machine"]["dqn"] == "machine-b"
    assert "dqn: its rows so far ran on another machine; all of them run again on this one" in \
        (tmp_path / "sitting.log").read_text()
    monkeypatch.setattr(gl, "EXPECTED", {**gl.EXPECTED})
    command("machine-b", 1.0)  # nothing left to add
    assert runs == ["eager", "eager", "jax"]


def test_the_gpus_figures_from_made_up_events():
    """analyse() on a made-up run of dqn.py: a plain window of 2 s and a profiled one of 2 s (200 steps each); samples
    on the line that steps the environment for a second, every 10 ms, then on the update's backward pass for a second,
    every 20 ms (time-weighted, each second is half of the window; counted, the first would be two thirds). The main
    thread (system id 7) synchronizes once and copies once (its device copy beginning 5 ms into the call: the 5 ms
    before are waiting); a piece's calls launch kernels; another thread launches a kernel that no call owns."""
    main = Main(SCRIPT_DIR / "dqn.py")

    def line(pattern):
        return next(n for n, path in main.paths.items()
                    if n == path[-1].lineno and re.search(pattern, main.text(path[-1])))
    ms, t0 = 1_000_000, 1_800_000_000_000_000_000
    w0 = t0 + 3000 * ms  # the profiled window: [w0, w0 + 2 s]
    script = SCRIPT_DIR / "dqn.py"
    lines = script.read_text().splitlines()  # the backward pass: in loss_and_grads, which update() calls
    backward = next(n for n, text in enumerate(lines, 1) if "loss.backward()" in text)
    calls = next(n for n, text in enumerate(lines, 1) if "out = loss_and_grads(" in text)
    stacks = [["<module> (<string>:1)", f"main ({script}:{line(r'env.step')})"],
              ["<module> (<string>:1)", f"main ({script}:{line(r'= update[(]')})", f"update ({script}:{calls})",
               f"loss_and_grads ({script}:{backward})", "backward (torch/_tensor.py:1)"]]
    times = w0 + np.concatenate([10 * ms * np.arange(1, 101), 1000 * ms + 20 * ms * np.arange(1, 51)])
    raw = {"script": str(script), "error": None, "stacks": stacks,
           "points": [(100 * (i + 1), t0 + 1000 * ms * i) for i in range(6)],
           "marks": {"plain": 0, "arming": 2, "window": 3, "end": 5},
           "samples": [(int(t), 0 if t <= w0 + 1000 * ms else 1) for t in times],
           "info": {"process_start_ns": t0 - 5000 * ms, "main_tid": 7, "profiler": None, "profiler_start_s": 1.0,
                    "instruments_start_ns": t0 + 2000 * ms, "instruments_stop_ns": t0 + 5100 * ms},
           "calls": {"main.<locals>.update": [(w0 + 1500 * ms, w0 + 1502 * ms), (w0 + 1800 * ms, w0 + 1801 * ms)],
                     "main.<locals>.policy": [(w0 + 100 * ms, w0 + 101 * ms)]},
           "nvml": [(t0 + 500 * ms, 40.0), (t0 + 1500 * ms, 60.0), (w0 + 500 * ms, 90.0)]}
    at = w0 + 1500 * ms
    api = np.array([  # start, end, kind (API_KINDS), correlation id, thread
        (w0 + 200 * ms, w0 + 250 * ms, 1, 1, 7),  # a synchronize, 50 ms: waiting
        (w0 + 600 * ms, w0 + 700 * ms, 2, 2, 7),  # a copy call, 100 ms, its device copy beginning 5 ms in
        (at + ms // 2, at + ms, 0, 3, 7),  # the update's launch, inside its first call
        (w0 + 1800 * ms + 10, w0 + 1800 * ms + 20, 0, 4, 7),  # inside its second call
        (w0 + 900 * ms, w0 + 901 * ms, 0, 5, 99),  # another thread's launch, in no call
    ], dtype=np.int64)
    dev = np.array([  # start, end, kind (DEV_KINDS), correlation id, bytes
        (w0 + 605 * ms, w0 + 700 * ms, 2, 2, 4096),  # the copy, device to host, 95 ms
        (at + 2 * ms, at + 6 * ms, 0, 3, 0),  # the update's first call: two kernels, 4 and 3 ms, 1 ms apart
        (at + 7 * ms, at + 10 * ms, 0, 3, 0),
        (w0 + 1800 * ms, w0 + 1802 * ms, 0, 4, 0),  # its second call: 2 ms
        (w0 + 900 * ms, w0 + 920 * ms, 0, 5, 0),  # 20 ms
        (w0 - 50 * ms, w0 + 5 * ms, 0, 0, 0),  # begun before the window: its 5 ms inside count
        (w0 + 1990 * ms, w0 + 1995 * ms, 0, 6, 0),  # 5 ms, launched by no call recorded
        (w0 + 650 * ms, w0 + 660 * ms, 4, 0, 64),  # a memset during the copy: the GPU is no busier
    ], dtype=np.int64)
    row = gl.analyse(raw, dev, api, "dqn", "compile", bin_ms=10)

    assert row["gpu"] == "profiled" and row["clocks_aligned"] and row["main_thread_calls_found"]
    assert row["fps"] == pytest.approx(100) and row["fps_plain"] == pytest.approx(100)
    shares = row["shares"]
    # the first second's samples stand for 10 ms each: waiting at 200..240 ms (the synchronize, [200, 250)) and at 600
    # (the copy call before its device copy, [600, 605)), copying at 610..690 ([605, 700)), the rest on the
    # environment's line; the second second's 50 samples on the update's
    assert sum(shares.values()) == pytest.approx(1)
    assert shares[gl.WAITING] == pytest.approx(6 / 200) and shares[gl.COPIES] == pytest.approx(9 / 200)
    assert shares["environment"] == pytest.approx(85 / 200) and shares["update"] == pytest.approx(1 / 2)
    assert row["samples"] == 150
    assert row["ms_per_step"][gl.WAITING] == pytest.approx(6 / 200 * 10)  # 10 ms a step at 100 fps
    assert list(row["heaviest_lines"].values()) == pytest.approx([0.5, 0.5])
    d = row["device"]
    assert d["per_step"]["kernel"]["count"] == pytest.approx(6 / 200)
    assert d["per_step"]["kernel"]["ms"] == pytest.approx((4 + 3 + 2 + 20 + 5 + 5) / 200)
    assert d["per_step"]["DtoH"] == {"count": 1 / 200, "ms": pytest.approx(95 / 200), "bytes": 4096 / 200}
    assert d["per_step"]["memset"] == {"count": 1 / 200, "ms": pytest.approx(10 / 200), "bytes": 64 / 200}
    assert d["busy"] == pytest.approx((95 + 4 + 3 + 2 + 20 + 5 + 5) / 2000) and d["steps"] == 200
    assert d["busy_ms_per_step"] == pytest.approx(134 / 200)
    series = np.array(d["series"])
    assert len(series) == 200 and series[0] == pytest.approx(0.5) and series[1] == 0 and series[199] == 0.5
    assert series[60] == pytest.approx(0.5) and series[61:70].tolist() == [1.0] * 9
    assert series.sum() * 10 == pytest.approx(95 + 4 + 3 + 2 + 20 + 5 + 5)
    calls = d["main_thread_calls_per_step"]
    assert calls["synchronize"] == {"count": 1 / 200, "ms": pytest.approx(50 / 200)}
    assert calls["launch"]["count"] == 2 / 200  # the other thread's launch is not the main thread's
    update = row["pieces"]["main.<locals>.update"]
    assert update["calls_per_step"] == 2 / 200 and update["best_host_s"] == pytest.approx(1e-3)
    assert update["best_gpu_s"] == pytest.approx(2e-3)  # the second call's kernel (the first call's two: 7 ms)
    assert update["best_latency_s"] == pytest.approx(2e-3)  # 1 ms on the host, its kernel ending 2 ms after its start
    assert row["pieces"]["main.<locals>.policy"]["best_gpu_s"] is None  # it launched nothing
    assert row["nvml_utilization"] == {"plain": pytest.approx(0.5), "profiled": pytest.approx(0.9)}

    # the profiler's record stops 1.8 s into the window (its buffer full): the GPU's figures come from the window's
    # first second, up to the last point before it stopped (100 steps: the early kernel, the copy, the 20 ms kernel)
    cut = gl.analyse(raw, np.delete(dev, 6, axis=0), api, "dqn", "compile", bin_ms=10)
    assert cut["gpu"] == "profiled" and cut["device_window_truncated_at_s"] == pytest.approx(1.0)
    assert cut["device"]["steps"] == 100 and cut["device"]["busy"] == pytest.approx((5 + 95 + 20) / 1000)
    assert len(cut["device"]["series"]) == 100 and cut["pieces"]["main.<locals>.policy"]["calls_per_step"] == 1 / 100
    assert "main.<locals>.update" not in cut["pieces"]  # its calls came after the first second
    assert cut["shares"] == row["shares"]  # the split keeps the whole window

    # a JAX twin's kernels may be launched after its call returned: they belong to the last call begun before
    late = api.copy()
    late[3, 0] = w0 + 1900 * ms  # the second update call's launch, 99 ms after the call's end
    assert gl.analyse(raw, dev, late, "dqn", "compile", bin_ms=10)["pieces"]["main.<locals>.update"]["best_gpu_s"] \
        == pytest.approx(7e-3)  # only the first call has kernels now
    assert gl.analyse(raw, dev, late, "dqn", "jax", bin_ms=10)["pieces"]["main.<locals>.update"]["best_gpu_s"] \
        == pytest.approx(2e-3)


def stack_at(script, main, pattern: str, *inner: str) -> list[str]:
    """A sampled stack on the line of the script's main() whose statement matches `pattern`, with `inner` frames
    below it."""
    n = next(n for n, path in main.paths.items() if n == path[-1].lineno and re.search(pattern, main.text(path[-1])))
    return ["<module> (<string>:1)", f"main ({script}:{n})", *inner]


def jax_twin_raw(script, stacks: list[list[str]]) -> dict:
    """What a JAX twin's launcher writes, made up: 200 samples in the window, 10 ms apart, taking the stacks in turn;
    no profiler (JAX on a GPU)."""
    t0, ms = 1_800_000_000_000_000_000, 1_000_000
    return {"script": str(script), "error": None, "stacks": stacks, "calls": {}, "nvml": [],
            "points": [(100 * (i + 1), t0 + 1000 * ms * i) for i in range(6)],
            "marks": {"plain": 0, "arming": 2, "window": 3, "end": 5},
            "samples": [(t0 + 3000 * ms + 10 * ms * (i + 1), i % len(stacks)) for i in range(200)],
            "info": {"process_start_ns": t0 - 5000 * ms, "main_tid": 7, "jax_backend": "gpu",
                     "profiler": "torch.profiler failed to start: (made up)"}}


def test_a_jax_twin_on_a_gpu_waits_where_it_reads_a_result():
    """JAX's dispatch is asynchronous: a jitted call returns at once and the host waits where it reads a result. On a
    GPU such samples count as waiting for the GPU (inside JAX's ArrayImpl._value, or on a line of main() that reads an
    array with no Python frame below it), but never the environment's line (which may read one for its action); the
    call that dispatches the update stays the update. Without a GPU the classifier's categories stay."""
    script = SCRIPT_DIR / "sac_continuous_action_jax.py"
    main = Main(script)
    at = functools.partial(stack_at, script, main)
    jax_src = "/site-packages/jax/_src"
    stacks = [at(r"action = np\.asarray\(action\)"),  # a read, in C++: waiting
              at(r"env\.step\("),  # the environment
              at(r"harness\.log_losses\(", "log_losses (leanrl_utils/harness.py:360)",
                 f"ArrayImpl.__float__ ({jax_src}/array.py:300)",
                 f"annotate_function.<locals>.wrapper ({jax_src}/profiler.py:420)",
                 f"ArrayImpl._value ({jax_src}/array.py:623)"),  # a read, in JAX: waiting
              at(r"= train_step\(", f"cache_miss ({jax_src}/pjit.py:1)")]  # the update's dispatch
    raw = jax_twin_raw(script, stacks)
    empty = np.zeros((0, 5), np.int64)
    on_gpu = gl.analyse(raw, empty, empty, "sac", "jax", bin_ms=10)["shares"]
    assert on_gpu[gl.WAITING] == pytest.approx(0.5) and on_gpu["environment"] == pytest.approx(0.25)
    assert on_gpu["update"] == pytest.approx(0.25)
    raw["info"] |= {"jax_backend": "cpu", "profiler": "no GPU (JAX runs on cpu)"}
    on_cpu = gl.analyse(raw, empty, empty, "sac", "jax", bin_ms=10)["shares"]
    assert on_cpu[gl.WAITING] == 0 and on_cpu["logging"] == pytest.approx(0.25)
    assert on_cpu["other"] == pytest.approx(0.25)


def test_a_sample_on_no_line_is_other():
    """Python 3.11+ gives a frame's line as None while it runs an instruction that belongs to no line; CI's sampler
    caught the JAX DQN twin's main() there once and the row's analysis failed. Such a sample is 'other' (not waiting,
    and its heaviest-lines label is the frame), and the row's figures come out."""
    script = SCRIPT_DIR / "dqn_jax.py"
    main = Main(script)
    stacks = [stack_at(script, main, r"\benvs?\.step\("), ["<module> (<string>:1)", f"main ({script}:None)"]]
    raw = jax_twin_raw(script, stacks)
    empty = np.zeros((0, 5), np.int64)
    row = gl.analyse(raw, empty, empty, "dqn", "jax", bin_ms=10)
    assert row["shares"]["other"] == pytest.approx(0.5) and row["shares"]["environment"] == pytest.approx(0.5)
    assert any(label.endswith(f"main ({script}:None)") for label in row["heaviest_lines"]), row["heaviest_lines"]


def test_gae_is_told_apart_in_the_split():
    """PPO Atari's GAE has a category of its own in the split (limits.py's classifier counts it as the update, or as
    the rollout's storage where its results are written into the rollout): a sample inside the script's GAE functions
    (the optimized script's gae, its chunk, the eager script's compute_gae), or on main()'s line that calls one,
    whatever library runs it (a CUDA graph's module); the update, the acting step and the storage keep theirs."""
    assert gl.split_categories()[gl.split_categories().index("update") + 1] == gl.GAE
    for name in ("ppo_atari_envpool_torchcompile", "ppo_atari_envpool"):
        script = SCRIPT_DIR / f"{name}.py"
        main = Main(script)
        at = functools.partial(stack_at, script, main)
        graph = "CudaGraphModule.__call__ (/site-packages/tensordict/nn/cudagraphs.py:300)"
        gae = at(r"= (gae|compute_gae)\(")
        assert gl.category(gae, script.name, main) == gl.GAE
        assert gl.category(gae + [graph], script.name, main) == gl.GAE
        inner = "main.<locals>.gae" if "compile" in name else "compute_gae"
        assert gl.category(gae + [graph, f"{inner} ({script}:1)"], script.name, main) == gl.GAE
        assert gl.category(at(r"= update\("), script.name, main) == "update"
        assert gl.category(at(r"= (agent\.get_action_and_value|policy)\(next_obs\)"), script.name, main) == "acting"
    optimized = SCRIPT_DIR / "ppo_atari_envpool_torchcompile.py"
    main = Main(optimized)
    n = next(n for n, path in main.paths.items()
             if re.search(r'rollout\["values"\]\[step\] = value', main.text(path[-1])))
    assert gl.category([f"main ({optimized}:{n})"], optimized.name, main) == "storage"


def test_busy_fraction_is_the_union_of_intervals_per_bin():
    """Overlapping intervals count once; a bin's value is the share of its time that something covers."""
    iv = np.array([(0, 4), (2, 6), (8, 9), (5, 7), (12, 30)], dtype=np.int64)
    assert gl.merged(iv).tolist() == [[0, 7], [8, 9], [12, 30]]
    assert gl.busy_series(iv, 0, 20, 5).tolist() == [1.0, 0.6, 0.6, 1.0]
    assert gl.busy_series(iv, 3, 9, 2).tolist() == [1.0, 1.0, 0.5]
    assert gl.busy_series(iv[:0], 0, 10, 5).tolist() == [0.0, 0.0]
    assert gl.inside(gl.merged(iv), np.array([0, 7, 8, 11, 29])).tolist() == [True, False, True, False, True]


def test_the_profilers_events_become_arrays_on_the_unix_clock():
    """device_arrays() on torch.profiler's own events (CPU operators, the only kind this machine records): every event
    becomes a row, on time.time_ns()'s clock (the windows'), with its thread's system id."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    before = time.time_ns()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.randn(64, 64) @ torch.randn(64, 64)
    after = time.time_ns()
    events = prof.profiler.kineto_results.events()
    dev, api = gl.device_arrays(events)
    assert dev.shape == (0, 5) and api.shape == (len(events), 5) and len(events) > 0
    assert (before <= api[:, 0]).all() and (api[:, 0] <= api[:, 1]).all() and (api[:, 1] <= after).all()
    assert set(api[:, 4].tolist()) == {threading.get_native_id()}
    assert set(api[:, 2].tolist()) == {gl.API_KINDS.index("other")}  # aten operators: no launch, wait or copy


def test_the_sampler_weighs_samples_by_time():
    """The sampler on this thread: 0.3 s asleep in one function, then 0.3 s of pure Python in another, which holds the
    interpreter (with a 0.5 ms switch interval the sampler still gets it in time): about half each."""

    def asleep():
        time.sleep(0.3)

    def computing():
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    sampler = gl.Sampler(threading.get_ident(), rate=200)
    start = time.time_ns()
    sampler.start()
    try:
        asleep()
        computing()
    finally:
        sampler.stopping.set()
        sampler.join()
        sys.setswitchinterval(switch)
    end = time.time_ns()
    frames = sampler.frames()

    def where(stack):
        return next((name for name in ("asleep", "computing") if any(name in f for f in stack)), "other")
    times = np.array([t for t, _ in sampler.samples])
    no_call = np.zeros((0, 2), np.int64)
    shares, n = gl.split_shares(times, [where(frames[i]) for _, i in sampler.samples], start, end, no_call, no_call,
                                ["asleep", "computing", "other"])
    assert n > 40 and shares["asleep"] == pytest.approx(0.5, abs=0.2)
    assert shares["computing"] == pytest.approx(0.5, abs=0.2)
    # frames as limits.classify reads them: 'qualname (file:line)', outermost first
    asleep_stack = next(stack for stack in frames if where(stack) == "asleep")
    assert re.fullmatch(r"test_the_sampler_weighs_samples_by_time \(.*test_gpu_limits\.py:\d+\)", asleep_stack[-2])
    assert asleep_stack[-1].startswith("test_the_sampler_weighs_samples_by_time.<locals>.asleep (")
