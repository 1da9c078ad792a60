"""The figures of the README and of docs/: what a figure is, where it comes from, and the bindings that tie
each one to the single number of a committed output that holds it.

A page is split into sections by its headings. A section's sources are the committed files it links to (in
its own text, or in the text of the sections that hold it) under a folder of docs/ (a benchmark's
results.md / results.json, a run.sh report) or docs/quoted.md (figures of other projects, with theirs),
and the .json files beside a linked results.md or report.md (the benchmark wrote both from one run); images
are never sources.

Every number of a page's prose and tables is a figure, but for those a rule says are not measurements
(NOT_A_MEASUREMENT: numbers inside code spans and link targets, in headings, in a table's header row and
first column, dates, versions, numbers glued to letters as in names and codes (HalfCheetah-v4, H100,
AVX-512, bf16, 1e-4, 1faea4a), numbered list items, numbers that name a thing (Zen 5, family 25, model
17, rule 7, seed 41, batch 64) and the machine's or the run's set-up counts (2 cores, 2 threads, 4
processes, 3 seeds, 3 rounds, 512-bit)). A figure is the number as written, with its unit if one follows
(x, %, ms, fps, GB, GHz, games, ..., on the next line too) and k or M for thousands and millions; a table
cell without a unit takes its column's (update (ms, p50)); the first half of a range ("65-76%", "369 to
578 fps") takes the second half's.

Each figure is either bound to one number of one source (tests/figures.json), or declared not a
measurement in tests/not_figures.json (keyed as a binding is, by the page, its line masked, that line's
occurrence and the figure's place on it; with the number as written and why: a setting, a threshold, a
count of the set-up, a reading off a curve that no committed number holds). A binding is a line of a
markdown or text source and the number's place in it, or a key path in a JSON source
(`docs/x/results.json | /rows/3/p50_ms`: the better binding where the JSON holds the number, since a key
is the number's meaning and not its place on a line). It is found once, among the numbers of the
figure's sources that hold it at the precision it is written with (a JSON value in seconds, bytes, FLOP/s
or Hz read in the figure's ms, µs, GB, GFLOP/s or GHz; a ratio or a percentage only from a number written
as one, or a JSON fraction), by the words around each: a table row's label cells and its column's header,
or the figure's sentence, and the section's heading, against the source's line, its column's header and
its heading (JSON: the strings of the record that holds the value, and its key). The binder binds only
where the words decide: a candidate must share words of its own (row and column, or sentence) with the
figure, not only the value and the heading, and must score above every other candidate (of one line, the
one at the figure's place in its cell, else the first: a median before its rounds). Otherwise it says
why (a tie, or the value alone), and the figure gets a binding by hand in tests/figures.json, stored as
{"source": key, "hand": why}, or an entry in tests/not_figures.json. A figure bound to a markdown cell is
moved to the JSON beside it where exactly one value of that JSON, of a key its column names, holds both
the cell and the figure.

A figure and a source line are found again by their text with every number masked, so a rerun that changes
the values keeps the binding and fails the figures until the page is updated (`rerun` writes a source as
such a rerun would, for the tests). A new or reworded figure has no binding: `python tests/figures.py
--bind` binds it (and drops bindings that no figure uses), or says why it cannot. It never moves a binding
whose source line is still there: a figure that differs from its number is the page's to fix, not to bind
to an equal number elsewhere. `python tests/figures.py --fresh` binds every figure again from scratch
without writing and prints where that disagrees with a binding kept; tests/test_figures.py requires that
every binding not made by hand is the one the binder makes again.
"""

import json
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BINDINGS = REPO / "tests" / "figures.json"
NOT_FIGURES = REPO / "tests" / "not_figures.json"
# the pages whose figures are checked (docs/quoted.md is a source: other projects' figures)
PAGES = [REPO / "README.md"] + sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "quoted.md")
SOURCE_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")  # a range "1.2-3.4" is two numbers
LINK = re.compile(r"\]\(([^)#\s]+)")
RULE = re.compile(r"^\s*\|[\s|:-]+\|\s*$")  # a table's rule line
STOP = {"the", "of", "a", "an", "and", "for", "with", "its", "in", "on", "to", "by", "is", "it", "as", "at", "or",
        "x", "s", "ms", "fps", "than", "against", "this", "that", "each", "per", "one", "are", "be", "vs"}
