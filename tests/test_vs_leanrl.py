"""benchmarks/vs_leanrl/vs_leanrl.py without LeanRL (not installed here): it reads LeanRL's fps back from an offline
Weights & Biases run file, and from the lines of the stand-in for wandb (benchmarks/vs_leanrl/wandb.py) the same
values; LeanRL's fps over a window comes exactly from its logged speeds; it refuses a folder that is not a LeanRL
checkout. The fixes (benchmarks/vs_leanrl/fixes.py) refuse a LeanRL they were not written for; on a real checkout
(LEANRL_CHECKOUT), they apply."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ENV, REPO

from benchmarks.vs_leanrl import fixes as vs_leanrl_fixes
from benchmarks.vs_leanrl.vs_leanrl import window_fps


def test_speeds_read_back_from_an_offline_wandb_run(tmp_path):
    """A run that logs `speed` at some steps (and other keys at others) gives back exactly those (step, speed)
    pairs, in order, through the blocks of the file (enough logs to span more than one 32 KiB block); the stand-in
    for wandb, given the same calls (values as LeanRL logs them: numbers, tensors, a string), gives the same."""
    standin = tmp_path / "standin"
    standin.mkdir()
    shutil.copyfile(REPO / "benchmarks" / "vs_leanrl" / "wandb.py", standin / "wandb.py")
    code = f"""
import glob, importlib.util, torch, wandb
from pathlib import Path
from benchmarks.vs_leanrl.vs_leanrl import logged_speeds, standin_speeds
spec = importlib.util.spec_from_file_location("standin", {str(standin / "wandb.py")!r})
standin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(standin)
run = wandb.init(mode="offline", dir={str(tmp_path)!r}, project="t", settings=wandb.Settings(silent=True))
standin.init(project="t", name="n", config={{"seed": 1}}, save_code=True)  # as LeanRL calls it
for step in range(0, 3000, 10):  # one call per step, as LeanRL logs
    logged = {{"losses/x": torch.tensor(step * 0.5), "pad": "y" * 40,
               **({{"speed": 1000.0 + step}} if step % 100 == 0 else {{}})}}
    wandb.log(logged, step=step)
    standin.log(logged, step=step)
run.finish()
standin.finish()
rows = logged_speeds(Path(glob.glob({str(tmp_path)!r} + "/wandb/offline-run-*/run-*.wandb")[0]))
expected = [(s, 1000.0 + s) for s in range(0, 3000, 100)]
assert rows == expected, [r for r in rows if r not in expected] + [r for r in expected if r not in rows]
assert standin_speeds(Path({str(tmp_path / "standin.jsonl")!r})) == rows
print("ok", len(rows), Path(glob.glob({str(tmp_path)!r} + "/wandb/offline-run-*/run-*.wandb")[0]).stat().st_size)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**ENV, "WANDB_MODE": "offline", "LEANRL_WANDB_LOG": str(tmp_path / "standin.jsonl")})
    assert proc.returncode == 0 and proc.stdout.startswith("ok 30"), proc.stderr[-3000:]
    assert int(proc.stdout.split()[2]) > 32768, proc.stdout  # the records crossed a block boundary


def test_not_a_leanrl_checkout_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks.vs_leanrl", "--leanrl", str(tmp_path)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not a LeanRL checkout" in proc.stderr.strip().splitlines()[-1], proc.stderr


def test_leanrl_fps_over_a_window_comes_from_its_logged_speeds():
    """LeanRL's logged speeds made from a known clock, slow until step 600 then fast: a cumulative speed (since S0)
    gives back the window's exact fps from any logged step, or from S0; windowed speeds give the rate over the windows
    after the first. Too few logs for the window stop with a line that says so."""
    s0 = 203

    def clock(step):  # seconds since S0: 4 ms a step until 600, 1 ms after
        return 0.004 * (min(step, 600) - s0) + 0.001 * max(step - 600, 0)
    rows = [(step, (step - s0) / clock(step)) for step in range(300, 1001, 100)]
    assert window_fps(rows, s0, 600) == pytest.approx(1000.0)
    assert window_fps(rows, s0, 300) == pytest.approx(700 / (clock(1000) - clock(300)))
    assert window_fps(rows, s0, None) == pytest.approx(rows[-1][1])  # from S0: the last logged speed
    windows = [(10240, 100.0), (20480, 1000.0), (30720, 500.0)]  # each 10240 steps
    assert window_fps(windows, None, None) == pytest.approx(20480 / (10240 / 1000 + 10240 / 500))
    too_few = [([(300, 70.0)], 203, 300), ([(300, 70.0), (400, 71.0)], 203, 450), ([(10240, 100.0)], None, None)]
    for rows, s0, frm in too_few:
        with pytest.raises(SystemExit, match="give it more steps"):
            window_fps(rows, s0, frm)


