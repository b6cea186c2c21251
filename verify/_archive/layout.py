"""The ``layout`` check: every entry of the archive is accounted for (archive-format §1).

Each folder may hold only what the format lists for it; locked files, arm texts, figures and
blobs are allowed by name only when the signed events call for them. Anything else (an extra
file, an empty folder, a symbolic link, named pipe, device or socket) FAILs, named.
"""

from __future__ import annotations

import re

from verify._archive.checklists import checklist_names
from verify._archive.flow import FLOW_CSV, FLOW_SVG
from verify._archive.protocol import locked_archive_path
from verify._archive.report import figure_names
from verify._archive.view import Archive
from verify._archive.witnesses import POLICY_FILE
from verify._ledgerfile import _State
from verify._reader.files import show
from verify._reader.names import EVENTS, MANIFEST
from verify._report import Check

__all__ = ["FOLDERS", "check_layout"]

FOLDERS: dict[str, str] = {
    "": "README.md, MANIFEST.sha256 and the folders ledger/, protocol/, stimuli/, truth/, "
    "trials/, scores/, analysis/ and blobs/",
    "ledger": "events.jsonl, checkpoints/<8 digits>.txt, keys/<actor>.vkey of each "
    "registered key and, for a study with witnesses, witnesses.json",
    "blobs": "files named by the 64 lowercase hex SHA-256 of their content, each referenced by "
    "an event",
    "protocol": "files.csv, protocol.json, arms/<arm>.txt (and arms/<arm>.json) of each locked "
    "arm and each locked file that is not a stimulus or truth table",
    "stimuli": "the locked stimuli",
    "truth": "the locked truth tables",
    "trials": "schedule.csv, attempts.csv and, for a study with steps, steps.csv",
    "scores": "scores.csv",
    "analysis": "results.json, trials.csv, items.csv, report.html, tables/verdicts.csv, "
    "tables/flow.csv, figures/<name>.png of the report's figures, figures/flow.svg and "
    "checklists/<checklist>.md and .html",
}
"""What each folder may hold, as the ``layout`` check's messages say it."""

_FIXED_FILES = frozenset(
    {
        "README.md",
        MANIFEST,
        EVENTS,
        "protocol/files.csv",
        "protocol/protocol.json",
        "trials/schedule.csv",
        "trials/attempts.csv",
        "scores/scores.csv",
        "analysis/results.json",
        "analysis/trials.csv",
        "analysis/items.csv",
        "analysis/report.html",
        "analysis/tables/verdicts.csv",
    }
)
_FIXED_DIRS = frozenset(
    {
        "ledger",
        "ledger/checkpoints",
        "ledger/keys",
        "blobs",
        "protocol",
        "protocol/arms",
        "stimuli",
        "truth",
        "trials",
        "scores",
        "analysis",
        "analysis/tables",
        "analysis/figures",
    }
)
_CHECKPOINT = re.compile(r"ledger/checkpoints/[0-9]{8}\.txt")
_BLOB = re.compile(r"blobs/([0-9a-f]{64})")


def _folder_of(rel: str) -> str:
    top = rel.split("/", 1)[0] if "/" in rel else ""
    return top if top in FOLDERS else ""


def _allowed_files(a: Archive) -> set[str]:
    """Every file path the format allows in this archive, beside blobs and checkpoints."""
    allowed: set[str] = set(_FIXED_FILES)
    for path, (role, _, _) in a.locked_files.items():
        allowed.add(locked_archive_path(path, role))
    arms = a.protocol.get("arms")
    for arm in arms if type(arms) is dict else {}:
        allowed.add(f"protocol/arms/{arm}.txt")
        if "arm_identity" in a.protocol:  # docs/prompts.md §3.1: version 2's identity objects
            allowed.add(f"protocol/arms/{arm}.json")
    allowed.update(f"analysis/figures/{name}" for name in figure_names(a))
    allowed.update((FLOW_CSV, FLOW_SVG, *checklist_names()))  # docs/reporting.md §4
    reviews = a.protocol.get("reviews")  # docs/archive-format.md: one CSV per contrast sample
    for name, review in reviews.items() if type(reviews) is dict else ():
        if type(review) is dict and review.get("kind") == "contrast":
            allowed.add(f"analysis/review/{name}.csv")
    allowed.update(f"ledger/keys/{name}" for name in a.key_files)
    if "steps" in a.protocol:
        allowed.add("trials/steps.csv")  # docs/archive-format.md §1: a study with steps
    if any("witnessing" in a.body(s) for s in a.of_kind("protocol.locked")):
        allowed.add(POLICY_FILE)  # the trust policy of a witnessed study (docs/witness.md)
    return allowed


def _referenced_blobs(a: Archive) -> set[str]:
    """The blob digests some event references."""
    referenced: set[str] = set()
    for seq in range(a.n):
        blobs = a.envs.blobs(seq)
        if type(blobs) is dict:
            referenced.update(d for d in blobs.values() if type(d) is str)
    return referenced


def _allowed_dirs(allowed: set[str]) -> set[str]:
    """The fixed folders and every folder on the way to an allowed file."""
    dirs = set(_FIXED_DIRS)
    for rel in allowed:
        parts = rel.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return dirs


def _holds(rel: str) -> str:
    """What the folder of ``rel`` holds, for a message: ``(protocol/ holds ...)``."""
    folder = _folder_of(rel)
    return f"({folder or 'the root'}{'/' if folder else ''} holds {FOLDERS[folder]})"


def _file_problem(rel: str, allowed: set[str], referenced: set[str]) -> str | None:
    """Why file ``rel`` is not part of the archive, or None if it is."""
    if rel in allowed or _CHECKPOINT.fullmatch(rel):
        return None
    blob = _BLOB.fullmatch(rel)
    if blob is not None:
        if blob.group(1) in referenced:
            return None
        return f"{rel} is referenced by no event: not part of the archive"
    return f"{show(rel)} is not part of the archive format {_holds(rel)}"


def check_layout(a: Archive) -> Check:
    """Every entry is a regular file or folder at a place the archive format allows."""
    st = _State("layout")
    files = a.files
    for where, reason in files.problems:
        st.fail(reason, where=show(where))
    allowed = _allowed_files(a)
    referenced = _referenced_blobs(a)
    dirs = _allowed_dirs(allowed)
    for rel, what in sorted(files.others.items()):
        st.fail(f"{show(rel)} {what}", where=show(rel))
    for rel in sorted(files.dirs - dirs):
        st.fail(
            f"{show(rel)}/ is a folder the archive format does not have {_holds(rel)}",
            where=show(rel),
        )
    for rel in sorted(files.files):
        problem = _file_problem(rel, allowed, referenced)
        if problem is not None:
            st.fail(problem, where=rel if _BLOB.fullmatch(rel) else show(rel))
    return st.check(
        f"{len(files.files)} files and {len(files.dirs)} folders, each where the format puts it "
        "(no link, pipe, device or socket; no extra file)"
    )
