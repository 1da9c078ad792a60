"""Every page reads raw (issue 61): `python -m leanrl_utils.pagebars` prints, per page (README.md, CONTRIBUTING.md,
docs/*.md), the share of its bytes in link machinery, its longest line, its lines over 160 and 200 characters
outside code blocks and its inline HTML comments, and holds each page to the bars: link bytes at most 10%, no line
over 200 characters, no inline marker; the README, a front page, at most 200 lines, 2,000 words and 160 characters
a line. The bars are shown catching a broken copy of the pages."""

import shutil
import subprocess
import sys

import pytest
from helpers import ENV, REPO

from leanrl_utils import pagebars


def test_the_script_prints_every_page_within_its_bars():
    run = subprocess.run([sys.executable, "-m", "leanrl_utils.pagebars", str(REPO)], cwd=REPO, env=ENV,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ") and not line.startswith("| page")]
    assert [row.split(" | ")[0][2:] for row in rows] == [p.relative_to(REPO).as_posix() for p in pagebars.pages()]
    assert run.stdout.rstrip().endswith("every page is within its bars")


@pytest.mark.parametrize("page", pagebars.pages(), ids=lambda p: p.name)
def test_the_page_is_within_the_bars(page):
    assert pagebars.over(page.relative_to(REPO).as_posix(), pagebars.measure(page.read_text())) == []


def test_what_is_measured():
    """Link bytes: an inline link's target and title, a reference's label, a definition's whole line; lines and
    markers outside code blocks and code spans."""
    text = ("A [figure][1] and [a link](docs/x.md \"t\"), `<!-- code -->`, a 1M<!-- marker --> steps.\n\n"
            "```bash\n" + "x" * 300 + "  # <!-- in code -->\n```\n\n[1]: docs/x.md \"/a/b\"\n<!-- a last comment -->\n")
    m = pagebars.measure(text)
    links = len("[1]") + len('(docs/x.md "t")') + len('[1]: docs/x.md "/a/b"\n')
    assert m["link bytes"] == pytest.approx(links / len(text.encode()))
    assert (m["longest line"], m["lines over 160"], m["markers"]) == (len(text.split("\n")[0]), 0, 1)


@pytest.fixture
def copy(tmp_path):
    shutil.copy(REPO / "README.md", tmp_path)
    shutil.copy(REPO / "CONTRIBUTING.md", tmp_path)
    (tmp_path / "docs").mkdir()
    for page in (REPO / "docs").glob("*.md"):
        shutil.copy(page, tmp_path / "docs")
    return tmp_path


def test_the_bars_catch_a_broken_page(copy):
    """A line over 200 characters, a number declared inside its sentence, links that outweigh the text, and a README
    grown past a front page: each fails, naming the page and the bar."""
    assert pagebars.main([str(copy)]) == 0
    speed, readme = copy / "docs" / "speed.md", copy / "README.md"
    speed.write_text(speed.read_text() + "\n" + "a long line " * 20 + "\n")
    assert pagebars.main([str(copy)]) == 1
    assert pagebars.over("docs/speed.md", pagebars.measure(speed.read_text())) == ["docs/speed.md: lines over 200 1"]
    rules = copy / "docs" / "rules.md"
    rules.write_text(rules.read_text().replace("a full buffer", "a full 1M<!-- not a figure: a setting --> buffer"))
    assert pagebars.over("docs/rules.md", pagebars.measure(rules.read_text())) == ["docs/rules.md: markers 1"]
    torchrun = copy / "docs" / "torchrun.md"
    torchrun.write_text(torchrun.read_text() + "".join(f"[{i}]: torchrun/results.md \"/2/eager/fps, all ranks\"\n"
                                                       for i in range(10, 20)))
    problems = pagebars.over("docs/torchrun.md", pagebars.measure(torchrun.read_text()))
    assert len(problems) == 1 and problems[0].startswith("docs/torchrun.md: link bytes ")
    readme.write_text(readme.read_text() + ("word " * 20 + "\n") * 15 + "x" * 170 + "\n")
    text = readme.read_text()
    assert pagebars.over("README.md", pagebars.measure(text)) == [
        f"README.md: lines {text.count(chr(10))}", f"README.md: words {len(text.split())}", "README.md: lines over 160 1"]
