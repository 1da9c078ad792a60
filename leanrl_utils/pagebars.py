"""How a page reads raw, measured against the bars every page is held to (issue 61): README.md, CONTRIBUTING.md and
docs/*.md, each as a maintainer meets it in an editor or a diff.

Per page: the share of its bytes that are link machinery (an inline link's target and title, a reference link's
label, a link definition's whole line), its longest line, its lines over 160 characters and over 200 (code blocks
left out: a command is copied, not read), and its inline markers (an HTML comment on a line with other text, such
as a number declared inside a sentence). The README has bars of its own: a front page, not a study.

    python -m leanrl_utils.pagebars [ROOT]   # a table, then one line per bar a page is over; exit 1 if any
"""

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BARS = {"link bytes": 0.10, "lines over 200": 0, "markers": 0}
README_BARS = {"lines": 200, "words": 2000, "lines over 160": 0}
INLINE = re.compile(r'\]\((?:<(?:[^<>\n\\]|\\.)*>|[^\s()<>]+)(?:\s+"[^"\n]*")?\)')  # [text](target "title")
REFERENCE = re.compile(r"\](\[[^\]\n]*\])")  # [text][label]: the label
DEFINITION = re.compile(r'(?m)^ {0,3}\[[^\]\n]+\]:[ \t]+\S.*$')  # [label]: target "title"
COMMENT = re.compile(r"<!--.*?-->", re.S)


def pages(root: Path = REPO) -> list[Path]:
    return [root / "README.md", root / "CONTRIBUTING.md"] + sorted((root / "docs").glob("*.md"))


def prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def measure(text: str) -> dict:
    lines = prose_lines(text)
    prose = "\n".join(lines)
    size = len(text.encode())
    link = sum(len(m.group().encode()) - 1 for m in INLINE.finditer(prose))
    link += sum(len(m.group(1).encode()) for m in REFERENCE.finditer(prose))
    link += sum(len(m.group().encode()) + 1 for m in DEFINITION.finditer(prose))
    prose = re.sub(r"`[^`\n]*`", lambda m: "x" * len(m.group()), prose)  # a comment in a code span is code
    markers = sum(1 for m in COMMENT.finditer(prose)
                  if prose[prose.rfind("\n", 0, m.start()) + 1:m.start()].strip()
                  or prose[m.end():(prose.find("\n", m.end()) + 1 or len(prose) + 1) - 1].strip())
    widths = [len(line) for line in lines]
    return {"link bytes": link / size if size else 0.0, "longest line": max(widths, default=0),
            "lines over 160": sum(w > 160 for w in widths), "lines over 200": sum(w > 200 for w in widths),
            "markers": markers, "lines": text.count("\n"), "words": len(text.split())}


def over(name: str, m: dict) -> list[str]:
    """The bars the page is over, one line each."""
    bars = dict(BARS, **(README_BARS if name == "README.md" else {}))
    return [f"{name}: {key} {m[key]:.1%}" if key == "link bytes" else f"{name}: {key} {m[key]}"
            for key, most in bars.items() if m[key] > most]


def main(argv: list[str]) -> int:
    root = Path(argv[0]).resolve() if argv else REPO
    rows, problems = [], []
    for page in pages(root):
        name, m = page.relative_to(root).as_posix(), measure(page.read_text())
        rows.append(f"| {name} | {m['link bytes']:.1%} | {m['longest line']} | {m['lines over 160']} | "
                    f"{m['lines over 200']} | {m['markers']} | {m['lines']} | {m['words']} |")
        problems += over(name, m)
    print("| page | bytes in links | longest line | lines over 160 | lines over 200 | inline markers | lines | words |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n".join(["", *problems]) if problems else "\nevery page is within its bars")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
