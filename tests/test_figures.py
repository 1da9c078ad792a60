"""Every measurement-like number of the README and of the docs/ pages is the number of a committed output it is
bound to, or is declared not a measurement, with why, in tests/not_figures.json.

What a figure is, where it may come from and how each is bound to one number of one source:
tests/figures.py (`python tests/figures.py --bind` binds new figures). Here: every figure equals its own
number or its declaration; no binding or declaration is left that no figure uses; every binding the binder
made is the one it makes again, and one made by hand says why; no binding points at a machine, command or
date line. Then the two ways a page goes wrong, each seen to fail: a page changed as a slip of the pen would
(every figure, seeded), and a source rerun with other numbers (every source, seeded), which must fail
the figures bound to the numbers that changed, and only those; a change of what no figure is bound to (a
version, a core count, a command) fails none. The scripts' comments hold no measured figure at all
(CONTRIBUTING.md: figures live in docs/).
"""

import ast
import io
import random
import re
import tokenize
import zlib

import figures as F
import pytest
from helpers import SCRIPT_DIR

FIGURES = F.all_figures()
BINDINGS = F.load_bindings()
NOT_FIGURES = F.load_not_figures()


@pytest.mark.parametrize("page", F.PAGES, ids=lambda p: F.rel(p))
def test_every_figure_is_the_number_it_is_bound_to(page):
    """A figure bound to no source and declared nowhere fails here: every measurement-like number is one or
    the other."""
    wrong = [why for f in FIGURES if f.page == page and (why := F.check(f, BINDINGS, not_figures=NOT_FIGURES))]
    assert not wrong, "\n".join(wrong)


def test_no_two_figures_of_a_line_share_a_number():
    """Two figures of one line (a table row, a sentence) are two numbers: bound to the same number of a source,
    one of them was bound by its value to another row or column than its own."""
    by_line = {}
    for f in FIGURES:
        by_line.setdefault((F.rel(f.page), f.lineno, BINDINGS.get(f.key)), []).append(f.text)
    shared = [f"{page}:{line} {texts} -> {key}" for (page, line, key), texts in by_line.items() if key and len(texts) > 1]
    assert not shared, "\n".join(shared)


def test_no_binding_or_declaration_is_left_that_no_figure_uses():
    keys = {f.key for f in FIGURES}
    unused = set(BINDINGS) - keys
    assert not unused, ("bindings of figures that are gone (`python tests/figures.py --bind` drops them): "
                        f"{sorted(unused)[:5]}")
    stale = sorted(set(NOT_FIGURES) - keys)
    assert not stale, f"declarations in tests/not_figures.json of numbers that are gone: {stale[:5]}"
    both = sorted(set(NOT_FIGURES) & set(BINDINGS))
    assert not both, f"bound and declared not a measurement: {both[:5]}"
    assert all(entry.get("why") for entry in NOT_FIGURES.values()), "a declaration without why"


def test_every_binding_is_the_binder_s_own_or_says_why():
    """A binding the binder made is the one it makes again from the figure's words (so a binding kept from an
    older binder, or edited, is seen); one it cannot make (a tie, the value alone) is made by hand, with why."""
    hand = F.hand_bindings()
    assert all(v.get("hand") for v in hand.values()), "a hand binding without why"
    differ = []
    for f in FIGURES:
        key = BINDINGS.get(f.key)
        if key is None or f.key in hand:
            continue
        fresh, why = F.bind_why(f)
        if fresh != key:
            differ.append(f"{F.rel(f.page)}:{f.lineno} {f.text!r}: bound to {key}, the binder now says {fresh or why}")
    assert not differ, "\n".join(differ[:20])


def test_no_binding_points_at_a_machine_command_or_date():
    meta = [f"{F.rel(f.page)}:{f.lineno} {f.text!r} -> {key}" for f in FIGURES
            if (key := BINDINGS.get(f.key)) and (n := F.find(key)) is not None and n.meta]
    assert not meta, "\n".join(meta)


@pytest.mark.parametrize("page", [*F.PAGES, F.REPO / "docs" / "quoted.md", F.REPO / "CONTRIBUTING.md"],
                         ids=lambda p: p.name)
def test_every_link_of_a_page_leads_to_a_file(page):
    """A renamed study or a moved output folder leaves no page pointing at nothing."""
    missing = [t for t in F.LINK.findall(page.read_text()) if "://" not in t and not (page.parent / t).exists()]
    assert missing == []


def factor(rng: random.Random) -> float:
    """A rerun's change: 3 to 15%, either way."""
    return 1 + rng.choice((-1, 1)) * rng.uniform(0.03, 0.15)


