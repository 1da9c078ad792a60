"""Every figure of the README and of the docs/ pages is in a committed file its section cites.

A page is split into sections by its headings. A section's sources are the committed files it links to
(in its own text, or in the text of the sections that hold it) under a folder of docs/ (a benchmark's
results.md / results.json, a run.sh report) or docs/quoted.md (figures of other projects, with theirs).
A figure is a number written with decimals, or followed by a unit (x, %, fps, s, ms, µs, GB, MB, /s,
GFLOP/s, ...), or in a table cell past the first column; numbers inside code (commands) and in names
(HalfCheetah-v4, H100) are not figures. Each figure must equal, at the precision it is written with, a
number of one of its section's sources (a percentage may be a fraction there). The scripts' comments
hold no measured figure at all (CONTRIBUTING.md: figures live in docs/).
"""

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest
from helpers import REPO, SCRIPT_DIR

# the pages whose figures are checked (docs/quoted.md is a source: other projects' figures)
PAGES = [REPO / "README.md"] + sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "quoted.md")
UNIT = r"(?:x|×|%|\s?(?:fps|s|ms|µs|us|min|GB|MB|GFLOP/s|MFLOP|M|steps/s|calls/s|/s|requests/s|seconds|minutes|hours))"
NUMBER = re.compile(r"(?<![\w.])([-−]?)(\d[\d,]*(?:\.\d+)?)(" + UNIT + r")?(?![\w/]|\.\d)")
SOURCE_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")  # a range "1.2-3.4" is two numbers
LINK = re.compile(r"\]\(([^)#\s]+)")


def sections(page: Path) -> list[tuple[list[str], list[str]]]:
    """(the section's lines, the lines of the sections that hold it before their first subsection) per
    heading of the page, code blocks taken out."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    out, stack, current = [], [], []  # stack: (level, intro lines)
    for line in text.splitlines() + ["# end"]:
        heading = re.match(r"^(#+) ", line)
        if heading:
            if current or stack:
                out.append((current, [x for _, intro in stack[:-1] for x in intro]))
            level = len(heading.group(1))
            stack = [(lv, intro) for lv, intro in stack if lv < level] + [(level, [])]
            current = []
        else:
            current.append(line)
            if stack:
                stack[-1][1].append(line)
    return out


def sources(page: Path, lines: list[str]) -> list[Path]:
    found = []
    for target in LINK.findall("\n".join(lines)):
        path = (page.parent / target).resolve()
        if path.is_file() and path.is_relative_to(REPO / "docs") and (path.parent != REPO / "docs" or
                                                                         path.name == "quoted.md"):
            found.append(path)
    return found


@cache
def numbers_in(path: Path) -> list[float]:
    return [float(x) for x in SOURCE_NUMBER.findall(path.read_text(errors="ignore").replace(",", ""))]


def figures(lines: list[str]) -> list[str]:
    """The figures of a section's text: (the figure as written)."""
    found = []
    for line in lines:
        cells = None
        if line.lstrip().startswith("|"):
            if re.match(r"^\s*\|[\s|:-]+\|\s*$", line):  # a table's rule
                continue
            cells = [c for c in line.strip().strip("|").split("|")]
        for i, part in enumerate(cells if cells is not None else [line]):
            part = re.sub(r"`[^`]*`", " ", part)  # code: commands, flags, names
            part = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", part)  # links: keep the text
            for sign, digits, unit in NUMBER.findall(part):
                in_table = cells is not None and i > 0
                if "." in digits or unit or in_table:
                    found.append(f"{'-' if sign else ''}{digits}{unit or ''}")
    return found


def traced(figure: str, values: list[float]) -> bool:
    match = re.match(r"(-?)([\d,]+(?:\.(\d+))?)", figure)
    value = float(match.group(1) + match.group(2).replace(",", ""))
    decimals = len(match.group(3) or "")
    candidates = [value] + ([value / 100] if figure.endswith("%") else [])
    return any(abs(x - v) <= 0.5 * 10 ** -decimals + 1e-9 or abs(round(x, decimals) - v) < 1e-9
               for v in candidates for x in values)


def page_sections():
    for page in PAGES:
        for i, (lines, intro) in enumerate(sections(page)):
            yield pytest.param(page, lines, intro, id=f"{page.relative_to(REPO)}:{i}")


@pytest.mark.parametrize("page,lines,intro", list(page_sections()))
def test_every_figure_is_in_a_file_its_section_cites(page, lines, intro):
    found = figures(lines)
    if not found:
        return
    cited = sources(page, lines + intro)
    heading = next((line for line in lines if line.strip()), "")[:80]
    assert cited, f"{page.name}: a section with figures ({found[:5]}) cites no committed source ({heading!r})"
    values = [x for path in cited for x in numbers_in(path)]
    missing = [f for f in found if not traced(f, values)]
    assert not missing, (f"{page.name}: figures not found in {[str(p.relative_to(REPO)) for p in cited]}: "
                         f"{missing} ({heading!r})")


TIMING = re.compile(r"(\d ?(ms|µs|us|fps)\b|\d\.\d+x\b|\d+(\.\d+)? ?%)")


def prose(source: str) -> list[tuple[int, str]]:
    """A script's comments and docstrings: (line number, text) per line."""
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node) is not None:
            first = node.body[0]
            out += [(first.lineno + i, line) for i, line in enumerate(ast.get_docstring(node, clean=False).splitlines())]
    return out


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPT_DIR.glob("*.py")))
def test_no_measured_figure_in_a_script_s_comments(script):
    lines = [f"{i}: {text.strip()}" for i, text in prose((SCRIPT_DIR / script).read_text()) if TIMING.search(text)]
    assert not lines, f"measured figures belong in docs/, not in comments or docstrings: {lines}"


def test_prose_holds_comments_and_docstrings():
    source = '"""Module: 1.5x."""\nx = "3 ms"  # 2 fps\ndef f():\n    """Takes 4 µs."""\n    return f"{x} 5 ms"\n'
    assert [t for _, t in prose(source) if TIMING.search(t)] == ["# 2 fps", "Module: 1.5x.", "Takes 4 µs."]


def test_the_checker_finds_figures_and_their_sources(tmp_path):
    """The rules above on a made-up page: a figure with decimals, one with a unit, table cells, a
    percentage held as a fraction; numbers in code and in names are not figures."""
    lines = ["SAC runs at 86.7 fps, 1.71x eager, in 5 s on HalfCheetah-v4 (`--steps 6000`) with 3 seeds, 48% of it.",
             "| pair | fps |", "|---|---|", "| sac 2 | 1,006 |"]
    assert figures(lines) == ["86.7 fps", "1.71x", "5 s", "48%", "1,006"]
    values = [86.66, 1.7149, 4.6, 0.481, 1006.2]
    assert all(traced(f, values) for f in figures(lines))
    assert not traced("86.8 fps", values) and not traced("1.72x", values)
    source = tmp_path / "results.md"
    source.write_text("| 12.5 | 128.8-145.0 | 31 µs-2.11 ms | 1e-05 | -3 |")
    assert numbers_in(source) == [12.5, 128.8, 145.0, 31.0, 2.11, 1e-05, -3.0]
