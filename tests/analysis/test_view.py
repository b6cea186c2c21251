"""`ledger view` over HTTP (Starlette's TestClient and a real uvicorn subprocess), issue 21.

Blinding is checked on a scored, not unblinded text study from ``docs/study-spec.md`` (arms
``direct``, ``cot``, ``bare``: names a page cannot hold by chance): every page, filter and JSON
document is crawled and searched for the real arm names, trial ids, request hashes and arm
prompt texts. Bad input, each a named test: a path that is neither study nor archive, a port in
use, a tampered archive, a response with ``<script>``, markdown and terminal escapes, and a
study viewed while ``ledger run`` writes it.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlparse

import httpx
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from analysis.view._app import Viewer, make_app
from analysis.view._index import FILTERS
from analysis.view._viewer import DEFAULT_PORT, PortInUseError, bind, open_viewer, write_bundle
from ledger import Ledger
from ledger.cli import main
from tests.e2e.test_text_studies import MC, write_example

# end-to-end studies, servers and a live run: the slow set (.ci/run runs it), keeping the
# README's test command within its budget
pytestmark = pytest.mark.slow

HOSTILE = (
    "<script>alert('x')</script> **bold** # Heading\n"
    "[a link](javascript:alert(1)) \x1b[31mRED\x1b[0m <img src=x onerror=alert(2)>"
)


def run(*args: str | Path) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, (args, result.output)
    return result.output


def client(viewer: Viewer) -> TestClient:
    return TestClient(make_app(viewer), base_url="http://127.0.0.1")


def wait_verified(viewer: Viewer, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while viewer.verification.state == "running":
        assert time.monotonic() < deadline, "the background verification did not finish"
        time.sleep(0.05)
    return viewer.verification.state


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.selects: dict[str, list[str]] = {}
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for name in ("href", "src"):
            if a.get(name):
                self.links.append(str(a[name]))
        if tag == "select":
            self._select = a.get("name")
            self.selects[str(self._select)] = []
        if tag == "option" and self._select is not None and a.get("value"):
            self.selects[self._select].append(str(a["value"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None


def parse(html: str) -> _Links:
    p = _Links()
    p.feed(html)
    return p


# ---------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMPT_LEDGER_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def blind_study(tmp_path_factory: pytest.TempPathFactory, home: Path) -> Path:
    """The text multiple-choice study of docs/study-spec.md: locked, run, scored, NOT unblinded."""
    from ledger import SigningKey

    key = home / "owner.key"
    SigningKey.generate("view-test.example/owner").save(key)
    root = write_example(tmp_path_factory.mktemp("blind") / "study", MC)
    run("lock", root, "--key", key)
    run("run", root, "--backend", "simulated", "--key", key)
    run("score", root, "--key", key)
    return root


@pytest.fixture(scope="module")
def hostile_study(
    tmp_path_factory: pytest.TempPathFactory, home: Path, study_template: Path
) -> Path:
    """A tumbling-E study answered over real HTTP by a fake Messages server with hostile text."""
    from fake_messages import FakeMessagesServer, default_responder
    from helpers import make_study, study_key

    from analysis._scoring import score_study
    from runner._backends import AnthropicBackend
    from runner._execute import RunOptions, run_study

    root = make_study(
        tmp_path_factory.mktemp("hostile") / "study", replicates=1, template=study_template
    )

    def responder(body: dict[str, object]) -> str:
        text = json.dumps(body, sort_keys=True)
        return HOSTILE if "uniform-up" in text or len(text) % 3 == 0 else default_responder(body)

    with FakeMessagesServer(latency_ms=0, responder=responder) as server:
        run_study(
            root,
            study_key(),
            AnthropicBackend(api_key="test", base_url=server.base_url),
            RunOptions(concurrency=4, backoff_base=0.01, backoff_max=0.05),
        )
    score_study(root, study_key())
    return root


def secrets_of(study: Path) -> dict[str, list[str]]:
    """What blinding hides, read from the ledger itself: arms, trial ids, request hashes."""
    with Ledger.open(study / "ledger.db", readonly=True) as log:
        requested = list(log.events("trial.requested"))
        [locked] = list(log.events("protocol.locked"))
        texts = [log.blob(e.blobs["request"]) for e in requested[:3]]
    arms = sorted(locked.body["arms"])
    return {
        "arms": arms,
        "trials": sorted({e.body["trial"] for e in requested}),
        "requests": sorted({e.body["request_sha256"] for e in requested}),
        "request_texts": [t.decode() for t in texts],
    }


# ---------------------------------------------------------------------- blinding


def crawl(c: TestClient) -> dict[str, str]:
    """Every page reachable from the overview and the table (with every filter choice)."""
    seen: dict[str, str] = {}
    queue = ["/", "/trials", "/api/status", "/trials?format=json", "/plots", "/trials?format=csv"]
    # issue 38: search results (and their CSV) over the responses' own words
    for word in ("answer", "the", "A", '"the answer"'):
        queue += [f"/trials?q={word}", f"/trials?q={word}&format=csv"]
    events = c.get("/api/status").json()["events"]
    queue += [f"/proof/{seq}" for seq in range(events)]  # every event, linked or not
    first = c.get("/trials").text
    for name, values in parse(first).selects.items():
        for value in values:
            queue.append(f"/trials?{name}={value}")
            queue.append(f"/trials?{name}={value}&format=json")
    while queue:
        url = queue.pop()
        if url in seen:
            continue
        response = c.get(url)
        assert response.status_code == 200, (url, response.text[:300])
        kind = response.headers["content-type"]
        shown = any(t in kind for t in ("text", "json", "svg", "csv"))
        seen[url] = response.text if shown else ""
        if "text/html" in kind:
            for link in parse(response.text).links:
                target = urljoin(url, link)
                parsed = urlparse(target)
                if parsed.netloc in ("", "testserver") and not parsed.path.startswith("/static"):
                    queue.append(parsed.path + (f"?{parsed.query}" if parsed.query else ""))
    return seen


def test_blinding_no_page_of_a_scored_blind_study_links_a_trial_to_its_arm(
    blind_study: Path,
) -> None:
    secrets = secrets_of(blind_study)
    assert secrets["arms"] == ["bare", "cot", "direct"] and len(secrets["trials"]) == 72
    viewer = open_viewer(blind_study)
    try:
        assert viewer.blind
        pages = crawl(client(viewer))
    finally:
        viewer.index.close()
    trial_pages = [u for u in pages if u.startswith("/trial/")]
    assert len(trial_pages) == 72  # every trial reached (paging, filters)
    # issue 38: the crawl covers the plots (SVG, text kept as text), search results and CSVs
    plots = [u for u in pages if u.startswith("/plot/") and u.endswith(".svg")]
    assert plots and all("<svg" in pages[u] for u in plots), plots
    assert any("<text" in pages[u] for u in plots)  # searchable labels, not outlines
    assert any(u.startswith("/trials?q=") and "format=csv" in u for u in pages)
    assert any(u.startswith("/item/") for u in pages)
    csv_header = pages["/trials?format=csv"].splitlines()[0].split(",")
    assert "arm_code" in csv_header and not {"arm", "trial", "variant"} & set(csv_header)
    assert any(u.startswith("/compare") for u in pages)
    assert any(u.startswith("/proof/") for u in pages)
    arm_word = re.compile(r"\b(" + "|".join(secrets["arms"]) + r")\b")
    prompt_lines = {
        line
        for text in secrets["request_texts"]
        for line in re.findall(r'"text": ?"([^"]{25,})', text)
    }
    assert prompt_lines
    for url, text in pages.items():
        for trial in secrets["trials"]:
            assert trial not in text, f"{url} shows trial id {trial}"
        for sha in secrets["requests"]:
            assert sha not in text, f"{url} shows request blob {sha}"
        for line in prompt_lines:
            assert line[:40] not in text, f"{url} shows the request text {line[:40]!r}"
        # the study's id and title are not arms
        shown = text.replace("mc-cot", "").replace("against direct answers", "")
        if url.startswith("/proof/") and re.search(r"<h1>Event \d+: (artifact|protocol)\.", text):
            shown = re.sub(r"<pre>.*?</pre>", "", shown, flags=re.S)  # a locked file's path
        if url == "/":  # the protocol as locked may list the arms, never tied to trials
            shown = re.sub(r'<table class="arms">.*?</table>', "", shown, flags=re.S)
            shown = re.sub(r'<table class="hypotheses">.*?</table>', "", shown, flags=re.S)
            shown = re.sub(r"<h3>Locked files</h3>.*?</table>", "", shown, flags=re.S)
        found = arm_word.search(shown)
        context = shown[max(0, found.start() - 200) : found.end() + 50] if found else ""
        assert not found, f"{url} names an arm: {context}"
    # the arm codes are shown (the scorer's view) and used by the comparison
    codes = {json.loads(pages["/trials?format=json"])["rows"][0]["arm_code"]}
    assert codes and None not in codes


def test_blinding_the_arm_filter_and_sort_are_refused_until_the_reveal(blind_study: Path) -> None:
    viewer = open_viewer(blind_study, verify=False)
    try:
        c = client(viewer)
        for url in (
            "/trials?arm=direct",
            "/trials?arm=cot&format=json",
            "/trials?sort=arm",
            "/trials?sort=position",
        ):
            response = c.get(url)
            assert response.status_code == 403, url
            assert "blinding.revealed" in response.text
            assert "direct|" not in response.text
        trial = c.get("/trial/" + str(viewer.index.query("SELECT MIN(h) FROM trials")[0][0]))
        assert "Hidden until" in trial.text and 'id="arm"' not in trial.text
        sha = viewer.index.query("SELECT request_sha FROM attempts LIMIT 1")[0][0]
        assert c.get(f"/image/{sha}/0").status_code == 404
    finally:
        viewer.index.close()


def test_blinding_a_verifier_reason_naming_a_trial_is_redacted_while_blind(
    blind_study: Path,
) -> None:
    viewer = open_viewer(blind_study, verify=False)
    try:
        h, trial = viewer.index.query("SELECT h, trial FROM trials ORDER BY h LIMIT 1")[0]
        reason = f"trial {trial!r} has no final outcome (seq {h})"
        v = viewer.verification
        v.state, v.error = "failed", None
        v.checks = [
            {"name": "outcomes", "status": "FAIL", "reason": reason, "seq": h, "where": trial}
        ]
        v.faults = {h: [f"outcomes: {reason}"]}
        c = client(viewer)
        for url in ("/", "/api/status", "/trials?format=json", f"/trial/{h}", "/trials"):
            text = c.get(url).text
            assert trial not in text, url
        assert "[a trial]" in c.get(f"/trial/{h}").text
    finally:
        viewer.index.close()


def test_unblinded_study_shows_arms_trial_ids_and_requests(simulated_archive: Path) -> None:
    study = simulated_archive.parent / "study"
    viewer = open_viewer(study, verify=False)
    try:
        assert not viewer.blind
        c = client(viewer)
        rows = c.get("/trials?arm=B&format=json").json()["rows"]
        assert rows and {r["arm"] for r in rows} == {"B"} and rows[0]["trial"].startswith("B|")
        page = c.get(f"/trial/{rows[0]['h']}").text
        assert rows[0]["trial"] in page and "Request as sent" in page
        links = parse(page).links
        image = next(link for link in links if link.startswith("/image/"))
        png = c.get(image)
        assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
        stimulus = next(link for link in links if link.startswith("/stimulus/"))
        assert c.get(stimulus).content == png.content  # the request carries the locked stimulus
    finally:
        viewer.index.close()


# ---------------------------------------------------------------------- pages and filters


def test_filters_are_data_driven_and_select_server_side(simulated_archive: Path) -> None:
    viewer = open_viewer(simulated_archive, verify=False)
    try:
        c = client(viewer)
        everything = c.get("/trials?format=json").json()
        assert everything["total"] == 70 and everything["pages"] == 2
        form = parse(c.get("/trials").text).selects
        # a filter with no values in this study (no variants, no judges) is not offered
        offered = [f for f in FILTERS if f.param not in ("variant", "judge")]
        assert [f.param for f in FILTERS if f.param in form] == [f.param for f in offered]
        for f in offered:
            for value in form[f.param]:
                got = c.get(f"/trials?{f.param}={value}&format=json").json()
                assert got["total"] > 0
                expected = viewer.index.query(
                    f"SELECT COUNT(*) FROM trials WHERE {f.column}=?", (value,)
                )[0][0]
                assert got["total"] == expected
                assert all(
                    str(r[f.column if f.column != "arm_code" else "arm_code"]) == value
                    for r in got["rows"]
                )
        both = c.get("/trials?arm=A&stimulus=uniform-up&format=json").json()
        assert both["total"] == 2 and {r["rep"] for r in both["rows"]} == {1, 2}
        assert c.get("/trials?sort=nonsense").status_code == 400
        second = c.get("/trials?page=2&format=json").json()
        assert len(second["rows"]) == 20
    finally:
        viewer.index.close()


def test_comparison_puts_the_same_item_side_by_side_across_arms(simulated_archive: Path) -> None:
    viewer = open_viewer(simulated_archive, verify=False)
    try:
        page = client(viewer).get("/compare?stimulus=mixed-1&rep=2").text
        assert "across arms" in page
        assert page.count('class="column"') == 5  # arms A to E
        for arm in "ABCDE":
            assert f"arm {arm} <small>" in page
        assert "Answers item by item" in page
    finally:
        viewer.index.close()


def test_inclusion_proof_pages_check(simulated_archive: Path) -> None:
    viewer = open_viewer(simulated_archive, verify=False)
    try:
        c = client(viewer)
        for seq in (0, 17, 100, viewer.index.next_seq - 1):
            page = c.get(f"/proof/{seq}").text
            assert "the proof checks" in page, seq
        # the archive's root equals the root the study's ledger computes
        with Ledger.open(simulated_archive.parent / "study" / "ledger.db", readonly=True) as log:
            root = log.root(viewer.index.next_seq).hex()
        assert root in c.get("/proof/5").text
        assert c.get("/proof/999999").status_code == 404
    finally:
        viewer.index.close()


def test_bundle_is_a_static_site_whose_every_link_resolves(
    simulated_archive: Path, tmp_path: Path
) -> None:
    result = write_bundle(simulated_archive, tmp_path / "site")
    assert result.verification == "passed" and result.trials == 70
    index = (tmp_path / "site" / "index.html").read_text()
    assert "PASSED" in index and f"python -m verify {simulated_archive}" in index
    report = json.loads((tmp_path / "site" / "verification.json").read_text())
    assert report["state"] == "passed" and report["checks"]
    pages = list((tmp_path / "site").glob("*.html"))
    assert len([p for p in pages if p.name.startswith("trial-")]) == 70
    for page in pages:
        text = page.read_text()
        assert "<script" not in text
        for link in parse(text).links:
            target = link.split("#")[0]
            if target:
                assert (tmp_path / "site" / target).is_file(), (page.name, link)
    with pytest.raises(Exception, match="not an empty folder"):
        write_bundle(simulated_archive, tmp_path / "site")


# ---------------------------------------------------------------------- bad input


def test_bad_input_a_path_that_is_neither_study_nor_archive(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("hello")
    for path, problem in (
        (tmp_path / "empty", "holds neither ledger.db"),
        (tmp_path / "file.txt", "is a file"),
        (tmp_path / "missing", "does not exist"),
    ):
        result = CliRunner().invoke(main, ["view", str(path)])
        assert result.exit_code != 0
        assert str(path) in result.output and problem in result.output
        bundle = CliRunner().invoke(main, ["view", str(path), "--bundle", str(tmp_path / "b")])
        assert bundle.exit_code != 0 and problem in bundle.output
        assert not (tmp_path / "b").exists()


def test_bad_input_a_port_in_use(simulated_archive: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        with pytest.raises(PortInUseError, match=f"port {port} on 127.0.0.1 is in use"):
            bind("127.0.0.1", port)
        result = CliRunner().invoke(main, ["view", str(simulated_archive), "--port", str(port)])
        assert result.exit_code != 0 and f"port {port} on 127.0.0.1 is in use" in result.output
    finally:
        taken.close()
    default = socket.socket()
    try:
        default.bind(("127.0.0.1", DEFAULT_PORT))
        default.listen(1)
    except OSError:
        pass  # someone else holds it: the case under test all the same
    try:
        sock, note = bind("127.0.0.1", None)
        try:
            assert sock.getsockname()[1] != DEFAULT_PORT
            assert note == (
                f"port {DEFAULT_PORT} is in use; serving on port {sock.getsockname()[1]} instead"
            )
        finally:
            sock.close()
    finally:
        default.close()


def test_bad_input_a_non_local_host_needs_public(simulated_archive: Path) -> None:
    result = CliRunner().invoke(main, ["view", str(simulated_archive), "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "--public" in result.output


def test_bad_input_a_tampered_archive_is_browsable_with_verification_failed(
    simulated_archive: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(simulated_archive, copy)
    events = copy / "ledger" / "events.jsonl"
    lines = events.read_bytes().split(b"\n")
    at = next(
        i
        for i, line in enumerate(lines)
        if b'"kind":"trial.scored"' in line and b'"n_correct":61' in line
    )
    lines[at] = lines[at].replace(b'"n_correct":61', b'"n_correct":60')
    events.write_bytes(b"\n".join(lines))
    viewer = open_viewer(copy)
    try:
        assert wait_verified(viewer) == "failed"
        assert at in viewer.verification.faults
        c = client(viewer)
        overview = c.get("/").text
        assert 'id="verification-failed"' in overview and ">FAILED<" in overview
        assert f'href="/proof/{at}"' in overview
        rows = (
            c.get("/trials?format=json").json()["rows"]
            + c.get("/trials?page=2&format=json").json()["rows"]
        )
        marked = {r["scored_seq"]: r for r in rows if r["faults"]}
        # the changed event (its signature) and the next one (its prev link no longer holds)
        assert at in marked and set(marked) <= {at, at + 1}
        page = c.get(f"/trial/{marked[at]['h']}").text  # still browsable
        assert "Verification FAILED at seq" in page and "signature" in page
        assert "60 of 61 items correct" in page
    finally:
        viewer.index.close()


def test_bad_input_a_response_with_script_markdown_and_terminal_escapes_is_text(
    hostile_study: Path,
) -> None:
    viewer = open_viewer(hostile_study, verify=False)
    try:
        c = client(viewer)
        # the hostile replies are unparseable (which trials got one depends on the bodies)
        rows = c.get("/trials?parse=unparseable&format=json").json()["rows"]
        assert rows
        page = c.get(f"/trial/{rows[0]['h']}")
        text = page.text
        assert "<script>alert" not in text and "<img src=x" not in text
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in text
        assert "**bold** # Heading" in text and "\x1b" not in text
        assert "\u241b[31mRED\u241b[0m" in text  # ESC shown as its control picture
        assert "script-src 'nonce-" in page.headers["content-security-policy"]
        compare = c.get(f"/compare?stimulus={rows[0]['stimulus']}&rep={rows[0]['rep']}").text
        assert "<script>alert" not in compare and "&lt;script&gt;" in compare
        parsed = c.get("/trials?parse=unparseable&format=json").json()
        assert parsed["total"] >= 1
    finally:
        viewer.index.close()


def test_bad_input_viewing_while_ledger_run_writes(
    tmp_path: Path, study_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A viewer (a real server, polled) and `ledger run` on one study: no lock contention."""
    from helpers import make_study

    monkeypatch.setenv("PROMPT_LEDGER_HOME", str(tmp_path / "home"))
    study = make_study(tmp_path / "study", replicates=1, template=study_template)
    viewer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from ledger.cli import main; main()",
            "view",
            str(study),
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert viewer.stdout is not None
        line = viewer.stdout.readline()
        url = re.search(r"http://[\d.]+:\d+/", line)
        assert url, line + (viewer.stderr.read() if viewer.stderr else "")
        base = url.group(0)
        with httpx.Client(base_url=base, timeout=30) as http:
            before = http.get("/api/status").json()
            assert before["trials"] == 0
            writer = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from ledger.cli import main; main()",
                    "run",
                    str(study),
                    "--backend",
                    "simulated",
                    "--concurrency",
                    "4",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            seen = set()
            while writer.poll() is None:
                status = http.get("/api/status").json()
                seen.add(status["trials"])
                assert http.get("/trials").status_code == 200
            out = writer.communicate()[0]
            assert writer.returncode == 0, out
            assert "locked" not in out.lower() or "database is locked" not in out.lower()
            time.sleep(0.6)  # the viewer re-reads at most twice a second
            after = http.get("/api/status").json()
            assert after["trials"] == 35 and after["responded"] == 35
            page = http.get("/trials?format=json").json()
            assert page["total"] == 35
        assert len(seen) >= 1
    finally:
        viewer.terminate()
        _, err = viewer.communicate(timeout=30)
    assert "Traceback" not in err and "locked" not in err, err