# a unit after a figure: attached (x, %, /s) or after a space; the longest first
UNITS = sorted(["fps", "s", "ms", "µs", "us", "ns", "min", "minutes", "minute", "seconds", "second", "hours", "hour",
                "h", "GB", "MB", "KB", "GiB", "MiB", "GHz", "MHz", "GFLOP/s", "GFLOPs", "MFLOP", "FLOPs", "FLOP",
                "steps/s", "calls/s", "requests/s", "samples/s", "/s", "games", "game", "graph breaks",
                "graph break", "graphs", "graph", "slots", "slot", "steps", "step", "episodes", "episode", "points",
                "point", "updates", "calls", "iterations", "units", "lanes", "samples", "bytes", "frames",
                "transitions", "epochs", "minibatches", "observers", "actors", "%"],
               key=len, reverse=True)
UNIT = re.compile(r"(?:(?P<attached>%|x|×|/s)|(?P<spaced>(?:[ \t]?|\n\s*)(?:"
                  + "|".join(re.escape(u) for u in UNITS) + r")))(?![\w/])")
# what a rule says is not a measurement (blanked before numbers are read); each with its reason
NAMED = r"(?:zen|family|model|rules?|seeds?|batch|batches|sections?|issue|pr|world size|rank|layer|v|version)"
SETUP = (r"(?:cores?|threads?|observers?|actors?|process(?:es)?|GPUs?|CPUs?|bits?|sockets?|ranks?|seeds?|rounds?"
         r"|workers?|envs?|environments?)")