def mutated(figure: str, rng: random.Random) -> str:
    """The figure changed by 3 to 15% as a rerun or a slip would, written at its precision (k and M kept) and
    with its unit, never equal at that precision (a figure that small changes by its last digit)."""
    match = re.match(r"(-?)([\d,]+(?:\.(\d+))?)([kKM](?![A-Za-z]))?(.*)", figure, re.S)
    value = float(match.group(1) + match.group(2).replace(",", ""))
    decimals = len(match.group(3) or "")
    rest = (match.group(4) or "") + match.group(5)
    text = f"{value * factor(rng):.{decimals}f}"
    if float(text) == round(value, decimals):
        text = f"{value + 10 ** -decimals:.{decimals}f}"
    return text + rest


@pytest.mark.parametrize("page", F.PAGES, ids=lambda p: F.rel(p))
def test_a_changed_figure_fails(page):
    """Every figure of the page, changed by 3 to 15% (seeded), fails: one bound to a source is not its
    number, one declared not a measurement is not the number declared. Bound to no source counts as no
    catch."""
    rng = random.Random(zlib.crc32(F.rel(page).encode()))
    escaped = []
    for f in (f for f in FIGURES if f.page == page):
        why = F.check(f, BINDINGS, mutated(f.text, rng), NOT_FIGURES)
        expected = "is not its source's number" if f.key in BINDINGS else "is declared not a measurement"
        if why is None or expected not in why:
            escaped.append(f"{F.rel(f.page)}:{f.lineno} {f.text!r}: {why}")
    assert not escaped, "\n".join(escaped)


def bound_sources() -> dict:
    """Each source that figures are bound to, with the keys of its numbers that they are bound to."""
    out = {}
    for key in BINDINGS.values():
        out.setdefault(F.REPO / key.split(" | ")[0], set()).add(key)
    return dict(sorted(out.items()))


@pytest.mark.parametrize("path", list(bound_sources()), ids=lambda p: F.rel(p))
def test_a_rerun_of_a_source_fails_its_figures(path):
    """The source rewritten as a rerun with other numbers would write it (every number of its measurements
    3 to 15% off, seeded; not its machine, command or date): every figure bound to a number that moved by
    more than its last digit fails, one bound to a number that did not move passes, and some figure
    fails."""
    rng = random.Random(zlib.crc32(F.rel(path).encode()))
    meta = {n.key for n in F.source_numbers(path) if n.meta}
    text = F.rerun(path, lambda key: None if key in meta else factor(rng))
    texts = {path: text}
    failed, missed, wrong, any_changed = 0, [], [], False
    for f in FIGURES:
        key = BINDINGS.get(f.key)
        if key is None or not key.startswith(F.rel(path) + " | "):
            continue
        old, new = F.find(key), F.find(key, texts)
        assert new is not None, f"{key}: the rerun lost the number's place"
        # moved by more than twice the figure's last digit: it must fail (reckoned here, not by the checker)
        value, half = F.value_of(f.text)
        changed = old.value != 0 and abs(value * (new.value / old.value - 1)) > 2 * half
        any_changed |= changed
        why = F.check(f, BINDINGS, texts=texts)
        failed += why is not None
        if changed and why is None:
            missed.append(f"{F.rel(f.page)}:{f.lineno} {f.text!r} ({old.value:g} -> {new.value:g}) passed")
        if new.value == old.value and why is not None:
            wrong.append(why)
    assert not missed and not wrong, "\n".join(missed + wrong)
    assert failed or not any_changed, f"no figure bound to {F.rel(path)} failed its rerun"
    F.source_numbers.cache_clear()


def test_a_rerun_fails_every_page():
    """Every page with figures bound to sources fails when its sources are rerun."""
    rng = random.Random(20261126)
    texts = {path: F.rerun(path, lambda key: factor(rng)) for path in bound_sources()}
    failing = {f.page for f in FIGURES if f.key in BINDINGS and F.check(f, BINDINGS, texts=texts)}
    bound = {f.page for f in FIGURES if f.key in BINDINGS}
    assert bound and bound - failing == set(), sorted(F.rel(p) for p in bound - failing)
    F.source_numbers.cache_clear()


def test_a_change_no_figure_is_bound_to_fails_none():
    """Every number of every source's machine, command and date lines (versions, cores, the command's
    settings), and every other number that no figure is bound to (the cells no page quotes), changed by 3 to
    15% and in its last digit at least: every figure still passes (one bound to a version or a core count
    fails here)."""
    rng = random.Random(20261125)
    used = set(BINDINGS.values())
    meta = {n.key for path in bound_sources() for n in F.source_numbers(path) if n.meta}
    texts = {path: F.rerun(path, lambda key: factor(rng) if key in meta or key not in used else None, always=True)
             for path in bound_sources()}
    wrong = [why for f in FIGURES if (why := F.check(f, BINDINGS, not_figures=NOT_FIGURES, texts=texts))]
    assert not wrong, "\n".join(wrong[:20])
    F.source_numbers.cache_clear()


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


