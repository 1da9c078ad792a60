"""Every figure of the README and of the docs/ pages cites the committed output that holds it, where it stands
(leanrl_utils/cite.py: the format, the check and the rule of what is a measurement), and the check fails where
it should: a source's value changed (a rerun) fails exactly the pages that cite it, until `--write` brings them
up to date; a cited number changed on the page fails; a citation of a key that does not exist, or a measurement
that cites nothing, fails with one line naming the page; a sentence reworded around its figure needs nothing
else. Those are shown on a copy of the pages and their sources. The scripts' comments hold no measured figure
at all (CONTRIBUTING.md: figures live in docs/)."""

import ast
import io
import json
import re
import shutil
import tokenize

import pytest
from helpers import REPO, SCRIPT_DIR

from leanrl_utils import cite


@pytest.mark.parametrize("page", cite.pages(), ids=lambda p: p.name)
def test_every_figure_of_the_page_cites_its_source_s_value(page):
    assert cite.check_page(REPO, page, {}) == []


@pytest.mark.parametrize("page", [*cite.pages(), REPO / "docs" / "quoted.md", REPO / "CONTRIBUTING.md"],
                         ids=lambda p: p.name)
def test_every_link_of_a_page_leads_to_a_file(page):
    """A renamed study or a moved output folder leaves no page pointing at nothing."""
    targets = [m.group(2).strip("<>").split("#")[0] for m in cite.LINK.finditer(page.read_text())]
    assert [t for t in targets if t and "://" not in t and not (page.parent / t).exists()] == []


@pytest.fixture
def copy(tmp_path):
    """The pages and their sources (no plots, no raw scalars), in a folder of their own."""
    shutil.copy(REPO / "README.md", tmp_path)
    shutil.copytree(REPO / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("*.png", "*.csv", "scalars"))
    return tmp_path


def citing(root, source, fragment):
    """The pages with a citation of that source and fragment, found by their text."""
    return {p.relative_to(root).as_posix() for p in cite.pages(root) if any(
        (p.parent / m.group(2).strip("<>").split("#")[0]).resolve() == source.resolve() and
        m.group(2).strip("<>").split("#", 1)[1:] == [fragment] for m in cite.LINK.finditer(p.read_text()))}


def failing(root):
    return {line.split(":")[0] for line in cite.check(root)}


def edit(path, old, new):
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("source, fragment, old, new", [
    ("docs/limits/results.json", "/measured_rates/matmul", '"matmul": 343644600441.3321', '"matmul": 363644600441.3'),
    ("docs/speed/sac/results.md", "/sac_continuous_action_torchcompile --compile/fps (median)", "| 231.0 |", "| 244.9 |"),
    ("docs/quoted.md", "/after 1M steps,/1", "± 46.03", "± 48.11"),
], ids=["a JSON key", "a table's cell", "a line of quoted.md"])
def test_a_changed_source_value_fails_exactly_the_pages_citing_it_until_written(copy, source, fragment, old, new):
    """One value of a source changed, as a rerun would: the check fails the pages that cite it and no other, one
    line per citation; --write rewrites those numbers at their precision and touches no other page."""
    pages = citing(copy, copy / source, fragment)
    assert pages and failing(copy) == set()
    before = {p: p.read_text() for p in cite.pages(copy)}
    edit(copy / source, old, new)
    problems = cite.check(copy)
    assert {line.split(":")[0] for line in problems} == pages
    assert all("is not its source's" in line for line in problems)
    assert cite.check(copy, write=True) == [] and cite.check(copy) == []
    changed = {p.relative_to(copy).as_posix() for p in cite.pages(copy) if p.read_text() != before[p]}
    assert changed == pages


def test_a_rerun_of_a_whole_source_fails_exactly_the_pages_citing_it(copy):
    """Every number of a speed table's rows 10% off: the pages that cite that table fail, and only those."""
    path = copy / "docs" / "speed" / "td3" / "results.md"
    path.write_text(re.sub(r"(?m)^\|.*\|$", lambda row: re.sub(
        r"(?<![\w.])\d+\.\d+", lambda m: f"{float(m.group()) * 1.1:.{len(m.group().split('.')[1])}f}", row.group()),
        path.read_text()))
    citing_it = {p.relative_to(copy).as_posix() for p in cite.pages(copy) if "speed/td3/results.md#/" in p.read_text()}
    assert citing_it and failing(copy) == citing_it


def test_a_changed_figure_on_the_page_fails_with_one_line(copy):
    edit(copy / "README.md", "[231.0](<docs/speed/sac/results.md#/sac_continuous_action_torchcompile",
         "[213.0](<docs/speed/sac/results.md#/sac_continuous_action_torchcompile")
    line = 1 + (copy / "README.md").read_text().split("[213.0]")[0].count("\n")
    assert cite.check(copy) == [f"README.md:{line}: 213.0 is not its source's 231.0 (docs/speed/sac/results.md"
                                "#/sac_continuous_action_torchcompile --compile/fps (median))"]


def test_a_missing_key_fails_with_one_line_naming_the_page_and_the_key(copy, capsys):
    edit(copy / "docs" / "rules.md", "(dqn_atari_buffer/results.json#/slots)", "(dqn_atari_buffer/results.json#/nope)")
    line = 1 + (copy / "docs" / "rules.md").read_text().split("#/nope")[0].count("\n")
    assert cite.main(["--check", str(copy)]) == 1
    assert capsys.readouterr().out == f"docs/rules.md:{line}: docs/dqn_atari_buffer/results.json#/nope: no such key\n"


