"""Figures that cite their source, checked against it, in pages that read raw (CONTRIBUTING.md: "Figures").

Every measured number of the pages (README.md, docs/*.md but the source quoted.md) comes from a committed output.
A table cites once, "Source: [results.md](sac/results.md)" under it ("Sources:", several): a cell's n-th number is
that of its source's cell in the same row, found by the page row's first cells (the first maybe the heading the
source row is under), and column, the page's header (the source's, or its start). A number in a sentence is a
reference link, [231.0][3], its definition's title naming the value: [3]: sac/results.md#heading "/row/col x100":
a JSON pointer in a .json source; row/column or text[/n] (the n-th number after the text) in a markdown or text
source; "~1" a '/' in a segment; "x100" the value's scale on the page. The anchor is the value's heading but a
title. The page writes the value rounded to its digits (k and M: thousands, millions). Any other measurement fails
unless a phrase holding it is listed in the page's last comment, "<!-- not figures:", a "phrase: why" a line. Not
measurements: code, links' targets, comments, headings, a table's header row and first column, dates, versions,
names (Zen 5, rule 7), set-up counts (2 cores), numbered items, numbers glued to letters (H100, 1e-4).

    python -m leanrl_utils.cite --check | --write [ROOT]   # wrong citations and bare measurements | the fix
"""

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINK = re.compile(r'\[([^\]\n]*)\]\((<(?:[^<>\n\\]|\\.)*>|[^\s()<>]+)(?:\s+"([^"\n]*)")?\)')
REFERENCE = re.compile(r"\[([^\]\n]*)\]\[([^\]\n]+)\]")
DEFINITION = re.compile(r'(?m)^ {0,3}\[([^\]\n]+)\]:[ \t]+(<(?:[^<>\n\\]|\\.)*>|\S+)(?:[ \t]+"([^"\n]*)")?[ \t]*$')
SHOWN = re.compile(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?([kM]?)")
FIGURE = re.compile(r"(?<![\w.])" + SHOWN.pattern + r"(?![\w.]*\d)")  # a number as a page's cell writes it
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")  # a source's number; "104.5-113.7" is two
TITLE = re.compile(r"(/.*?)(?: x(\d+(?:\.\d+)?(?:e-?\d+)?))?")
DECLARED = re.compile(r"<!-- not figures:[^\n]*\n(.*?)-->\s*\Z", re.S)  # the page's last comment
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
    re.compile(r"(?m)^#.*|^.*\n *\|[ \t|:-]+$"),  # a heading; a table's header row and rule
    re.compile(r"(?m)^ *\|([^|\n]*)"),  # a table's first column
]
# a unit glued to a number keeps it a figure (12ms, 1.71x); other letters make it a name (H100, 1faea4a)
GLUED_UNIT = re.compile(r"(?:x|×|ms|µs|us|ns|s|fps|GB|MB|GiB|MiB|GHz|min|h)(?![\w/])")


def pages(root: Path = REPO) -> list[Path]:
    return [root / "README.md"] + sorted(p for p in (root / "docs").glob("*.md") if p.name != "quoted.md")


def plain(text: str) -> str:
    """A cell, header, heading or line as a title names it: no markup, no thousands' commas."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "").replace("**", "")
    return " ".join(re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text).split())


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def markdown(text: str) -> tuple[list, list]:
    """A markdown or text source's table cells, (heading, anchor, row, names of the column, cell, header), its other
    lines, (heading, anchor, line); the heading is the nearest above, its anchor GitHub's ("" for a # title atop)."""
    found, lines, heading, header, seen = [], [], (None, None), None, {}
    for i, line in enumerate(text.splitlines()):
        if line.startswith("#"):
            name = plain(line.lstrip("#"))
            seen[slug(name)] = seen.get(slug(name), -1) + 1  # a repeated heading's anchor: name-1, name-2, ...
            anchor = slug(name) + f"-{seen[slug(name)]}" * bool(seen[slug(name)])
            heading = (name, anchor if i or line[1] == "#" else "")
        if not line.lstrip().startswith("|"):
            header, _ = None, lines.append((*heading, plain(line.lstrip("#"))))
            continue
        row = [plain(c) for c in line.strip().strip("|").split("|")]
        if header is None:  # each column by its header, and as the n-th of its header
            header = [{h, f"{h}@{row[:i].count(h) + 1}"} for i, h in enumerate(row)]
        elif not re.fullmatch(r"[\s|:-]+", line):
            found += [(*heading, row, names, cell, header) for names, cell in zip(header[1:], row[1:])]
    return found, lines


