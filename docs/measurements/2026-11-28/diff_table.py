import sys
from pathlib import Path

sys.path[:0] = ["tests", "."]
from test_contract import PAIR_NAMES, diff_hunks  # noqa: E402

folder = Path(sys.argv[1])
print("| pair | hunks | lesson hunks | lesson hunks with one tag | largest lesson hunk |")
print("|---|---|---|---|---|")
for eager in PAIR_NAMES:
    old = (folder / f"{eager}.py").read_text().splitlines()
    new = (folder / f"{eager}_torchcompile.py").read_text().splitlines()
    hunks = diff_hunks(old, new)
    lesson = [h for h in hunks if not h.plumbing]
    big = max(lesson, key=lambda h: h.changed)
    print(f"| {eager} | {len(hunks)} | {len(lesson)} | {sum(len(h.tags) == 1 for h in lesson)} | "
          f"{big.header} ({big.changed} changed lines) |")
