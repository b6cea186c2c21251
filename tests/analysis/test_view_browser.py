"""`ledger view` driven in a real Chromium (Playwright against the system browser), issue 21.

Marked ``browser``: left out of the README's test command; ``.ci/run`` runs ``pytest -m
browser`` (it installs Debian's chromium when missing). Playwright only drives the browser at
``/usr/bin/chromium`` (``executable_path``): no browser is ever downloaded. Every test fails on
any console error or page error. Screenshots of the trial page and the comparison page are
written to ``tmp/view-artefacts/`` (ignored by git; ``LEDGER_VIEW_ARTEFACTS`` moves it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from locations import REPO

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTEFACTS = Path(os.environ.get("LEDGER_VIEW_ARTEFACTS", REPO / "tmp" / "view-artefacts"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


class Page:
    """A page that records every console error and page error."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on(
            "console",
            lambda m: (
                self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None
            ),
        )
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("requestfailed", self._failed)

    def _failed(self, request: Any) -> None:
        """A request that failed, but not one the browser itself cancelled (``ERR_ABORTED``):
        navigating to the next page, or closing this one, cancels the overview's
        ``/api/status`` poll when it is in flight (on a loaded machine a poll can take longer
        than a test's next step). A viewer that refuses, drops or resets the connection still
        fails the test (``ERR_CONNECTION_REFUSED``, ``ERR_EMPTY_RESPONSE``, ...)."""
        if request.failure != "net::ERR_ABORTED":
            self.errors.append(f"failed: {request.url} ({request.failure})")

    def leave(self) -> None:
        """Go to a blank page, so that nothing polls a viewer that is about to stop."""
        self.page.goto("about:blank")

    def close(self) -> None:
        self.context.close()
        assert not self.errors, self.errors


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    p = Page(browser)
    yield p
    p.close()


