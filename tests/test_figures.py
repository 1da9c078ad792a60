"""Every figure of the README and of the docs/ pages is checked against the committed output that holds it
(leanrl_utils/cite.py: a table cites once, on a Source line under it; a number in a sentence is a reference link
whose definition names the value; anything else the rule calls a measurement is bare, unless the page's last
comment lists it), and the check fails where it should, shown on a copy of the pages and their sources: a figure
changed in a table cell, a figure changed in a sentence, a value changed in a source (a rerun: exactly the pages
citing it fail, until `--write` brings them up to date), a key or a heading that does not exist, a measurement
that cites nothing; a sentence reworded around its figure needs nothing else. Every link lands: on a file that
exists and, where it has an anchor, on a heading of it. The scripts' comments hold no measured figure at all
(CONTRIBUTING.md: figures live in docs/)."""

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


def anchors(path):
    """A markdown file's heading anchors, as GitHub makes them (a repeated heading's: name-1, name-2, ...)."""
    seen = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            name = cite.slug(cite.plain(line.lstrip("#")))
            seen[name] = seen.get(name, -1) + 1
            yield name + (f"-{seen[name]}" if seen[name] else "")


@pytest.mark.parametrize("page", [*cite.pages(), REPO / "docs" / "quoted.md", REPO / "CONTRIBUTING.md"],
                         ids=lambda p: p.name)
def test_every_link_of_a_page_lands(page):
    """Inline links and reference definitions: the file exists (a renamed study or a moved output folder leaves no
    page pointing at nothing), and an anchor is one of its headings', never a fragment that resolves to nothing
    on GitHub; only a markdown page has anchors."""
    text = re.sub(r"```.*?```|`[^`\n]*`", "", page.read_text(), flags=re.S)
    targets = [m.group(2) for m in cite.LINK.finditer(text)] + [m.group(2) for m in cite.DEFINITION.finditer(text)]
    wrong = []
    for target in (t.strip("<>") for t in targets if "://" not in t):
        path, _, anchor = target.partition("#")
        file = page.parent / path if path else page
        if not file.exists() or anchor and not (file.suffix == ".md" and anchor in set(anchors(file))):
            wrong.append(target)
    assert wrong == []


@pytest.fixture
def copy(tmp_path):
    """The pages and their sources (no plots, no raw scalars), in a folder of their own."""
    shutil.copy(REPO / "README.md", tmp_path)
    shutil.copytree(REPO / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("*.png", "*.csv", "scalars"))
    return tmp_path


def edit(path, old, new):
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def line_of(path, text):
    return 1 + path.read_text().split(text)[0].count("\n")


def test_a_changed_figure_in_a_table_cell_fails_with_one_line(copy):
    """A table that cites once: each of its cells is its source's, by row and column."""
    page = copy / "docs" / "speed.md"
    assert cite.check(copy) == []
    edit(page, "| TD3 | 208.2 | 197.4 (0.95x, slower) |", "| TD3 | 208.3 | 197.4 (0.95x, slower) |")
    assert cite.check(copy) == [f"docs/speed.md:{line_of(page, '| TD3 | 208.3')}: 208.3 is not its source's 208.2 "
                                '(speed/summary.md "/TD3/eager fps")']
    edit(page, "| TD3 | 208.3 | 197.4 (0.95x, slower) |", "| TD3 | 208.2 | 197.4 (0.96x, slower) |")
    assert cite.check(copy) == [f"docs/speed.md:{line_of(page, '| TD3 | 208.2')}: 0.96 is not its source's 0.95 "
                                '(speed/summary.md "/TD3/no flag fps (x eager)/1")'], "a cell's second number too"


def test_a_changed_figure_in_a_sentence_fails_with_one_line(copy):
    readme = copy / "README.md"
    edit(readme, "[63.6][", "[61.6][")
    assert cite.check(copy) == [f"README.md:{line_of(readme, '[61.6]')}: 61.6 is not its source's 63.6 "
                                '(docs/speed_settings/busy/results.md "/idle/seconds")']


