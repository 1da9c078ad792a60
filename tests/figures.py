"""The figures of the README and of docs/: what a figure is, where it comes from, and the bindings that tie
each one to the single number of a committed output that holds it.

A page is split into sections by its headings. A section's sources are the committed files it links to (in
its own text, or in the text of the sections that hold it) under a folder of docs/ (a benchmark's
results.md / results.json, a run.sh report) or docs/quoted.md (figures of other projects, with theirs);
images are never sources. A figure is a number written with decimals, or followed by a unit (x, %, fps, s,
ms, µs, GB, ...), or in a table cell past the first column; numbers inside code (commands) and in names
(HalfCheetah-v4, H100) are not figures.

Each figure is bound to one number of one source: a line of that file and the number's place in it. The
binding is found once, among the numbers of the figure's sources that equal it at the precision it is
written with, by the words around each (a table row's label cells and its column's header, or the
figure's sentence, and the section's heading, against the source line, its column's header and its
heading), and it is kept in tests/figures.json. The check then compares each figure with its own number
only: a figure whose number changed, or that matches only some other number of the file, fails.

A figure and a source line are found again by their text with every number masked, so a rerun that changes
the values keeps the binding and fails the figures until the page is updated. A new or reworded figure has
no binding: `python tests/figures.py --bind` binds it (and drops bindings that no figure uses), or says
that none of its section's sources holds it. It never moves a binding whose source line is still there: a
figure that differs from its number is the page's to fix, not to bind to an equal number elsewhere.
"""

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BINDINGS = REPO / "tests" / "figures.json"
# the pages whose figures are checked (docs/quoted.md is a source: other projects' figures)
PAGES = [REPO / "README.md"] + sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "quoted.md")
UNIT = r"(?:x|×|%|\s?(?:fps|s|ms|µs|us|min|GB|MB|GFLOP/s|MFLOP|M|steps/s|calls/s|/s|requests/s|seconds|minutes|hours))"
NUMBER = re.compile(r"(?<![\w.])([-−]?)(\d[\d,]*(?:\.\d+)?)(" + UNIT + r")?(?![\w/]|\.\d)")
SOURCE_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")  # a range "1.2-3.4" is two numbers
LINK = re.compile(r"\]\(([^)#\s]+)")
RULE = re.compile(r"^\s*\|[\s|:-]+\|\s*$")  # a table's rule line
STOP = {"the", "of", "a", "an", "and", "for", "with", "its", "in", "on", "to", "by", "is", "it", "as", "at", "or",
        "x", "s", "ms", "fps", "than", "against", "this", "that", "each", "per", "one", "are", "be", "vs"}


def rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def mask(line: str) -> str:
    """A line with each number masked as #: how a figure's line and a source's line are found again after a
    rerun has changed their values."""
    return re.sub(r"\s+", " ", re.sub(r"\d+(?:[.,]\d+)*", "#", line)).strip()


def stem(word: str) -> str:
    """A word without its ending, so that 'compiled', 'compile' and 'compiles' meet."""
    for ending in ("ing", "ed", "es", "e", "s", "d"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[:-len(ending)]
    return word


def words(text: str) -> set[str]:
    text = re.sub(r"\]\([^)]*\)", "]", text).lower().replace("_", " ")
    return {stem(w) for w in re.findall(r"[a-z][a-z0-9]*", text) if w not in STOP}


def header_words(text: str) -> set[str]:
    """A column header's words, its numbers kept: "batch 64" and "batch 1" are different columns."""
    return words(text) | set(re.findall(r"\d+", text))


def cells_of(line: str) -> list[str]:
    return line.strip().strip("|").split("|")


# --- pages ---------------------------------------------------------------------------------------------------

def sections(page: Path) -> list[tuple[str, list[tuple[int, str]], list[str]]]:
    """(heading, the section's (line number, line) pairs, the lines of the sections that hold it before their
    first subsection) per heading of the page, code blocks blanked."""
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), page.read_text(), flags=re.S)
    out, stack, current, heading = [], [], [], ""
    for n, line in enumerate(text.splitlines() + ["# end"], 1):
        match = re.match(r"^(#+) ", line)
        if match:
            if current or stack:
                out.append((heading, current, [x for _, intro in stack[:-1] for x in intro]))
            level = len(match.group(1))
            stack = [(lv, intro) for lv, intro in stack if lv < level] + [(level, [])]
            current, heading = [], line
        else:
            current.append((n, line))
            if stack:
                stack[-1][1].append(line)
    return out


def sources(page: Path, lines: list[str]) -> list[Path]:
    """The committed outputs that lines link to (no images, and no results.json beside its results.md)."""
    found = []
    for target in LINK.findall("\n".join(lines)):
        path = (page.parent / target).resolve()
        if (path.is_file() and path.is_relative_to(REPO / "docs") and path.suffix != ".png"
                and (path.parent != REPO / "docs" or path.name == "quoted.md") and path not in found):
            found.append(path)
    return found


