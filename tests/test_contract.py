"""The promises of the script contract (CONTRIBUTING.md) that every script keeps, checked on each script.

Pair-specific checks (numerics, learning) live in test_<algorithm>.py.
"""

import math
import re
from dataclasses import fields

import pytest
import torch
from helpers import CHECKED, SPECS, assert_user_error, ctrl_c_inside, interrupt_script, load_script, run_in_process, \
    run_script, wandb_history, with_flag
from leanrl_utils import evals


# SPECS (each script's short run, an action space it refuses, bad sizes; CHECKED: their names) and
# assert_user_error: helpers.py's, which test_devices.py and test_mistakes.py read too


@pytest.mark.parametrize("script", CHECKED)
def test_help_lists_every_flag(script, tmp_path):
    run = run_in_process(script, "--help", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    module = load_script(script)
    for f in fields(module.Args):
        flag = "--" + f.name.replace("_", "-")
        assert flag in run.stdout, f"{flag} missing from --help"
    if script.endswith("_torchcompile"):
        assert "--compile" in run.stdout and "--cudagraphs" in run.stdout


# Bad input: one real process per script (its exit code and stderr as a user sees them), then the other
# cases in this process (the same main() and checks, without a new interpreter's seconds of start-up).
@pytest.mark.parametrize("script", CHECKED)
def test_unknown_env_id(script, tmp_path):
    run = run_script(script, "--env-id", "NoSuchEnv-v9", cwd=tmp_path)
    assert_user_error(run, "--env-id")


@pytest.mark.parametrize("script", CHECKED)
def test_unsupported_action_space(script, tmp_path):
    env_id, word = SPECS[script].wrong_space
    run = run_in_process(script, "--env-id", env_id, cwd=tmp_path)
    assert_user_error(run, "--env-id")
    assert word in run.stderr


@pytest.mark.parametrize("script,flag,value", [(s, f, v) for s in CHECKED for f, v in SPECS[s].bad_sizes])
def test_bad_sizes(script, flag, value, tmp_path):
    run = run_in_process(script, *SPECS[script].short, flag, value, cwd=tmp_path)
    assert_user_error(run, flag)


@pytest.mark.parametrize("script", CHECKED)
def test_every_float_flag_refuses_nan_and_inf(script, tmp_path):
    """A float flag given as nan or inf passes range checks written as comparisons (every comparison with nan
    is false): each script refuses a non-finite value (nan and inf in turn) for every float flag, with one
    line naming the flag (in this process: the same main() and checks, without a new interpreter per flag)."""
    floats = [f.name for f in fields(load_script(script).Args) if f.type in (float, "float", float | None, "float | None")]
    assert floats, "no float flag"
    for i, name in enumerate(floats):
        flag = "--" + name.replace("_", "-")
        run = run_in_process(script, *SPECS[script].short, flag, ["nan", "inf"][i % 2], cwd=tmp_path / name)
        assert_user_error(run, flag)


@pytest.mark.parametrize("script", CHECKED)
def test_every_float_flag_refuses_a_negative_value(script, tmp_path):
    """No float flag of any script takes a negative value (rates, coefficients, noises, probabilities, times):
    each refuses -1 with one line naming the flag, the same way in the three scripts of a family."""
    floats = [f.name for f in fields(load_script(script).Args) if f.type in (float, "float", float | None, "float | None")]
    for name in floats:
        flag = "--" + name.replace("_", "-")
        run = run_in_process(script, *SPECS[script].short, flag, "-1", cwd=tmp_path / name)
        assert_user_error(run, flag)


@pytest.mark.parametrize("script", CHECKED)
def test_ctrl_c_keeps_the_logs(script, tmp_path):
    spec = SPECS[script]
    args = with_flag(spec.short, "--total-timesteps", "1000000")
    run = interrupt_script(script, *args, cwd=tmp_path, after_step=spec.interrupt_after)
    assert run.returncode == 130, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "interrupted" in run.stderr
    # the writer was closed: what was logged before the interrupt is readable
    assert run.values("charts/episodic_return"), sorted(run.scalars)
    assert any(tag.startswith("losses/") for tag in run.scalars), sorted(run.scalars)


@pytest.mark.parametrize("script", CHECKED)
def test_a_ctrl_c_during_a_write_waits_for_it(script, monkeypatch, tmp_path):
    """A SIGINT that lands while the writer writes a scalar is raised once the write is done: raised inside
    TensorBoard's queue, it could leave the writer's thread asleep and the run hung at exit (the Ctrl-C test
    above hung 1 time in 14 so, on dqn_torchcompile). Here the signal is sent from inside the write itself."""
    import signal

    from torch.utils.tensorboard.writer import FileWriter

    from leanrl_utils.events import read_run

    if script.endswith("_jax"):
        pytest.importorskip("jax")
    module = load_script(script)
    monkeypatch.chdir(tmp_path)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    add_summary, calls = FileWriter.add_summary, []

    def interrupted(self, *args, **kwargs):
        calls.append(True)
        signal.raise_signal(signal.SIGINT)
        return add_summary(self, *args, **kwargs)
    try:
        writer = module.make_writer(module.Args(), "run", 0.0)
        monkeypatch.setattr(FileWriter, "add_summary", interrupted)
        with pytest.raises(KeyboardInterrupt):
            writer.add_scalar("charts/written", 1.0, 7)
        monkeypatch.setattr(FileWriter, "add_summary", add_summary)
        writer.close()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert calls, "the write never reached the file writer"
    written = read_run(tmp_path / "runs" / "run").scalars.get("charts/written", [])
    assert [(step, value) for step, _, value in written] == [(7, 1.0)], written


@pytest.mark.parametrize("script", ["sac_continuous_action_torchcompile", "td3_continuous_action_torchcompile"])
def test_ctrl_c_inside_a_to_module_context(script, tmp_path):
    # tensordict's `to_module` context turns a KeyboardInterrupt raised in its body into a RuntimeError
    # on exit; a SIGINT lands there at random (it once failed CI), so this test puts it there on purpose
    run = ctrl_c_inside("batched_qf", script, *SPECS[script].short, cwd=tmp_path)
    assert run.returncode == 130, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "interrupted" in run.stderr
    assert run.values("charts/episodic_return"), sorted(run.scalars)


def saved_and_tracked(script, cached_run):
    """One short run per script with --save-model and --track (offline), shared by the tests below."""
    return cached_run(script, *SPECS[script].short, "--save-model", "--eval-episodes", "2", "--track").check()


@pytest.mark.parametrize("script", CHECKED)
def test_save_model_loads_back_and_acts(script, cached_run):
    run = saved_and_tracked(script, cached_run)
    models = list(run.run_dir.glob("*.pt"))
    assert len(models) == 1, list(run.run_dir.iterdir())
    assert len(run.values("eval/episodic_return")) == 2
    policy, saved_args = evals.load_policy(str(models[0]))[:2]
    assert saved_args["env_id"] == SPECS[script].short[1]
    returns = evals.evaluate(str(models[0]), eval_episodes=1)
    assert len(returns) == 1 and math.isfinite(returns[0])


TWINS = [(s.removesuffix("_jax"), s) if s.endswith("_jax") else (s, f"{s}_torchcompile")
         for s in CHECKED if not s.endswith("_torchcompile") and (s.endswith("_jax") or f"{s}_torchcompile" in CHECKED)]


@pytest.mark.parametrize("eager,twin", TWINS, ids=[twin for _, twin in TWINS])
def test_every_twin_saves_the_eager_script_s_checkpoint(eager, twin, cached_run):
    """A model saved by any script of a pair loads the same way: same algorithm, same networks, same tensor
    names and shapes (the optimized SAC and TD3 keep their critics stacked, and save them apart; the JAX
    twins convert their parameters to the eager script's layout)."""
    a, b = (torch.load(next(saved_and_tracked(s, cached_run).run_dir.glob("*.pt")), weights_only=True)
            for s in (eager, twin))
    assert sorted(a) == sorted(b) and a["algo"] == b["algo"]
    for key in a:
        if isinstance(a[key], dict) and key != "args":
            layout = lambda d: {k: getattr(v, "shape", type(v)) for k, v in d.items()}  # noqa: E731
            assert layout(a[key]) == layout(b[key]), key


@pytest.mark.parametrize("script", CHECKED)
def test_track_offline_holds_the_scalars(script, cached_run):
    run = saved_and_tracked(script, cached_run)
    offline = list((run.cwd / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(offline) == 1, "no offline wandb run was written"
    history = wandb_history(offline[0])
    assert "charts/SPS" in run.scalars, f"the run logged no fps: {sorted(run.scalars)}"
    for tag, points in run.scalars.items():
        assert len(history.get(tag, [])) == len(points), f"{tag}: {len(points)} logged, {history.get(tag)} in wandb"


@pytest.mark.parametrize("script", CHECKED)
def test_no_placeholder_is_left_in_a_script(script):
    """A docstring or comment left as a placeholder (a `SOMETHING_NOTE`, a TODO) reads as a finished sentence
    to nobody."""
    from helpers import SCRIPT_DIR

    text = (SCRIPT_DIR / f"{script}.py").read_text()
    assert not re.findall(r"\b[A-Z]{3,}_NOTE\b|\bTODO\b|\bFIXME\b|\bXXX\b", text)


def test_every_script_has_a_spec():
    from helpers import SCRIPT_DIR

    scripts = sorted(p.stem for p in SCRIPT_DIR.glob("*.py"))
    assert scripts == CHECKED, "add the new script to SPECS"


class _NetworksBuilt(Exception):
    """Stops a script's main() once its networks are built (at its writer, which comes after them)."""


PYTORCH = [s for s in CHECKED if not s.endswith("_jax") and "multigpu" not in s]  # main() runs alone in-process


@pytest.mark.parametrize("script", PYTORCH)
def test_networks_are_built_on_the_cpu_and_moved(script, monkeypatch, tmp_path):
    """Every script of a pair draws its initial weights from the CPU generator, on any device: its layers are
    built without a device (by argument or `with torch.device(...)`) and moved, so that on a GPU the
    optimized script starts from the eager script's weights, as it does here. A layer built on the training
    device (the CPU here) fails this; shells built on "meta" (they hold no weights of their own) pass."""
    import torch.nn as nn
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._device import DeviceContext

    module, built = load_script(script), []
    for layer in (nn.Linear, nn.Conv2d):
        init = layer.__init__

        def recording(self, *args, _init=init, **kwargs):
            contexts = [m.device for m in _get_current_function_mode_stack() if isinstance(m, DeviceContext)]
            device = torch.device(kwargs.get("device") or (contexts[-1] if contexts else "cpu"))
            # a device given, by argument or context, other than "meta"
            built.append((type(self).__name__, device.type != "meta" and ("device" in kwargs or bool(contexts)),
                          device.type))
            _init(self, *args, **kwargs)
        monkeypatch.setattr(layer, "__init__", recording)

    def stop(*args, **kwargs):
        raise _NetworksBuilt
    monkeypatch.setattr(module, "make_writer", stop)
    monkeypatch.chdir(tmp_path)
    args = SPECS[script].short
    with pytest.raises(_NetworksBuilt):
        module.main(module.Args(**{a[2:].replace("-", "_"): type(getattr(module.Args, a[2:].replace("-", "_")))(v)
                                   for a, v in zip(args[::2], args[1::2])}))
    real = [(name, explicit) for name, explicit, device in built if device != "meta"]
    assert real, "no layer was built"
    assert not [name for name, explicit in real if explicit], f"layers built on a given device: {real}"
    assert {device for _, _, device in built} <= {"cpu", "meta"}, built


# Hunks of a pair's diff that carry no comment and need none, each with its reason (keep it short).
UNCOMMENTED_HUNKS: dict[tuple[str, str], str] = {
    ("ppo_atari_envpool_torchcompile", "return self.critic(self.network(self.frames(x)))"):
        "calls frames() just above, whose comment says why",
    ("ppo_atari_envpool_multigpu_torchcompile", "return self.critic(self.network(self.frames(x)))"):
        "calls frames() just above, whose comment says why",
    ("ppo_atari_envpool_torchcompile", "obs[step] = next_obs"):
        "the rollout's writes move into the one loop after the acting step, commented there",
    ("ppo_atari_envpool_multigpu_torchcompile", "obs[step] = next_obs"):
        "the rollout's writes move into the one loop after the acting step, commented there",
    ("dqn_torchcompile", "# optimize the model"): "the optimizer step moves into update(), commented there",
    ("dqn_atari_envpool_torchcompile", "# optimize the model"): "as in dqn_torchcompile",
}


def unexplained_hunks(eager: str, optimized: str) -> list[str]:
    """The hunks of `diff eager.py optimized.py` (no context) that say nothing about why they are there. A hunk
    is explained by a comment on one of its new lines or in the paragraph just above it in the optimized file
    (the non-blank lines up to the blank one before; a comment the eager script has too explains nothing), or
    by being prose (the module docstring, which lists the optimizations), comments only, or imports only (they
    follow from the code that uses them)."""
    import difflib

    from helpers import SCRIPT_DIR

    old = (SCRIPT_DIR / f"{eager}.py").read_text().splitlines()
    new = (SCRIPT_DIR / f"{optimized}.py").read_text().splitlines()

    def docstring_end(lines):  # the line after the module docstring
        quotes = [i for i, line in enumerate(lines) if '"""' in line]
        return quotes[1] + 1 if quotes[0] == 0 and len(quotes) > 1 else 0

    def commented(line):
        return "#" in line or '"""' in line

    def is_import(line):
        return not line.strip() or re.match(r"\s*(import \w|from [\w.]+ import )", line) is not None

    found, eager_lines = [], set(old)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal" or (i2 <= docstring_end(old) and j2 <= docstring_end(new)):
            continue
        changed = old[i1:i2] + new[j1:j2]
        if all(is_import(line) for line in changed) or all(line.strip()[:1] in ("", "#") for line in changed):
            continue
        above, k = [], j1 - 1
        while k >= 0 and new[k].strip():
            above.append(new[k])
            k -= 1
        # a comment above explains the change only if the eager script does not have it too
        if any(commented(line) for line in new[j1:j2]) or any(commented(l) and l not in eager_lines for l in above):
            continue
        first = (new[j1:j2] or old[i1:i2])[0].strip()
        if (optimized, first) not in UNCOMMENTED_HUNKS:
            found.append(f"{optimized}.py:{j1 + 1} ({tag}) {first}")
    return found


@pytest.mark.parametrize("eager", [s for s in CHECKED if f"{s}_torchcompile" in CHECKED])
def test_every_hunk_of_a_pair_s_diff_says_why(eager):
    """`diff -u X.py X_torchcompile.py` reads as a lesson (the contract): every changed piece of the optimized
    script has its comment, or is one of the few listed above with the reason it needs none."""
    assert unexplained_hunks(eager, f"{eager}_torchcompile") == []


# Runs an optimized script's main() with --compile --cudagraphs on the CPU (where CudaGraphModule calls its
# function directly) and records, per compiled function and kind of call, at which of its calls dynamo
# compiled a graph, and the warm-up each CudaGraphModule was given. COMPILED_ACTING takes the CPU in too:
# the acting steps that --compile compiles on CUDA only are compiled here as well.
SETTLE = """
import atexit, json, sys
import torch, tyro
from tensordict.nn import CudaGraphModule
from leanrl_utils.scripts import load_script

out, name = sys.argv[1], sys.argv[2]
calls, compiles, warmups = {}, {}, []
counters = torch._dynamo.utils.counters
compile_ = torch.compile


def kind(args, kwargs):
    plain = [repr(a) for a in args if isinstance(a, bool)]
    plain += [f"{k}={v!r}" for k, v in sorted(kwargs.items()) if isinstance(v, (bool, int, str))]
    return f"({', '.join(plain)})" if plain else ""


def recording_compile(fn=None, **options):
    if fn is None:
        return lambda f: recording_compile(f, **options)
    compiled, fname = compile_(fn, **options), getattr(fn, "__qualname__", repr(fn))

    def call(*args, **kwargs):
        key = fname + kind(args, kwargs)
        n = calls[key] = calls.get(key, 0) + 1
        before = counters["stats"]["unique_graphs"]
        result = compiled(*args, **kwargs)
        if counters["stats"]["unique_graphs"] != before:
            compiles.setdefault(key, []).append(n)
        return result
    return call


init = CudaGraphModule.__init__


def recording_init(self, module, *args, warmup=2, **kwargs):
    warmups.append(warmup)
    init(self, module, *args, warmup=warmup, **kwargs)


torch.compile, CudaGraphModule.__init__ = recording_compile, recording_init
module = load_script(name)
if hasattr(module, "COMPILED_ACTING"):
    module.COMPILED_ACTING = (*module.COMPILED_ACTING, "cpu")
atexit.register(lambda: open(out, "w").write(json.dumps({"calls": calls, "compiles": compiles, "warmups": warmups})))
module.main(tyro.cli(module.Args, args=sys.argv[3:]))
"""
SETTLE_RUNS = {  # long enough that every compiled kind of call runs past its capture (PPO Atari: 8 iterations)
    "ppo_atari_envpool_torchcompile": lambda short: with_flag(short, "--total-timesteps", "512"),
}


@pytest.mark.slow
@pytest.mark.parametrize("script", [s for s in PYTORCH if s.endswith("_torchcompile")])
def test_compilation_settles_well_before_the_capture(script, tmp_path):
    """Under --cudagraphs, each function is captured after its warm-up calls: a graph that dynamo compiled
    again after them would be compiled inside the capture, or never captured. On the CPU (the same code,
    compiled, called directly), every compiled function's last compilation comes at least two calls before
    its capture, for each kind of call (SAC's update with and without its actor step are two), and every
    kind runs past it. The acting steps compiled on CUDA only (TD3, DQN, DQN Atari) are compiled here too,
    and run."""
    import json
    import subprocess
    import sys

    from helpers import ENV, Run

    args = SETTLE_RUNS.get(script, list)(list(SPECS[script].short))
    cmd = [sys.executable, "-c", SETTLE, str(tmp_path / "settle.json"), script, *args, "--compile", "--cudagraphs"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
    Run(proc.returncode, proc.stdout, proc.stderr, tmp_path).check()
    record = json.loads((tmp_path / "settle.json").read_text())
    warmup = set(record["warmups"])
    assert len(warmup) == 1, f"one warm-up for every graph of a script: {record['warmups']}"
    warmup = warmup.pop()
    assert record["compiles"] and set(record["compiles"]) == set(record["calls"]), record
    for key, at in record["compiles"].items():
        assert max(at) <= warmup - 2, f"{key}: compiled at calls {at}; its capture comes at call {warmup + 1}"
        assert record["calls"][key] > warmup + 1, f"{key}: {record['calls'][key]} calls, not past its capture"
    acting = {"td3_continuous_action_torchcompile": "main.<locals>.policy", "dqn_torchcompile": "main.<locals>.policy",
              "dqn_atari_envpool_torchcompile": "main.<locals>.policy"}.get(script)
    assert acting is None or acting in record["calls"], sorted(record["calls"])


# Runs a script with tensordict's CudaGraphModule replaced by one that does on the CPU what a CUDA graph whose
# input copies are off does on a GPU: from the call that captures on (the `warmup`-th), every call runs the
# function on that call's inputs again.
FROZEN = """
import runpy, sys
import torch
import tensordict.nn
from torch.utils._pytree import tree_map


class FrozenInputs:
    def __init__(self, module, *args, warmup=2, **kwargs):
        self.module, self.warmup, self.calls, self.frozen = module, warmup, 0, None

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.warmup:
            self.frozen = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, (args, kwargs))
        if self.frozen is not None:
            args, kwargs = self.frozen
        return self.module(*args, **kwargs)


tensordict.nn.CudaGraphModule = FrozenInputs
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.parametrize("pair", ["sac", "td3", "ppo_continuous", "ppo_atari", "dqn", "dqn_atari"])
def test_the_gpu_comparison_catches_frozen_inputs(pair, tmp_path):
    """tests/test_gpu.py compares each optimized script's first updates under CUDA graphs with the eager twin's,
    and asks that comparison to fail when the graphs replay stale inputs. Shown here on the CPU with the same
    runs, tags, steps and tolerance: inputs frozen at the capture call make some value leave the tolerance,
    and the same run without freezing stays within it."""
    import subprocess
    import sys

    from helpers import ENV, GPU_RUNS as RUNS, GPU_TOL as TOL, SCRIPT_DIR, Run, assert_close_logs, log_differences, \
        run_script

    eager, fast, args, tags, upto, _ = RUNS[pair]
    reference = run_script(eager, *args, cwd=tmp_path / "eager").check()
    graphs = run_script(fast, *args, "--cudagraphs", cwd=tmp_path / "graphs").check()
    assert_close_logs(graphs, reference, tags, upto_step=upto, **TOL)
    frozen_dir = tmp_path / "frozen"
    frozen_dir.mkdir()
    proc = subprocess.run([sys.executable, "-c", FROZEN, str(SCRIPT_DIR / f"{fast}.py"), *args, "--cudagraphs"],
                          cwd=frozen_dir, env=ENV, capture_output=True, text=True, timeout=900)
    frozen = Run(proc.returncode, proc.stdout, proc.stderr, frozen_dir).check()
    assert log_differences(frozen, reference, tags, upto_step=upto, **TOL), "frozen inputs went unnoticed"


def test_the_jax_twins_pick_their_device_one_way(monkeypatch):
    """The six JAX twins share one `use_device`: --torch-deterministic adds XLA's deterministic GPU kernels to
    XLA_FLAGS once, after what the user set there, and leaves a value the user gave for that flag alone."""
    pytest.importorskip("jax")
    import inspect
    import os

    twins = [s for s in CHECKED if s.endswith("_jax")]
    sources = {inspect.getsource(load_script(s).use_device) for s in twins}
    assert len(twins) == 6 and len(sources) == 1, f"{len(sources)} versions of use_device in {twins}"
    module = load_script(twins[0])
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    module.use_device(module.Args())
    module.use_device(module.Args())
    assert os.environ["XLA_FLAGS"] == "--xla_cpu_enable_fast_math=false --xla_gpu_deterministic_ops=true"
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=false")
    module.use_device(module.Args())
    assert os.environ["XLA_FLAGS"] == "--xla_gpu_deterministic_ops=false"
    monkeypatch.delenv("XLA_FLAGS")
    module.use_device(module.Args(torch_deterministic=False))
    assert "XLA_FLAGS" not in os.environ