def test_what_counts_as_a_figure():
    """Every number of prose and tables, its unit where one follows (on the next line too), k for thousands,
    both halves of a range; not code, link targets, versions, dates, names, set-up counts, list numbers, nor
    a table's first column."""
    text = ("1. torch's matmul ran 344\n  GFLOP/s and XLA's 294, at 65-76% of it, 369 to 578 fps, near step 19k,"
            " scoring -1250 with 5 graph breaks; torch 2.13.0 on 2026-11-25, 2 cores, seeds 21, 31 and 41, Zen 5,"
            " AVX-512, H100, HalfCheetah-v4, batch 64, `--steps 6000`, [run](docs/x1.md), 1faea4a, 1e-4,"
            " 31 µs-2.11 ms.")
    assert [(written, unit) for written, unit, _ in F.numbers_in(text)] == [
        ("344 GFLOP/s", "GFLOP/s"), ("294", ""), ("65", "%"), ("76%", "%"), ("369", "fps"), ("578 fps", "fps"),
        ("19k", ""), ("-1250", ""), ("5 graph breaks", "graph breaks"), ("31 µs", "µs"), ("2.11 ms", "ms")]
    assert F.figures(["| 2 | 1,006 | 3 |"]) == ["1,006", "3"]
    # after a package's name: a version (torch 2.11 to 2.13, AVX-512), or a figure where it cannot be one
    assert F.figures(["torch 2.11 to 2.13 and jax 0.10.2 on AVX-512; fps: eager 990.7, JAX 2484.6"]) == ["990.7", "2484.6"]
    assert F.value_of("19k") == (19000, 500) and F.traced("19k", [19400]) and not F.traced("19k", [19600])


def test_the_binder_binds_by_words_prefers_json_and_refuses_the_value_alone(tmp_path, monkeypatch):
    """A cell of a results.md is moved to the key of the results.json beside it that it was written from; a
    sentence whose words fit two numbers equally (a tie) or none (the value alone) is not bound."""
    out = tmp_path / "docs" / "run"
    out.mkdir(parents=True)
    (out / "results.md").write_text("| arm | batch 1 | batch 8 |\n|---|---|---|\n| eager | 0.032 | 0.047 |\n"
                                    "| compiled | 0.047 | 0.051 |\n")
    (out / "results.json").write_text(
        '{"command": "python -m run 0.047", "rows": [{"arm": "eager", "batch": 1, "p50_ms": 0.0319},'
        ' {"arm": "eager", "batch": 8, "p50_ms": 0.0468}, {"arm": "compiled", "batch": 1, "p50_ms": 0.0467},'
        ' {"arm": "compiled", "batch": 8, "p50_ms": 0.0512}]}')
    page = tmp_path / "docs" / "page.md"
    page.write_text("# Page\n\nSource: [results](run/results.md).\n\n| arm | batch 8 |\n|---|---|\n"
                    "| compiled | 0.051 ms |\n\nThe actor takes 0.047 ms compiled against 0.032 ms eager.\n\n"
                    "It took 0.0512 ms.\n")
    monkeypatch.setattr(F, "REPO", tmp_path)
    F.source_numbers.cache_clear()
    found = F.page_figures(page)
    assert [f.text for f in found] == ["0.051 ms", "0.047 ms", "0.032 ms", "0.0512 ms"]
    assert F.bind_why(found[0]) == ("docs/run/results.json | /rows/3/p50_ms", "")
    assert F.bind_why(found[1])[1].startswith("tie")  # eager at batch 8 and compiled at batch 1 both say 0.047
    assert F.bind_why(found[2])[0] == "docs/run/results.json | /rows/0/p50_ms"
    assert F.bind_why(found[3])[1].startswith("value")  # no word of its sentence names the number
    bindings = {found[0].key: "docs/run/results.json | /rows/3/p50_ms"}
    assert F.check(found[0], bindings) is None
    assert "is not its source's number" in F.check(found[0], bindings, "0.056 ms")
    rerun = {out / "results.json": F.rerun(out / "results.json",
                                           lambda key: 1.1 if key.endswith("/rows/3/p50_ms") else None)}
    assert "is not its source's number" in F.check(found[0], bindings, texts=rerun)
    F.source_numbers.cache_clear()
