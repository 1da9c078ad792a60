"""What a learning test reads from a run: the mean return of the games that ended from a step on, the
last 10 games' mean, and the evaluation games of its saved model, for each TensorBoard run folder given.

    python -m benchmarks.learning.check --from-step 10240 runs/*
"""

import argparse
from pathlib import Path

from leanrl_utils.events import read_scalars


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-step", type=int, required=True)
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    for run in args.runs:
        scalars = read_scalars(run)
        returns = scalars.get("charts/episodic_return", [])
        late = [v for step, v in returns if step >= args.from_step]
        last = [v for _, v in returns][-10:]
        evaluated = [v for _, v in scalars.get("eval/episodic_return", [])]
        mean = lambda xs: f"{sum(xs) / len(xs):.1f}" if xs else "n/a"  # noqa: E731
        print(f"{run.name}: {len(late)} games from step {args.from_step}, mean {mean(late)}; last 10 games "
              f"{mean(last)}; {len(evaluated)} eval games, mean {mean(evaluated)}: {[int(v) for v in evaluated]}")


if __name__ == "__main__":
    main()