def markdown_value(source: tuple[list, list], segments: list[str], anchor: str | None) -> tuple[float, str]:
    """The number segments name in a markdown or text source, and its heading's anchor; anchor: only under it."""
    (table, lines), found = source, []
    options = [(segments, 0)] + ([(segments[:-1], int(segments[-1]))] if segments[-1].isdigit() else [])
    for (*head, last), n in (o for o in options if o[0]):
        # the column by its header (by its start where no header is it); the row by its first cells, or its heading's
        found += [(NUMBER.findall(cell)[n:n + 1], a) for h, a, row, names, cell, header in table if anchor in (None, a)
                  and (last in names or all(last not in x for x in header) and any(re.match(re.escape(
                      last) + r"(?![\w@])", name) for name in names))
                  and (head and row[:len(head)] == head or head[:1] == [h] and row[:len(head) - 1] == head[1:] != [])]
        found += [(NUMBER.findall(line[line.index(last) + len(last):])[n:n + 1], a) for h, a, line in lines
                  if not head and anchor in (None, a) and last in line]
    if len(found) != 1 or not found[0][0]:
        raise LookupError(f"ambiguous: {len(found)} places" if found[1:] else "no number there" if found else
                          f"#{anchor}: no such heading" if anchor and anchor not in [a for _, a, _ in lines] else
                          "no such cell or text")
    return float(found[0][0][0]), found[0][1]


def value_of(source: Path, anchor: str | None, segments: list[str], read: dict) -> tuple[float, str]:
    """The value segments name in a source (read: the sources read so far, parsed), and the anchor it is under."""
    if source not in read:
        read[source] = source.is_file() and (json.loads if source.suffix == ".json" else markdown)(source.read_text())
    if read[source] is False:
        raise LookupError("no such file")
    if source.suffix != ".json":
        return markdown_value(read[source], segments, anchor)
    node = read[source]
    for key in segments:
        try:
            node = node[int(key) if isinstance(node, list) and key.isdigit() else key]
        except (KeyError, IndexError, TypeError):
            raise LookupError("no such key") from None
    if anchor or isinstance(node, bool) or not isinstance(node, (int, float)):
        raise LookupError("a JSON file has no anchors" if anchor else "not a number")
    return node, ""


def written(shown: str) -> tuple[float, float]:
    """A number as a page writes it: its value and half its last digit."""
    sign, digits, decimals, suffix = SHOWN.fullmatch(shown).groups()
    unit, decimals = {"k": 1e3, "M": 1e6}.get(suffix, 1), decimals or ""
    return float(sign + digits.replace(",", "") + "." + (decimals or "0")) * unit, 0.5 * 10 ** -len(decimals) * unit


def rewrite(value: float, like: str) -> str:
    """value written as like is: its decimals, k or M, commas, a + sign."""
    sign, digits, decimals, suffix = SHOWN.fullmatch(like).groups()
    text = f"{value / {'k': 1e3, 'M': 1e6}.get(suffix, 1):{',' if ',' in digits else ''}.{len(decimals or '')}f}"
    return ("+" if sign == "+" and value >= 0 else "") + text + suffix


def blank(match: re.Match) -> str:
    """The match's text as spaces, its newlines kept: offsets and line numbers stay."""
    return re.sub(r"[^\n]", " ", match.group())


def bare(text: str, cited: list = ()) -> list[tuple[int, str]]:
    """(line, why) of each measurement that no citation (cited: spans) or listed phrase holds; of each lost phrase."""
    for start, end in [*cited, *(m.span() for m in re.finditer(r"```.*?```", text, re.S))]:
        text = text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]
    listed = DECLARED.search(text)
    phrases = [p.split(":")[0].split() for p in listed.group(1).splitlines() if p.strip()] if listed else []
    patterns = [re.compile(r"\s+".join(map(re.escape, phrase))) for phrase in phrases]
    found = [(text.count("\n", 0, listed.start()) + 1, f"'{' '.join(phrase)}' is listed, not on the page")
             for phrase, pattern in zip(phrases, patterns) if not pattern.search(text, 0, listed.start())]
    for m in [m for pattern in patterns for m in pattern.finditer(text, 0, listed.start())]:
        text = text[:m.start()] + blank(m) + text[m.end():]
    for pattern in [DEFINITION, *NOT_A_MEASUREMENT]:  # a reference's definition, and what the rule names
        text = pattern.sub(blank, text)
    # a range's dash ("65-76%", "31 µs-2.11 ms") is no sign and glues nothing
    text = re.sub(r"(?<=\d)((?:[ \t]?(?:µs|us|ns|ms|s|%|x|fps|GB|MB))?)-(?=\d)", "\\1–", text)
    for m in re.finditer(r"\d[\d,]*(?:\.\d+)?", text):
        number = m.group().rstrip(",")
        before, after = text[max(m.start() - 2, 0):m.start()].rjust(2), text[m.start() + len(number):]
        if before[1].isalnum() or before[1] in "._#'’/\\" or re.fullmatch(r"[\w-]-", before):
            continue  # glued to a word or a path: a name or a code
        after = after[1:] if re.match(r"[kKM](?![A-Za-z\d])", after) else after
        if re.match(r"[A-Za-z\d]|\.\d|,\d", after) and not GLUED_UNIT.match(after):
            continue  # glued to what follows: 1faea4a, 2nd, 3e-2
        found.append((text.count("\n", 0, m.start()) + 1, f"{number} stands bare: cite its source, or list it"))
    return sorted(found, key=lambda f: f[0])