class Viewer:
    """`ledger view PATH --port 0` in a subprocess; its URL from the line it prints."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from ledger.cli import main; main()",
                "view",
                str(path),
                "--port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"http://[\d.]+:\d+", line)
        if not found:
            self.stop()
            raise AssertionError(f"ledger view did not start: {line}")
        self.url = found.group(0)

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return err


@pytest.fixture
def archive_viewer(simulated_archive: Path) -> Iterator[Viewer]:
    """The simulated archive in ``ledger view``; a test asks for it before ``page``, so the page
    is closed before the viewer stops (its /api/status poll would otherwise fail)."""
    v = Viewer(simulated_archive)
    yield v
    err = v.stop()
    assert "Traceback" not in err, err


def loaded(page: Any, selector: str) -> bool:
    return bool(page.eval_on_selector(selector, "img => img.complete && img.naturalWidth > 0"))


def test_browser_filter_open_a_trial_see_its_image_and_response_then_compare(
    archive_viewer: Viewer, page: Page
) -> None:
    p = page.page
    p.goto(archive_viewer.url + "/trials")
    assert "70 trials" in p.inner_text("#count")
    p.select_option("#filter-arm", "B")
    p.select_option("#filter-stimulus", "mixed-1")
    p.click("#apply")
    p.wait_for_url(re.compile(r"arm=B"))
    assert "2 trials match" in p.inner_text("#count")
    arms = p.eval_on_selector_all(
        "#trials tr td:nth-child(3)", "tds => tds.map(t => t.textContent)"
    )
    assert arms == ["B", "B"]
    p.click("a.trial-link >> nth=0")
    p.wait_for_selector("#arm")
    assert p.inner_text("#arm") == "B"
    p.wait_for_load_state("networkidle")
    assert loaded(p, "#stimulus-image") and loaded(p, "img.request-image")
    response = p.inner_text("pre.response")
    assert "chart_type" in response and "orientations" in response
    assert p.inner_text("#parse-status") == "ok"
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    p.screenshot(path=str(ARTEFACTS / "trial.png"), full_page=True)
    p.click("#compare-link")
    p.wait_for_selector("#compare")
    assert p.locator("#compare .column").count() == 5
    headings = p.eval_on_selector_all("#compare .column h2", "hs => hs.map(h => h.textContent)")
    assert [h.split()[1] for h in headings] == ["A", "B", "C", "D", "E"]
    p.wait_for_load_state("networkidle")
    p.screenshot(path=str(ARTEFACTS / "compare.png"), full_page=True)
    assert (ARTEFACTS / "trial.png").stat().st_size > 10_000
    assert (ARTEFACTS / "compare.png").stat().st_size > 10_000


def test_browser_overview_shows_verification_passed_once_the_background_check_ends(
    archive_viewer: Viewer, page: Page
) -> None:
    p = page.page
    p.goto(archive_viewer.url + "/")
    # the page polls /api/status and swaps itself in when the verifier finishes
    p.wait_for_selector("#verification-passed", timeout=120_000)
    assert p.inner_text("#verification .big") == "PASSED"


def test_browser_tampered_archive_shows_failed_and_still_browses(
    page: Page, simulated_archive: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(simulated_archive, copy)
    events = copy / "ledger" / "events.jsonl"
    data = events.read_bytes()
    events.write_bytes(data.replace(b'"n_correct":61', b'"n_correct":59', 1))
    viewer = Viewer(copy)
    try:
        p = page.page
        p.goto(viewer.url + "/")
        p.wait_for_selector("#verification-failed", timeout=120_000)
        assert p.inner_text("#verification .big") == "FAILED"
        p.goto(viewer.url + "/trials")
        p.click("tr.fault a.trial-link >> nth=0")
        p.wait_for_selector(".fault-detail")
        assert "Verification FAILED at seq" in p.inner_text(".fault-detail >> nth=0")
        assert "59 of 61" in p.inner_text("#score")
    finally:
        page.leave()
        viewer.stop()


def test_browser_watch_a_live_run_add_trials(
    page: Page, tmp_path: Path, study_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers import make_study

    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    study = make_study(tmp_path / "study", replicates=2, template=study_template)
    viewer = Viewer(study)
    try:
        p = page.page
        p.goto(viewer.url + "/trials")
        assert "0 trials" in p.inner_text("#count")
        p.evaluate("window.__not_reloaded = true")
        run = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from ledger.cli import main; main()",
                "run",
                str(study),
                "--backend",
                "simulated",
                "--concurrency",
                "1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        counts = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = p.inner_text("#count")
            counts.add(int(text.split()[0]))
            if text.startswith("70 trials"):
                break
            p.wait_for_timeout(200)
        out = run.communicate(timeout=120)[0]
        assert run.returncode == 0, out
        assert "70 trials" in p.inner_text("#count")
        assert p.evaluate("window.__not_reloaded") is True  # swapped in place, no reload
        assert len(counts) >= 2, counts  # it grew while the run wrote
        p.click("a.trial-link >> nth=0")
        p.wait_for_selector("pre.response")
    finally:
        page.leave()
        err = viewer.stop()
    assert "Traceback" not in err, err


def test_browser_a_hostile_archive_runs_no_script_in_the_viewer_or_its_bundle(
    browser: Any, simulated_archive: Path, tmp_path: Path
) -> None:
    """Issue 32: a request "image" that is JavaScript, and one that is an HTML page loading it
    and claiming VERIFIED. Neither is served (400), the trial page's <img> shows nothing, no
    script of the archive's runs in the viewer or in the bundle, and the bundle writes neither.
    """
    import json

    from analysis.view._viewer import write_bundle
    from tests.analysis.test_view_hostile import with_request_image

    copy = tmp_path / "hostile"
    script = b"window.pwned = 1; document.title = 'PWNED';"
    js = with_request_image(simulated_archive, copy, script, "text/javascript", nth=0)
    html = (
        b"<!doctype html><title>VERIFIED</title><h1>VERIFIED: every check PASSED</h1>"
        b"<script>window.pwned = 1; document.title = 'PWNED';</script>"
        b"<script src='/image/" + js.encode() + b"/0'></script>"
    )
    page_sha = with_request_image(simulated_archive, copy, html, "text/html", nth=1)
    seqs = [
        json.loads(line)["envelope"]["seq"]
        for line in (copy / "ledger" / "events.jsonl").read_bytes().splitlines()
        if json.loads(line)["envelope"]["kind"] == "trial.requested"
    ]
    context = browser.new_context()
    p = context.new_page()
    viewer = Viewer(copy)
    try:
        for sha in (page_sha, js):
            answer = p.goto(f"{viewer.url}/image/{sha}/0")
            assert answer is not None and answer.status == 400
            assert "is not a PNG, JPEG, GIF or WebP image" in p.inner_text("body")
            assert p.evaluate("window.pwned") is None and p.title() != "PWNED"
        for seq in seqs[:2]:  # the trial pages that embed the hostile images
            p.goto(f"{viewer.url}/trial/{seq}")
            p.wait_for_load_state("load")
            assert p.evaluate("window.pwned") is None and p.title() != "PWNED"
            assert "Request as sent" in p.inner_text("body")
        # a foreign Host (DNS rebinding) gets 400, whatever the path
        status = p.request.get(f"{viewer.url}/", headers={"Host": "rebind.example"}).status
        assert status == 400
    finally:
        viewer.stop()
    site = tmp_path / "site"
    write_bundle(copy, site)
    assert not list((site / "images").glob(f"{page_sha}-*"))
    assert not list((site / "images").glob(f"{js}-*"))
    pages = [site / "index.html"] + [site / f"trial-{seq}.html" for seq in seqs[:2]]
    for page_file in pages:
        p.goto(page_file.as_uri())
        assert "Request as sent" in p.inner_text("body") or page_file.name == "index.html"
        assert p.evaluate("window.pwned") is None and p.title() != "PWNED"
    context.close()


# ---------------------------------------------------------------------- issue 38: the demos

DEMOS = {
    # seed 001: the green-shielding pilot (a correctness judge on every trial, item steps)
    "seed-001": ("green-shielding-pilot", "archive", 220),
    # seed 002: the medmcqa-prompt-sensitivity template's mcq study (option-order variants)
    "seed-002": ("medmcqa-prompt-sensitivity", "archives/mcq", 200),
}
"""Each demo's template, its archive's folder in the demo, and the console width its demo module
(``tests/e2e/test_template_pilot.py``, ``test_template_mcq.py``) builds it with: the same
build serves both (``conftest.shared_demo``)."""


@pytest.fixture(scope="module", params=sorted(DEMOS))
def demo_viewer(request: Any, shared_demo: Any) -> Iterator[Any]:
    """A template's demo (built once per run and shared with its demo module: tens of seconds,
    in a process of its own, since Playwright's event loop runs in this one) served by a
    viewer."""
    template, archive, width = DEMOS[request.param]
    result, _ = shared_demo(template, width)
    assert result.verified and result.tamper_caught
    v = Viewer(result.archive.parent / archive)  # the demo folder holds archive or archives
    try:
        yield request.param, v
    finally:
        err = v.stop()
        assert "Traceback" not in err, err


def shot(p: Any, name: str) -> Path:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTEFACTS / f"{name}.png"
    p.wait_for_load_state("networkidle")
    p.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


def test_browser_demo_every_page_kind_with_screenshots(page: Page, demo_viewer: Any) -> None:
    """Issue 38's acceptance: the overview with its forest plot, search results, a judged
    trial with its judge call (seed 001), an item across variants with each its own key (seed
    002), an arm diff and every plot kind drawn for the demo, screenshot each."""
    seed, viewer = demo_viewer
    p = page.page
    p.goto(viewer.url + "/")
    p.wait_for_selector("#forest-plot")
    assert loaded(p, "#forest-plot")
    assert p.locator("#verdicts tr").count() > 1
    assert "Models" in p.inner_text("main") and "{" not in p.inner_text("table.models")
    shot(p, f"{seed}-overview")

    p.goto(viewer.url + "/trials")
    total = int(p.inner_text("#count").split()[0])
    p.fill("#search", "answer")
    p.press("#search", "Enter")
    p.wait_for_url(re.compile(r"q=answer"))
    found = int(p.inner_text("#count").split()[0])
    assert 0 < found <= total and "search=answer" in p.inner_text("#count")
    previews = p.eval_on_selector_all("td.preview", "tds => tds.map(t => t.textContent)")
    assert previews and all(x for x in previews)
    assert p.get_attribute("#csv", "href")
    shot(p, f"{seed}-trials-search")

    # keyboard: the search box, then the first filter, are reachable by Tab
    p.focus("#search")
    p.keyboard.press("Tab")
    assert p.evaluate("document.activeElement.tagName") in ("SELECT", "INPUT", "BUTTON")

    if seed == "seed-001":
        p.goto(viewer.url + "/trials?judge=correct+%28unanimous%29")
        p.click("a.trial-link >> nth=0")
        p.wait_for_selector("#judge")
        assert p.inner_text("#judge-decision") == "correct"
        assert p.locator("#steps .call").count() >= 1
        assert p.locator("#steps pre.step-reply").count() >= 1
        shot(p, f"{seed}-judged-trial")
        p.click("#item-link")
        p.wait_for_selector("#item-trials")
        if p.locator("#item-steps").count():
            assert p.locator("#item-steps .call").count() >= 1
        shot(p, f"{seed}-item-steps")
    else:
        p.goto(viewer.url + "/trials")
        p.click("#trials a[href^='/item/'] >> nth=0")
        p.wait_for_selector("#item-trials")
        variants = set(p.eval_on_selector_all("td.variant", "tds => tds.map(t => t.textContent)"))
        keys = set(p.eval_on_selector_all("td.key", "tds => tds.map(t => t.textContent)"))
        assert len(variants) > 1 and len(keys) > 1  # each variant its own (remapped) key
        shot(p, f"{seed}-item-variants")

    p.goto(viewer.url + "/")
    p.click("#diff-link")
    p.wait_for_selector("#diff")
    assert int(p.inner_text("#diff-count").split()[0]) > 0
    assert p.locator("#diff tr.replace, #diff tr.insert, #diff tr.delete").count() > 0
    shot(p, f"{seed}-arm-diff")

    p.goto(viewer.url + "/plots")
    drawn = p.eval_on_selector_all("section.plot img", "is => is.map(i => i.src)")
    assert len(drawn) >= 4, drawn
    for n in range(len(drawn)):
        assert loaded(p, f"section.plot img >> nth={n}")
    shot(p, f"{seed}-plots")
    for name in ("accuracy", "factorial", "position", "phenotype", "flips", "forest"):
        if p.locator(f"#plot-{name} img").count():
            p.locator(f"#plot-{name}").screenshot(path=str(ARTEFACTS / f"{seed}-plot-{name}.png"))