def test_a_bare_measurement_fails_with_one_line_unless_declared(copy):
    page = copy / "docs" / "speed.md"
    page.write_text(page.read_text() + "\nOn a laptop SAC ran 123.4 fps.\n")
    lines = page.read_text().count("\n")
    assert cite.check(copy) == [f"docs/speed.md:{lines}: 123.4 stands bare: cite its source, [123.4](path#/key), "
                                "or declare it, 123.4<!-- not a figure: why -->"]
    edit(page, "123.4 fps", "123.4<!-- not a figure: a laptop's, once --> fps")
    assert cite.check(copy) == []
    edit(page, "<!-- not a figure: a laptop's, once -->", "<!-- not a figure: with --compile -->")
    assert len(cite.check(copy)) == 1, "an HTML comment holds no --: GitHub would show it"


def test_rewording_a_sentence_around_its_figures_needs_no_other_file(copy):
    """The words around a citation and its place in the sentence are the page's own: the check passes with no
    other file touched."""
    files = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    readme = copy / "README.md"
    text = readme.read_text()
    cited = re.search(r"ran (\[344\]\([^)]*\) GFLOP/s) and XLA's (\[294\]\([^)]*\))", text)
    readme.write_text(text.replace(cited.group(), f"reached only {cited.group(2)} GFLOP/s through XLA, against "
                                                  f"torch's {cited.group(1)}"))
    assert cite.check(copy) == []
    assert [p for p, data in files.items() if p.read_bytes() != data] == [readme]


def test_the_fragment_names_one_value(tmp_path):
    """A table's cell by its row's first cells and its column (the heading where two tables hold the row; the
    n-th column of a header; the n-th number of a cell); a number on a line by the text before it; a JSON key by
    its pointer; a title's scale, k and commas."""
    (tmp_path / "r.md").write_text("Command: `run --steps 8000`\n\n## one\n| mode | arm | fps | % | % | min-max |\n"
                                   "|---|---|---|---|---|---|\n| eager | a | 1,006.4 | 31% | 33% | 12.5-14.0 |\n"
                                   "| eager | b/c | 9.5 | 1% | 2% | 1-2 |\n\n## two\n| mode | fps |\n|---|---|\n"
                                   "| eager | 7.0 |\n\nours / theirs: median 2.46x, per round 2.46, 2.51\n")
    (tmp_path / "r.json").write_text(json.dumps({"rows": [{"p50 (s)": 0.0147}], "bytes": 7.08e9, "a/b": 3}))
    read, md, js = {}, tmp_path / "r.md", tmp_path / "r.json"
    cases = {"/one/eager/a/fps": 1006.4, "/eager/b~1c/%@2": 2, "/eager/a/min-max/1": 14.0, "/two/eager/fps": 7.0,
             "/median": 2.46, "/per round/1": 2.51, "/run --steps": 8000}
    assert {f: cite.value_of(md, f, read) for f in cases} == cases
    assert [cite.value_of(js, f, read) for f in ("/rows/0/p50 (s)", "/a~1b")] == [0.0147, 3]
    for fragment, why in [("/eager/fps", "ambiguous: 3 places"), ("/eager/a/%", "ambiguous: 2 places"),
                          ("/three/eager/fps", "no such cell or text"), ("/one/eager/a/mode", "no such cell or text")]:
        with pytest.raises(LookupError, match=why):
            cite.value_of(md, fragment, read)
    with pytest.raises(LookupError, match="no such key"):
        cite.value_of(js, "/rows/1/p50 (s)", read)
    page = tmp_path / "README.md"
    (tmp_path / "docs").mkdir()
    page.write_text('[14.7](<r.json#/rows/0/p50 (s)> "x1000") ms, [7.08](r.json#/bytes "x1e-9") GB, '
                    "[1,006](<r.md#/one/eager/a/fps>) fps, [1k](<r.md#/one/eager/a/fps>) fps\n")
    assert cite.check(tmp_path) == []
    edit(md, "1,006.4", "2,106.4")
    assert len(cite.check(tmp_path)) == 2 and cite.check(tmp_path, write=True) == []
    assert "[2,106](<r.md#/one/eager/a/fps>) fps, [2k](<r.md#/one/eager/a/fps>)" in page.read_text()


def test_what_counts_as_a_measurement():
    """Every number of prose and tables, both halves of a range, k for thousands; not code, link targets,
    versions, dates, names, set-up counts, list numbers, a table's header row and first column, nor a number
    glued to letters."""
    text = ("1. torch's matmul ran 344\n  GFLOP/s and XLA's 294, at 65-76% of it, 369 to 578 fps, near step 19k,"
            " scoring -1250 with 5 graph breaks; torch 2.13.0 on 2026-11-25, 2 cores, seeds 21, 31 and 41, Zen 5,"
            " AVX-512, H100, HalfCheetah-v4, batch 64, `--steps 6000`, [run](docs/x1.md), 1faea4a, 1e-4,"
            " 31 µs-2.11 ms, 12ms.\n\n| pair 2 | fps 3 |\n|---|---|\n| sac 2 | 1,006 |\n")
    assert [n for _, n in cite.bare(text)] == ["344", "294", "65", "76", "369", "578", "19", "1250", "5", "31",
                                               "2.11", "12", "1,006"]
    assert [n for _, n in cite.bare("torch 2.11 to 2.13 and jax 0.10.2 on AVX-512; fps: eager 990.7, JAX 2484.6")] \
        == ["990.7", "2484.6"]


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
