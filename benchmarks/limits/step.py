"""Where SAC's and TD3's step loses time against its pieces: the running script's own calls timed where the loop
makes them, against the same calls timed alone, in one run, taking turns.

    python -m benchmarks.limits.step --out docs/limits/step/intel           # sac and td3, --compile and JAX
    python -m benchmarks.limits.step --pairs sac --modes compile --blocks 3 --block-steps 100   # a quick look

Each pair and mode runs in a process of its own: the script's own main() (loaded with the declared loader) on the
speed table's task (HalfCheetah-v4, --learning-starts 5000), with no sampler. Thin wrappers on the script's own
calls record when each starts and ends (two perf_counter reads, well under a microsecond each), and each step is
cut at its environment step's start:
- env: the environment's step (the environment the script's make_env built);
- act: from the top of the loop to the environment's step: the acting step and the copies around it (the
  action read back to the host);
- store: the replay buffer's add (a jitted buffer_add for JAX); sample: its sample_indices (PyTorch);
- update: the update's call as the loop makes it (PyTorch: the variant main()'s `updates` dict holds, a
  functools.partial, wrapped in place at the first update; the dict lookup lands in rest); the jitted
  train_step's dispatch (JAX: its work runs on XLA's threads while the host steps on, and is waited for where
  the next acting step reads its action);
- log: the writer's add_scalar and the progress bar's calls;
- rest: what is left of the step (the loop's Python between the pieces).
Once the warm-up is over (--measure-after updates), the run alternates blocks: `--block-steps` steps of the loop
as it runs, then, from inside the loop (at the step's tick, the top of the loop, with main()'s own objects, before
that step's acting), each piece called alone `--calls` times, back to back at the same shapes and threads: the update's line
with each variant the loop ran (PyTorch: also without the partial's call; JAX: train_step with its result waited
for, on a copy of the state, which it donates), the acting step with the current observation, the buffer's add
(on a copy for JAX) and sample, an environment step (a second instance of the task, random actions), and the
progress bar's step. The update's line is also timed alone after each of: a step of that second environment
(MuJoCo between two updates, as in the loop), a sleep and a spin of the same length (the thread pool left idle
without MuJoCo's memory traffic, with and without the main thread busy). Calls made alone train on (the
buffer holds a few more transitions, the networks take more steps): the run's learning is not the point here.

Per pair and mode: each piece's median time per step in the loop's blocks and alone (the median of the blocks'
medians; the update weighted by how often each variant runs), their ratio, the step's wall-clock against the
sum of its pieces alone, and the candidates' update times against back to back. Writes results.md and
results.json into --out.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, write_results

PAIRS = {"sac": "sac_continuous_action", "td3": "td3_continuous_action"}
MODES = {"compile": ("_torchcompile", ["--compile"]), "jax": ("_jax", []), "plain": ("_torchcompile", [])}  # plain: tests
PIECES = ["env", "act", "store", "sample", "update", "log", "rest"]
AFTER = ["back to back", "fresh batch", "after an env step", "after a sleep", "after a spin",
         "after the loop's other work", "variants in turn"]


class Clock:
    """What one run records: the start of each step (its environment step), labelled intervals, the steps that
    held an alone block, and the alone blocks' times."""

    def __init__(self):
        self.steps, self.events, self.blocked, self.alone = [], [], set(), []
        self.loop_started = None  # the top of the loop's current step (the end of the progress bar's tick)


    def timed(self, label, fn):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.events.append((label, start, time.perf_counter()))
        return call


