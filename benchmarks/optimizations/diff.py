"""Each pair's diff read as a lesson (docs/optimizations.md): per pair, the hunks of `diff -u X.py X_torchcompile.py`
as tests/test_contract.py's diff_hunks cuts them (3 lines of context), those that are not plumbing (the lesson
hunks), those carrying exactly one tag, and the largest. Reads files only.

    python -m benchmarks.optimizations.diff [FOLDER]   # the scripts' folder (default leanrl/): a Markdown table
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def table(folder: Path) -> str:
    sys.path[:0] = [str(REPO / "tests"), str(REPO)]
    from test_contract import PAIR_NAMES, diff_hunks

    lines = ["| pair | hunks | lesson hunks | lesson hunks with one tag | largest lesson hunk |", "|---|---|---|---|---|"]
    for eager in PAIR_NAMES:
        old = (folder / f"{eager}.py").read_text().splitlines()
        new = (folder / f"{eager}_torchcompile.py").read_text().splitlines()
        hunks = diff_hunks(old, new)
        lesson = [h for h in hunks if not h.plumbing]
        big = max(lesson, key=lambda h: h.changed)
        lines.append(f"| {eager} | {len(hunks)} | {len(lesson)} | {sum(len(h.tags) == 1 for h in lesson)} | "
                     f"{big.header} ({big.changed} changed lines) |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "leanrl"))