@pytest.mark.parametrize("source, old, new, pages", [
    ("docs/limits/results.json", '"matmul": 343644600441.3321', '"matmul": 363644600441.3', {"docs/limits.md"}),
    ("docs/speed/summary.md", "| 231.0 (2.17x, faster) |", "| 244.9 (2.17x, faster) |", {"docs/speed.md"}),
    ("docs/quoted.md", "± 46.03", "± 48.11", {"docs/learning.md"}),
], ids=["a JSON key", "a table's cell", "a line of quoted.md"])
def test_a_changed_source_value_fails_exactly_the_pages_citing_it_until_written(copy, source, old, new, pages):
    """One value of a source changed, as a rerun would: the check fails the pages that cite it and no other, one
    line per citation; --write rewrites those numbers at their precision and touches no other page."""
    assert cite.check(copy) == []
    before = {p: p.read_text() for p in cite.pages(copy)}
    edit(copy / source, old, new)
    problems = cite.check(copy)
    assert {line.split(":")[0] for line in problems} == pages
    assert problems and all(" is not its source's " in line for line in problems)
    assert cite.check(copy, write=True) == [] and cite.check(copy) == []
    assert {p.relative_to(copy).as_posix() for p in cite.pages(copy) if p.read_text() != before[p]} == pages


def test_a_rerun_of_a_whole_source_fails_exactly_the_pages_citing_it(copy):
    """Every number of a speed table's rows 10% off: the pages that cite that table fail, and only those."""
    path = copy / "docs" / "speed" / "td3" / "results.md"
    path.write_text(re.sub(r"(?m)^\|.*\|$", lambda row: re.sub(
        r"(?<![\w.])\d+\.\d+", lambda m: f"{float(m.group()) * 1.1:.{len(m.group().split('.')[1])}f}", row.group()),
        path.read_text()))
    assert {line.split(":")[0] for line in cite.check(copy)} == {"docs/optimizations.md"}


def test_a_missing_key_or_heading_fails_with_one_line_naming_the_page_and_the_key(copy, capsys):
    page = copy / "docs" / "rules.md"
    edit(page, '"/resident_growth_bytes x1e-9"', '"/nope x1e-9"')
    assert cite.main(["--check", str(copy)]) == 1
    assert capsys.readouterr().out == (f"docs/rules.md:{line_of(page, '[7.08]')}: 7.08: "
                                       'dqn_atari_buffer/results.json "/nope": no such key\n')
    page = copy / "docs" / "learning.md"
    edit(page, 'report.md#dqn-cartpole-v1 "/policy lasts"', 'report.md#dqn-cartpole "/policy lasts"')
    assert cite.check_page(copy, page, {}) == [
        f"docs/learning.md:{line_of(page, '[22]')}: 22: learning/intel/report.md#dqn-cartpole \"/policy lasts\": "
        "#dqn-cartpole: no such heading"]


def test_a_bare_measurement_fails_with_one_line_unless_listed(copy):
    page = copy / "docs" / "speed.md"
    edit(page, "\n<!-- not figures:\n", "\nOn a laptop SAC ran 123.4 fps.\n\n<!-- not figures:\n")
    line = line_of(page, "123.4 fps")
    assert cite.check(copy) == [f"docs/speed.md:{line}: 123.4 stands bare: cite its source, or list it"]
    edit(page, "<!-- not figures:\n", "<!-- not figures:\n123.4 fps: a laptop's, once\n")
    assert cite.check(copy) == []
    edit(page, "On a laptop SAC ran 123.4 fps.\n", "")
    assert cite.check(copy) == [f"docs/speed.md:{line_of(page, '<!-- not figures')}: '123.4 fps' is listed, not on the page"]