def child(pair: str, mode: str, opts) -> dict:
    """One run of the script with the clocks on; returns what they recorded, reduced."""
    import numpy as np
    import torch

    from leanrl_utils import harness
    from leanrl_utils.scripts import load_script

    suffix, flags = MODES[mode]
    module = load_script(PAIRS[pair] + suffix)
    clock = Clock()
    jax_mode = mode == "jax"
    window = opts.learning_starts + 1 + opts.measure_after  # the first step after the warm-up
    total = window + opts.blocks * (opts.block_steps + 1) + 2

    make_env = module.make_env

    def clocked_env(*args, **kwargs):
        env = make_env(*args, **kwargs)
        step = env.step

        def timed_step(action):
            start = time.perf_counter()
            clock.steps.append(start)
            if clock.loop_started is not None:
                clock.events.append(("act", clock.loop_started, start))
            try:
                return step(action)
            finally:
                clock.events.append(("env", start, time.perf_counter()))
        env.step = timed_step
        return env
    module.make_env = clocked_env

    def time_what_it_makes(owner, factory: str, attr: str, label: str):
        """owner.factory(...) as before, the `attr` of what it returns timed under `label`."""
        make = getattr(owner, factory)

        def made(*args, **kwargs):
            thing = make(*args, **kwargs)
            setattr(thing, attr, clock.timed(label, getattr(thing, attr)))
            return thing
        setattr(owner, factory, made)
    time_what_it_makes(harness, "make_writer", "add_scalar", "log")

    class ClockedProgress(harness.Progress):
        def tick(self, step):  # at the top of the loop's every step
            start = time.perf_counter()
            super().tick(step)
            clock.events.append(("log", start, time.perf_counter()))
            updates = sys._getframe(1).f_locals.get("updates")
            if not jax_mode and not any(isinstance(fn, TimedCall) for fn in updates.values()):
                for key, fn in updates.items():  # the script's own dict, its values wrapped in place (first tick)
                    updates[key] = TimedCall(fn, key)
            if step >= window and (step - window) % (opts.block_steps + 1) == opts.block_steps:
                clock.blocked.add(len(clock.steps))  # the step about to run holds an alone block: not a loop step
                clock.alone.append(alone_block(sys._getframe(1).f_locals, step))
            clock.loop_started = time.perf_counter()

        def log(self, step, episodic_return=float("nan")):
            start = time.perf_counter()
            try:
                return super().log(step, episodic_return)
            finally:
                clock.events.append(("log", start, time.perf_counter()))
    harness.Progress = ClockedProgress

    if jax_mode:
        import jax
        import jax.numpy as jnp

        buffer_add = module.buffer_add
        module.buffer_add = clock.timed("store", buffer_add)
        time_what_it_makes(module, "make_update_fns", "train_step", "update")
    else:
        rb_class = module.ReplayBuffer

        class ClockedBuffer(rb_class):
            add = clock.timed("store", rb_class.add)
            sample_indices = clock.timed("sample", rb_class.sample_indices)
        module.ReplayBuffer = ClockedBuffer
        ran = set()  # the update's variants the loop ran

        class TimedCall:
            """A variant of the update as main()'s `updates` dict holds it (a functools.partial), timed per call."""

            def __init__(self, fn, key):
                self.fn, self.key, self.func, self.keywords = fn, key, fn.func, fn.keywords

            def __call__(self, *a, **k):
                ran.add(self.key)
                start = time.perf_counter()
                try:
                    return self.fn(*a, **k)
                finally:
                    clock.events.append(("update", start, time.perf_counter()))

    spare_env = make_env(opts.env_id, 1)  # the alone blocks' environment: a second instance of the task
    spare_env.reset(seed=1)
    env_time = []

    def median_calls(fn, calls, before=None):
        times = []
        for _ in range(calls):
            if before is not None:
                before()
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def spare_step():
        _, _, terminated, truncated, _ = spare_env.step(spare_env.action_space.sample())
        if terminated or truncated:
            spare_env.reset()

    def alone_block(main_locals, step):
        """Each piece alone, from main()'s own objects at this step; then the update's candidates."""
        f = main_locals
        args, calls, obs = f["args"], opts.calls, f["obs"]
        block = {"step": step}
        block["env"] = median_calls(spare_step, calls)
        env_time.append(block["env"])
        block["log"] = median_calls(lambda: f["progress"].bar.update(0), calls)
        action = np.zeros(spare_env.action_space.shape, np.float32)
        if jax_mode:
            holder = {"rb": jax.tree.map(jnp.copy, f["rb"]), "state": jax.tree.map(jnp.copy, f["state"]),
                      "key": f["key"]}

            def act():
                return np.asarray(f["act"](holder["state"].actor_params, obs, f["key"])[0])

            def add():
                holder["rb"] = buffer_add(holder["rb"], obs, obs, action, np.float32(0), np.float32(0))
                jax.block_until_ready(holder["rb"])
            sample = None  # drawn inside train_step
            kinds = [dict(policy_update=p, target_update=True) for p in (False, True)] if pair == "sac" else \
                [dict(policy_update=p) for p in (False, True)]

            def updater(kind):  # on a copy of the state (train_step donates it); fresh: a new key, a new batch
                def update(fresh=False):
                    state, key, info = f["train_step"](holder["state"], f["rb"], holder["key"], **kind)
                    holder["state"], holder["key"] = state, key if fresh else holder["key"]
                    jax.block_until_ready((state, info))
                return update
            updaters = {",".join(f"{k}={v}" for k, v in kind.items()): updater(kind) for kind in kinds}
        else:
            policy, device, rb = f["policy"], f["device"], f["rb"]
            x = lambda: torch.as_tensor(obs, device=device, dtype=torch.float32)[None]  # noqa: E731
            act = (lambda: policy(x())[0][0].cpu().numpy()) if pair == "sac" else (lambda: policy(x())[0].cpu().numpy())
            add = lambda: rb.add(obs, obs, action, 0.0, False)  # noqa: E731
            sample = lambda: rb.sample_indices(args.batch_size)  # noqa: E731
            batch = {"idx": sample()}
            updaters = {}
            for key, fn in f["updates"].items():
                kind = dict(zip(["policy_step", "target_step"], key if isinstance(key, tuple) else (key,)))
                if key not in ran:
                    continue  # a variant the loop never ran

                def update(fresh=False, fn=fn):  # fresh: a new batch's indices, drawn untimed first
                    fn(batch["idx"])
                updaters[",".join(f"{k}={v}" for k, v in kind.items())] = update
                # the update alone without the partial's call (under --compile the compiled program's)
                block.setdefault("program", {})[",".join(f"{k}={v}" for k, v in kind.items())] = \
                    median_calls(lambda fn=fn: fn.func(batch["idx"], **fn.keywords), calls)
        block["act"], block["store"] = median_calls(act, calls), median_calls(add, calls)
        block["sample"] = median_calls(sample, calls) if sample else 0.0

        def fresh_batch():
            if sample:
                batch["idx"] = sample()

        def loop_work():  # what the loop does between two updates, on the second environment
            act()
            spare_step()
            add()
            fresh_batch()
        first = next(iter(updaters.values()))
        befores = candidates()
        block["update"] = {name: {after: median_calls(lambda u=u: u(fresh=after != "back to back"), calls,
                                                      {"fresh batch": fresh_batch, "after the loop's other work": loop_work}
                                                      .get(after, before))
                                  for after, before in befores.items()} for name, u in updaters.items()}
        # the variants in turn, as the loop runs them (a delayed actor step every other update), fresh batches
        turns = {name: [] for name in updaters}
        for _ in range(calls):
            for name, u in updaters.items():
                fresh_batch()
                start = time.perf_counter()
                u(fresh=True)
                turns[name].append(time.perf_counter() - start)
        for name in updaters:
            block["update"][name]["variants in turn"] = statistics.median(turns[name])
        # the environment right after an update, as in the loop
        times = []
        for _ in range(calls):
            first(fresh=True)
            start = time.perf_counter()
            spare_step()
            times.append(time.perf_counter() - start)
        block["env after an update"] = statistics.median(times)
        return block

    def candidates():
        """What runs before each timed update call: nothing, a new batch, an environment step, a sleep or a spin
        as long, and the loop's other work (acting, an environment step, a write, a new batch)."""
        length = statistics.median(env_time) if env_time else 1e-4

        def spin():
            end = time.perf_counter() + length
            while time.perf_counter() < end:
                pass
        return {"back to back": None, "fresh batch": None, "after an env step": spare_step,
                "after a sleep": lambda: time.sleep(length), "after a spin": spin, "after the loop's other work": None}

    argv = ["--env-id", opts.env_id, "--learning-starts", str(opts.learning_starts), "--total-timesteps", str(total),
            "--measure-after", str(opts.measure_after), *flags]
    args = harness.parse_args(module.Args, argv)
    harness.check_common(args)
    module.check_args(args)
    with tempfile.TemporaryDirectory() as tmp:
        here = os.getcwd()
        os.chdir(tmp)
        try:
            module.main(args)
        finally:
            os.chdir(here)
    return reduce(clock, window, opts)


