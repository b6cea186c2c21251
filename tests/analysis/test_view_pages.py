"""The viewer's pages of issue 38 on the session's simulated archive (fast, default set).

Search (FTS5) against the responses themselves, CSV against the JSON of the same filters,
sorting by the new columns, the plots (Wilson intervals checked against statsmodels), the
item page's keys against the scores, the arm diff, and the bad input of the issue (each a
named case: a clear message in the page, never a traceback or a 500). The blinding crawl over
plots, search and CSVs is in ``tests/analysis/test_view.py`` (slow set); Chromium in
``tests/analysis/test_view_browser.py``.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from analysis.view._app import Viewer, make_app
from analysis.view._plots import PLOTS, wilson
from analysis.view._viewer import open_viewer


@pytest.fixture(scope="module")
def viewer(simulated_archive: Path) -> Iterator[Viewer]:
    v = open_viewer(simulated_archive, verify=False)
    yield v
    v.index.close()


@pytest.fixture(scope="module")
def client(viewer: Viewer) -> TestClient:
    return TestClient(make_app(viewer), base_url="http://127.0.0.1")


def all_rows(client: TestClient, query: str) -> list[dict[str, object]]:
    first = client.get(f"/trials?{query}&format=json").json()
    rows = list(first["rows"])
    for page in range(2, first["pages"] + 1):
        rows += client.get(f"/trials?{query}&format=json&page={page}").json()["rows"]
    return rows


def words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[^\W_]+", text)}


def test_search_finds_exactly_the_trials_whose_response_has_the_words(
    viewer: Viewer, client: TestClient
) -> None:
    texts: dict[int, str] = {}
    for h, sha, fmt in viewer.index.query(
        "SELECT t.h, a.response_sha, a.format FROM trials t JOIN attempts a "
        "ON a.outcome_seq = t.response_seq"
    ):
        texts[h] = str(viewer.response(sha, fmt)["text"])
    counts: dict[str, int] = {}
    for text in texts.values():
        for w in words(text):
            counts[w] = counts.get(w, 0) + 1
    # a word some responses have and others lack, so the search has something to leave out
    word = next(w for w, n in sorted(counts.items()) if 0 < n < len(texts) and len(w) > 3)
    found = {int(str(r["h"])) for r in all_rows(client, f"q={word}")}
    assert found == {h for h, text in texts.items() if word in words(text)}
    assert found and len(found) < len(texts)
    page = client.get(f"/trials?q={word}").text
    assert f"search={word}" in page and f'value="{word}"' in page


def test_csv_has_every_trial_the_filters_select(client: TestClient) -> None:
    rows = all_rows(client, "correct=incorrect")
    answer = client.get("/trials?correct=incorrect&format=csv")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(answer.text)))
    assert [int(r["h"]) for r in table] == [r["h"] for r in rows]
    assert {r["correct"] for r in table} == {"incorrect"}
    assert {"arm", "variant", "predicted", "key", "preview"} <= set(table[0])  # unblinded
    assert 'id="csv"' in client.get("/trials?correct=incorrect").text


def test_sorting_by_the_new_columns(client: TestClient) -> None:
    for key in ("predicted", "key", "correct", "attempts", "rep"):
        rows = all_rows(client, f"sort={key}")
        values = [(r[key] is not None, r[key]) for r in rows]
        assert values == sorted(values), key  # SQLite sorts NULL first, as the tuples do
        down = all_rows(client, f"sort={key}&desc=1")
        assert [(r[key] is not None, r[key]) for r in down] == sorted(values, reverse=True)


def test_plots_are_svg_with_text_or_say_why_not(viewer: Viewer, client: TestClient) -> None:
    page = client.get("/plots").text
    for plot in PLOTS:
        svg, note = viewer.plot(plot.name)
        answer = client.get(f"/plot/{plot.name}.svg")
        if svg is None:
            assert answer.status_code == 404 and note and note in page
            continue
        assert answer.status_code == 200 and answer.headers["content-type"] == "image/svg+xml"
        assert b"<text" in svg and b"<script" not in svg
        assert f'src="/plot/{plot.name}.svg"' in page
    accuracy = viewer.plot("accuracy")[0]
    assert accuracy is not None
    for arm in [x[0] for x in viewer.index.query("SELECT DISTINCT arm FROM trials")]:
        assert f"{arm} · " in accuracy.decode()  # unblinded: the arms label the rows


def test_wilson_interval_is_statsmodels_wilson() -> None:
    from statsmodels.stats.proportion import proportion_confint

    for k, n in ((0, 10), (3, 10), (61, 70), (70, 70)):
        lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
        p, a, b = wilson(k, n)
        assert p == k / n and a == pytest.approx(lo, abs=1e-12)
        assert b == pytest.approx(hi, abs=1e-12)


def test_item_page_shows_each_trials_own_keys(viewer: Viewer, client: TestClient) -> None:
    stimulus, h = viewer.index.query("SELECT stimulus, h FROM trials ORDER BY h LIMIT 1")[0]
    page = client.get(f"/item/{stimulus}").text
    n = viewer.index.query("SELECT COUNT(*) FROM trials WHERE stimulus=?", (stimulus,))[0][0]
    assert page.count('class="trial-link"') == n
    score = viewer.score(viewer.index.query("SELECT scored_seq FROM trials WHERE h=?", (h,))[0][0])
    keys = " ".join(str(i["truth"]) for i in score["item_scores"])
    assert f'<td class="key">{keys}</td>' in page


def test_arm_diff_marks_what_differs(viewer: Viewer, client: TestClient) -> None:
    arms = [x[0] for x in viewer.index.query("SELECT DISTINCT arm FROM trials ORDER BY arm")]
    same = viewer.diff(arms[0], arms[0], None)
    assert same["changed"] == 0 and {r["op"] for r in same["rows"]} == {"equal"}
    differ = viewer.diff(arms[0], arms[-1], None)
    assert differ["changed"] > 0
    a_lines = viewer._request_lines(differ["ha"])
    b_lines = viewer._request_lines(differ["hb"])
    assert [r["a"] for r in differ["rows"] if r["a"] is not None] == a_lines
    assert [r["b"] for r in differ["rows"] if r["b"] is not None] == b_lines
    assert "differ</b>" in client.get(f"/diff?a={arms[0]}&b={arms[-1]}").text


BAD_INPUT = [
    ("fts syntax error", "/trials?q=%22unclosed", 400, "not a query the full-text index"),
    ("fts bare operator", "/trials?q=AND", 400, "put a phrase in double quotes"),
    ("unknown filter value", "/trials?model=no-such-model", 400, "no trial has this model"),
    ("unknown sort", "/trials?sort=nonsense", 400, "unknown sort 'nonsense'"),
    ("huge page size", "/trials?per_page=1000000", 400, "per_page 1000000 is out of range"),
    ("page size not a number", "/trials?per_page=lots", 400, "is not a number"),
    ("unknown format", "/trials?format=xml", 400, "choose html, json or csv"),
    ("trial handle not a number", "/trial/abc", 404, "is not a number"),
    ("trial that does not exist", "/trial/999999", 404, "no trial has handle 999999"),
    ("proof seq not a number", "/proof/-1", 404, "is not a number"),
    ("item that does not exist", "/item/no-such-item", 400, "no trial or step call of item"),
    ("unknown plot", "/plot/pie.svg", 400, "no plot 'pie'"),
    ("diff of an unknown arm", "/diff?a=A&b=Z", 400, "diff b='Z': no trial has this arm"),
    ("diff without arms", "/diff", 400, "diff needs ?a=ARM&amp;b=ARM"),
]


@pytest.mark.parametrize(
    ("url", "status", "message"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_bad_input_is_a_clear_message_in_the_page(
    client: TestClient, url: str, status: int, message: str
) -> None:
    answer = client.get(url)
    assert answer.status_code == status, answer.text[:500]
    assert message in answer.text.replace("&#39;", "'").replace("&#34;", '"')
    assert "Traceback" not in answer.text and "<h1>" in answer.text
