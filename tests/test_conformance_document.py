"""docs/CONFORMANCE.md §4, the table from each must of the protocol to the checks that exercise it, stays true:
its quotes are in the documents it names, its checks are the runner's, and every normative sentence of
docs/PROTOCOL.md (the rule is in §4 itself) has a row."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from gym_remote.conformance import all_checks
from tests.conftest import REPO_ROOT

DOCS = REPO_ROOT / "docs"
TABLE_HEADING = "## 4. Every must and its check"

NORMATIVE = re.compile(r"\b([Mm]ust|[Nn]ever|[Ii]nvalid|[Mm]alformed|[Rr]eject(?:s|ed)?|[Rr]efuse[sd]?)\b")
"""The words that make a sentence normative (CONFORMANCE.md §4)."""

SENTENCE_END = re.compile(r"(?<=[.:;!?])\s+(?=[A-Z`(*])")
LIST_ITEM = re.compile(r"\s*(?:\*|\d+\.)\s")
SECTION_HEADING = re.compile(r"#+ (\d+(?:\.\d+)*)\.? ")
LEFT_OUT = ("13",)
"""PROTOCOL.md sections the rule leaves out (§13, the optional same-host data plane, and its subsections)."""


@dataclass(frozen=True)
class Row:
    id: str
    document: str
    section: str
    quote: str
    checks: str


def _cells(line: str) -> list[str]:
    """The cells of a markdown table row, ``\\|`` unescaped."""
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [cell.strip().replace("\\|", "|") for cell in cells]


def table_rows() -> list[Row]:
    text = (DOCS / "CONFORMANCE.md").read_text()
    assert TABLE_HEADING in text, f"docs/CONFORMANCE.md has no section {TABLE_HEADING!r}"
    section = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| id ") or line.startswith("|---"):
            continue
        cells = _cells(line)
        assert len(cells) == 4, f"a row of {TABLE_HEADING!r} does not have 4 cells: {line}"
        identifier, where, quote, checks = cells
        document, _, section_name = where.partition(" ")
        assert quote.startswith('"') and quote.endswith('"') and len(quote) > 2, f"{identifier}: quote {quote!r}"
        rows.append(Row(identifier, document, section_name.lstrip("§"), quote[1:-1], checks))
    return rows


def _flat(text: str) -> str:
    return " ".join(text.split())


def sections(document: str) -> dict[str, str]:
    """Each heading's section of ``document`` (its number, e.g. ``3.1``, or its title), whitespace collapsed,
    fenced code left out; the text before the first heading is under ``""``."""
    text = re.sub(r"```.*?```", "", (DOCS / document).read_text(), flags=re.S)
    found: dict[str, list[str]] = {"": []}
    current = ""
    for line in text.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip()
            number = SECTION_HEADING.match(line)
            current = number.group(1) if number else title
            found.setdefault(current, [])
            continue
        found[current].append(line)
    return {name: "\n".join(lines) for name, lines in found.items()}


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences as CONFORMANCE.md §4 says: a table row is one, a list item starts a new one."""
    found = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.strip().splitlines() if line.strip()]
        items: list[list[str]] = []
        for line in lines:
            if line.lstrip().startswith("|"):
                items.append([line])
            elif not items or LIST_ITEM.match(line) or items[-1][0].lstrip().startswith("|"):
                items.append([line])
            else:
                items[-1].append(line)
        for item in items:
            joined = _flat(" ".join(item))
            if joined.startswith("|"):
                if not re.fullmatch(r"[|\-: ]+", joined):
                    found.append(joined)
            else:
                found.extend(SENTENCE_END.split(joined))
    return found


def normative_sentences() -> list[tuple[str, str]]:
    """(section, sentence) for every normative sentence of PROTOCOL.md outside the sections left out."""
    return [
        (name, sentence)
        for name, text in sections("PROTOCOL.md").items()
        if not any(name == left or name.startswith(left + ".") for left in LEFT_OUT)
        for sentence in sentences(text)
        if NORMATIVE.search(sentence)
    ]


def test_the_table_has_rows_with_distinct_ids():
    rows = table_rows()
    ids = [row.id for row in rows]
    assert len(rows) >= 40 and len(set(ids)) == len(ids), ids


@pytest.mark.parametrize("row", table_rows(), ids=lambda row: row.id)
def test_each_quote_is_in_the_section_it_names(row):
    named = sections(row.document)
    assert row.section in named, f"{row.id}: {row.document} has no section {row.section!r}: {sorted(named)}"
    assert _flat(row.quote) in _flat(named[row.section]), (
        f"{row.id}: {row.quote!r} is not in {row.document} §{row.section} (the text changed: quote it anew)"
    )


@pytest.mark.parametrize("row", table_rows(), ids=lambda row: row.id)
def test_each_check_named_is_one_the_runner_runs(row):
    names = {check.name for check in all_checks()}
    checks = re.findall(r"`([^`]+)`", row.checks)
    unknown = [name for name in checks if name not in names]
    assert not unknown, f"{row.id} names checks the runner does not have: {unknown}"
    if row.checks.startswith("none: "):
        assert len(row.checks) > len("none: ") + 10, f"{row.id}: say why no check can exercise it"
    elif not row.checks.startswith("the rows "):
        assert checks, f"{row.id}: name the checks (in backticks) or start with 'none: ' and say why"


def test_every_normative_sentence_of_the_protocol_has_a_row():
    rows = [row for row in table_rows() if row.document == "PROTOCOL.md"]
    missing = [
        f"§{name}: {sentence}"
        for name, sentence in normative_sentences()
        if not any(row.section == name and _flat(row.quote) in sentence for row in rows)
    ]
    assert not missing, "normative sentences of docs/PROTOCOL.md without a row in CONFORMANCE.md §4:\n" + "\n".join(
        missing
    )
    assert len(normative_sentences()) >= 40  # the rule still finds the protocol's musts