def test_the_fixes_refuse_a_leanrl_they_were_not_written_for(tmp_path):
    """A checkout whose lines differ from those a fix replaces stops the fixes in one line naming the script and the
    fix, exit code 1; a folder without leanrl/ is no checkout."""
    fake = tmp_path / "LeanRL"
    (fake / "leanrl").mkdir(parents=True)
    for script in vs_leanrl_fixes.FIXES:
        (fake / "leanrl" / f"{script}.py").write_text("print('not the lines the fixes expect')\n")
    run = [sys.executable, "-m", "benchmarks.vs_leanrl.fixes", str(fake), str(tmp_path / "dest")]
    proc = subprocess.run(run, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=60)
    first = next(iter(vs_leanrl_fixes.FIXES))
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith(
        f"vs_leanrl_fixes: {first}: the lines of the fix {vs_leanrl_fixes.FIXES[first][0][0]!r} are found 0 times"), \
        proc.stderr
    proc = subprocess.run(run[:3] + [str(tmp_path), str(tmp_path / "dest")], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "not a LeanRL checkout (no leanrl/ folder)" in proc.stderr, proc.stderr


@pytest.mark.skipif(not os.environ.get("LEANRL_CHECKOUT"), reason="no LeanRL checkout (LEANRL_CHECKOUT: a clean "
                    "checkout of github.com/pytorch-labs/LeanRL); CI has none")
def test_the_fixes_apply_to_leanrl(tmp_path):
    """On a clean LeanRL checkout: every fix applies, the fixed scripts compile, and FIXES.json names the commit and
    every fix; the stand-in for wandb is beside them."""
    state = vs_leanrl_fixes.build(Path(os.environ["LEANRL_CHECKOUT"]), tmp_path)
    assert len(state["commit"]) == 40 and state["local changes"] == [], state
    assert state == json.loads((tmp_path / "FIXES.json").read_text())
    assert state["fixes"] == {s: [why for why, _, _ in fixes] for s, fixes in vs_leanrl_fixes.FIXES.items()}
    for script in vs_leanrl_fixes.FIXES:
        compile((tmp_path / "leanrl" / f"{script}.py").read_text(), script, "exec")
    assert (tmp_path / "wandb.py").read_text() == (REPO / "benchmarks" / "vs_leanrl" / "wandb.py").read_text()


def test_a_leanrl_configuration_that_fails_is_recorded_and_the_rest_go_on(tmp_path, monkeypatch):
    """LeanRL's SAC --compile stops in dynamo on torch 2.13 (CPU): its row says it failed, with the exception its
    traceback ends with, it is left out of the later rounds and of the ratio, and the other configurations and
    pairs are measured. (The runs are stood in for: this checks the loop, not a speed.)"""
    from benchmarks.vs_leanrl import vs_leanrl

    (tmp_path / "leanrl" / "leanrl").mkdir(parents=True)
    calls = []

    def fake_leanrl_fps(leanrl, pydeps, script, flags, env_id, total, s0, frm):
        calls.append((script, flags))
        if "--compile" in flags and script.startswith("sac"):
            tail = "Traceback (most recent call last):\n  ...\ntorch._dynamo.exc.InternalTorchDynamoError: NameError: name 'SYNTHETIC_LOCAL'"
            raise vs_leanrl.PeerFailed(f"exit code 1: {vs_leanrl.error_line(tail)}")
        return 50.0 + len(calls)

    monkeypatch.setattr(vs_leanrl, "leanrl_fps", fake_leanrl_fps)
    monkeypatch.setattr(vs_leanrl, "run_once", lambda *args, **kwargs: {"sps": 200.0})
    monkeypatch.setattr(sys, "argv", ["vs_leanrl", "--leanrl", str(tmp_path / "leanrl"), "--pairs", "sac,td3",
                                      "--rounds", "2", "--out", str(tmp_path / "out")])
    vs_leanrl.main()
    text = (tmp_path / "out" / "results.md").read_text()
    assert "| leanrl --compile | failed | exit code 1: torch._dynamo.exc.InternalTorchDynamoError: NameError: name " \
           "'SYNTHETIC_LOCAL' |" in text, text
    assert "ours / LeanRL's best that ran (leanrl eager)" in text.split("## td3")[0]
    assert text.count("ours / LeanRL's best that ran") == 2  # TD3 measured too, both its configurations
    assert calls.count(("sac_continuous_action_torchcompile", "--compile")) == 1  # not tried again in round 2
    saved = json.loads((tmp_path / "out" / "results.json").read_text())["fps"]
    assert saved["sac"]["leanrl --compile"]["failed"].startswith("exit code 1") and len(saved["td3"]["leanrl --compile"]) == 2