def figures_with_cells(line: str) -> list[tuple[str, int | None]]:
    """The figures of one line of a page, each with the table cell it is in (None outside tables)."""
    cells = cells_of(line) if line.lstrip().startswith("|") else None
    if cells is not None and RULE.match(line):
        return []
    found = []
    for i, part in enumerate(cells if cells is not None else [line]):
        part = re.sub(r"`[^`]*`", " ", part)  # code: commands, flags, names
        part = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", part)  # links: keep the text
        for sign, digits, unit in NUMBER.findall(part):
            in_table = cells is not None and i > 0
            if "." in digits or unit or in_table:
                found.append((f"{'-' if sign else ''}{digits}{unit or ''}", i if cells is not None else None))
    return found


def figures(lines: list[str]) -> list[str]:
    return [f for line in lines for f, _ in figures_with_cells(line)]


def traced(figure: str, values: list[float], percent: bool = True) -> bool:
    """Whether one of values, written at the figure's precision, is the figure (a percentage may be a
    fraction where the source is JSON)."""
    match = re.match(r"(-?)([\d,]+(?:\.(\d+))?)", figure)
    value = float(match.group(1) + match.group(2).replace(",", ""))
    decimals = len(match.group(3) or "")
    candidates = [value] + ([value / 100] if percent and figure.endswith("%") else [])
    return any(abs(x - v) <= 0.5 * 10 ** -decimals + 1e-9 or abs(round(x, decimals) - v) < 1e-9
               for v in candidates for x in values)


@dataclass
class Figure:
    page: Path
    lineno: int  # 1-based, in the page
    text: str  # the figure as written
    key: str  # the page, its line masked, that line's occurrence among equal masked lines, the figure's index
    context: set[str]  # the words around it
    header: set[str]  # its column's header words (tables)
    heading: set[str]
    sources: list[Path]  # the row's or paragraph's own links first, then the section's
    own: int = 0  # how many of them are the row's or paragraph's own


def page_figures(page: Path) -> list[Figure]:
    out, seen = [], Counter()

    def key(line: str, j: int) -> str:
        return f"{rel(page)} | {mask(line)} | {seen[mask(line)]} | {j}"

    for heading, body, intro in sections(page):
        section_sources = sources(page, [line for _, line in body] + intro)
        header, paragraph = None, []
        for n, line in body + [(0, "")]:
            is_table = line.lstrip().startswith("|")
            item = re.match(r"^\s*(?:[-*]|\d+\.)\s", line)  # a list item starts a paragraph of its own
            if line.strip() and not is_table and not (item and paragraph):
                paragraph.append((n, line))
                continue
            if paragraph:  # a paragraph ended: its figures, each with the words of its sentence
                text = " ".join(x for _, x in paragraph)
                own = sources(page, [x for _, x in paragraph])
                spans, pos = [], 0
                for sentence in re.split(r"(?<=[.;:!?])\s+(?=[A-Z(*`\-\[])", text):
                    begin = text.find(sentence, pos)
                    spans.append((begin, begin + len(sentence), words(sentence)))
                    pos = begin + len(sentence)
                pos = 0
                for pn, pline in paragraph:
                    begin = text.find(pline.strip(), pos)
                    end = begin + len(pline.strip())
                    pos = end
                    found = figures_with_cells(pline)
                    if not found:
                        continue
                    context = set().union(*[w for b, e, w in spans if b <= end and e >= begin])
                    for j, (figure, _) in enumerate(found):
                        out.append(Figure(page, pn, figure, key(pline, j), context, set(), words(heading),
                                          own + [s for s in section_sources if s not in own], len(own)))
                    seen[mask(pline)] += 1
                paragraph = []
                if item:
                    paragraph.append((n, line))
                    continue
            if is_table and header is None:  # a table's first row: its header, labels, not figures
                header = cells_of(line)
                continue
            header = header if is_table else None
            found = figures_with_cells(line) if is_table else []
            if not found:
                continue
            cells = cells_of(line)
            labels = " ".join(c for i, c in enumerate(cells) if i == 0 or not figures_with_cells(f"| x | {c} |"))
            own = sources(page, [line])
            for j, (figure, cell) in enumerate(found):
                out.append(Figure(page, n, figure, key(line, j), words(labels),
                                  header_words(header[cell]) if cell < len(header) else set(), words(heading),
                                  own + [s for s in section_sources if s not in own], len(own)))
            seen[mask(line)] += 1
    return out


# --- sources -------------------------------------------------------------------------------------------------

@dataclass
class Number:
    value: float
    key: str  # the source, its line masked, that line's occurrence among equal masked lines, the number's index
    context: set[str]  # its line's words
    header: set[str]  # its column's header words (tables)
    heading: set[str]
    percent: bool  # written as a percentage, or a fraction in JSON
    unit: str  # the character after it


