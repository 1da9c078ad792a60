"""Every figure of the README and of the docs/ pages is the number of a committed output it is bound to.

What a figure is, where it may come from and how each is bound to one number of one source:
tests/figures.py (`python tests/figures.py --bind` binds new figures). Here: every figure equals its own
number; no binding is left that no figure uses; a seeded mutation of every figure is caught; the scripts'
comments hold no measured figure at all (CONTRIBUTING.md: figures live in docs/).
"""

import ast
import io
import random
import re
import tokenize

import figures as F
import pytest
from helpers import SCRIPT_DIR

FIGURES = F.all_figures()
BINDINGS = F.load_bindings()


@pytest.mark.parametrize("page", F.PAGES, ids=lambda p: F.rel(p))
def test_every_figure_is_the_number_it_is_bound_to(page):
    wrong = [why for f in FIGURES if f.page == page and (why := F.check(f, BINDINGS))]
    assert not wrong, "\n".join(wrong)


def test_no_two_figures_of_a_line_share_a_number():
    """Two figures of one line (a table row, a sentence) are two numbers: bound to the same number of a source,
    one of them was bound by its value to another row or column than its own."""
    by_line = {}
    for f in FIGURES:
        by_line.setdefault((F.rel(f.page), f.lineno, BINDINGS.get(f.key)), []).append(f.text)
    shared = [f"{page}:{line} {texts} -> {key}" for (page, line, key), texts in by_line.items() if key and len(texts) > 1]
    assert not shared, "\n".join(shared)


def test_no_binding_is_left_that_no_figure_uses():
    unused = set(BINDINGS) - {f.key for f in FIGURES}
    assert not unused, ("bindings of figures that are gone (`python tests/figures.py --bind` drops them): "
                        f"{sorted(unused)[:5]}")


def mutated(figure: str, rng: random.Random) -> str:
    """The figure times a factor drawn in 0.5-1.5, written at its precision and with its unit, never equal."""
    match = re.match(r"(-?)([\d,]+(?:\.(\d+))?)(.*)", figure)
    value = float(match.group(1) + match.group(2).replace(",", ""))
    decimals = len(match.group(3) or "")
    for _ in range(100):
        text = f"{value * rng.uniform(0.5, 1.5):.{decimals}f}"
        if float(text) != round(value, decimals):
            return text + match.group(4)
    return f"{value + 10 ** -decimals:.{decimals}f}" + match.group(4)



@pytest.mark.parametrize("page", [*F.PAGES, F.REPO / "docs" / "quoted.md", F.REPO / "CONTRIBUTING.md"],
                         ids=lambda p: p.name)
def test_every_link_of_a_page_leads_to_a_file(page):
    """A renamed study or a moved output folder leaves no page pointing at nothing."""
    missing = [t for t in F.LINK.findall(page.read_text()) if "://" not in t and not (page.parent / t).exists()]
    assert missing == []

def test_a_mutated_figure_is_caught():
    """Every published figure, changed as a slip of the pen would (seeded): at least 99% must fail the check;
    those that escape are named."""
    rng = random.Random(20261124)
    escaped = [f"{F.rel(f.page)}:{f.lineno} {f.text!r} -> {m!r}" for f in FIGURES
               if F.check(f, BINDINGS, m := mutated(f.text, rng)) is None]
    assert len(FIGURES) > 500 and len(escaped) <= 0.01 * len(FIGURES), escaped


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


def test_the_checker_finds_figures_and_binds_each_to_its_row(tmp_path, monkeypatch):
    """The rules on a made-up page: a figure with decimals, one with a unit, table cells, a percentage;
    numbers in code and in names are not figures; each figure is bound to the number of the row and column
    that hold it, not to an equal number elsewhere, and a figure changed or a source rerun fails."""
    lines = ["SAC runs at 86.7 fps, 1.71x eager, in 5 s on HalfCheetah-v4 (`--steps 6000`) with 3 seeds, 48% of it.",
             "| pair | fps |", "|---|---|", "| sac 2 | 1,006 |"]
    assert F.figures(lines) == ["86.7 fps", "1.71x", "5 s", "48%", "1,006"]
    assert F.traced("48%", [0.481]) and F.traced("86.7 fps", [86.66]) and not F.traced("86.8 fps", [86.66])
    out = tmp_path / "docs" / "run"
    out.mkdir(parents=True)
    (out / "results.md").write_text("| mode | fps | warm-up (s) |\n|---|---|---|\n| eager | 12.5 | 3.0 |\n"
                                    "| compiled | 3.0 | 12.5 |\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text("# Page\n\nSource: [results](run/results.md).\n\n| mode | warm-up (s) | fps |\n|---|---|---|\n"
                    "| compiled | 12.5 | 3.0 |\n\nEager ran 12.5 fps.\n")
    monkeypatch.setattr(F, "REPO", tmp_path)
    found = F.page_figures(page)
    assert [f.text for f in found] == ["12.5", "3.0", "12.5 fps"]
    bindings = {f.key: F.bind(f) for f in found}
    # the table's cells are bound by row and column, the sentence by its words: the compiled row's warm-up,
    # its fps, eager's fps (not the 12.5 of the compiled row's warm-up, nor the 3.0 of eager's)
    assert [F.parse(b)[1].strip("| ").split(" | ")[0] + f" #{F.parse(b)[3]}" for b in bindings.values()] == [
        "compiled #1", "compiled #0", "eager #0"]
    assert all(F.check(f, bindings) is None for f in found)
    assert "is not its source's number" in F.check(found[0], bindings, "3.0")
    assert "bound to no source" in F.check(found[0], {})
    F.source_numbers.cache_clear()
    (out / "results.md").write_text("| mode | fps | warm-up (s) |\n|---|---|---|\n| eager | 12.5 | 3.0 |\n"
                                    "| compiled | 3.0 | 9.5 |\n")
    assert "is not its source's number 9.5" in F.check(found[0], bindings)
    F.source_numbers.cache_clear()