def check_page(root: Path, page: Path, read: dict, write: bool = False) -> list[str]:
    """One line per wrong citation and bare measurement of the page; write: cited numbers rewritten from sources."""
    text, where, problems, edits, cited = page.read_text(), page.relative_to(root), [], [], []  # edits, cited: spans
    defined = {m.group(1).lower(): (m.group(2), m.group(3)) for m in DEFINITION.finditer(text)}

    def source(target: str) -> tuple[Path, str | None, str]:
        path, _, anchor = re.sub(r"\\(.)", r"\1", target.strip("<>")).partition("#")
        return (page.parent / path).resolve(), anchor or None, target.strip("<>")

    def compare(shown: str, start: int, sources: list, candidates: list, scale: float = 0.0):
        """shown against the first candidate (segments, shown is their value) one source holds; scale: a sentence's."""
        line, why = text.count("\n", 0, start) + 1, "no row of its sources is this one alone"
        try:
            for segments, figure in candidates:
                hits, located = [], "/".join(segments)
                for path, anchor, name in sources:
                    try:
                        hits.append((*value_of(path, anchor, segments, read), anchor, name))
                    except LookupError as e:
                        why = str(e)
                if len(hits) == 1:
                    break
            else:
                raise LookupError(why)
            value, under, anchor, name = hits[0]
            if under and not anchor and scale:
                raise LookupError(f"its link lands at the file's top: add #{under}")
            if figure and abs(written(shown)[0] - value * (scale or 1)) > written(shown)[1] * (1 + 1e-9) + 1e-12:
                edits.append((start, start + len(shown), rewrite(value * (scale or 1), shown)))
                problems.append(f"{where}:{line}: {shown} is not its source's {edits[-1][2]} ({name} \"/{located}\")")
        except (LookupError, ValueError) as why:  # named by its sources and its last candidate
            problems.append(f'{where}:{line}: {shown}: {", ".join(s[2] for s in sources)} "/{located}": {why}')

    for m in REFERENCE.finditer(text):  # the numbers of sentences
        target, title = defined.get(m.group(2).lower(), ("", None))
        if (title or "").startswith("/"):
            cited.append(m.span())
            locator = TITLE.fullmatch(title)
            segments = [s.replace("~1", "/").replace("~0", "~") for s in locator.group(1)[1:].split("/")]
            compare(m.group(1), m.start() + 1, [source(target)], [(segments, True)], float(locator.group(2) or 1))
    for t in re.finditer(r"(?m)^((?: *\|.*\n)+)\n*(Sources?:.*(?:\n.+)*)", text):  # the tables that cite once
        sources, rows = [source(m.group(2)) for m in LINK.finditer(t.group(2))], list(re.finditer(r".+", t.group(1)))
        header = [plain(c) for c in rows[0].group().strip().strip("|").split("|")]
        header = [h if header.count(h) == 1 else f"{h}@{header[:c].count(h) + 1}" for c, h in enumerate(header)]
        for m in rows[2:]:
            start, row = t.start(1) + m.start(), [plain(c) for c in m.group().strip().strip("|").split("|")]
            bars = [start + b.start() for b in re.finditer(r"\|", m.group())]
            cited.append((start, start + len(m.group())))
            for c in range(1, min(len(row), len(bars) - 1, len(header))):
                raw = re.sub(r"`[^`]*`", lambda m: " " * len(m.group()), text[bars[c] + 1:bars[c + 1]])
                for n, f in enumerate(FIGURE.finditer(raw) if "](" not in raw and "][" not in raw else []):
                    compare(f.group(), bars[c] + 1 + f.start(), sources, [
                        (row[:k] + [header[c]] + [str(n)] * (n > 0), k <= c) for k in range(1, len(row))])
    problems += [f"{where}:{line}: {why}" for line, why in bare(text, cited)]
    if write and edits:
        for start, end, new in sorted(edits, reverse=True):
            text = text[:start] + new + text[end:]
        page.write_text(text)
    return [p for p in problems if not write or " is not its source's " not in p]


def check(root: Path = REPO, write: bool = False) -> list[str]:  # read: the sources, parsed once for all pages
    return [p for read in [{}] for page in pages(root) for p in check_page(root, page, read, write)]


def main(argv: list[str]) -> int:
    root = Path(argv[1]).resolve() if len(argv) == 2 else REPO
    if not argv or argv[0] not in ("--check", "--write") or len(argv) > 2 or not (root / "README.md").is_file():
        print("usage: python -m leanrl_utils.cite --check | --write [the repository's root]", file=sys.stderr)
        return 2
    problems = check(root, write=argv[0] == "--write")
    print("\n".join(problems) or "every figure is its source's value")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
