"""The memory of DQN Atari's replay buffer at its default size, measured: the process's resident memory
before and after a buffer of the script's own class is built and every byte of it written.

    python -m benchmarks.dqn_atari_buffer                     # the default 1M slots (about 7 GB)
    python -m benchmarks.dqn_atari_buffer --size 100000 --script dqn_atari_envpool_torchcompile

Its tensors are allocated untouched (the pages come as the buffer fills); writing them all shows
what a full buffer holds, as after the first 1M steps of a run.
"""

import argparse
from pathlib import Path

import torch

from benchmarks.common import load_script, write_results


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("dqn_atari_buffer: needs Linux (/proc/self/status)")


def main():
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=None, help="slots (default: the script's --buffer-size)")
    parser.add_argument("--script", default="dqn_atari_envpool", choices=["dqn_atari_envpool",
                                                                          "dqn_atari_envpool_torchcompile"])
    parser.add_argument("--out", type=Path, default=None, help="also write results.md and results.json here")
    opts = parser.parse_args()
    module = load_script(opts.script)
    size = opts.size or module.Args.buffer_size
    before = rss_bytes()
    rb = module.ReplayBuffer(size, (84, 84), torch.device("cpu"), seed=1)
    tensors = [t for t in vars(rb).values() if isinstance(t, torch.Tensor)]
    allocated = sum(t.nbytes for t in tensors)
    for t in tensors:
        t.fill_(1)  # every page resident, as in a full buffer
    grown = rss_bytes() - before
    write_results(opts.out, f"| script | slots | bytes per slot | tensors allocated | resident memory growth, buffer full |\n"
                            f"|---|---|---|---|---|\n| {opts.script} | {size} | {allocated / size:.0f} | "
                            f"{allocated / 1e9:.2f} GB | {grown / 1e9:.2f} GB |",
                  {"script": opts.script, "slots": size, "allocated_bytes": allocated, "resident_growth_bytes": grown})


if __name__ == "__main__":
    main()