def reduce(clock: Clock, window: int, opts) -> dict:
    """Per loop block, each piece's median time per step; the alone blocks as recorded. A step runs from its
    environment step's start to the next one's (the acting step that ends it included); the steps that held
    an alone block, and the step after each (its caches warmed by the block), are left out of the loop's."""
    starts, events = clock.steps, sorted(clock.events, key=lambda e: e[1])
    blocks, e = [[] for _ in range(opts.blocks)], 0
    for i in range(window, len(starts) - 1):
        lo, hi = starts[i], starts[i + 1]
        while e < len(events) and events[e][1] < lo:
            e += 1
        sums, j = dict.fromkeys(PIECES, 0.0), e
        while j < len(events) and events[j][1] < hi:
            sums[events[j][0]] += events[j][2] - events[j][1]
            j += 1
        sums["rest"] = (hi - lo) - sum(sums.values())
        b = (i - window) // (opts.block_steps + 1)
        if b < opts.blocks and i not in clock.blocked and (i - 1) not in clock.blocked:
            blocks[b].append({"wall": hi - lo, **sums})
    loop = [{k: statistics.median(s[k] for s in b) for k in ["wall", *PIECES]} for b in blocks if b]
    return {"loop_blocks": loop, "alone_blocks": clock.alone, "loop_steps": sum(map(len, blocks))}


