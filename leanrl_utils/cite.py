"""Figures that cite their source where they stand.

Every measured number of the pages (README.md and docs/*.md; docs/quoted.md is a source, not a page) is a
markdown link whose text is the number as the page shows it and whose target is the committed output that
holds it, with a fragment that names the value (a fragment starting with '/' makes a link a citation):

    [231.0](<docs/speed/sac/results.md#/sac_continuous_action_torchcompile --compile/fps (median)>) fps
    [7.08](docs/dqn_atari_buffer/results.json#/allocated_bytes "x1e-9") GB

The fragment's segments are split at '/'; in a segment "~1" stands for '/' and "~0" for '~' (RFC 6901).
- In a .json source it is a JSON pointer (RFC 6901).
- In a markdown or text source it names a table's cell, [heading/]row/column: the row by its first cells (as
  many as make it one row), the column by its header ("header@2": the second column of that header), the
  heading (the nearest above the table, whole) only where the row is in two tables; or a number on a line
  outside tables, [heading/]text: the first number after the text, which one line holds. A last segment n
  takes the number n places further (0 is the first). Backticks, ** and links' targets are no part of a cell,
  header, heading or line; a target with spaces is written <...>.
The number shown is the value times the link's title where it has one ("x1000": seconds shown in ms, "x100":
a fraction as a percentage, "x1e-9": bytes in GB, FLOP/s in GFLOP/s), rounded to the digits the page writes
(k and M for thousands and millions; commas as written). Units and words stay outside the link: [2.17](...)x.

A page's other numbers that the rule below calls measurements fail, unless declared right after the number,
with why: `about -1250<!-- not a figure: a random policy's score, off a curve -->` (no "--" in the why: an
HTML comment cannot hold it). Not measurements: code, links' targets, comments, headings, a table's header row
and first column, dates, versions, names (Zen 5, rule 7, batch 64), the set-up's counts (2 cores, 3 seeds),
numbered items, numbers glued to letters (HalfCheetah-v4, H100, 1e-4).

    python -m leanrl_utils.cite --check [ROOT]   # one line per wrong citation or bare measurement; exit 1
    python -m leanrl_utils.cite --write [ROOT]   # after a rerun: every cited number from its source
"""

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINK = re.compile(r'\[([^\]\n]*)\]\((<(?:[^<>\n\\]|\\.)*>|[^\s()<>]+)(?:\s+"([^"\n]*)")?\)')
SHOWN = re.compile(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?([kM]?)")
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")  # a source's number; "104.5-113.7" is two
DECLARED = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?[kM]?<!-- not a figure: \S(?:(?!--).)*-->")  # no -- in a comment
SCALE = re.compile(r"x(\d+(?:\.\d+)?(?:e-?\d+)?)")
# what the rule says is not a measurement (blanked before the page's numbers are read)
NAMED = r"(?:zen|family|model|rules?|seeds?|batch|batches|sections?|issue|pr|world size|rank|layer|v|version)"
SETUP = (r"(?:cores?|threads?|observers?|actors?|process(?:es)?|GPUs?|CPUs?|bits?|sockets?|ranks?|seeds?|rounds?"
         r"|workers?|envs?|environments?)")
NOT_A_MEASUREMENT = [
    re.compile(r"`[^`]*`"),  # code
    re.compile(r"(?<=\])\([^)]*\)"),  # a link's target
    re.compile(r"<!--.*?-->", re.S),  # a comment
    re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?\b"),  # a date
    re.compile(r"(?<![\w.])\d+(?:\.\d+){2,}(?:[+\w.-]*)"),  # a version
    # a package's version, and those that follow it ("torch 2.11 to 2.13"); "JAX 2484.6" is a figure
    re.compile(r"(?i)\b(?:torch|pytorch|jax|jaxlib|tensordict|python|gymnasium|envpool|mujoco|flax|optax|cuda|"
               r"numpy|ubuntu|gcc|avx)(?:\s+(?:before|after|since|from|older than))?[\s-]+v?((?:\d+(?![.\d])|"
               r"\d{1,2}(?!\d)(?:\.\d+)*)(?:\s*(?:,|to|or|and)\s*\d+\.\d+(?:\.\d+)*)*)"),
    re.compile(r"(?i)\b" + NAMED + r"\s+\d+(?![.,]?\d)(?:(?:\s*(?:,|/|and|or|to)\s*)+\d+(?![.,]?\d))*"),  # a name
    re.compile(r"(?<![\w.])\d+(?:\s*(?:,|/|and|or)\s*\d+)*(?:-|\s+)" + SETUP + r"\b"),  # a count of the set-up
    re.compile(r"(?m)^\s*\d+\.\s"),  # a numbered item
]
# a unit glued to a number keeps it a figure (12ms, 1.71x); other letters make it a name (H100, 1faea4a)
GLUED_UNIT = re.compile(r"(?:x|×|ms|µs|us|ns|s|fps|GB|MB|GiB|MiB|GHz|min|h)(?![\w/])")


def pages(root: Path = REPO) -> list[Path]:
    return [root / "README.md"] + sorted(p for p in (root / "docs").glob("*.md") if p.name != "quoted.md")


def plain(text: str) -> str:
    """A cell, header, heading or line as a fragment names it: no markup, no thousands' commas."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "").replace("**", "")
    return " ".join(re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text).split())


def numbers(text: str, start: int = 0) -> list[float]:
    return [float(m.group()) for m in NUMBER.finditer(text) if m.start() >= start]


def markdown(text: str) -> tuple[list, list]:
    """A markdown or text source's table cells, (heading, row, names of the column, cell), and its other lines,
    (heading, line); the heading is the nearest above."""
    cells, lines, heading, header = [], [], None, None
    for line in text.splitlines():
        if line.startswith("#"):
            heading = plain(line.lstrip("#"))
        if not line.lstrip().startswith("|"):
            header = None
            lines.append((heading, plain(line.lstrip("#"))))
            continue
        row = [plain(c) for c in line.strip().strip("|").split("|")]
        if header is None:  # each column by its header, and as the n-th of its header
            header = [{h, f"{h}@{row[:i].count(h) + 1}"} for i, h in enumerate(row)]
        elif not re.fullmatch(r"[\s|:-]+", line):
            cells += [(heading, row, names, cell) for names, cell in zip(header[1:], row[1:])]
    return cells, lines


def markdown_value(source: tuple[list, list], segments: list[str]) -> float:
    """The number a fragment names in a markdown or text source (see the module's docstring)."""
    (cells, lines), found = source, []
    options = [(segments, 0)] + ([(segments[:-1], int(segments[-1]))] if segments[-1].isdigit() else [])
    for (*head, last), n in (o for o in options if o[0]):
        # the row by its first cells, or by the table's heading and then its first cells
        found += [numbers(cell)[n:n + 1] for heading, row, names, cell in cells if last in names and (
            head and row[:len(head)] == head or head[:1] == [heading] and head[1:] and row[:len(head) - 1] == head[1:])]
        found += [numbers(line, line.index(last) + len(last))[n:n + 1] for heading, line in lines
                  if head in ([], [heading]) and last in line]
    if len(found) != 1:
        raise LookupError("no such cell or text" if not found else f"ambiguous: {len(found)} places")
    if not found[0]:
        raise LookupError("no number there")
    return found[0][0]


def json_value(node, segments: list[str]) -> float:
    for key in segments:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            raise LookupError("no such key")
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise LookupError("not a number")
    return node


def value_of(source: Path, fragment: str, read: dict) -> float:
    """The value a citation names (read: the sources read so far, parsed)."""
    if source not in read and not source.is_file():
        raise LookupError("no such file")
    if source not in read:
        read[source] = (json.loads if source.suffix == ".json" else markdown)(source.read_text(errors="replace"))
    segments = [s.replace("~1", "/").replace("~0", "~") for s in fragment[1:].split("/")]
    return (json_value if source.suffix == ".json" else markdown_value)(read[source], segments)


def written(shown: str) -> tuple[float, float]:
    """A number as a page writes it: its value and half its last digit."""
    sign, digits, decimals, suffix = SHOWN.fullmatch(shown).groups()
    unit = {"k": 1e3, "M": 1e6}.get(suffix, 1)
    value = float(sign + digits.replace(",", "") + "." + (decimals or "0")) * unit
    return value, 0.5 * 10 ** -len(decimals or "") * unit


def rewrite(value: float, like: str) -> str:
    """value written as like is: its decimals, k or M, commas, a + sign."""
    sign, digits, decimals, suffix = SHOWN.fullmatch(like).groups()
    text = f"{value / {'k': 1e3, 'M': 1e6}.get(suffix, 1):{',' if ',' in digits else ''}.{len(decimals or '')}f}"
    return ("+" if sign == "+" and value >= 0 else "") + text + suffix


def blank(match: re.Match, group: int = 0) -> str:
    """The match's text (or of its group) as spaces, its newlines kept: offsets and line numbers stay."""
    text, (start, end) = match.group(), match.span(group) if match.group(group) else match.span()
    start, end = start - match.start(), end - match.start()
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def bare(text: str) -> list[tuple[int, str]]:
    """(line number, number) of each measurement of a page that no citation or declaration holds."""
    text = re.sub(r"```.*?```", blank, text, flags=re.S)
    lines, in_table = [], False
    for line in text.split("\n"):  # headings, a table's rule and header row and its first column
        table = line.lstrip().startswith("|")
        if line.startswith("#") or table and (not in_table or re.fullmatch(r"[\s|:-]+", line)):
            line = " " * len(line)
        elif table:
            line = re.sub(r"^(\s*\|)([^|]*)", lambda m: m.group(1) + " " * len(m.group(2)), line)
        lines.append(line)
        in_table = table
    text = "\n".join(lines)
    text = LINK.sub(lambda m: blank(m) if "#/" in m.group(2) else m.group(), text)  # the citations
    text = DECLARED.sub(blank, text)
    for pattern in NOT_A_MEASUREMENT:
        text = pattern.sub(lambda m: blank(m, 1 if pattern.groups else 0), text)
    # a range's dash ("65-76%", "31 µs-2.11 ms") is no sign and glues nothing
    text = re.sub(r"(?<=\d)((?:[ \t]?(?:µs|us|ns|ms|s|%|x|fps|GB|MB))?)-(?=\d)", "\\1–", text)
    found = []
    for m in re.finditer(r"\d[\d,]*(?:\.\d+)?", text):
        number = m.group().rstrip(",")
        before, after = text[max(m.start() - 2, 0):m.start()].rjust(2), text[m.start() + len(number):]
        if before[1].isalnum() or before[1] in "._#'’/\\" or re.fullmatch(r"[\w-]-", before):
            continue  # glued to a word or a path: a name or a code
        after = after[1:] if re.match(r"[kKM](?![A-Za-z\d])", after) else after
        if re.match(r"[A-Za-z\d]|\.\d|,\d", after) and not GLUED_UNIT.match(after):
            continue  # glued to what follows: 1faea4a, 2nd, 3e-2
        found.append((text.count("\n", 0, m.start()) + 1, number))
    return found


def check_page(root: Path, page: Path, read: dict, write: bool = False) -> list[str]:
    """One line per wrong citation and per bare measurement of the page; write: each cited number that is not
    its source's value is rewritten from it, and the page saved."""
    text, problems = page.read_text(), []
    where = page.relative_to(root)

    def cite(m: re.Match) -> str:
        shown, target, title = m.group(1), m.group(2), m.group(3)
        target = re.sub(r"\\(.)", r"\1", target[1:-1] if target.startswith("<") else target)
        path, _, fragment = target.partition("#")
        if not fragment.startswith("/"):
            return m.group()
        line = text.count("\n", 0, m.start()) + 1
        source = (page.parent / path).resolve()
        name = f"{source.relative_to(root) if source.is_relative_to(root) else path}#{fragment}"
        scale = SCALE.fullmatch(title or "x1")
        if not SHOWN.fullmatch(shown) or not scale:
            problems.append(f"{where}:{line}: [{shown}]({name}): " + (
                f'its title "{title}" is no scale such as "x1000"' if not scale else "its text is no number"))
            return m.group()
        try:
            value = value_of(source, fragment, read) * float(scale.group(1))
        except (LookupError, ValueError) as why:
            problems.append(f"{where}:{line}: {name}: {why}")
            return m.group()
        number, half = written(shown)
        if abs(number - value) <= half * (1 + 1e-9) + 1e-12:
            return m.group()
        if write:
            return m.group().replace(f"[{shown}]", f"[{rewrite(value, shown)}]", 1)
        problems.append(f"{where}:{line}: {shown} is not its source's {rewrite(value, shown)} ({name})")
        return m.group()

    new = LINK.sub(cite, text)
    if write and new != text:
        page.write_text(new)
    problems += [f"{where}:{line}: {number} stands bare: cite its source, [{number}](path#/key), or declare it, "
                 f"{number}<!-- not a figure: why -->" for line, number in bare(text)]
    return problems


def check(root: Path = REPO, write: bool = False) -> list[str]:
    read = {}
    return [p for page in pages(root) for p in check_page(root, page, read, write)]


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("--check", "--write") or len(argv) > 2:
        print("usage: python -m leanrl_utils.cite --check | --write [ROOT]", file=sys.stderr)
        return 2
    root = Path(argv[1]).resolve() if len(argv) > 1 else REPO
    if not (root / "README.md").is_file():
        print(f"{root}: no README.md, not the repository's root", file=sys.stderr)
        return 2
    problems = check(root, write=argv[0] == "--write")
    print("\n".join(problems) or "every figure is its source's value")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
