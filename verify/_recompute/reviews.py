"""``review.*`` results and the review sample files (analysis.md §10, mcq-statistics.md §9).

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

from typing import Any

from verify import _human, _review
from verify._recompute.archive import _Archive, _Event, _item_file, _Problem
from verify._recompute.dataset import _Dataset
from verify._recompute.results import _guard, _Result
from verify._report import Check, Status
from verify._steps import review_sample


def _review_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """The contrast samples of ``protocol.locked`` ``reviews`` (docs/study-spec.md), by name.

    ``{}`` when none is declared. A ``judge-label`` sample has no analysis result (the
    ``steps`` check verifies its ``review.recorded`` labels); any other kind is a problem.
    """
    reviews = plan.get("reviews") or {}
    if not isinstance(reviews, dict) or not all(isinstance(r, dict) for r in reviews.values()):
        raise _Problem("protocol.locked reviews is not an object of review declarations")
    for name, review in reviews.items():
        if review.get("kind") not in ("judge-label", "contrast", "reference-set"):
            raise _Problem(
                f"protocol.locked reviews.{name}: kind {review.get('kind')!r} is "
                "not 'judge-label', 'contrast' or 'reference-set'"
            )
    return {name: r for name, r in reviews.items() if r["kind"] == "contrast"}


def _reviews(ds: _Dataset, plan: dict[str, Any]) -> list[_Result]:
    """``review.<NAME>`` of each declared review sample, in name order (mcq-statistics.md §9)."""
    out = []
    for name, review in sorted(_review_plan(plan).items()):

        def compute(review: dict[str, Any] = review) -> dict[str, Any]:
            return _review.values_of(ds, plan, review)

        out.append(_guard(_Result(f"review.{name}"), compute))
    return out


def _human_tables(archive: _Archive, plan: dict[str, Any], done: list[_Result]) -> list[_Result]:
    """analysis.md §10: the tables of the recorded reviews, in sample name order.

    ``review.<NAME>`` of a reference-set sample (its items drawn from the locked item file) and of
    a judge-label sample (reviewers against the recorded judge decisions, whose votes the
    rescore check re-derived), ``review.<NAME>.codes`` of a contrast sample with codes (its
    cases those of the re-derived ``review.<NAME>`` in ``done``).
    """
    reviews: dict[str, list[tuple[int, str, Any, Any]]] = {}
    analysed = min((e.seq for e in archive.of("analysis.result")), default=None)
    for e in archive.of("review.recorded"):
        if analysed is not None and e.seq > analysed:
            continue  # recorded after the analysis: in no result (scoring.md §11)
        reviews.setdefault(str(e.body.get("sample")), []).append(
            (e.seq, e.actor, e.body.get("subject"), e.body.get("value"))
        )
    drawn = {r.id: r for r in done}
    out = []
    for name, review in sorted((plan.get("reviews") or {}).items()):
        mine = reviews.get(name, [])
        if review.get("kind") == "reference-set":

            def refsets(review: dict[str, Any] = review, mine: list[Any] = mine) -> dict[str, Any]:
                items = [item.id for item in _item_file(archive).items]
                sample = _human.item_sample(items, int(review["n"]), str(review["seed"]))
                return {
                    "reference": review["reference"],
                    "n": review["n"],
                    "seed": review["seed"],
                    **_human.reference_table(sample, mine),
                }

            out.append(_guard(_Result(f"review.{name}"), refsets))
        elif review.get("kind") == "judge-label":

            def labels(review: dict[str, Any] = review, mine: list[Any] = mine) -> dict[str, Any]:
                scored = {
                    e.body["response_seq"]: e.body["judge"]
                    for e in archive.of("trial.scored")
                    if isinstance(e.body.get("judge"), dict)
                    and e.body["judge"].get("step") == review["step"]
                }
                judged = []
                for seq, judge in scored.items():
                    votes = [x.get("vote") for x in judge["votes"]]
                    judged.append((seq, None not in votes and len(set(votes)) == 1))
                chosen = review_sample(judged, int(review["n"]), str(review["seed"]))
                step = (plan.get("steps") or {}).get(review["step"]) or {}
                return {
                    "step": review["step"],
                    "sample": chosen,
                    **_human.label_table(
                        {s: scored[s]["decision"] for s in chosen},
                        list(step.get("labels") or []),
                        mine,
                        dict(judged),
                    ),
                }

            out.append(_guard(_Result(f"review.{name}"), labels))
        elif review.get("kind") == "contrast" and review.get("codes"):

            def codes(
                name: str = name, review: dict[str, Any] = review, mine: list[Any] = mine
            ) -> dict[str, Any]:
                sample = drawn.get(f"review.{name}")
                if sample is None or sample.status != "ok":
                    raise ValueError("not drawn")
                seqs = [c["failed_response_seq"] for c in sample.values["cases"]]
                return _human.code_table(seqs, list(review["codes"]), mine)

            out.append(_guard(_Result(f"review.{name}.codes"), codes))
    return out


def _review_files(archive: _Archive, plan: dict[str, Any], results: list[_Event]) -> Check | None:
    """Each ``analysis/review/<NAME>.csv`` rebuilt (docs/archive-format.md), else a FAIL.

    From its verified ``review.<NAME>`` result, the locked item file and the response blobs;
    the FAIL names the first file that differs and its first differing line.
    """
    bodies = {str(e.body.get("id")): e.body for e in results}
    items: dict[str, dict[str, Any]] | None = None
    for name in sorted(_review_plan(plan)):
        rel = f"analysis/review/{name}.csv"
        body = bodies.get(f"review.{name}") or {}
        present = rel in archive.files.files
        if body.get("status") != "ok":
            if present:
                return Check(
                    "reanalysis",
                    Status.FAIL,
                    f"{rel} is in the archive but review.{name} was not computed.",
                    None,
                    rel,
                )
            continue
        if not present:
            return Check(
                "reanalysis",
                Status.FAIL,
                f"{rel} is missing (review.{name} was computed).",
                None,
                rel,
            )
        if items is None:
            items = {i.id: i.data for i in _item_file(archive).items}

        def response(seq: int, rel: str = rel) -> str:
            event = archive.by_seq.get(seq)
            if event is None or event.kind != "trial.responded":
                raise _Problem(f"{rel}: seq {seq} is not a trial.responded event", seq)
            fmt = str(event.body.get("format", "anthropic-messages"))
            return _review.shown_response(archive.event_blob(event, "response"), fmt)

        expected = _review.csv_bytes(body["values"], items, response)
        got = archive.file(rel)
        if got != expected:
            old = got.decode("utf-8", "replace").splitlines()
            new = expected.decode("utf-8", "replace").splitlines()
            line = next(
                (i for i, (a, b) in enumerate(zip(old, new, strict=False), 1) if a != b),
                min(len(old), len(new)) + 1,
            )
            return Check(
                "reanalysis",
                Status.FAIL,
                f"{rel} differs from the review sample "
                f"rebuilt from review.{name}, the item file and the responses (first at "
                f"line {line}).",
                None,
                rel,
            )
    return None
