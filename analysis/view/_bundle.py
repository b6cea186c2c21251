"""``ledger view --bundle DIR``: an archive's pages as a static site, publishable beside it.

The bundle holds the overview (with the verification report computed when the bundle was
made, and the command that re-checks the archive), the trial table in pages, every trial's
page, every comparison, every event's inclusion proof, the locked stimuli and the request
images: plain HTML files with relative links, one stylesheet, no script and no server. It is
written into a temporary folder beside DIR and renamed into place, so a failure leaves nothing
half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis._errors import AnalysisError
from analysis.view._app import STATIC, Links, Verification, Viewer, environment, verify_command
from analysis.view._index import ViewIndex

__all__ = ["BundleLinks", "BundleResult", "write_bundle"]

PER_PAGE = 100


def _key(*parts: Any) -> str:
    return hashlib.sha256("\x00".join(str(p) for p in parts).encode()).hexdigest()[:16]


def _safe(name: str) -> str:
    stem, suffix = Path(name).stem, Path(name).suffix
    clean = "".join(c if c.isalnum() or c in "-_" else "_" for c in stem)
    return f"{clean}-{_key(name)[:8]}{suffix if suffix[1:].isalnum() else ''}"


class BundleLinks(Links):
    """Relative links between the bundle's files (every page sits at the top level)."""

    live = False

    def home(self) -> str:
        return "index.html"

    def trials(self, params: dict[str, str]) -> str:
        return f"trials-{int(params.get('page', 1))}.html"

    def trial(self, h: int) -> str:
        return f"trial-{h}.html"

    def compare(self, stimulus: str, model: str | None, rep: int | None) -> str:
        return f"compare-{_key(stimulus, model, rep)}.html"

    def proof(self, seq: int) -> str:
        return f"proof-{seq}.html"

    def item(self, stimulus: str) -> str:
        return f"item-{_key(stimulus)}.html"

    def diff(self, a: str, b: str, stimulus: str | None) -> str | None:
        return None  # every pair of arms on every item: too many pages; the server has them

    def plots(self) -> str:
        return "plots.html"

    def plot(self, name: str) -> str:
        return f"plot-{name}.svg"

    def csv(self, params: dict[str, str]) -> str | None:
        return "trials.csv" if not params else None

    def stimulus(self, name: str) -> str:
        return f"stimuli/{_safe(name)}"

    def image(self, sha: str, n: int) -> str:
        return f"images/{sha}-{n}"

    def static(self, name: str) -> str:
        return name


@dataclass(frozen=True)
class BundleResult:
    """What :func:`write_bundle` wrote."""

    directory: Path
    files: int
    trials: int
    verification: str
    seconds: float


def write_bundle(
    archive: str | os.PathLike[str], directory: str | os.PathLike[str], *, force: bool = False
) -> BundleResult:
    """Write the static site of ``archive`` into ``directory`` (which must not exist or be empty).

    Verifies the archive first (the report goes on the overview, FAILED or PASSED); a study
    folder is refused: a bundle is of a finished, exported archive. Raises
    :class:`AnalysisError` naming the path at fault.
    """
    started = time.perf_counter()
    out = Path(directory)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not force)):
        raise AnalysisError(f"{out} exists and is not an empty folder (pass --force to replace it)")
    index = ViewIndex.open(archive)
    try:
        if index.kind != "archive":
            raise AnalysisError(
                f"{archive}: a bundle is made of an archive written by 'ledger export', not of "
                "a study folder (serve a study with 'ledger view STUDY')"
            )
        verification = Verification(command=verify_command(index.path))
        verification.start(index.path).join()
        viewer = Viewer(index, verification)
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            files = _write(viewer, tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
        trials = index.query("SELECT COUNT(*) FROM trials")[0][0]
        return BundleResult(out, files, trials, verification.state, time.perf_counter() - started)
    finally:
        index.close()


def _write(viewer: Viewer, root: Path) -> int:
    links = BundleLinks()
    env = environment(links)
    count = 0

    def page(name: str, template: str, context: dict[str, Any]) -> None:
        nonlocal count
        (root / name).write_text(env.get_template(template).render(**context), "utf-8")
        count += 1

    def data(name: str, content: bytes) -> None:
        nonlocal count
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        count += 1

    for name in ("view.css", "favicon.svg"):
        shutil.copyfile(STATIC / name, root / name)
        count += 1
    page("index.html", "overview.html", viewer.overview())
    data("verification.json", json.dumps(viewer.verification_summary(), indent=2).encode())
    total = viewer.index.query("SELECT COUNT(*) FROM trials")[0][0]
    pages = max(1, -(-total // PER_PAGE))
    for n in range(1, pages + 1):
        page(
            links.trials({"page": str(n)}),
            "trials.html",
            viewer.trials({"page": str(n)}, per_page=PER_PAGE),
        )
    seen_images: set[str] = set()
    for (h,) in viewer.index.query("SELECT h FROM trials ORDER BY h"):
        context = viewer.trial(h)
        assert context is not None
        page(links.trial(h), "trial.html", context)
        request = context.get("request")
        if request and request.get("sha") and request["sha"] not in seen_images:
            seen_images.add(request["sha"])
            for part in (p for turn in request.get("turns", []) for p in turn["parts"]):
                if part["type"] == "image":
                    try:
                        found = viewer.image(request["sha"], part["n"])
                    except AnalysisError:  # not an image of an allowed type: never written
                        found = None
                    if found is not None:
                        data(links.image(request["sha"], part["n"]), found[0])
    for row in viewer.index.query("SELECT DISTINCT stimulus, model, rep FROM trials"):
        stimulus, model, rep = row[0], row[1], row[2]
        page(
            links.compare(stimulus, model, rep),
            "compare.html",
            viewer.compare(stimulus, model, str(rep)),
        )
    for (name,) in viewer.index.query("SELECT DISTINCT stimulus FROM trials"):
        stim = viewer.stimulus_blob(name)
        try:
            found = viewer.stimulus_bytes(name) if stim else None
        except AnalysisError:  # an image stimulus whose bytes are not one: never written
            found = None
        if stim is not None and found is not None:
            data(links.stimulus(stim[1]), found[0])
    plots = viewer.plots()
    page(links.plots(), "plots.html", {**viewer.common(), "plots": plots})
    for p in plots:
        svg = viewer.plot(p["name"])[0]
        if svg is not None:
            data(links.plot(p["name"]), svg)
    data("trials.csv", viewer.csv({}).encode())
    for (name,) in viewer.index.query(
        "SELECT stimulus FROM trials UNION SELECT item FROM steps WHERE trial IS NULL"
    ):
        if name is not None:
            page(links.item(name), "item.html", viewer.item(name))
    for seq in range(viewer.index.next_seq):
        context = viewer.proof(seq)
        assert context is not None
        page(links.proof(seq), "proof.html", context)
    return count