def summary(record: dict) -> dict:
    """The medians over the blocks: each piece in the loop and alone, the gap, the candidates."""
    loop, alone = record["loop_blocks"], record["alone_blocks"]
    med = statistics.median
    in_loop = {k: med(b[k] for b in loop) for k in ["wall", *PIECES]}
    variants = list(alone[0]["update"])
    # the update alone per step: the loop runs its variants in turn (a delayed actor step every other step)
    update_alone = med(statistics.mean(b["update"][v]["back to back"] for v in variants) for b in alone)
    alone_pieces = {k: med(b[k] for b in alone) for k in ["env", "act", "store", "sample", "log"]}
    alone_pieces["update"] = update_alone
    pieces_sum = sum(alone_pieces.values())
    candidates = {v: {after: med(b["update"][v][after] for b in alone) for after in alone[0]["update"][v]}
                  for v in variants}
    ratios = {v: {after: med(b["update"][v][after] / b["update"][v]["back to back"] for b in alone)
                  for after in alone[0]["update"][v]} for v in variants}
    program = {v: med(b["program"][v] for b in alone) for v in variants} if "program" in alone[0] else {}
    return {"in_loop": in_loop, "alone": alone_pieces, "sum_alone": pieces_sum,
            "step_over_sum": in_loop["wall"] / pieces_sum, "update_candidates": candidates,
            "update_candidates_vs_back_to_back": ratios, "program_alone": program,
            "env_after_an_update": med(b["env after an update"] for b in alone)}


