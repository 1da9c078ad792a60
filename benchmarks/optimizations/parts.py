"""Time the small pieces that the optimized scripts' comments and the README quote, beyond what the
compile-scope study (benchmarks/compile_scope/compile_scope.py: where to compile an update, AMP, DDP) and the
inference benchmark (benchmarks/inference/inference.py: the acting steps) measure:

    python -m benchmarks.optimizations.parts --rounds 15

- writing a `bool` mask of a vmapped critic layer (2 x 256 x 256), eager and compiled: why the scripts
  set `recompute_views` (a compiled backward that saved such masks would write them slowly);
- one 256 x 256 x 256 matmul with torch's default thread count and with 1 thread;
- the Atari Nature CNN's forward and backward on 256 frames (PPO Atari's minibatch), channels-last or
  not, built by the optimized script's Agent class.

The variants of a piece take turns for `--rounds` rounds (benchmarks/common.py's helper), so that the
drift of a shared machine falls on all of them; the table gives the median time per call with its
min-max over the calls.
"""

import argparse
import statistics
from pathlib import Path

import torch

from benchmarks.common import NoCompiling, interleaved, load_script, write_results

BATCH = 256


def bool_mask(compiled: bool):
    x = torch.randn(2, BATCH, 256)
    fn = torch.compile(lambda t: t > 0) if compiled else (lambda t: t > 0)
    return lambda: fn(x)


def matmul(threads: int):
    a, b = torch.randn(256, 256), torch.randn(256, 256)

    def call():
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return a @ b
        finally:
            torch.set_num_threads(before)

    return call


def atari_forward_backward(channels_last: bool, frames: int):
    m = load_script("ppo_atari_envpool_torchcompile")
    agent = m.Agent(m.make_envs(m.Args(env_id="Breakout-v5"), num_envs=1))  # built channels-last, as the script's
    x = torch.randint(0, 256, (frames, 4, 84, 84), dtype=torch.uint8)
    if channels_last:
        prepare = m.Agent.frames  # what the script does: channels-last floats

        def call():
            hidden = agent.network(prepare(x))
            (agent.actor(hidden).sum() + agent.critic(hidden).sum()).backward()
    else:
        agent = agent.to(memory_format=torch.contiguous_format)

        def call():
            hidden = agent.network(x.float() / 255.0)
            (agent.actor(hidden).sum() + agent.critic(hidden).sum()).backward()

    return call


def pieces(frames: int):
    return {
        "bool mask of a vmapped critic layer (2 x 256 x 256)": {"eager": bool_mask(False), "compiled": bool_mask(True)},
        "256 x 256 x 256 matmul": {f"{torch.get_num_threads()} threads (torch's default)": matmul(torch.get_num_threads()),
                                   "1 thread": matmul(1)},
        f"Atari Nature CNN, forward+backward on {frames} frames": {
            "contiguous (NCHW)": atari_forward_backward(False, frames),
            "channels-last (the script)": atari_forward_backward(True, frames)},
    }


def fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--round-time", type=float, default=0.2, help="seconds of calls per variant and round")
    parser.add_argument("--frames", type=int, default=BATCH, help="frames of the Atari forward and backward")
    parser.add_argument("--only", default="", help="time only the pieces whose title contains this")
    parser.add_argument("--out", type=Path, default=None, help="also write results.md and results.json here")
    args = parser.parse_args()
    if args.rounds < 1 or args.round_time <= 0 or args.frames < 1:
        parser.error("--rounds and --frames must be at least 1, --round-time positive")

    torch.manual_seed(0)
    todo = {k: v for k, v in pieces(args.frames).items() if args.only in k}
    if not todo:
        parser.error(f"no piece's title contains {args.only!r}")
    lines, data = [], {}
    for title, variants in todo.items():
        for fn in variants.values():  # warm-up: compiles, allocator, oneDNN primitives
            for _ in range(3):
                fn()
        with NoCompiling():  # a compile inside the timing would time the compiler
            times = interleaved(variants, args.rounds, args.round_time)
        first = statistics.median(next(iter(times.values())))
        lines += ["", f"| {title} | median per call | min-max | vs first |", "|---|---|---|---|"]
        for name, ts in times.items():
            med = statistics.median(ts)
            lines.append(f"| {name} | {fmt(med)} | {fmt(min(ts))}-{fmt(max(ts))} | {med / first:.2f}x |")
        data[title] = times
    write_results(args.out, "\n".join(lines), {"seconds per call": data})


if __name__ == "__main__":
    main()
