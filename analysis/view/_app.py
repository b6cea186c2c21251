"""The viewer's pages: what each shows, computed from the index, and the Starlette routes.

:class:`Viewer` turns the index (:mod:`analysis.view._index`) into the context of each page:
overview, trial table, trial, comparison, inclusion proof. :func:`make_app` serves them with
Starlette (server-rendered Jinja2 templates, autoescaped; one small local script for live
mode; no CDN), and :mod:`analysis.view._bundle` writes the same pages as static files.

Blinding (``docs/viewer.md``). Until ``blinding.revealed`` is indexed, every page, filter, URL
and JSON document shows a trial by its handle (its first ``trial.requested`` seq), its arm code
(from ``trial.scored``, once scored), model, stimulus, replicate and responses, never its arm,
its trial id, its schedule position or its request (whose prompt text names the arm): those
values are never put in a page's context (:meth:`Viewer.row`), and the arm filter and sorts are
refused. The protocol page lists the arms as locked, never tied to trials.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from analysis._errors import AnalysisError
from analysis._identical import IDENTICAL_ID, identical_banner
from analysis._parse import ParseError, response_text
from analysis._scoring import unwrap_batch
from analysis.view._index import FILTERS, SORTS, ViewIndex
from analysis.view._plots import PLOTS, PlotData, render_svg
from ledger import Ledger, LedgerError, RemoteLedger, RemoteLocation, is_http_url

__all__ = [
    "BlindingError",
    "Links",
    "ServerLinks",
    "Verification",
    "Viewer",
    "make_app",
    "verify_command",
]

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
PER_PAGE = 50
MAX_PER_PAGE = 500
ITEM_TRIALS = 200
"""Trials the item page lists (the trial table, filtered by the item, has every one)."""
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""The names a viewer bound to the loopback answers to (``Host`` header, port aside)."""


