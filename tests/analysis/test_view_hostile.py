"""`ledger view` pointed at a hostile archive or reached from a hostile page (issue 32).

Each attack is a named test: a request "image" that is HTML or JavaScript (the archive claims
``text/html``), a real image under a false claim, a foreign ``Host`` header (DNS rebinding), a
page's script policy, a blob that is a named pipe, an events line nested past the parser's
depth, an events line past the envelope limit. The archive is the session's simulated one
(``conftest.simulated_archive``), copied and changed; the viewer indexes a changed archive
(its verification, in the background, fails), so every attack reaches the code that serves it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from analysis import AnalysisError
from analysis.view._app import host_name, image_media_type, make_app
from analysis.view._viewer import BundleResult, open_viewer, write_bundle

PAYLOAD = (
    b"<!doctype html><title>VERIFIED</title><h1>VERIFIED: every check PASSED</h1>"
    b"<script src='/image/SELF/1'></script>"
)


def with_request_image(
    archive: Path, target: Path, payload: bytes, media: str, nth: int = 0
) -> str:
    """A copy of ``archive`` at ``target`` whose ``nth`` request's image is ``payload``.

    The request blob is rewritten (claiming ``media``) and stored under its new SHA-256, and
    the ``nth`` ``trial.requested`` line is made to name it (its signature no longer holds: the
    verifier would say so; the viewer indexes it all the same). ``target`` may already be
    such a copy. Returns the new blob's name.
    """
    if not target.exists():
        shutil.copytree(archive, target)
    events = target / "ledger" / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    index, old = [
        (i, json.loads(line)["envelope"]["blobs"]["request"])
        for i, line in enumerate(lines)
        if json.loads(line)["envelope"]["kind"] == "trial.requested"
    ][nth]
    body = json.loads((target / "blobs" / old).read_bytes())
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    image = next(b for b in blocks if b.get("type") == "image")
    image["source"] = {
        "type": "base64",
        "media_type": media,
        "data": base64.b64encode(payload).decode(),
    }
    raw = json.dumps(body).encode()
    new = hashlib.sha256(raw).hexdigest()
    (target / "blobs" / new).write_bytes(raw)
    lines[index] = lines[index].replace(old.encode(), new.encode())
    events.write_bytes(b"".join(lines))
    return new


def client(viewer: Any, host: str = "127.0.0.1") -> TestClient:
    return TestClient(make_app(viewer), base_url=f"http://{host}")


@pytest.mark.parametrize(
    ("payload", "claimed"),
    [
        (PAYLOAD, "text/html"),
        (b"document.title = 'PWNED';", "text/javascript"),
        (PAYLOAD, "image/png"),  # HTML under an image's name: the bytes decide, not the claim
        (b"<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'/>", "image/svg+xml"),
    ],
    ids=["html", "javascript", "html-claimed-png", "svg-with-script"],
)
def test_a_request_image_that_is_not_an_image_is_never_served(
    simulated_archive: Path, tmp_path: Path, payload: bytes, claimed: str
) -> None:
    sha = with_request_image(simulated_archive, tmp_path / "hostile", payload, claimed)
    viewer = open_viewer(tmp_path / "hostile", verify=False)
    try:
        answer = client(viewer).get(f"/image/{sha}/0")
        assert answer.status_code == 400
        assert answer.headers["content-type"].startswith("text/html")  # the viewer's own page
        assert "is not a PNG, JPEG, GIF or WebP image" in answer.text
        assert claimed[:40] in answer.text
        assert payload.decode() not in answer.text  # autoescaped, never echoed raw
    finally:
        viewer.index.close()


def test_a_real_image_under_a_false_claim_is_served_as_what_it_is(
    simulated_archive: Path, tmp_path: Path
) -> None:
    png = next((simulated_archive / "stimuli").glob("*.png")).read_bytes()
    sha = with_request_image(simulated_archive, tmp_path / "claim", png, "text/html")
    viewer = open_viewer(tmp_path / "claim", verify=False)
    try:
        answer = client(viewer).get(f"/image/{sha}/0")
        assert answer.status_code == 200 and answer.content == png
        assert answer.headers["content-type"] == "image/png"
        assert answer.headers["x-content-type-options"] == "nosniff"
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "sandbox" in policy
    finally:
        viewer.index.close()


def test_image_media_type_reads_the_bytes() -> None:
    assert image_media_type(b"\x89PNG\r\n\x1a\n....") == "image/png"
    assert image_media_type(b"\xff\xd8\xff\xe0") == "image/jpeg"
    assert image_media_type(b"GIF89a...") == "image/gif"
    assert image_media_type(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    for hostile in (b"", b"<html>", b"RIFF\x00\x00\x00\x00AVI ", b" \x89PNG\r\n\x1a\n"):
        assert image_media_type(hostile) is None


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8765", "127.0.0.1.evil.example", "[::2]:8765", ""]
)
def test_a_foreign_host_gets_400(simulated_archive: Path, host: str) -> None:
    viewer = open_viewer(simulated_archive, verify=False)
    try:
        c = client(viewer)
        for path in ("/", "/trials?format=json", "/api/status", "/static/view.js"):
            answer = c.get(path, headers={"Host": host})
            assert answer.status_code == 400, (host, path)
            assert "DNS rebinding" in answer.text and answer.headers["content-type"].startswith(
                "text/plain"
            )
            assert "arm" not in answer.text.lower().replace("warn", "")
    finally:
        viewer.index.close()


@pytest.mark.parametrize("host", ["127.0.0.1:8765", "localhost", "LOCALHOST:80", "[::1]:8765"])
def test_the_loopback_names_are_answered(simulated_archive: Path, host: str) -> None:
    viewer = open_viewer(simulated_archive, verify=False)
    try:
        assert client(viewer).get("/", headers={"Host": host}).status_code == 200
    finally:
        viewer.index.close()


def test_host_name_strips_the_port() -> None:
    assert host_name("127.0.0.1:8765") == "127.0.0.1"
    assert host_name("[::1]:8765") == "::1"
    assert host_name("LocalHost") == "localhost"
    assert host_name("::1") == "::1"


def test_a_public_viewer_answers_any_host(simulated_archive: Path) -> None:
    viewer = open_viewer(simulated_archive, verify=False)
    try:
        c = TestClient(make_app(viewer, None), base_url="http://study.example.org")
        assert c.get("/").status_code == 200
    finally:
        viewer.index.close()


def test_a_page_runs_only_its_own_nonced_script(simulated_archive: Path) -> None:
    study = simulated_archive.parent / "study"  # live: the page carries view.js
    viewer = open_viewer(study, verify=False)
    try:
        c = client(viewer)
        first, second = c.get("/"), c.get("/")
        policy = first.headers["content-security-policy"]
        nonce = policy.split("'nonce-", 1)[1].split("'", 1)[0]
        assert "script-src 'nonce-" in policy and "script-src 'self'" not in policy
        assert f'nonce="{nonce}"' in first.text and "view.js" in first.text
        assert nonce not in second.headers["content-security-policy"]  # fresh per response
    finally:
        viewer.index.close()


def test_a_blob_that_is_a_named_pipe_is_refused_not_waited_on(
    simulated_archive: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "fifo"
    shutil.copytree(simulated_archive, copy)
    line = next(
        json.loads(raw)["envelope"]
        for raw in (copy / "ledger" / "events.jsonl").read_bytes().splitlines()
        if json.loads(raw)["envelope"]["kind"] == "trial.responded"
    )
    blob = copy / "blobs" / next(iter(line["blobs"].values()))
    blob.unlink()
    os.mkfifo(blob)
    outcome: list[BundleResult | BaseException] = []

    def bundle() -> None:
        try:
            outcome.append(write_bundle(copy, tmp_path / "site"))
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=bundle, daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():  # unblock the reader so the test process can end
        with open(blob, "wb"):
            pass
        pytest.fail("ledger view --bundle waited on a named pipe")
    # the bundle ends: the verification FAILED, and the trial page says why the body is missing
    result = outcome[0]
    assert result is not None and not isinstance(result, BaseException), outcome
    assert result.verification == "failed"
    pages = [p.read_text("utf-8") for p in (tmp_path / "site").rglob("*.html")]
    assert any(blob.name in page and "not a regular file" in page for page in pages)


def test_an_events_line_nested_too_deep_is_a_bad_line(
    simulated_archive: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "deep"
    shutil.copytree(simulated_archive, copy)
    events = copy / "ledger" / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    lines.insert(3, b'{"envelope":' + b"[" * 200_000 + b"]" * 200_000 + b"}\n")
    events.write_bytes(b"".join(lines))
    with pytest.raises(AnalysisError, match=r"line 4 is not an event \(arrays and objects nested"):
        open_viewer(copy, verify=False)
    with pytest.raises(AnalysisError, match="line 4 is not an event"):
        write_bundle(copy, tmp_path / "site")


def test_an_events_line_past_the_envelope_limit_is_refused_unread(
    simulated_archive: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "long"
    shutil.copytree(simulated_archive, copy)
    events = copy / "ledger" / "events.jsonl"
    with events.open("ab") as handle:
        handle.write(b'{"envelope":"' + b"x" * (3 << 20) + b'"}\n')
    with pytest.raises(AnalysisError, match=r"line \d+ is longer than 1,049,600 bytes"):
        open_viewer(copy, verify=False)
