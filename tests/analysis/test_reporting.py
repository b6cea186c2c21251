"""The trial flow and the reporting checklists (``docs/reporting.md``, issue 37's reporting part).

On the session's simulated archive (70 trials): the flow equals a plain count of the archive's
events and tables, the verifier's ``flow`` and ``checklists`` checks pass, every mechanical item
of TRIPOD-LLM and MI-CLEAR-LLM links a seq the viewer opens, and each named tamper (a count in
the flow's CSV or SVG, an answer or a seq of a checklist in Markdown or HTML, a cell of the
report's flow table) fails the check that owns it with a message naming the place.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import assert_flow_matches_ledger
from locations import REPO

from verify import Report, Status, verify_path

ROOT = REPO


def _check(report: Report, name: str) -> tuple[Status, str]:
    found = [c for c in report.checks if c.name == name]
    assert found, [c.name for c in report.checks]
    return found[0].status, found[0].reason


def test_the_flow_of_the_simulated_archive_is_a_plain_count_of_its_events(
    simulated_archive: Path,
) -> None:
    assert_flow_matches_ledger(simulated_archive)
    report = verify_path(simulated_archive)
    for name in ("flow", "checklists", "report", "layout"):
        status, reason = _check(report, name)
        assert status is Status.PASS, (name, reason)


def test_the_flow_csv_adds_up_in_every_row(simulated_archive: Path) -> None:
    text = (simulated_archive / "analysis" / "tables" / "flow.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["level"] for r in rows][:1] == ["all"] and len(rows) > 1
    for r in rows:
        n = {k: int(v) for k, v in r.items() if k not in ("level", "arm", "model", "variant")}
        assert n["scheduled"] == n["excluded_unsent"] + n["never_sent"] + n["requested"], r
        assert n["requested"] == n["given_up"] + n["no_outcome"] + n["responded"], r
        assert n["responded"] == n["not_scored"] + n["parsed"] + n["unparseable"] + n["refused"]
        assert n["analysed"] == (
            n["parsed"] + n["unparseable"] + n["refused"] - n["control"] - n["excluded_unparseable"]
        ), r


def test_the_checklist_items_are_one_list_on_both_sides() -> None:
    writer = (ROOT / "analysis" / "checklists.json").read_bytes()
    verifier = (ROOT / "verify" / "_archive" / "checklists.json").read_bytes()
    assert writer == verifier
    lists = json.loads(writer)["checklists"]
    assert [c["id"] for c in lists] == ["tripod-llm", "chart", "mi-clear-llm"]


def _rows(md: str) -> list[list[str]]:
    return [
        [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        for line in md.splitlines()[6:]
        if line.startswith("| ")
    ]


@pytest.mark.parametrize("name", ["tripod-llm", "mi-clear-llm", "chart"])
def test_every_mechanical_item_is_filled_and_links_a_seq_the_viewer_opens(
    simulated_archive: Path, name: str
) -> None:
    from starlette.testclient import TestClient

    from analysis.view._app import make_app
    from analysis.view._viewer import open_viewer

    items = next(
        c
        for c in json.loads((ROOT / "analysis" / "checklists.json").read_text())["checklists"]
        if c["id"] == name
    )["items"]
    md = (simulated_archive / "analysis" / "checklists" / f"{name}.md").read_text("utf-8")
    rows = _rows(md)
    assert [r[0] for r in rows] == [i["id"] for i in items]
    links: set[str] = set()
    for row, item in zip(rows, items, strict=True):
        if item["fact"] is None:
            assert row[3] == "**to be completed by the authors**" and row[4] == "–", row
            assert item["id"] in md.splitlines()[-1]  # listed for the authors
            continue
        found = re.findall(r"\[seq (\d+)\]\((/proof/(\d+))\)", row[4])
        assert found and all(a == b for a, _, b in found), row
        assert row[3] and "to be completed" not in row[3], row
        links.update(link for _, link, _ in found)
    viewer = open_viewer(simulated_archive, verify=False)
    try:
        client = TestClient(make_app(viewer), base_url="http://127.0.0.1")
        for link in sorted(links, key=lambda s: int(s.rsplit("/", 1)[1])):
            page = client.get(link)
            assert page.status_code == 200, link
            assert f"<h1>Event {link.rsplit('/', 1)[1]}:" in page.text, link
    finally:
        viewer.index.close()


def _csv_cell(rel: str, row: int, column: str, delta: int) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        path = root / rel
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
        col = rows[0].index(column)
        rows[row][col] = str(int(rows[row][col]) + delta)
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        path.write_text(out.getvalue(), encoding="utf-8")

    return change


def _regex(rel: str, pattern: str, repl: Callable[[re.Match[str]], str]) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        new, n = re.subn(pattern, repl, text, count=1)
        assert n == 1, (rel, pattern)
        path.write_text(new, encoding="utf-8")

    return change


def _plus_one(m: re.Match[str]) -> str:
    return m.group(1) + str(int(m.group(2)) + 1) + (m.group(3) if m.re.groups >= 3 else "")


TAMPERS = {
    "flow-csv-total-analysed": (
        _csv_cell("analysis/tables/flow.csv", 1, "analysed", 1),
        "flow",
        r"analysis/tables/flow\.csv line 2 \(all trials\): analysed is '\d+'; the events give",
    ),
    "flow-csv-arm-responded": (
        _csv_cell("analysis/tables/flow.csv", 2, "responded", -1),
        "flow",
        r"analysis/tables/flow\.csv line 3 \(A\): responded is '\d+'; the events give \d+",
    ),
    "flow-svg-analysed": (
        _regex("analysis/figures/flow.svg", r"(>Analysed: )(\d+)(<)", _plus_one),
        "flow",
        r"analysis/figures/flow\.svg text \d+ says 'Analysed: \d+'; the events give 'Analysed",
    ),
    "flow-svg-arm-breakdown": (
        _regex("analysis/figures/flow.svg", r"(>by arm: A )(\d+)( )", _plus_one),
        "flow",
        r"flow\.svg text 2 says 'by arm: A \d+",
    ),
    "checklist-md-answer": (
        _regex("analysis/checklists/mi-clear-llm.md", r"(; )(\d+)( requests\.)", _plus_one),
        "checklists",
        r"mi-clear-llm\.md line \d+ \(item 1b\) says .*the events give",
    ),
    "checklist-md-seq": (
        _regex("analysis/checklists/tripod-llm.md", r"(\[seq )(\d+)(\])", _plus_one),
        "checklists",
        r"tripod-llm\.md line \d+ \(item data-source\) says",
    ),
    "checklist-html-link": (
        _regex("analysis/checklists/chart.html", r'(href="/proof/)(\d+)(")', _plus_one),
        "checklists",
        r"chart\.html line \d+ \(item 3a\) says",
    ),
    "report-flow-table": (
        _regex("analysis/report.html", r"(<td>all arms</td><td class=\"num\">)(\d+)(<)", _plus_one),
        "report",
        r"report\.html",
    ),
}


DEFAULT_TAMPERS = ("flow-csv-arm-responded", "checklist-md-answer", "report-flow-table")
"""One tamper of each kind of file in the README's command; the others in the slow set."""


@pytest.mark.parametrize(
    "case",
    [
        c if c in DEFAULT_TAMPERS else pytest.param(c, marks=pytest.mark.slow)
        for c in sorted(TAMPERS)
    ],
)
def test_a_tampered_count_or_answer_fails_verification(
    simulated_archive: Path, tmp_path: Path, case: str
) -> None:
    change, check, message = TAMPERS[case]
    copy = tmp_path / "archive"
    shutil.copytree(simulated_archive, copy)
    change(copy)
    status, reason = _check(verify_path(copy), check)
    assert status is Status.FAIL, reason
    assert re.search(message, reason), reason