def test_rewording_a_sentence_around_its_figures_needs_no_other_file(copy):
    """The words around a citation and its place in the sentence are the page's own: the check passes with no
    other file touched."""
    files = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    page = copy / "docs" / "limits.md"
    edit(page, "ran at [344][13] GFLOP/s against XLA's [294][14], so", "reached [294][14] GFLOP/s through XLA, where\n"
         "torch's reached [344][13], so")
    assert cite.check(copy) == []
    assert [p for p, data in files.items() if p.read_bytes() != data] == [page]


def test_the_title_names_one_value(tmp_path):
    """In a markdown source, a table's cell by its row's first cells and its column (the heading's anchor where two
    tables hold the row; the n-th column of a header; the start of a header; the n-th number of a cell), a number
    on a line by the text before it; in a JSON source, a key by its pointer."""
    (tmp_path / "r.md").write_text("Command: `run --steps 8000`\n\n## one\n| mode | arm | fps | % | % | min-max |\n"
                                   "|---|---|---|---|---|---|\n| eager | a | 1,006.4 | 31% | 33% | 12.5-14.0 |\n"
                                   "| eager | b/c | 9.5 | 1% | 2% | 1-2 |\n\n## two\n| mode | fps (median) |\n"
                                   "|---|---|\n| eager | 7.0 |\n\nours / theirs: median 2.46x, per round 2.46, 2.51\n")
    (tmp_path / "r.json").write_text(json.dumps({"rows": [{"p50 (s)": 0.0147}], "bytes": 7.08e9, "a/b": 3}))
    read, md, js = {}, tmp_path / "r.md", tmp_path / "r.json"
    cases = {("one", ("eager", "a", "fps")): 1006.4, (None, ("eager", "b/c", "%@2")): 2, ("two", ("eager", "fps")): 7.0,
             (None, ("eager", "a", "min-max", "1")): 14.0, (None, ("median",)): 2.46, (None, ("per round", "1")): 2.51,
             (None, ("run --steps",)): 8000}
    assert {key: cite.value_of(md, key[0], list(key[1]), read)[0] for key in cases} == cases
    assert cite.value_of(md, None, ["eager", "a", "fps"], read) == (1006.4, "one"), "the anchor of its heading"
    assert [cite.value_of(js, None, s, read)[0] for s in (["rows", "0", "p50 (s)"], ["a/b"])] == [0.0147, 3]
    for anchor, key, why in [(None, "eager/fps", "ambiguous: 3 places"), (None, "eager/a/%", "ambiguous: 2 places"),
                             ("three", "eager/fps", "#three: no such heading"),
                             ("one", "eager/a/mode", "no such cell or text")]:
        with pytest.raises(LookupError, match=why):
            cite.value_of(md, anchor, key.split("/"), read)
    with pytest.raises(LookupError, match="no such key"):
        cite.value_of(js, None, ["rows", "1", "p50 (s)"], read)