NOT_A_MEASUREMENT = [
    ("code", re.compile(r"`[^`]*`")),
    ("a link's target", re.compile(r"(?<=\])\([^)]*\)")),
    ("a comment", re.compile(r"<!--.*?-->")),
    ("a date", re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?\b")),
    ("a version", re.compile(r"(?<![\w.])\d+(?:\.\d+){2,}(?:[+\w.-]*)")),
    # a package's version, and the versions that follow it ("torch 2.11 to 2.13", "torch before 2.12"); a number
    # with a decimal and three digits or more before it is a figure ("the JAX twin's fps, JAX 2484.6"), not a version
    ("a version", re.compile(r"(?i)\b(?:torch|pytorch|jax|jaxlib|tensordict|python|gymnasium|envpool|mujoco|flax|"
                             r"optax|cuda|numpy|ubuntu|gcc|avx)(?:\s+(?:before|after|since|from|older than))?[\s-]+"
                             r"v?((?:\d+(?![.\d])|\d{1,2}(?!\d)(?:\.\d+)*)(?:\s*(?:,|to|or|and)\s*\d+\.\d+(?:\.\d+)*)*)")),
    ("a name", re.compile(r"(?i)\b" + NAMED + r"\s+\d+(?![.,]?\d)(?:(?:\s*(?:,|/|and|or|to)\s*)+\d+(?![.,]?\d))*")),
    ("a count of the set-up", re.compile(r"(?<![\w.])\d+(?:\s*(?:,|/|and|or)\s*\d+)*(?:-|\s+)" + SETUP + r"\b")),
    ("a numbered item", re.compile(r"(?m)^\s*\d+\.\s")),
]


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


SYNONYMS = {"yes": "true", "no": "false"}


def words(text: str, stop: set[str] = STOP) -> set[str]:
    """A text's words, stemmed, without the commonest; a number that names something ("batch 8",
    "world size 4") also as one word, batch=8."""
    named = {f"{stem(n.lower().replace(' ', '_'))}={v}" for n, v in
             re.findall(r"(?i)\b(batch|world size|seed|observers|ranks?)[\s:=]+(\d+)\b", text)}
    text = re.sub(r"\]\([^)]*\)", "]", text).lower().replace("_", " ")
    return {SYNONYMS.get(w, stem(w)) for w in re.findall(r"[a-z][a-z0-9]*", text) if w not in stop} | named


def header_words(text: str) -> set[str]:
    """A column header's words, its numbers kept: "batch 64" and "batch 1" are different columns."""
    return words(text, STOP - {"ms", "s", "fps", "x"}) | set(re.findall(r"\d+", text))


def cells_of(line: str) -> list[str]:
    return line.strip().strip("|").split("|")


def label_of(text: str) -> str:
    """A row's label as compared with a source's: lower case, no markup."""
    return re.sub(r"\s+", " ", re.sub(r"[`*_]", " ", text)).strip().lower()


# --- figures -------------------------------------------------------------------------------------------------

def blank(text: str, span: tuple[int, int]) -> str:
    return text[:span[0]] + " " * (span[1] - span[0]) + text[span[1]:]


def measurable(part: str) -> str:
    """A line (or cell) with every number that a rule says is not a measurement blanked."""
    for _, pattern in NOT_A_MEASUREMENT:
        for match in reversed(list(pattern.finditer(part))):
            span = match.span(1) if pattern.groups and match.group(1) else match.span()
            part = blank(part, span)
    return part


def numbers_in(part: str) -> list[tuple[str, str, int]]:
    """The figures of a text: (the figure as written, the unit it is read with, where it starts)."""
    # a range's dash (1.2-3.4, 31 µs-2.11 ms): its second half has no sign
    text = re.sub(r"(?<=\d)((?:[ \t]?(?:µs|us|ns|ms|s|%|x|fps|GB|MB))?)[-–](?=\d)", r"\1–", measurable(part))
    found = []
    for match in re.finditer(r"\d[\d,]*(?:\.\d+)?", text):
        start, end = match.span()
        digits = match.group().rstrip(",")
        end = start + len(digits)
        before = text[start - 1] if start else " "
        if before.isalnum() or before in "._#'’/\\":  # glued to a word or a path: a name or a code
            continue
        sign = ""
        if before in "-−":
            if start >= 2 and (text[start - 2].isalnum() or text[start - 2] in "_-"):
                continue
            sign = "-"
        rest = text[end:]
        scale = re.match(r"[kKM](?![A-Za-z\d])", rest)
        if scale:
            end += 1
            rest = text[end:]
        unit = UNIT.match(rest)
        after = rest[unit.end():] if unit else rest
        if re.match(r"[A-Za-z\d]|\.\d|,\d", after) and not (unit and unit.group("spaced")):
            continue  # glued to what follows: 1faea4a, 2nd, 3e-2, 10x20
        written = sign + digits + (scale.group() if scale else "") + (re.sub(r"\s+", " ", unit.group()) if unit else "")
        found.append((written, (unit.group().strip() if unit else ""), start - len(sign)))
    # the first half of a range takes the second half's unit
    out = []
    for i, (written, unit, start) in enumerate(found):
        if not unit and i + 1 < len(found):
            nxt = found[i + 1]
            between = text[start + len(written):nxt[2]]
            if re.fullmatch(r"\s*(?:–|-|to|and|against)\s*", between) and nxt[1]:
                unit = nxt[1]
        out.append((written, unit, start))
    return out


def figures_with_cells(line: str) -> list[tuple[str, int | None]]:
    """The figures of one line of a page, each with the table cell it is in (None outside tables); a
    table's first column holds its row's label, not figures."""
    return [(written, cell) for written, _, cell, _ in figures_of_line(line)]


def figures_of_line(line: str) -> list[tuple[str, str, int | None, int]]:
    cells = cells_of(line) if line.lstrip().startswith("|") else None
    if cells is not None and RULE.match(line):
        return []
    found = []
    for i, part in enumerate(cells if cells is not None else [line]):
        if cells is not None and i == 0:
            continue
        found += [(written, unit, i if cells is not None else None, start) for written, unit, start in numbers_in(part)]
    return found


def figures(lines: list[str]) -> list[str]:
    return [f for line in lines for f, _ in figures_with_cells(line)]


def value_of(figure: str) -> tuple[float, float]:
    """A figure's value and half its last digit's unit (how far a source's number may be from it)."""
    match = re.match(r"(-?)([\d,]+(?:\.(\d+))?)([kKM](?![A-Za-z]))?", figure)
    scale = {"k": 1e3, "K": 1e3, "M": 1e6}.get(match.group(4) or "", 1)
    value = float(match.group(1) + match.group(2).replace(",", "")) * scale
    return value, 0.5 * 10 ** -len(match.group(3) or "") * scale


def traced(figure: str, values: list[float], percent: bool = True) -> bool:
    """Whether one of values, written at the figure's precision, is the figure (a percentage may be a
    fraction where the source is JSON)."""
    value, half = value_of(figure)
    candidates = [value] + ([value / 100] if percent and figure.rstrip().endswith("%") else [])
    for v in candidates:
        h = half if v == value else half / 100
        for x in values:
            if abs(x - v) <= h * (1 + 1e-9) + 1e-12:
                return True
    return False


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
    unit: str = ""  # its unit, or its range's
    label: str = ""  # its row's label (tables)
    line: str = ""
    cell: int | None = None  # its table cell (None outside tables)
    column: str = ""  # its column's header (tables)
    pos: int = 0  # its place among the numbers of its table cell


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
    """The committed outputs that lines link to (no images), each results.md or report.md followed by the
    JSON files beside it."""
    found = []
    for target in LINK.findall("\n".join(lines)):
        path = (page.parent / target).resolve()
        if (path.is_file() and path.is_relative_to(REPO / "docs") and path.suffix != ".png"
                and (path.parent != REPO / "docs" or path.name == "quoted.md")):
            beside = sorted(path.parent.glob("*.json")) if path.name in ("results.md", "report.md") else []
            found += [p for p in [path, *beside] if p not in found]
    return found


def header_unit(header: str) -> str:
    """The unit of time or size a column's header gives its cells: "update (ms, p50)", "first call (s)"."""
    match = re.search(r"\((?:[^)]*?[\s,(])?(ms|s|µs|GB)(?=[\s,/)])", "(" + header.strip() + ")")
    return match.group(1) if match else ""


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
                text = "\n".join(x for _, x in paragraph)  # read whole: a unit may be on the next line
                own = sources(page, [x for _, x in paragraph])
                spans, pos = [], 0
                for sentence in re.split(r"(?<=[.;:!?])\s+(?=[A-Z(*`\-\[])", text):
                    begin = text.find(sentence, pos)
                    spans.append((begin, begin + len(sentence), words(sentence)))
                    pos = begin + len(sentence)
                starts = [0]
                for _, x in paragraph:
                    starts.append(starts[-1] + len(x) + 1)
                found = numbers_in(text)
                for i, (pn, pline) in enumerate(paragraph):
                    mine = [x for x in found if starts[i] <= x[2] < starts[i + 1]]
                    for j, (figure, unit, at) in enumerate(mine):
                        context = set().union(*[w for b, e, w in spans if b <= at < e] or [set()])
                        out.append(Figure(page, pn, figure, key(pline, j), context, set(), words(heading),
                                          own + [s for s in section_sources if s not in own], len(own), unit,
                                          "", pline))
                    if mine:
                        seen[mask(pline)] += 1
                paragraph = []
                if item:
                    paragraph.append((n, line))
                    continue
            if is_table and header is None:  # a table's first row: its header, labels, not figures
                header = cells_of(line)
                continue
            header = header if is_table else None
            found = figures_of_line(line) if is_table else []
            if not found:
                continue
            cells = cells_of(line)
            labels = " ".join(c for i, c in enumerate(cells) if i == 0 or not figures_of_line(f"| x | {c} |"))
            own = sources(page, [line])
            for j, (figure, unit, cell, _) in enumerate(found):
                unit = unit or (header_unit(header[cell]) if cell < len(header) else "")
                out.append(Figure(page, n, figure, key(line, j), words(labels),
                                  header_words(header[cell]) if cell < len(header) else set(), words(heading),
                                  own + [s for s in section_sources if s not in own], len(own), unit,
                                  label_of(cells[0]), line, cell,
                                  label_of(header[cell]) if cell < len(header) else "",
                                  [c for _, _, c, _ in found[:j]].count(cell)))
            seen[mask(line)] += 1
    return out


# --- sources -------------------------------------------------------------------------------------------------

@dataclass
class Number:
    value: float
    key: str  # the source, its line masked, that line's occurrence among equal masked lines, the number's index;
    # or, in a JSON source, the source and the value's key path
    context: set[str]  # its line's words (JSON: the words of the record that holds it and of its keys)
    header: set[str]  # its column's header words (tables; JSON: its key's)
    heading: set[str]
    percent: bool  # written as a percentage (JSON: a fraction)
    unit: str  # the unit written after it (JSON: what its key says it is: ms, s, bytes, flops, hz, fraction)
    labels: tuple[str, ...] = ()  # its row's label (tables; JSON: the strings of its record)
    meta: bool = False  # a line of the machine, the command or the date, not a measurement
    json: bool = False
    column: str = ""  # its column's header (JSON: its key)
    pos: int = 0  # its place among the numbers of its table cell


NAME = re.compile(r"[\w .()/%+=,-]{1,40}")  # a JSON key that names something (not a line of code)
META = re.compile(r"^\s*(?:Machine|Hardware|Command|Commands|Date|Preset)\b.*:")
IDENTITY = {"batch", "world_size", "seed", "observers", "ranks"}  # a record's numbers that name it
META_KEYS = {"machine", "command", "date", "args", "env_id", "steps", "rounds", "leanrl", "script", "cores",
             "commit"}
# what a JSON value in seconds, bytes, FLOP/s or Hz is divided by to be read in the figure's unit
SCALES = {"ms": {"ms": 1, "s": 1e-3}, "µs": {"ms": 1e-3, "s": 1e-6}, "us": {"ms": 1e-3, "s": 1e-6},
          "s": {"s": 1, "ms": 1e3}, "seconds": {"s": 1, "ms": 1e3}, "min": {"s": 60}, "minutes": {"s": 60},
          "GB": {"bytes": 1e9}, "GiB": {"bytes": 2 ** 30}, "MB": {"bytes": 1e6}, "MiB": {"bytes": 2 ** 20},
          "GFLOP/s": {"flops": 1e9}, "GHz": {"hz": 1e9}, "%": {"fraction": 1, "plain": 1}}


def json_kind(key: str) -> str:
    """What a JSON value is, by its key: ms, s, bytes, flops (per second), hz, fraction or plain."""
    low = key.lower()
    if "bytes" in low:
        return "bytes"
    if "flops" in low or "rates" in low:
        return "flops"
    if re.search(r"\bhz\b|_hz\b", low):
        return "hz"
    if re.search(r"(?:^|[ _(])ms\b", low):
        return "ms"
    if re.search(r"second|(?:^|_)s\b|\(s\)|warmup|wall|time|latency", low):
        return "s"
    if re.search(r"fraction|share|percent|efficien", low):
        return "fraction"
    return "plain"


def parse_json(path: Path, text: str) -> list[Number]:
    """A JSON source's numbers, each with its key path. A list of plain numbers, or of records without a
    string of their own, holds rounds (one run each): none of its values is a figure's own number; nor is a
    value under a key that is data (a line of code)."""
    out = []

    def walk(node, keys, ident, labels, meta, in_record=False):
        if isinstance(node, dict) and not in_record:  # the file's own strings (its command) name no value
            for k, v in node.items():
                if NAME.fullmatch(k):
                    walk(v, keys + [k], ident, labels, meta or k in META_KEYS, isinstance(v, list))
        elif isinstance(node, dict):
            record = {k: v for k, v in node.items() if not isinstance(v, (dict, list))}
            strings = [f"{k} {v}" for k, v in record.items() if isinstance(v, (str, bool))]
            named = [f"{k}={v}" for k, v in record.items() if isinstance(v, int) and not isinstance(v, bool)
                     and k in IDENTITY]
            labels = labels + tuple(label_of(v) for v in record.values() if isinstance(v, str))
            ident = ident + strings + named
            for k, v in node.items():
                if NAME.fullmatch(k):
                    walk(v, keys + [k], ident, labels, meta or k in META_KEYS, True)
        elif isinstance(node, list):
            if not any(isinstance(x, dict) and any(isinstance(v, str) for v in x.values()) for x in node):
                return
            for i, v in enumerate(node):
                walk(v, keys + [str(i)], ident, labels, meta, True)
        elif isinstance(node, (int, float)) and not isinstance(node, bool) and math.isfinite(node) \
                and not (in_record and keys[-1] in IDENTITY):  # a record's batch size names it
            names = [k for k in keys if not k.isdigit()]
            leaf = " ".join(names[-1:] if len(keys) > 1 and keys[-2].isdigit() else names[-2:])  # its key
            kind = json_kind(leaf)
            out.append(Number(float(node), f"{rel(path)} | /{'/'.join(keys)}",
                              words(" ".join(ident + names)), header_words(leaf.replace("_", " ")),
                              words(names[0]) if names else set(), kind == "fraction", kind, labels, meta, True,
                              label_of(names[-1]) if names else ""))

    walk(json.loads(text), [], [], (), False)
    return out


@cache
def source_numbers(path: Path, text: str | None = None) -> tuple[Number, ...]:
    """A source's numbers (text: the source as a rerun would have written it, in place of the file's)."""
    text = path.read_text(errors="ignore") if text is None else text
    if path.suffix == ".json":
        return tuple(parse_json(path, text))
    out, seen = [], Counter()
    header, heading = None, ""
    for line in text.splitlines():
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
        table = line.lstrip().startswith("|") and header is not None and not RULE.match(line)
        parts = list(enumerate(cells_of(line))) if table else [(None, line)]
        label = label_of(cells_of(line)[0]) if table else ""
        meta = bool(META.match(line))
        index = 0
        for cell, part in parts:
            plain = part.replace(",", "")
            for pos, match in enumerate(SOURCE_NUMBER.finditer(plain)):
                unit = UNIT.match(plain[match.end():])
                unit = unit.group().strip() if unit else ""
                out.append(Number(float(match.group()), f"{rel(path)} | {m} | {occurrence} | {index}",
                                  words(line), header_words(header[cell]) if header and cell is not None and
                                  cell < len(header) else set(), words(heading),
                                  unit == "%", unit, (label,) if label else (), meta, False,
                                  label_of(header[cell]) if header and cell is not None and cell < len(header)
                                  else "", pos))
                index += 1
    return tuple(out)


def parse(key: str) -> tuple[str, str, int, int]:
    """A key's file, masked line, that line's occurrence and the number's (or figure's) index in it."""
    path, rest = key.split(" | ", 1)
    line, occurrence, index = rest.rsplit(" | ", 2)
    return path, line, int(occurrence), int(index)


def holds(figure: str, number: Number, unit: str = "", bound: bool = False) -> bool:
    """Whether the number, written at the figure's precision (and, from JSON, in the figure's unit), is the
    figure. bound: the figure is bound to it, and a figure without a unit ("XLA's 294", the unit elsewhere
    in the sentence) is read in any unit of the value's kind."""
    unit = unit or re.sub(r"^[-\d,.]+[kKM]?", "", figure).strip()
    if not number.json:
        return traced(figure, [number.value], percent=number.percent)
    if bound and not unit:
        scales = {1.0} | {s[number.unit] for s in SCALES.values() if number.unit in s}
        return any(traced(figure, [number.value / x]) for x in scales)
    scales = SCALES.get(unit, {"plain": 1})
    if number.unit not in scales:
        return False
    return traced(figure, [number.value / scales[number.unit]], percent=number.unit == "fraction")


# --- binding -------------------------------------------------------------------------------------------------

def score(figure: Figure, number: Number) -> tuple[float, float]:
    """(how many words of its own, the row's or sentence's and the column's, a number shares with the
    figure; the whole score, headings, units and exact labels added)."""
    if figure.cell is not None:  # a table's cell: its row against the source's row or record, its column
        # against the source's column (or, where the source's table is turned, its row; JSON: its key)
        row = len(figure.context & number.context)
        column = figure.header & (number.header if number.json else number.header | number.context)
        union = figure.header | number.header
        own = row + 2 * len(column) if column or (not number.json and figure.unit in ("%", "x")) else 0
        extra = ((2 if figure.label and figure.label in number.labels else 0)
                 + (1 if figure.column and figure.column == number.column else 0)
                 + (len(figure.header & number.header) / len(union) if union else 0))
    else:  # a sentence against the source's line, its column's header or the record and its keys (a JSON
        # key that the sentence does not name binds none of its figures)
        own = len(figure.context & (number.context | number.header)) if not number.json or \
            figure.context & number.header else 0
        unit = words(figure.unit)  # "0 graphs", "5 graph breaks": the unit names the column or key
        extra = len(unit & number.header) / len(unit | number.header) if unit & number.header else 0
    total = (own + extra + 0.5 * len(figure.heading & (number.heading | number.context))
             + 0.5 * len(figure.context & number.heading)
             + (3 if figure.unit in ("%", "x") and (number.unit == figure.unit or
                                                   (figure.unit == "%" and number.percent)) else 0))
    return own, total


def candidates(figure: Figure, paths: list[Path]) -> list[tuple[float, float, Number]]:
    """The numbers of paths that hold the figure, not of a machine, command or date line, with their scores,
    best first. A ratio or a percentage is held only by a number written as one (JSON: a fraction)."""
    found = []
    for path in paths:
        for number in source_numbers(path):
            if number.meta or not holds(figure.text, number, figure.unit):
                continue
            if not number.json and ("%" in (figure.unit, number.unit) or "x" in (figure.unit, number.unit)) \
                    and number.unit != figure.unit:
                continue  # a ratio or a percentage holds only a figure written as one, and only it holds one
            own, total = score(figure, number)
            found.append((own, total, number))
    return sorted(found, key=lambda x: -x[1])


def line_of(number: Number) -> str:
    return number.key if number.json else number.key.rsplit(" | ", 1)[0]


def lift(figure: Figure, number: Number) -> Number:
    """The JSON value that a markdown source's number was written from: where the JSON beside it holds
    exactly one value, of a key that the number's column (or line) names, that equals both the number (at
    its precision) and the figure; else the markdown's number."""
    path = REPO / number.key.split(" | ")[0]
    if number.json:
        return number
    _, masked, occurrence, index = parse(number.key)
    written = ([line for line in path.read_text(errors="ignore").splitlines() if mask(line) == masked]
               + [None] * (occurrence + 1))[occurrence]
    if written is None:
        return number
    plain = written.replace(",", "")
    numbers = [(m.group(), u.group().strip() if (u := UNIT.match(plain[m.end():])) else "")
               for m in SOURCE_NUMBER.finditer(plain)]
    if index >= len(numbers):
        return number
    cell, unit = numbers[index]
    unit = unit or figure.unit
    best = []
    for sibling in sorted(path.parent.glob("*.json")):
        for leaf in source_numbers(sibling):
            if leaf.meta:
                continue
            if unit and not (holds(f"{cell} {unit}", leaf, unit) and holds(figure.text, leaf, figure.unit or unit)):
                continue
            if not unit and not (traced(cell, [leaf.value]) and traced(figure.text, [leaf.value])):
                continue
            names = number.header if number.header else number.context
            column = len(names & (leaf.header | leaf.context))
            column += len(names & leaf.header) / len(names | leaf.header) if names | leaf.header else 0
            row = (len((number.context | number.heading) & leaf.context)
                   + (3 if set(number.labels) & set(leaf.labels) else 0))
            if column >= 1:
                best.append((row, column, leaf))
    if not best:
        return number
    best.sort(key=lambda x: (-x[0], -x[1]))
    top = [x for x in best if x[:2] == best[0][:2]]
    return top[0][2] if len(top) == 1 else number


def bind(figure: Figure) -> str | None:
    return bind_why(figure)[0]


def bind_why(figure: Figure) -> tuple[str | None, str]:
    """The key of the number that holds the figure, or why none. Of the numbers that hold it in the sources
    its row or paragraph links (else, where none does, in its section's), the one whose words are most like
    the figure's (row and column, or sentence; then heading), moved to the JSON it was written from where
    there is one. None where no candidate shares a word of its own with the figure ("value": the value
    alone would decide), or where two candidates of different lines, and of different JSON keys, score the
    same ("tie"); of one line, the one at the figure's place in its cell, else the first (a median before
    its rounds, a mean before its seeds). A table's cell is bound to a line of prose only where no table's
    cell or JSON key of its column holds it."""
    why, tied = "none", None
    for group in (figure.sources[:figure.own], figure.sources):
        found = candidates(figure, group)
        if not found:
            continue
        listed = "; ".join(f"{n.key} ({t:g})" for _, t, n in found[:3])
        found = [x for x in found if x[0] >= 1]
        if figure.cell is not None and any(x[2].header for x in found):
            found = [x for x in found if x[2].header]
        if not found:
            why = "value: " + listed
            continue
        best = [x for x in found if x[1] >= found[0][1]]
        lines = {}
        for x in best:
            lines.setdefault(line_of(x[2]), []).append(x[2])
        picks = [min(numbers, key=lambda n: (n.pos != figure.pos, 0 if n.json else parse(n.key)[3]))
                 for numbers in lines.values()]
        keys = {lift(figure, n).key for n in picks}
        if tied is not None and best[0][1] <= tied:
            break  # the row's own sources hold it twice, and the section's no better
        if len(keys) > 1:
            why, tied = "tie: " + "; ".join(sorted(keys)[:3]), best[0][1]
            continue
        return keys.pop(), ""
    return None, why


# --- reruns: a source as a rerun with other numbers would have written it ------------------------------------

def rewritten(written: str, factor: float, always: bool = False) -> str:
    """A number as written (sign, digits, decimals kept), times factor; always: changed in its last digit at
    least."""
    decimals = len(written.split(".")[1]) if "." in written else 0
    text = f"{float(written) * factor:.{decimals}f}"
    if always and float(text) == float(written):
        text = f"{float(written) + 10 ** -decimals:.{decimals}f}"
    return ("+" if written.startswith("+") else "") + text


def rerun(path: Path, change, numbers: set[str] | None = None, always: bool = False) -> str:
    """The text of a source with its numbers changed as a rerun would: change(key) -> a factor, or None to
    keep the number; only the numbers whose keys are in numbers when it is given; always: every number
    changed changes in its last digit at least (a small count too). A markdown source keeps its lines (a
    number's place, its masked line); a JSON source its keys."""
    text = path.read_text(errors="ignore")
    if path.suffix == ".json":
        data = json.loads(text)

        def walk(node, keys):
            items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
            for k, v in list(items):
                here = keys + [str(k)]
                if isinstance(v, (dict, list)):
                    walk(v, here)
                elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    key = f"{rel(path)} | /{'/'.join(here)}"
                    factor = change(key) if numbers is None or key in numbers else None
                    if factor is not None:
                        new = v * factor if isinstance(v, float) else round(v * factor)
                        node[k] = v + 1 if always and new == v else new

        walk(data, [])
        return json.dumps(data, indent=1)
    out, seen = [], Counter()
    for line in text.splitlines():
        m = mask(line)
        occurrence = seen[m]
        seen[m] += 1
        plain = re.sub(r"(?<=\d),(?=\d)", "", line)  # as source_numbers reads it; the masked line is the same
        pieces, last, index = [], 0, 0
        for match in SOURCE_NUMBER.finditer(plain):
            key = f"{rel(path)} | {m} | {occurrence} | {index}"
            factor = change(key) if numbers is None or key in numbers else None
            index += 1
            if factor is None or "e" in match.group().lower():
                continue
            pieces += [plain[last:match.start()], rewritten(match.group(), factor, always)]
            last = match.end()
        out.append("".join(pieces) + plain[last:] if pieces else line)
    return "\n".join(out) + "\n"


# --- bindings and the not-a-figure list ----------------------------------------------------------------------

def load_bindings() -> dict[str, str]:
    """figure key -> source key; a binding made by hand is stored with why ({"source": ..., "hand": why})."""
    raw = json.loads(BINDINGS.read_text()) if BINDINGS.exists() else {}
    return {k: (v["source"] if isinstance(v, dict) else v) for k, v in raw.items()}


def hand_bindings() -> dict[str, dict]:
    raw = json.loads(BINDINGS.read_text()) if BINDINGS.exists() else {}
    return {k: v for k, v in raw.items() if isinstance(v, dict)}


def load_not_figures() -> dict[str, dict]:
    """figure key -> {"number": the number as written, "why": why it is not a measurement}."""
    return json.loads(NOT_FIGURES.read_text()) if NOT_FIGURES.exists() else {}


def find(key: str, texts: dict[Path, str] | None = None) -> Number | None:
    path = REPO / key.split(" | ")[0]
    if texts and path in texts:
        numbers = source_numbers(path, texts[path])
    else:
        numbers = source_numbers(path) if path.is_file() else ()
    return next((n for n in numbers if n.key == key), None)


def check(figure: Figure, bindings: dict[str, str], text: str | None = None, not_figures: dict | None = None,
          texts: dict[Path, str] | None = None) -> str | None:
    """None when the figure (or text written in its place) equals its bound number, or is declared not a
    measurement as written; else why not. texts: sources as a rerun would have written them."""
    text = text or figure.text
    where = f"{rel(figure.page)}:{figure.lineno} {text!r}"
    key = bindings.get(figure.key)
    if key is None:
        entry = (not_figures or {}).get(figure.key)
        if entry is not None:
            if entry.get("number") == text:
                return None
            return f"{where} is declared not a measurement as {entry.get('number')!r}, not as {text!r}"
        return (f"{where} is bound to no source: link the output that holds it from its section, row or "
                f"paragraph, then run `python tests/figures.py --bind`, or declare it in tests/not_figures.json")
    number = find(key, texts)
    if number is None:
        return f"{where}: its source line is gone ({key}); rerun `python tests/figures.py --bind`"
    if not holds(text, number, figure.unit, bound=True):
        return f"{where} is not its source's number {number.value:g} ({key})"
    return None


def all_figures() -> list[Figure]:
    return [f for page in PAGES for f in page_figures(page)]


def main() -> int:
    args = sys.argv[1:]
    if args not in (["--bind"], ["--fresh"]):
        print("usage: python tests/figures.py --bind | --fresh", file=sys.stderr)
        return 2
    raw = json.loads(BINDINGS.read_text()) if BINDINGS.exists() else {}
    old, listed = load_bindings(), load_not_figures()
    new, unbound, wrong = {}, [], []
    for figure in all_figures():
        where = f"{rel(figure.page)}:{figure.lineno} {figure.text!r}"
        key = old.get(figure.key)
        if args == ["--fresh"]:
            fresh, why = bind_why(figure)
            if fresh != key and not (key is None and figure.key in listed):
                hand = raw.get(figure.key, {}).get("hand") if isinstance(raw.get(figure.key), dict) else None
                print(f"{where}: kept {key}" + (f" (by hand: {hand})" if hand else "") + f"\n    fresh {fresh or why}")
            continue
        why = check(figure, old) if key is not None else None
        if key is not None and (why is None or "is not its source's number" in why):
            new[figure.key] = raw[figure.key]  # a binding whose line is there is kept: a figure that differs
            if why:  # is the page's to fix, not to bind elsewhere to an equal number
                wrong.append(why)
            continue
        if figure.key in listed:
            continue
        key, why = bind_why(figure)
        if key is None:
            unbound.append(f"{where}: {why} (sources: {[rel(s) for s in figure.sources]})")
        else:
            new[figure.key] = key
    if args == ["--fresh"]:
        return 0
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