def table(results: dict) -> str:
    lines = ["| pair | mode | piece | in the loop (ms per step) | alone (ms per step) | loop / alone |", "|---|---|---|---|---|---|"]
    for key, r in results.items():
        pair, mode = key.split(" ")
        s = r["summary"]
        for piece in PIECES:
            a = s["alone"].get(piece)
            loop = s["in_loop"][piece]
            lines.append(f"| {pair} | {mode} | {piece} | {loop * 1e3:.3f} | "
                         + (f"{a * 1e3:.3f} | {loop / a:.2f}x |" if a else "- | - |"))
        lines.append(f"| {pair} | {mode} | **step** | {s['in_loop']['wall'] * 1e3:.3f} | {s['sum_alone'] * 1e3:.3f} "
                     f"(sum) | {s['step_over_sum']:.2f}x |")
    lines += ["", "The environment's step alone, right after an update (ms):", "",
              "| pair | mode | env alone | env after an update |", "|---|---|---|---|"]
    for key, r in results.items():
        s = r["summary"]
        lines.append(f"| {' | '.join(key.split(' '))} | {s['alone']['env'] * 1e3:.3f} | "
                     f"{s['env_after_an_update'] * 1e3:.3f} |")
    lines += ["", "The update alone, by what runs before each call (ms per call; its ratio to back to back):", "",
              "| pair | mode | update | " + " | ".join(AFTER) + " | without the partial |",
              "|---|---|---|" + "---|" * (len(AFTER) + 1)]
    for key, r in results.items():
        pair, mode = key.split(" ")
        s = r["summary"]
        for v, times in s["update_candidates"].items():
            ratio = s["update_candidates_vs_back_to_back"][v]
            cells = [f"{times[a] * 1e3:.3f} ({ratio[a]:.2f}x)" for a in AFTER]
            program = s["program_alone"].get(v)
            cells.append(f"{program * 1e3:.3f}" if program else "-")
            lines.append(f"| {pair} | {mode} | {v} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--pairs", default="sac,td3")
    parser.add_argument("--modes", default="compile,jax")
    parser.add_argument("--blocks", type=int, default=8, help="loop blocks and alone blocks, taking turns")
    parser.add_argument("--block-steps", type=int, default=300, help="steps of the loop per block")
    parser.add_argument("--calls", type=int, default=30, help="calls of each piece per alone block")
    parser.add_argument("--measure-after", type=int, default=50, help="updates left out (compilation)")
    parser.add_argument("--env-id", default="HalfCheetah-v4")
    parser.add_argument("--learning-starts", type=int, default=5000, help="the speed table's")
    parser.add_argument("--child", nargs=2, metavar=("PAIR", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        opts.child_out.write_text(json.dumps(child(*opts.child, opts)))
        return
    results = {}
    for pair in opts.pairs.split(","):
        for mode in opts.modes.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "record.json"
                cmd = [sys.executable, "-m", "benchmarks.limits.step", "--child", pair, mode, "--child-out", str(out),
                       "--blocks", str(opts.blocks), "--block-steps", str(opts.block_steps), "--calls", str(opts.calls),
                       "--measure-after", str(opts.measure_after), "--env-id", opts.env_id,
                       "--learning-starts", str(opts.learning_starts)]
                env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
                proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"{pair} {mode} failed:\n{proc.stderr[-3000:]}")
                record = json.loads(out.read_text())
            record["summary"] = summary(record)
            results[f"{pair} {mode}"] = record
            print(f"{pair} {mode}: step {record['summary']['in_loop']['wall'] * 1e3:.3f} ms, pieces alone "
                  f"{record['summary']['sum_alone'] * 1e3:.3f} ms", file=sys.stderr, flush=True)
    write_results(opts.out, table(results), {"blocks": opts.blocks, "block_steps": opts.block_steps,
                                              "calls": opts.calls, "results": results})


if __name__ == "__main__":
    main()