def test_a_table_cites_once_and_a_sentence_by_its_definition(tmp_path):
    """A page of both kinds: a Source line maps each cell by row (as many first cells as make it one, the heading
    first where the row is in two tables) and column (the header, or its start); a cell may keep a source cell's
    first numbers at fewer digits; a row's own name is no figure; Sources: several files. A definition's title
    scales the value; k and commas as the page writes them; --write rewrites both kinds."""
    (tmp_path / "docs" / "s").mkdir(parents=True)
    (tmp_path / "docs" / "s" / "r.md").write_text("## one\n| mode | arm | fps | min-max |\n|---|---|---|---|\n"
                                                 "| eager | a | 1,006.4 (2.1x, faster) | 12.5-14.0 |\n"
                                                 "| eager | 2 threads | 9.5 | 1-2 |\n\n## two\n| mode | fps (median) |\n"
                                                 "|---|---|\n| eager | 7.0 |\n")
    (tmp_path / "docs" / "s" / "t.md").write_text("| configuration | fps (median) |\n|---|---|\n| other | 3.5 |\n")
    (tmp_path / "docs" / "s" / "r.json").write_text(json.dumps({"rows": [{"p50 (s)": 0.0147}], "bytes": 7.08e9}))
    page = tmp_path / "README.md"
    page.write_text("| mode | arm | fps |\n|---|---|---|\n| eager | a | 1006 (2.1x) |\n| eager | 2 threads | 9.5 |\n\n"
                    "Source: [r.md](docs/s/r.md#one)\n\n| table | mode | fps |\n|---|---|---|\n| two | eager | 7 |\n"
                    "| other | | 3.50 |\n\nSources: [r.md](docs/s/r.md), [t.md](docs/s/t.md)\n\nIt took [14.7][1] ms "
                    "and [7.08][2] GB, or [1k][3] fps.\n\n[1]: docs/s/r.json \"/rows/0/p50 (s) x1000\"\n"
                    "[2]: docs/s/r.json \"/bytes x1e-9\"\n[3]: docs/s/r.md#one \"/eager/a/fps\"\n")
    assert cite.check(tmp_path) == []
    edit(tmp_path / "docs" / "s" / "r.md", "| a | 1,006.4 (2.1x, faster) |", "| a | 2,106.4 (2.1x, faster) |")
    assert sorted(p.split(": ", 1)[1][:25] for p in cite.check(tmp_path)) == ["1006 is not its source's ",
                                                                               "1k is not its source's 2k"]
    assert cite.check(tmp_path, write=True) == [] and cite.check(tmp_path) == []
    assert "| eager | a | 2106 (2.1x) |" in page.read_text() and "[2k][3]" in page.read_text()
    edit(page, "| other | | 3.50 |", "| other | 4 | 3.50 |")
    assert len(cite.check(tmp_path)) == 1, "a number in a cell that is not its source's"


def test_a_citation_lands_where_its_value_is(tmp_path):
    """A sentence's value under a heading is cited with that heading's anchor (a title's is the file's top)."""
    (tmp_path / "docs" / "s").mkdir(parents=True)
    (tmp_path / "docs" / "s" / "r.md").write_text("# Title\n\nmedian 2.46x\n\n## Per round\n\nper round 2.51\n")
    page = tmp_path / "README.md"
    page.write_text('[2.46][1]x and [2.51][2]x.\n\n[1]: docs/s/r.md "/median"\n[2]: docs/s/r.md "/per round"\n')
    assert cite.check(tmp_path) == ['README.md:1: 2.51: docs/s/r.md "/per round": its link lands at the file\'s top: '
                                    'add #per-round']
    edit(page, '[2]: docs/s/r.md "/per round"', '[2]: docs/s/r.md#per-round "/per round"')
    assert cite.check(tmp_path) == []


def test_what_counts_as_a_measurement():
    """Every number of prose and tables, both halves of a range, k for thousands; not code, link targets,
    versions, dates, names, set-up counts, list numbers, a table's header row and first column, nor a number
    glued to letters."""
    text = ("1. torch's matmul ran 344\n  GFLOP/s and XLA's 294, at 65-76% of it, 369 to 578 fps, near step 19k,"
            " scoring -1250 with 5 graph breaks; torch 2.13.0 on 2026-11-25, 2 cores, seeds 21, 31 and 41, Zen 5,"
            " AVX-512, H100, HalfCheetah-v4, batch 64, `--steps 6000`, [run](docs/x1.md), 1faea4a, 1e-4,"
            " 31 µs-2.11 ms, 12ms.\n\n| pair 2 | fps 3 |\n|---|---|\n| sac 2 | 1,006 |\n")
    assert [why.split()[0] for _, why in cite.bare(text)] == ["344", "294", "65", "76", "369", "578", "19", "1250",
                                                              "5", "31", "2.11", "12", "1,006"]
    assert [why.split()[0] for _, why in cite.bare("torch 2.11 to 2.13 and jax 0.10.2 on AVX-512; fps: eager "
                                                   "990.7, JAX 2484.6")] == ["990.7", "2484.6"]


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