@cache
def source_numbers(path: Path) -> tuple[Number, ...]:
    out, seen = [], Counter()
    header, heading, keys = None, "", []
    for line in path.read_text(errors="ignore").splitlines():
        if line.startswith("#"):
            heading = line
        if line.lstrip().startswith("|"):
            if header is None:
                header = cells_of(line)
        else:
            header = None
        m = mask(line)
        occurrence = seen[m]
        seen[m] += 1
        if line.lstrip().startswith("|") and header is not None and not RULE.match(line):
            parts = [(i, c) for i, c in enumerate(cells_of(line))]
        else:
            parts = [(None, line)]
        index = 0
        for cell, part in parts:
            for match in SOURCE_NUMBER.finditer(part.replace(",", "")):
                after = part.replace(",", "")[match.end():match.end() + 1]
                out.append(Number(float(match.group()), f"{rel(path)} | {m} | {occurrence} | {index}",
                                  words(line), header_words(header[cell]) if header and cell is not None and cell < len(header)
                                  else set(), words(heading),
                                  after == "%" or path.suffix == ".json", after))
                index += 1
        keys.append(m)
    return tuple(out)


def parse(key: str) -> tuple[str, str, int, int]:
    """A key's file, masked line, that line's occurrence and the number's (or figure's) index in it."""
    path, rest = key.split(" | ", 1)
    line, occurrence, index = rest.rsplit(" | ", 2)
    return path, line, int(occurrence), int(index)


def holds(figure: str, number: Number) -> bool:
    return traced(figure, [number.value], percent=number.percent)


def bind(figure: Figure) -> str | None:
    """The key of the number that holds the figure: of the numbers that equal it in the sources its row or
    paragraph links (else in its section's), the one whose words are most like the figure's (row and
    column, or sentence; then heading)."""
    unit = figure.text.rstrip()[-1]
    # a ratio or a percentage is bound to a number written as one where there is such a number, so that a
    # ratio never lands on an equal time or count in the same file
    same_unit = [lambda n: n.unit == unit or (unit == "%" and n.percent), lambda n: True] if unit in "%x" else \
        [lambda n: True]
    for group, wanted in ((g, w) for w in same_unit for g in (figure.sources[:figure.own], figure.sources)):
        best, best_score = None, None
        for path in group:
            for number in source_numbers(path):
                if not holds(figure.text, number) or not wanted(number):
                    continue
                score = (len(figure.context & (number.context | (number.header if not figure.header else set())))
                         + 0.5 * len(figure.context & number.heading)  # a row's label and the source's section
                         + 2 * len(figure.header & number.header)
                         + 0.5 * len(figure.heading & (number.heading | number.context))
                         + (3 if unit in "%x" and number.unit == unit else 0)
                         + (1 if path.suffix != ".json" else 0))
                if best_score is None or score > best_score:
                    best, best_score = number.key, score
        if best is not None:
            return best
    return None


def load_bindings() -> dict[str, str]:
    return json.loads(BINDINGS.read_text()) if BINDINGS.exists() else {}


def check(figure: Figure, bindings: dict[str, str], text: str | None = None) -> str | None:
    """None when the figure (or text written in its place) equals its bound number; else why not."""
    text = text or figure.text
    where = f"{rel(figure.page)}:{figure.lineno} {text!r}"
    key = bindings.get(figure.key)
    if key is None:
        return (f"{where} is bound to no source: link the output that holds it from its section, row or "
                f"paragraph, then run `python tests/figures.py --bind`")
    path = REPO / key.split(" | ")[0]
    found = [n for n in source_numbers(path) if n.key == key] if path.is_file() else []
    if not found:
        return f"{where}: its source line is gone ({key}); rerun `python tests/figures.py --bind`"
    if not holds(text, found[0]):
        return f"{where} is not its source's number {found[0].value:g} ({key})"
    return None


def all_figures() -> list[Figure]:
    return [f for page in PAGES for f in page_figures(page)]


def main() -> int:
    if sys.argv[1:] != ["--bind"]:
        print("usage: python tests/figures.py --bind", file=sys.stderr)
        return 2
    old, new, unbound, wrong = load_bindings(), {}, [], []
    for figure in all_figures():
        key = old.get(figure.key)
        why = check(figure, old) if key is not None else None
        if key is not None and (why is None or "is not its source's number" in why):
            new[figure.key] = key  # a binding whose line is there is kept: a figure that differs is the page's
            if why:  # to fix, not to bind elsewhere to an equal number
                wrong.append(why)
            continue
        key = bind(figure)
        if key is None:
            unbound.append(f"{rel(figure.page)}:{figure.lineno} {figure.text!r}: none of "
                           f"{[rel(s) for s in figure.sources]} holds it")
        else:
            new[figure.key] = key
    BINDINGS.write_text(json.dumps(dict(sorted(new.items())), indent=0, ensure_ascii=False) + "\n")
    print(f"{len(new)} figures bound ({len(set(new) - set(old))} new, {len(set(old) - set(new))} dropped) in "
          f"{rel(BINDINGS)}")
    for line in unbound:
        print("unbound:", line)
    for line in wrong:
        print("wrong:", line)
    return 1 if unbound or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