def image_media_type(data: bytes) -> str | None:
    """The media type of ``data`` read from its first bytes: PNG, JPEG, GIF or WebP, else None.

    The viewer serves an image only as the type its bytes show, never as the type an archive's
    request claims: a "picture" that is HTML or JavaScript is not served at all.
    """
    for magic, media in _IMAGE_MAGIC:
        if data.startswith(magic):
            return media
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def host_name(header: str) -> str:
    """The host of a ``Host`` header without its port, lower case (``[::1]:8765`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


# Event kinds whose body names no trial: their envelope is shown on the proof page while the
# study is blind (a trial event names its arm and trial id; a preflight names its trial).
_OPEN_KINDS = frozenset(
    {
        "ledger.genesis",
        "key.added",
        "key.revoked",
        "artifact.locked",
        "protocol.locked",
        "protocol.amended",
        "run.started",
        "run.stopped",
        "scoring.sealed",
    }
)


# A trial id (arm|stimulus|rep or arm|model|item|rep) inside a message, e.g. a verifier reason.
_TRIAL_ID = re.compile(r"[^\s'\"|,;()]+\|[^\s'\"|,;()]+(?:\|[^\s'\"|,;()]+)?\|\d+")


class NotFound(AnalysisError):
    """A page asked for by an address that names nothing (shown as a 404 page)."""


class BlindingError(AnalysisError):
    """A request for something blinding hides (the arm filter or sort before the reveal)."""


def visible(text: Any) -> str:
    """``text`` with control characters (terminal escapes) shown as their Unicode pictures.

    ESC becomes U+241B (␛) and so on, so a response carrying ``\\x1b[31m`` reads as text;
    newlines and tabs stay.
    """
    if text is None:
        return ""
    out = []
    for ch in str(text):
        code = ord(ch)
        if (code < 32 and ch not in "\n\t") or code == 127:
            out.append(chr(0x2400 + code) if code < 32 else "\u2421")
        elif 0x80 <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "".join(out)


# ---------------------------------------------------------------------- links


class Links:
    """Where each page lives; the server and the static bundle differ only here."""

    live = False

    def home(self) -> str:
        """The overview."""
        raise NotImplementedError

    def trials(self, params: dict[str, str]) -> str:
        """The trial table with these query parameters."""
        raise NotImplementedError

    def trial(self, h: int) -> str:
        """One trial's page."""
        raise NotImplementedError

    def compare(self, stimulus: str, model: str | None, rep: int | None) -> str:
        """The comparison of one item across arms or codes."""
        raise NotImplementedError

    def proof(self, seq: int) -> str:
        """The inclusion proof of event ``seq``."""
        raise NotImplementedError

    def item(self, stimulus: str) -> str:
        """One item across arms, variants and models."""
        raise NotImplementedError

    def diff(self, a: str, b: str, stimulus: str | None) -> str | None:
        """Two arms' requests for one item side by side (None where there is no server)."""
        raise NotImplementedError

    def plots(self) -> str:
        """The plots page."""
        raise NotImplementedError

    def plot(self, name: str) -> str:
        """The SVG of one plot."""
        raise NotImplementedError

    def csv(self, params: dict[str, str]) -> str | None:
        """The CSV of a filtered trial table (None where there is no server)."""
        raise NotImplementedError

    def stimulus(self, name: str) -> str:
        """A locked stimulus file."""
        raise NotImplementedError

    def image(self, sha: str, n: int) -> str:
        """The ``n``-th image of a request blob."""
        raise NotImplementedError

    def static(self, name: str) -> str:
        """A file of ``static/``."""
        raise NotImplementedError


class ServerLinks(Links):
    """Links of the live server."""

    live = True

    def home(self) -> str:
        return "/"

    def trials(self, params: dict[str, str]) -> str:
        from urllib.parse import urlencode

        kept = {k: v for k, v in params.items() if v not in ("", None)}
        return "/trials" + ("?" + urlencode(kept) if kept else "")

    def trial(self, h: int) -> str:
        return f"/trial/{h}"

    def compare(self, stimulus: str, model: str | None, rep: int | None) -> str:
        from urllib.parse import urlencode

        params = {"stimulus": stimulus, "model": model or "", "rep": "" if rep is None else rep}
        return "/compare?" + urlencode({k: v for k, v in params.items() if v != ""})

    def proof(self, seq: int) -> str:
        return f"/proof/{seq}"

    def item(self, stimulus: str) -> str:
        from urllib.parse import quote

        return f"/item/{quote(stimulus, safe='')}"

    def diff(self, a: str, b: str, stimulus: str | None) -> str | None:
        from urllib.parse import urlencode

        return "/diff?" + urlencode(
            {"a": a, "b": b, **({"stimulus": stimulus} if stimulus else {})}
        )

    def plots(self) -> str:
        return "/plots"

    def plot(self, name: str) -> str:
        return f"/plot/{name}.svg"

    def csv(self, params: dict[str, str]) -> str | None:
        return self.trials({**params, "format": "csv", "page": ""})

    def stimulus(self, name: str) -> str:
        from urllib.parse import quote

        return f"/stimulus/{quote(name, safe='')}"

    def image(self, sha: str, n: int) -> str:
        return f"/image/{sha}/{n}"

    def static(self, name: str) -> str:
        return f"/static/{name}"


# ---------------------------------------------------------------------- verification


def verify_target(path: Path) -> str:
    """What ``python -m verify`` checks for ``path``: a study's ledger, or the archive itself.

    A study folder's ledger is where :func:`runner._lock.ledger_path` says: ``ledger.db``, or
    the PostgreSQL store (its URL, with ``?schema=``, never a password) that ``ledger.store``
    names.
    """
    from runner import layout, ledger_path

    return str(ledger_path(path)) if layout(path) == "study" else str(path)


def verify_command(path: Path) -> str:
    """The shell command that re-checks ``path`` (a study folder or archive) independently."""
    import shlex

    return f"python -m verify {shlex.quote(verify_target(path))}"


@dataclass
class Verification:
    """The verifier's verdict on the source, computed once in a background thread."""

    state: str = "running"  # running | passed | partial | failed | error
    checks: list[dict[str, Any]] = field(default_factory=list)
    faults: dict[int, list[str]] = field(default_factory=dict)  # seq -> reasons
    size: int | None = None
    seconds: float | None = None
    error: str | None = None
    command: str = ""
    _proc: Any = field(default=None, repr=False)

    def start(self, target: Path | str) -> threading.Thread:
        """Run ``python -m verify --json target`` from a daemon thread; return the thread.

        A separate process, so the verifier's work never holds this process's GIL while pages
        are served; :meth:`stop` ends it early.
        """
        import subprocess
        import sys

        def work() -> None:
            started = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="ledger-view-verify-") as tmp:
                try:
                    checked = _local_copy(str(target), Path(tmp))
                except LedgerError as exc:
                    self.error = f"cannot fetch the study from the service: {exc}"
                    self.state = "error"
                    return
                _verify_in_process(checked)
            self.seconds = time.perf_counter() - started

        def _verify_in_process(checked: str) -> None:
            err = ""
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "verify", "--json", checked],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                out, err = self._proc.communicate()
                report = json.loads(out)
                checks = report["checks"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                code = self._proc.returncode if self._proc is not None else None
                last = err.strip().splitlines()[-1:] if err else []
                self.error = (
                    f"python -m verify did not report (exit {code}; {last[0] if last else exc})"
                )
                self.state = "error"
                return
            self.checks = [c for c in checks if isinstance(c, dict)]
            for c in self.checks:
                if c.get("status") == "FAIL" and isinstance(c.get("seq"), int):
                    self.faults.setdefault(c["seq"], []).append(f"{c['name']}: {c['reason']}")
            self.size = report.get("size")
            self.state = "passed" if report.get("ok") else "failed"
            if self.state == "passed" and report.get("status") == "partial":
                self.state = "partial"  # a public archive: withheld data not re-derived

        thread = threading.Thread(target=work, name="ledger-view-verify", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """End a verification still running (when the viewer stops)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()

    def summary(self) -> dict[str, Any]:
        """A JSON-able summary (state, failures, the command that re-checks)."""
        return {
            "state": self.state,
            "size": self.size,
            "seconds": self.seconds,
            "error": self.error,
            "command": self.command,
            "failures": [c for c in self.checks if c["status"] == "FAIL"],
            "checks": self.checks,
        }


def _local_copy(target: str, tmp: Path) -> str:
    """``target`` itself, or for a study behind ``ledger serve`` a SQLite copy of what it serves.

    The verifier reads files and PostgreSQL; a remote ledger is fetched first (every envelope,
    signature, blob and checkpoint, each checked again: :meth:`ledger.RemoteLedger.copy_to`),
    as ``ledger report`` does.
    """
    if not is_http_url(target):
        return target
    with Ledger.open(RemoteLocation.parse(target), readonly=True) as log:
        if not isinstance(log, RemoteLedger):
            raise LedgerError(f"{target} is not a ledger behind `ledger serve`")
        return str(log.copy_to(tmp / "ledger.db"))


# ---------------------------------------------------------------------- the pages' data


def _request_turns(raw: bytes, sha: str) -> dict[str, Any]:
    """The system prompt, turns and parameters of a stored request body, for display."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return {"error": f"request blob {sha} is not JSON ({exc})", "turns": []}
    if not isinstance(body, dict):
        return {"error": f"request blob {sha} is not a JSON object", "turns": []}
    images = 0
    turns: list[dict[str, Any]] = []

    def parts(content: Any) -> list[dict[str, Any]]:
        nonlocal images
        if isinstance(content, str):
            return [{"type": "text", "text": content}]
        out: list[dict[str, Any]] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                out.append({"type": "text", "text": block.get("text", "")})
            elif kind in ("image", "image_url"):
                out.append({"type": "image", "n": images})
                images += 1
            else:
                out.append({"type": "other", "text": json.dumps(block)[:2000]})
        return out

    system = body.get("system")
    if system:
        turns.append({"role": "system", "parts": parts(system)})
    for message in body.get("messages", []) if isinstance(body.get("messages"), list) else []:
        if isinstance(message, dict):
            turns.append({"role": str(message.get("role")), "parts": parts(message.get("content"))})
    params = {k: v for k, v in body.items() if k not in ("system", "messages")}
    return {"error": None, "turns": turns, "params": params}


def request_images(raw: bytes) -> list[tuple[str, bytes]]:
    """(media type, bytes) of every image in a request body, in order (Anthropic or OpenAI)."""
    body = json.loads(raw.decode("utf-8"))
    found: list[tuple[str, bytes]] = []
    for message in body.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "image":
                src = block.get("source", {})
                found.append((str(src.get("media_type")), base64.b64decode(src.get("data", ""))))
            elif block.get("type") == "image_url":
                url = str(block.get("image_url", {}).get("url", ""))
                head, _, data = url.partition(",")
                media = head.removeprefix("data:").split(";")[0]
                found.append((media, base64.b64decode(data)))
    return found


class Viewer:
    """What each page shows, from one :class:`ViewIndex` and its :class:`Verification`."""

    def __init__(self, index: ViewIndex, verification: Verification) -> None:
        """Wrap an open index."""
        self.index = index
        self.verification = verification
        self._refreshed = 0.0
        self._memo: dict[str, tuple[int, Any]] = {}

    def memo(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, kept until the index reads a new event (an archive: for good)."""
        found = self._memo.get(name)
        if found is not None and found[0] == self.index.next_seq:
            return found[1]
        value = compute()
        if len(self._memo) > 1024:  # many distinct filters: start over
            self._memo.clear()
        self._memo[name] = (self.index.next_seq, value)
        return value

    def counts(self) -> dict[str, int]:
        """Trials sent, responded and scored (for ``/api/status`` and the live pages)."""

        def compute() -> dict[str, int]:
            row = self.index.query(
                "SELECT COUNT(*), SUM(status='responded'), SUM(scored_seq IS NOT NULL) FROM trials"
            )[0]
            return {"trials": row[0], "responded": row[1] or 0, "scored": row[2] or 0}

        result: dict[str, int] = self.memo("counts", compute)
        return result

    def refresh(self) -> None:
        """Read new events of a live study (at most twice a second; an archive never changes)."""
        if self.index.kind != "study":
            return
        now = time.monotonic()
        if now - self._refreshed >= 0.5:
            self._refreshed = now
            self.index.refresh()

    @property
    def blind(self) -> bool:
        """True until ``blinding.revealed``: the arms stay hidden."""
        return not self.index.revealed

    def common(self) -> dict[str, Any]:
        """What every page shows in its header."""
        protocol = self.index.protocol() or {}
        return {
            "study": protocol.get("study", ""),
            "title": protocol.get("title", ""),
            "source": str(self.index.path),
            "kind": self.index.kind,
            "blind": self.blind,
            "events": self.index.next_seq,
            "verification": self.verification_summary(),
            "simulated": any(b.get("simulated") for _, b, _ in self.index.singles("run.started")),
        }

    def redact(self, text: str) -> str:
        """``text`` with anything shaped like a trial id replaced while the study is blind."""
        return _TRIAL_ID.sub("[a trial]", text) if self.blind else text

    def verification_summary(self) -> dict[str, Any]:
        """The verification summary, its reasons redacted while blind (:meth:`redact`)."""
        summary = self.verification.summary()
        if self.blind:
            for key in ("checks", "failures"):
                summary[key] = [
                    {
                        **c,
                        "reason": self.redact(str(c.get("reason"))),
                        "where": self.redact(str(c.get("where") or "")) or None,
                    }
                    for c in summary[key]
                ]
        return summary

    def faulted(self, seqs: list[int | None]) -> list[str]:
        """The verifier's reasons for any of these seqs (redacted while blind)."""
        return [
            self.redact(f"seq {s}: {r}")
            for s in seqs
            if s is not None
            for r in self.verification.faults.get(s, [])
        ]

    def row(self, r: Any, *, faults: bool = True) -> dict[str, Any]:
        """A trial row as pages and JSON may show it (no arm, id or position while blind)."""
        out = {
            "h": r["h"],
            "arm_code": r["arm_code"],
            "model": r["model"],
            "stimulus": r["stimulus"],
            "rep": r["rep"],
            "status": r["status"],
            "attempts": r["attempts"],
            "parse": r["parse"],
            "n_items": r["n_items"],
            "n_correct": r["n_correct"],
            "correct": r["correct"],
            "judge": r["judge"],
            "response_seq": r["response_seq"],
            "scored_seq": r["scored_seq"],
            "predicted": r["predicted"],
            "key": r["key"],
            "preview": r["preview"],
            "faults": self.faulted(
                [
                    r["h"],
                    r["last_request_seq"],
                    r["outcome_seq"],
                    r["response_seq"],
                    r["scored_seq"],
                ]
            )
            if faults
            else [],
        }
        if not self.blind:
            out.update(
                {
                    "arm": r["arm"],
                    "trial": r["trial"],
                    "position": r["position"],
                    "variant": r["variant"],
                }
            )
        return out

    # ------------------------------------------------------------------ overview

    def overview(self) -> dict[str, Any]:
        """The overview: protocol as locked, progress, cost, verdicts, verification."""
        figures: dict[str, Any] = self.memo("overview", self._overview)
        forest = bool(figures["verdicts"]) and self.plot("forest")[0] is not None
        return {**self.common(), **figures, "forest": forest}

    def _overview(self) -> dict[str, Any]:
        idx = self.index
        protocol = idx.protocol() or {}
        arms = protocol.get("arms") if isinstance(protocol.get("arms"), dict) else {}
        assert isinstance(arms, dict)
        group = "arm" if not self.blind else "arm_code"
        progress = [
            dict(r)
            for r in idx.query(
                f"SELECT {group} AS grp, COUNT(*) AS attempted, "
                "SUM(status='responded') AS responded, SUM(status='given_up') AS given_up, "
                "SUM(status IN ('requested', 'retrying')) AS open, "
                "SUM(scored_seq IS NOT NULL) AS scored, "
                "SUM(n_correct) AS n_correct, SUM(n_items) AS n_items, SUM(cost) AS cost "
                f"FROM trials GROUP BY {group} ORDER BY {group}"
            )
        ]
        by_model = [
            dict(r)
            for r in idx.query(
                "SELECT model AS grp, COUNT(*) AS attempted, SUM(status='responded') AS responded, "
                "SUM(status='given_up') AS given_up, SUM(cost) AS cost FROM trials GROUP BY model"
            )
        ]
        totals = dict(
            idx.query(
                "SELECT COUNT(*) AS attempted, SUM(status='responded') AS responded, "
                "SUM(status='given_up') AS given_up, SUM(scored_seq IS NOT NULL) AS scored, "
                "SUM(cost) AS cost FROM trials"
            )[0]
        )
        scheduled = protocol.get("trials") if isinstance(protocol.get("trials"), int) else None
        totals["scheduled"] = scheduled
        totals["pending"] = None if scheduled is None else scheduled - (totals["attempted"] or 0)
        verdicts = []
        copies = None
        from analysis._result_text import estimate_text, p_text, rule_text

        for seq, body, _ in idx.singles("analysis.result"):
            values: dict[str, Any] = body.get("values") or {}
            if body.get("hypothesis"):
                verdicts.append(
                    {
                        "seq": seq,
                        "hypothesis": body.get("hypothesis"),
                        "test": body.get("test"),
                        "status": body.get("status"),
                        "verdict": body.get("verdict"),
                        "error": body.get("error"),
                        "reason": values.get("reason"),
                        "estimate": estimate_text(body),
                        "p": p_text(body),
                        "rule": rule_text(body),
                    }
                )
            elif body.get("id") == IDENTICAL_ID and not self.blind:  # analysis.md §3
                copies = {"seq": seq, "text": identical_banner(body)}
        posthoc = (
            []
            if self.blind
            else [_posthoc_row(seq, body) for seq, body, _ in idx.singles("analysis.posthoc")]
        )
        artifacts = [
            {
                "seq": seq,
                "path": b.get("path"),
                "role": b.get("role"),
                "sha256": b.get("sha256"),
                "amended": False,
            }
            for seq, b, _ in idx.singles("artifact.locked")
        ] + [
            {
                "seq": seq,
                "path": b.get("path"),
                "role": b.get("role"),
                "sha256": b.get("sha256"),
                "amended": True,
            }
            for seq, b, _ in idx.singles("protocol.amended")
        ]
        sessions = [
            {
                "seq": s,
                **{
                    k: b.get(k)
                    for k in ("backend", "model", "simulated", "concurrency", "trials", "pending")
                },
            }
            for s, b, _ in idx.singles("run.started")
        ]
        stopped = [
            {
                "seq": s,
                **{k: b.get(k) for k in ("reason", "responded", "given_up", "pending", "cost_usd")},
            }
            for s, b, _ in idx.singles("run.stopped")
        ]
        milestones: dict[str, int | None] = {}
        for k in ("scoring.sealed", "blinding.revealed", "export.created"):
            found = idx.singles(k)
            milestones[k] = found[0][0] if found else None
        return {
            "protocol": {
                "seq": protocol.get("seq"),
                "schedule_sha256": protocol.get("schedule_sha256"),
                "design": protocol.get("design"),
                "model": protocol.get("model"),
                "models": protocol.get("models"),
                "trials": scheduled,
                "blinding_commitment": protocol.get("blinding_commitment"),
                "stimuli": len(protocol.get("stimuli") or []),
                "items": (protocol.get("items") or {}).get("count")
                if isinstance(protocol.get("items"), dict)
                else None,
            },
            "design": design_summary(protocol),
            "arms": [
                {
                    "arm": a,
                    "role": v.get("role"),
                    "components": v.get("components"),
                    "sha256": v.get("sha256"),
                }
                for a, v in arms.items()
                if isinstance(v, dict)
            ],
            "group": "arm" if not self.blind else "arm code",
            "progress": progress,
            "by_model": by_model,
            "totals": totals,
            "verdicts": verdicts,
            "copies": copies,
            "posthoc": posthoc,
            "artifacts": artifacts,
            "sessions": sessions,
            "stopped": stopped,
            "milestones": milestones,
        }

    # ------------------------------------------------------------------ plots

    def plots(self) -> list[dict[str, Any]]:
        """Every plot kind with its SVG drawn (or the reason there is none), memoized."""
        return [
            {"name": p.name, "title": p.title, "caption": p.caption, "note": self.plot(p.name)[1]}
            for p in PLOTS
        ]

    def plot(self, name: str) -> tuple[bytes | None, str | None]:
        """(SVG bytes, None) of plot ``name``, or (None, why there is none)."""
        found = [p for p in PLOTS if p.name == name]
        if not found:
            raise AnalysisError(
                f"no plot {name[:60]!r}; the plots are {', '.join(p.name for p in PLOTS)}"
            )

        def draw() -> tuple[bytes | None, str | None]:
            data = PlotData(self.index, self.blind, self.index.protocol() or {})
            fig, note = found[0].draw(data)
            return (render_svg(fig), None) if fig is not None else (None, note)

        result: tuple[bytes | None, str | None] = self.memo(f"plot-{name}-{self.blind}", draw)
        return result

    # ------------------------------------------------------------------ trial table

    def filters(self) -> list[Any]:
        """The filters offered now (the arm only after the reveal)."""
        return [f for f in FILTERS if f.blind or not self.blind]

    def choices(self) -> dict[str, list[str]]:
        """Every filter's values, read from the index."""
        found: dict[str, list[str]] = self.memo(f"choices-{self.blind}", self._choices)
        return found

    def _choices(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for f in self.filters():
            rows = self.index.query(
                f"SELECT DISTINCT {f.column} FROM trials WHERE {f.column} IS NOT NULL "
                f"ORDER BY {f.column}"
            )
            out[f.param] = [str(r[0]) for r in rows]
        return out

    def check_params(self, params: dict[str, str]) -> None:
        """Refuse, with :class:`BlindingError`, what would tie a trial to its arm while blind."""
        if not self.blind:
            return
        for f in FILTERS:
            if not f.blind and params.get(f.param):
                raise BlindingError(
                    f"the {f.label} filter is not available until blinding.revealed "
                    "(the study is still blind)"
                )
        sort = params.get("sort", "h")
        if sort in SORTS and not SORTS[sort][1]:
            raise BlindingError(f"sorting by {sort} is not available until blinding.revealed")

    def selection(self, params: dict[str, str]) -> tuple[str, list[Any], dict[str, str], str]:
        """The WHERE clause, its arguments, the active filters and the ORDER BY of ``params``.

        Raises :class:`BlindingError` for what blinding hides and :class:`AnalysisError` for a
        filter value no trial has (naming the filter and its values), an unknown sort or a
        search the full-text index cannot parse.
        """
        self.check_params(params)
        where: list[str] = []
        args: list[Any] = []
        active: dict[str, str] = {}
        choices = self.choices()
        for f in self.filters():
            value = params.get(f.param, "")
            if value:
                if value not in choices.get(f.param, []) and not (
                    self.index.kind == "study" and f.param == "status"
                ):
                    known = choices.get(f.param, [])
                    shown = ", ".join(known[:20]) + (" …" if len(known) > 20 else "")
                    raise AnalysisError(
                        f"filter {f.param}={value[:80]!r}: no trial has this {f.label}; "
                        + (f"the values are: {shown}" if known else "no trial has one yet")
                    )
                where.append(f"{f.column} = ?")
                args.append(value)
                active[f.param] = value
        query = params.get("q", "").strip()
        if query:
            condition, found = self.index.search(query)
            where.append(condition)
            args.extend(found)
            active["q"] = query
        sort = params.get("sort", "h")
        if sort not in SORTS:
            raise AnalysisError(f"unknown sort {sort!r}; choose one of {', '.join(SORTS)}")
        order = _descending(SORTS[sort][0]) if params.get("desc") else SORTS[sort][0]
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        return clause, args, active, order

    def csv(self, params: dict[str, str]) -> str:
        """Every trial the filters of ``params`` select (not one page), as CSV.

        The columns are the table's (:meth:`row`): no arm, trial id, variant or position while
        the study is blind.
        """
        import csv
        import io

        clause, args, _, order = self.selection(params)
        out = io.StringIO()
        columns = [
            "h",
            *([] if self.blind else ["trial", "arm", "variant", "position"]),
            "arm_code",
            "model",
            "stimulus",
            "rep",
            "status",
            "attempts",
            "parse",
            "n_items",
            "n_correct",
            "correct",
            "predicted",
            "key",
            "judge",
            "preview",
        ]
        writer = csv.DictWriter(out, columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        with self.index.lock:
            cursor = self.index.db.execute(f"SELECT * FROM trials{clause} ORDER BY {order}", args)
            for r in cursor:
                writer.writerow(self.row(r, faults=False))
        return out.getvalue()

    def trials(self, params: dict[str, str], per_page: int = PER_PAGE) -> dict[str, Any]:
        """One page of the trial table: the rows, the filters and the pager."""
        clause, args, active, order = self.selection(params)
        if params.get("per_page"):
            try:
                per_page = int(params["per_page"])
            except ValueError:
                raise AnalysisError(
                    f"per_page {params['per_page'][:40]!r} is not a number"
                ) from None
            if not 1 <= per_page <= MAX_PER_PAGE:
                raise AnalysisError(
                    f"per_page {per_page} is out of range: 1 to {MAX_PER_PAGE} trials a page "
                    "(the CSV download has every trial the filters select)"
                )
        sort = params.get("sort", "h")
        total = self.memo(
            f"count {clause} {args}",
            lambda: self.index.query(f"SELECT COUNT(*) FROM trials{clause}", args)[0][0],
        )
        pages = max(1, math.ceil(total / per_page))
        try:
            page = min(max(1, int(params.get("page", "1"))), pages)
        except ValueError:
            raise AnalysisError(f"page {params.get('page')!r} is not a number") from None
        rows = self.index.query(
            f"SELECT * FROM trials{clause} ORDER BY {order} LIMIT ? OFFSET ?",
            [*args, per_page, (page - 1) * per_page],
        )
        return {
            **self.common(),
            "rows": [self.row(r) for r in rows],
            "total": total,
            "page": page,
            "pages": pages,
            "filters": self.filters(),
            "choices": self.choices(),
            "active": active,
            "sort": sort,
            "desc": bool(params.get("desc")),
            "sorts": [k for k, (_, ok) in SORTS.items() if ok or not self.blind],
            "query": active.get("q", ""),
            "params": {
                **active,
                "sort": sort if sort != "h" else "",
                "desc": "1" if params.get("desc") else "",
                "per_page": str(per_page) if per_page != PER_PAGE else "",
            },
        }

    # ------------------------------------------------------------------ one trial

    def response(self, sha: str | None, wire_format: str | None) -> dict[str, Any]:
        """The text of a response blob (or why it cannot be read)."""
        if sha is None:
            return {"text": None, "error": None}
        try:
            raw = self.index.blob(sha)
        except AnalysisError as exc:
            return {"text": None, "error": str(exc)}
        try:
            return {
                "text": response_text(*unwrap_batch(raw, wire_format or "anthropic-messages")),
                "error": None,
            }
        except ParseError as exc:
            return {
                "text": raw.decode("utf-8", "replace"),
                "error": f"the body is not a response the parser reads ({exc})",
            }

    def stimulus_blob(self, name: str) -> tuple[str, str] | None:
        """(sha256, file name) of the locked stimulus ``name`` (by file stem), if it is one."""
        found = None
        for kind in ("artifact.locked", "protocol.amended"):
            for _, body, blobs in self.index.singles(kind):
                path = str(body.get("path", ""))
                if body.get("role") == "stimulus" and Path(path).stem == name:
                    found = (blobs.get("content") or str(body.get("sha256")), Path(path).name)
        return found

    def trial(self, h: int) -> dict[str, Any] | None:
        """The trial page, or None when ``h`` is not a trial's handle."""
        rows = self.index.query("SELECT * FROM trials WHERE h=?", (h,))
        if not rows:
            return None
        r = rows[0]
        attempts = []
        for a in self.index.query("SELECT * FROM attempts WHERE h=? ORDER BY request_seq", (h,)):
            item = {k: a[k] for k in a.keys() if k != "request_sha"}  # noqa: SIM118
            if a["outcome_kind"] == "responded":
                item.update(self.response(a["response_sha"], a["format"]))
            if not self.blind:
                item["request_sha"] = a["request_sha"]
            item["faults"] = self.faulted([a["request_seq"], a["outcome_seq"]])
            attempts.append(item)
        request = None
        if not self.blind:
            last = attempts[-1] if attempts else None
            if last is not None and last.get("request_sha"):
                sha = last["request_sha"]
                try:
                    request = {"sha": sha, **_request_turns(self.index.blob(sha), sha)}
                except AnalysisError as exc:
                    request = {"sha": sha, "error": str(exc), "turns": []}
        score = None
        if r["scored_seq"] is not None:
            score = self.score(r["scored_seq"])
        stim = self.stimulus_blob(str(r["stimulus"]))
        events = (
            [("trial.requested", a["request_seq"]) for a in attempts]
            + [
                (
                    ("trial.responded" if a["outcome_kind"] == "responded" else "trial.failed"),
                    a["outcome_seq"],
                )
                for a in attempts
                if a["outcome_seq"] is not None
            ]
            + ([("trial.scored", r["scored_seq"])] if r["scored_seq"] is not None else [])
        )
        calls = self.calls(
            self.index.query("SELECT * FROM steps WHERE h=? ORDER BY request_seq", (h,))
        )
        events += [("step.requested", c["request_seq"]) for c in calls] + [
            (f"step.{c['outcome_kind']}", c["outcome_seq"])
            for c in calls
            if c["outcome_seq"] is not None
        ]
        reviews = (
            [
                dict(x)
                for x in self.index.query(
                    "SELECT seq, sample, kind, value FROM reviews WHERE subject=? ORDER BY seq",
                    (r["response_seq"],),
                )
            ]
            if r["response_seq"] is not None
            else []
        )
        return {
            **self.common(),
            "t": self.row(r),
            "attempts": attempts,
            "request": request,
            "score": score,
            "stimulus_file": stim[1] if stim else None,
            "events": sorted(events, key=lambda e: e[1]),
            "calls": calls,
            "reviews": reviews,
            "item_link": True,
        }

    def calls(self, rows: list[Any]) -> list[dict[str, Any]]:
        """Step calls (``steps`` rows, one per attempt) as the trial and item pages show them.

        Each with its request (system prompt, turns, parameters) and its reply. While blind a
        trial step's call id and request are left out: the id holds the trial id, and a step
        that sees the request quotes the arm's prompt (an item step's are the item's only).
        """
        out = []
        for c in rows:
            hidden = self.blind and c["trial"] is not None
            item: dict[str, Any] = {
                "step": c["step"],
                "model": c["model"],
                "attempt": c["attempt"],
                "request_seq": c["request_seq"],
                "outcome_seq": c["outcome_seq"],
                "outcome_kind": c["outcome_kind"],
                "final": c["final"],
                "error_type": c["error_type"],
                "message": c["message"],
                "call": None if hidden else c["call"],
                "request": None,
                "faults": self.faulted([c["request_seq"], c["outcome_seq"]]),
            }
            if c["outcome_kind"] == "responded":
                item.update(self.response(c["response_sha"], c["format"]))
            if not hidden and c["request_sha"]:
                try:
                    raw = self.index.blob(c["request_sha"])
                    item["request"] = _request_turns(raw, c["request_sha"])
                except AnalysisError as exc:
                    item["request"] = {"error": str(exc), "turns": []}
            out.append(item)
        return out

    # ------------------------------------------------------------------ one item

    def item(self, stimulus: str) -> dict[str, Any]:
        """One item across arms × variants × models: every trial's answer against its own key.

        While blind the trials are listed by arm code (variants hidden, as in the table), in
        handle order. The item's steps (rewriters, screeners, extractors, reference models)
        are listed with their requests and replies: they see the item only, never an arm.
        """
        order = "arm, variant, model, rep, h" if not self.blind else "arm_code, model, rep, h"
        total = self.index.query("SELECT COUNT(*) FROM trials WHERE stimulus=?", (stimulus,))[0][0]
        rows = self.index.query(
            f"SELECT * FROM trials WHERE stimulus=? ORDER BY {order} LIMIT {ITEM_TRIALS}",
            (stimulus,),
        )
        scored: dict[int, list[dict[str, Any]]] = {}
        for i in self.index.query(
            "SELECT h, row, position, truth, answer, correct FROM items WHERE h IN "
            f"(SELECT h FROM trials WHERE stimulus=? ORDER BY {order} LIMIT {ITEM_TRIALS}) "
            "ORDER BY rowid",
            (stimulus,),
        ):
            scored.setdefault(i["h"], []).append(dict(i))
        step_rows = self.index.query(
            "SELECT * FROM steps WHERE item=? AND trial IS NULL ORDER BY step, request_seq",
            (stimulus,),
        )
        if not rows and not step_rows:
            raise AnalysisError(f"no trial or step call of item {stimulus[:100]!r} has been run")
        trials: list[dict[str, Any]] = []
        for r in rows:
            trials.append({"t": self.row(r), "items": scored.get(r["h"], [])})
        stim = self.stimulus_blob(stimulus)
        keys = sorted({str(i["truth"]) for t in trials for i in t["items"]})
        return {
            **self.common(),
            "stimulus": stimulus,
            "trials": trials,
            "total": total,
            "calls": self.calls(step_rows),
            "keys": keys,
            "stimulus_file": stim[1] if stim else None,
        }

    # ------------------------------------------------------------------ arm diff

    def diff(self, a: str, b: str, stimulus: str | None) -> dict[str, Any]:
        """Two arms' fully rendered requests for one item, side by side, differences marked.

        Refused while blind (:class:`BlindingError`): a request's text identifies its arm. The
        trials compared share the item, model, variant and replicate where both arms have
        one; every line of the system prompt, the turns and the parameters is compared.
        """
        import difflib

        if self.blind:
            raise BlindingError(
                "the arm diff shows the arms' prompts: it is not available "
                "until blinding.revealed (the study is still blind)"
            )
        arms = [x[0] for x in self.index.query("SELECT DISTINCT arm FROM trials ORDER BY arm")]
        for name, value in (("a", a), ("b", b)):
            if value not in arms:
                raise AnalysisError(
                    f"diff {name}={value[:80]!r}: no trial has this arm; the "
                    f"arms are: {', '.join(arms)}"
                )
        if stimulus is None:
            found = self.index.query(
                "SELECT stimulus FROM trials WHERE arm=? AND stimulus IN "
                "(SELECT stimulus FROM trials WHERE arm=?) ORDER BY h LIMIT 1",
                (a, b),
            )
            if not found:
                raise AnalysisError(f"arms {a} and {b} share no item")
            stimulus = str(found[0][0])
        pair = self.index.query(
            "SELECT x.h AS ha, y.h AS hb FROM trials x JOIN trials y ON x.stimulus = y.stimulus "
            "AND x.model IS y.model AND x.rep IS y.rep AND x.variant IS y.variant "
            "WHERE x.arm=? AND y.arm=? AND x.stimulus=? ORDER BY x.h LIMIT 1",
            (a, b, stimulus),
        )
        if not pair:
            pair = self.index.query(
                "SELECT (SELECT h FROM trials WHERE arm=? AND stimulus=? ORDER BY h LIMIT 1), "
                "(SELECT h FROM trials WHERE arm=? AND stimulus=? ORDER BY h LIMIT 1)",
                (a, stimulus, b, stimulus),
            )
        ha, hb = pair[0][0], pair[0][1]
        if ha is None or hb is None:
            raise AnalysisError(f"item {stimulus[:80]!r} was not run in both arms {a} and {b}")
        sides = [self._request_lines(int(ha)), self._request_lines(int(hb))]
        rows: list[dict[str, Any]] = []
        matcher = difflib.SequenceMatcher(a=sides[0], b=sides[1], autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            left, right = sides[0][i1:i2], sides[1][j1:j2]
            for n in range(max(len(left), len(right))):
                rows.append(
                    {
                        "op": op,
                        "a": left[n] if n < len(left) else None,
                        "b": right[n] if n < len(right) else None,
                    }
                )
        protocol = self.index.protocol() or {}
        locked = protocol.get("arms") if isinstance(protocol.get("arms"), dict) else {}
        assert isinstance(locked, dict)
        return {
            **self.common(),
            "a": a,
            "b": b,
            "stimulus": stimulus,
            "arms": arms,
            "ha": ha,
            "hb": hb,
            "rows": rows,
            "changed": sum(1 for x in rows if x["op"] != "equal"),
            "components": [locked.get(x, {}).get("components") for x in (a, b)],
            "items": [
                x[0]
                for x in self.index.query(
                    "SELECT DISTINCT stimulus FROM trials WHERE arm=? ORDER BY stimulus", (a,)
                )
            ],
        }

    def _request_lines(self, h: int) -> list[str]:
        """The last request of trial ``h`` as labelled lines (system, turns, parameters)."""
        found = self.index.query(
            "SELECT request_sha FROM attempts WHERE h=? ORDER BY request_seq DESC LIMIT 1", (h,)
        )
        if not found or not found[0][0]:
            return ["(no request recorded)"]
        request = _request_turns(self.index.blob(found[0][0]), found[0][0])
        lines: list[str] = []
        for turn in request.get("turns", []):
            for part in turn["parts"]:
                text = part.get("text") if part["type"] != "image" else f"[image {part['n']}]"
                lines += [f"{turn['role']}: {line}" for line in str(text).splitlines() or [""]]
        for key, value in sorted((request.get("params") or {}).items()):
            lines.append(f"parameter {key}: {json.dumps(value, sort_keys=True)}")
        if request.get("error"):
            lines.append(str(request["error"]))
        return lines

    def score(self, scored_seq: int) -> dict[str, Any]:
        """A ``trial.scored`` event's body and its per-item scores."""
        env = self.index.event_text(scored_seq) or {}
        body, blobs = env.get("body", {}), env.get("blobs", {})
        items: list[dict[str, Any]] = []
        error = None
        if "scores" in blobs:
            try:
                loaded = json.loads(self.index.blob(blobs["scores"]))
                listed = loaded if isinstance(loaded, list) else []
                items = [i for i in listed if isinstance(i, dict)]
            except (AnalysisError, ValueError) as exc:
                error = str(exc)
        judge = body.get("judge") if isinstance(body.get("judge"), dict) else None
        return {
            "judge": judge,
            "seq": scored_seq,
            "parser": body.get("parser"),
            "status": body.get("status"),
            "n_items": body.get("n_items"),
            "n_answered": body.get("n_answered"),
            "n_correct": body.get("n_correct"),
            "problems": body.get("problems") or [],
            "item_scores": items,
            "error": error,
        }

    # ------------------------------------------------------------------ comparison

    def compare(self, stimulus: str, model: str | None, rep: str | None) -> dict[str, Any]:
        """The same item (stimulus, model, replicate) side by side across arms or arm codes."""
        model_rows = self.index.query(
            "SELECT DISTINCT model FROM trials WHERE stimulus=? ORDER BY model", (stimulus,)
        )
        models = [m[0] for m in model_rows]
        if not models:
            raise AnalysisError(f"no trial of stimulus {stimulus!r} has been run")
        chosen_model = model if model in models else models[0]
        reps = [
            x[0]
            for x in self.index.query(
                "SELECT DISTINCT rep FROM trials WHERE stimulus=? AND model IS ? ORDER BY rep",
                (stimulus, chosen_model),
            )
        ]
        try:
            chosen_rep = int(rep) if rep else reps[0]
        except ValueError:
            raise AnalysisError(f"rep {rep!r} is not a number") from None
        rows = self.index.query(
            "SELECT * FROM trials WHERE stimulus=? AND model IS ? AND rep=? "
            f"ORDER BY {'arm' if not self.blind else 'arm_code'}, h",
            (stimulus, chosen_model, chosen_rep),
        )
        columns: list[dict[str, Any]] = []
        positions: dict[tuple[Any, Any], None] = {}
        for r in rows:
            response = {"text": None, "error": None}
            if r["response_seq"] is not None:
                att = self.index.query(
                    "SELECT response_sha, format FROM attempts WHERE outcome_seq=?",
                    (r["response_seq"],),
                )
                if att:
                    response = self.response(att[0]["response_sha"], att[0]["format"])
            score = self.score(r["scored_seq"]) if r["scored_seq"] is not None else None
            answers: dict[tuple[Any, Any], dict[str, Any]] = {}
            for n, item in enumerate(score["item_scores"] if score else []):
                # by the item's order in its trial: with variants the same item has another
                # position (and key) in each, and each answer is read against its own key
                key = (n + 1, item.get("row"))
                positions[key] = None
                answers[key] = item
            columns.append({"t": self.row(r), **response, "score": score, "answers": answers})
        grid = [
            {
                "key": k,
                "truths": sorted(
                    {str(c["answers"][k].get("truth")) for c in columns if k in c["answers"]}
                ),
                "cells": [c["answers"].get(k) for c in columns],
            }
            for k in positions
        ]
        stim = self.stimulus_blob(stimulus)
        return {
            **self.common(),
            "stimulus": stimulus,
            "model": chosen_model,
            "models": models,
            "rep": chosen_rep,
            "reps": reps,
            "columns": columns,
            "grid": grid,
            "stimulus_file": stim[1] if stim else None,
        }

    # ------------------------------------------------------------------ proofs

    def proof(self, seq: int) -> dict[str, Any] | None:
        """The RFC 9162 inclusion proof of event ``seq`` in the current log, checked."""
        from ledger import verify_inclusion

        rows = self.index.query("SELECT kind, time FROM events WHERE seq=?", (seq,))
        leaf = self.index.leaf(seq)
        if not rows or leaf is None:
            return None
        path, root, size = self.index.inclusion(seq)
        ok = verify_inclusion(seq, size, leaf, path, root)
        show_body = rows[0]["kind"] in _OPEN_KINDS or not self.blind
        envelope = self.index.event_text(seq) if show_body else None
        return {
            **self.common(),
            "seq": seq,
            "kind": rows[0]["kind"],
            "time": rows[0]["time"],
            "leaf": leaf.hex(),
            "size": size,
            "root": root.hex(),
            "path": [p.hex() for p in path],
            "ok": ok,
            "envelope": json.dumps(envelope, indent=2, sort_keys=True) if envelope else None,
            "faults": self.faulted([seq]),
        }

    def stimulus_bytes(self, name: str) -> tuple[bytes, str] | None:
        """The locked stimulus file ``name`` (by file stem or file name) and its media type.

        An image stimulus is served as the type its bytes show (:func:`image_media_type`);
        one whose bytes are not an image of an allowed type is refused (AnalysisError); any
        other file is plain text.
        """
        found = self.stimulus_blob(Path(name).stem)
        if found is None:
            return None
        data = self.index.blob(found[0])
        if Path(found[1]).suffix.lower() not in _IMAGE_SUFFIXES:
            return data, "text/plain; charset=utf-8"
        media = image_media_type(data)
        if media is None:
            raise AnalysisError(
                f"stimulus {found[1]}: its bytes are not a PNG, JPEG, GIF or WebP image; not served"
            )
        return data, media

    def image(self, sha: str, n: int) -> tuple[bytes, str] | None:
        """The ``n``-th image of request blob ``sha`` and its media type (from its bytes).

        None while blind or if there is none; AnalysisError if its bytes are not a PNG, JPEG,
        GIF or WebP image, whatever type the request claims (:func:`image_media_type`).
        """
        if self.blind:
            return None
        known = self.index.query("SELECT 1 FROM attempts WHERE request_sha=? LIMIT 1", (sha,))
        if not known:
            return None
        try:
            images = request_images(self.index.blob(sha))
        except (AnalysisError, ValueError, binascii.Error):
            return None
        if not 0 <= n < len(images):
            return None
        claimed, data = images[n]
        media = image_media_type(data)
        if media is None:
            raise AnalysisError(
                f"image {n} of request {sha[:12]}… is not a PNG, JPEG, GIF or WebP image (the "
                f"request calls it {claimed[:40]!r}); not served"
            )
        return data, media


def environment(links: Links) -> Environment:
    """The Jinja2 environment (autoescape on for every template) with the viewer's helpers."""
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["visible"] = visible
    env.globals["links"] = links
    env.globals["short"] = lambda s, n=12: (str(s)[:n] + "…") if s and len(str(s)) > n else s
    env.globals["pct"] = lambda a, b: f"{100 * a / b:.1f}%" if a is not None and b else "–"
    env.globals["Markup"] = Markup
    return env


# ---------------------------------------------------------------------- the server


def _posthoc_row(seq: int, body: dict[str, Any]) -> dict[str, Any]:
    """One ``analysis.posthoc`` event as the overview lists it (``docs/analysis.md`` §6).

    Its id, test, title, the two-sided difference a − b in percentage points with its 95%
    interval and p (null for a bootstrap), the declared reason, and the status or error.
    """

    def obj(value: Any) -> dict[str, Any]:
        return value if isinstance(value, dict) else {}

    values = obj(body.get("values"))
    summary, declared = obj(values.get("contrast")), obj(body.get("declared"))

    def pp(key: str) -> str:
        value = summary.get(key)
        return f"{100 * value:+.1f}" if isinstance(value, int | float) else "–"

    p = summary.get("p")
    return {
        "seq": seq,
        "id": body.get("id"),
        "test": body.get("test"),
        "title": body.get("title"),
        "label": body.get("label"),
        "status": body.get("status"),
        "error": body.get("error"),
        "reason": declared.get("reason"),
        "difference": (
            f"{pp('estimate')} pp ({pp('lower')} to {pp('upper')})"
            if body.get("status") == "ok"
            else "–"
        ),
        "p": f"{p:.3g}" if isinstance(p, int | float) else "–",
    }


def _descending(order: str) -> str:
    """An ORDER BY list with every term reversed (a comma inside parentheses is not a term's)."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(order):
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            terms.append(order[start:i].strip())
            start = i + 1
    terms.append(order[start:].strip())
    return ", ".join(f"{t} DESC" for t in terms)


def _words(value: Any) -> str:
    """A locked setting as words: ``a=1, b=[x, y]`` rather than JSON."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_words(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_words(v) for v in value) + "]"
    return str(value)


def design_summary(protocol: dict[str, Any]) -> dict[str, Any]:
    """The locked design in readable rows (arms, models, variants, steps, hypotheses, phases).

    Each arm says how it differs from the first (components, factor levels); the remaining
    design settings follow as name and value. The arms are the protocol's, as ``ledger lock``
    published them; the overview never ties them to trials while blind.
    """

    def obj(value: Any) -> dict[str, Any]:
        return value if isinstance(value, dict) else {}

    arms = obj(protocol.get("arms"))
    first = next(iter(arms), None)
    base = obj(arms.get(first)) if first is not None else {}
    arm_rows = []
    for name, spec in arms.items():
        spec = obj(spec)
        comps, base_comps = spec.get("components") or [], base.get("components") or []
        differs = [f"+{c}" for c in comps if c not in base_comps]
        differs += [f"−{c}" for c in base_comps if c not in comps]
        factors = obj(spec.get("factors"))
        differs += [f"{k}={v}" for k, v in factors.items() if obj(base.get("factors")).get(k) != v]
        if spec.get("sha256") != base.get("sha256") and not differs and name != first:
            differs.append("prompt text")
        arm_rows.append(
            {
                "arm": name,
                "role": spec.get("role"),
                "components": comps,
                "factors": _words(factors) if factors else "",
                "sha256": spec.get("sha256"),
                "models": ", ".join(map(str, spec.get("models") or [])),
                "variants": ", ".join(map(str, spec.get("variants") or [])),
                "differs": ", ".join(differs) if name != first else f"(the reference: {name})",
            }
        )
    models = [
        {"name": n, **{k: obj(m).get(k) for k in ("id", "provider", "temperature", "max_tokens")}}
        for n, m in obj(protocol.get("models")).items()
    ]
    if not models and isinstance(protocol.get("model"), dict):
        m = protocol["model"]
        models = [
            {"name": "", **{k: m.get(k) for k in ("id", "provider", "temperature", "max_tokens")}}
        ]
    steps = [
        {
            "name": n,
            "on": obj(v).get("on"),
            "models": ", ".join(obj(v).get("models") or []),
            "parser": obj(v).get("parser"),
            "sees": obj(v).get("sees"),
            "aggregate": obj(v).get("aggregate"),
            "template": obj(v).get("template"),
        }
        for n, v in obj(protocol.get("steps")).items()
    ]
    hypotheses = [
        {
            "id": h.get("id"),
            "test": h.get("test"),
            "description": h.get("description"),
            "contrast": " vs ".join(map(str, h.get("contrast") or []))
            or _words(h.get("arm") or ""),
            "outcome": h.get("outcome"),
        }
        for h in protocol.get("hypotheses") or []
        if isinstance(h, dict)
    ]
    variants = protocol.get("variants")
    phases = protocol.get("phases")
    return {
        "arms": arm_rows,
        "models": models,
        "steps": steps,
        "hypotheses": hypotheses,
        "variants": _words(variants) if variants else "",
        "phases": _words(phases) if phases else "",
        "settings": [(k, _words(v)) for k, v in obj(protocol.get("design")).items()],
    }


def make_app(viewer: Viewer, hosts: tuple[str, ...] | None = LOOPBACK_HOSTS) -> Any:
    """The Starlette application serving ``viewer``'s pages (HTML and JSON).

    ``hosts``: the names (``Host`` header, port aside) it answers to; any other gets 400, so a
    web page the user visits cannot read a study served on the loopback through DNS
    rebinding (``docs/viewer.md``). None answers any name (``ledger view --public``).
    Pages may load script only from ``/static/``; images and stimuli are served with their
    sniffed type, ``nosniff`` and a policy that runs nothing (a sandboxed, scriptless
    document, were a browser ever to render one).
    """
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    links = ServerLinks()
    env = environment(links)
    headers = {
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }

    data_headers = {
        "Content-Security-Policy": "default-src 'none'; img-src 'self'; sandbox",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }

    # a plot is matplotlib's SVG: styles inline, never a script
    svg_headers = {
        **data_headers,
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; sandbox",
    }

    def html(template: str, context: dict[str, Any], status: int = 200) -> Response:
        # a script runs only if this response's nonce is on its tag: the template's own
        # /static/view.js, never a script from a data route or injected into a page
        nonce = secrets.token_urlsafe(18)
        body = env.get_template(template).render(**context, csp_nonce=nonce)
        policy = (
            f"default-src 'self'; img-src 'self'; style-src 'self'; script-src 'nonce-{nonce}'; "
            "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
        )
        return HTMLResponse(body, status, headers={**headers, "Content-Security-Policy": policy})

    def problem(message: str, status: int) -> Response:
        return html("error.html", {**viewer.common(), "message": message}, status)

    def page(build: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                viewer.refresh()
                return build(request)
            except BlindingError as exc:
                return problem(str(exc), 403)
            except NotFound as exc:
                return problem(str(exc), 404)
            except AnalysisError as exc:
                return problem(str(exc), 400)

        return endpoint

    @page
    def overview(request: Request) -> Response:
        return html("overview.html", viewer.overview())

    @page
    def trials(request: Request) -> Response:
        params = dict(request.query_params)
        wanted = params.pop("format", "")
        if wanted == "csv":
            return Response(
                viewer.csv(params),
                media_type="text/csv; charset=utf-8",
                headers={
                    **data_headers,
                    "Content-Disposition": 'attachment; filename="trials.csv"',
                },
            )
        if wanted not in ("", "json", "html"):
            raise AnalysisError(f"format {wanted[:40]!r}: choose html, json or csv")
        if wanted == "json":
            data = viewer.trials(params)
            return JSONResponse(
                {
                    k: data[k]
                    for k in ("rows", "total", "page", "pages", "active", "blind", "events")
                }
            )
        return html("trials.html", viewer.trials(params))

    def number(value: str, what: str) -> int:
        if not value.isdigit() or len(value) > 18:
            raise NotFound(f"{what} {value[:40]!r} is not a number (a seq, as the links give)")
        return int(value)

    @page
    def trial(request: Request) -> Response:
        context = viewer.trial(number(request.path_params["h"], "trial handle"))
        if context is None:
            return problem(
                f"no trial has handle {request.path_params['h']} (a trial's handle "
                "is the seq of its first trial.requested; see the trial table)",
                404,
            )
        return html("trial.html", context)

    @page
    def item(request: Request) -> Response:
        return html("item.html", viewer.item(str(request.path_params["name"])))

    @page
    def diff(request: Request) -> Response:
        q = request.query_params
        if not q.get("a") or not q.get("b"):
            raise AnalysisError("diff needs ?a=ARM&b=ARM (and optionally stimulus=ITEM)")
        return html("diff.html", viewer.diff(q["a"], q["b"], q.get("stimulus") or None))

    @page
    def plots(request: Request) -> Response:
        return html("plots.html", {**viewer.common(), "plots": viewer.plots()})

    @page
    def plot(request: Request) -> Response:
        svg, note = viewer.plot(str(request.path_params["name"]))
        if svg is None:
            return problem(f"no plot to draw: {note}", 404)
        return Response(svg, media_type="image/svg+xml", headers=svg_headers)

    @page
    def compare(request: Request) -> Response:
        q = request.query_params
        stimulus = q.get("stimulus")
        if not stimulus:
            raise AnalysisError("compare needs ?stimulus=NAME (and optionally model and rep)")
        return html("compare.html", viewer.compare(stimulus, q.get("model"), q.get("rep")))

    @page
    def proof(request: Request) -> Response:
        context = viewer.proof(number(request.path_params["seq"], "event seq"))
        if context is None:
            return problem(f"no event with seq {request.path_params['seq']}", 404)
        return html("proof.html", context)

    @page
    def stimulus(request: Request) -> Response:
        found = viewer.stimulus_bytes(str(request.path_params["name"]))
        if found is None:
            return problem(f"no locked stimulus {request.path_params['name']!r}", 404)
        return Response(found[0], media_type=found[1], headers=data_headers)

    @page
    def image(request: Request) -> Response:
        found = viewer.image(str(request.path_params["sha"]), int(request.path_params["n"]))
        if found is None:
            return problem("no such request image (or the study is still blind)", 404)
        return Response(found[0], media_type=found[1], headers=data_headers)

    @page
    def status(request: Request) -> Response:
        return JSONResponse(
            {
                "events": viewer.index.next_seq,
                **viewer.counts(),
                "blind": viewer.blind,
                "verification": viewer.verification_summary(),
            },
            headers={"Cache-Control": "no-store"},
        )

    async def foreign_host(scope: Any, receive: Any, send: Any) -> None:
        header = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
        response = Response(
            f"400: this viewer answers to {', '.join(hosts or ())} only, not to Host "
            f"{header[:100]!r} (a page elsewhere may be trying to read the study through DNS "
            "rebinding); open it by that address\n",
            400,
            media_type="text/plain",
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"},
        )
        await response(scope, receive, send)

    class HostCheck:
        """Answer only requests whose ``Host`` names one of ``hosts`` (any port)."""

        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if hosts is not None and scope["type"] in ("http", "websocket"):
                header = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
                if host_name(header) not in hosts:
                    await foreign_host(scope, receive, send)
                    return
            await self.app(scope, receive, send)

    return Starlette(
        middleware=[Middleware(HostCheck)],
        routes=[
            Route("/", overview),
            Route("/trials", trials),
            Route("/trial/{h:str}", trial),
            Route("/compare", compare),
            Route("/proof/{seq:str}", proof),
            Route("/item/{name:str}", item),
            Route("/diff", diff),
            Route("/plots", plots),
            Route("/plot/{name:str}.svg", plot),
            Route("/stimulus/{name:str}", stimulus),
            Route("/image/{sha:str}/{n:int}", image),
            Route("/api/status", status),
            Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
        ],
    )


def _digest(*parts: Any) -> str:
    return hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()[:16]
