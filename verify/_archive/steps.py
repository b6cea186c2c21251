"""The ``steps`` check: recorded model steps re-derived (``docs/archive-format.md`` §4.1).

Every step request re-rendered from its locked template and the inputs that existed when it
was sent, every step response re-parsed, every decision, ``trial.excluded`` and judge vote
re-derived, and no call made before its inputs existed (:mod:`verify._steps`).
"""

from __future__ import annotations

from typing import Any

from verify import _human
from verify._archive.view import Archive
from verify._ddx import ddx_lock_problems
from verify._ledgerfile import _State
from verify._prompts import LockedStudy, PromptError
from verify._report import Check
from verify._steps import Replay, plans_of, review_sample, step_lock_problems

__all__ = ["attach_steps", "check_steps", "replay_of"]

_KINDS = (
    "trial.requested",
    "trial.responded",
    "trial.failed",
    "trial.excluded",
    "step.requested",
    "step.responded",
    "step.failed",
    "review.recorded",
)


def staged(protocol: dict[str, Any]) -> bool:
    """Whether the study has steps or answer-dependent arms (the replay has work)."""
    arms = protocol.get("arms")
    return "steps" in protocol or (
        type(arms) is dict and any(type(a) is dict and "after" in a for a in arms.values())
    )


def replay_of(a: Archive, study: LockedStudy) -> tuple[Replay | None, str | None]:
    """The replay of the archive's step events (computed once), or (None, why not)."""
    cached: tuple[Replay | None, str | None] | None = getattr(a, "_steps_replay", None)
    if cached is not None:
        return cached
    try:
        plans = plans_of(a.protocol, study, lambda p: a.locked_blob(p, a.protocol_seq))
    except (PromptError, ValueError) as exc:
        result: tuple[Replay | None, str | None] = (None, str(exc))
        a._steps_replay = result  # type: ignore[attr-defined]
        return result
    seqs = sorted(s for kind in _KINDS for s in a.of_kind(kind))
    events = []
    for seq in seqs:
        kind = str(a.envs.kind(seq))
        body = a.body(seq)
        events.append((seq, kind, body, _getter(a, seq, body)))
    replay = Replay(study, plans, events)
    ddx = (a.protocol.get("response") or {}).get("ddx")
    reference = ddx.get("reference") if isinstance(ddx, dict) else None
    if isinstance(reference, str) and reference != "items":
        replay.reference_step = reference
    replay.run()
    result = (replay, None)
    a._steps_replay = result  # type: ignore[attr-defined]
    return result


def _getter(a: Archive, seq: int, body: dict[str, Any]) -> Any:
    def get(name: str) -> bytes | None:
        if name == "__request__":  # the request a trial response answers
            rseq = body.get("request_seq")
            if type(rseq) is not int:
                return None
            return a.blob(a.blob_ref(rseq, "request"))
        return a.blob(a.blob_ref(seq, name))

    return get


def attach_steps(a: Archive, study: LockedStudy) -> None:
    """Give ``study`` the ``{steps.*}`` values its item template reads, item by item."""
    replay, _ = replay_of(a, study)
    if replay is None:
        return
    study.prior_values = replay.prior_values
    for item in study.item_ids:
        try:
            values = replay.item_values(item)
        except KeyError:
            continue
        if values is not None:
            study.step_values[item] = values


def check_steps(a: Archive) -> Check:
    """Every step call re-rendered, re-parsed and re-derived; none before its inputs."""
    st = _State("steps")
    if not staged(a.protocol):
        kinds = [k for k in _KINDS[3:-1] if a.of_kind(k)]
        if kinds:
            seq = a.of_kind(kinds[0])[0]
            st.fail(f"seq {seq}: {kinds[0]} in a study that locked no steps", seq)
        reviews = _check_reviews(st, a, None)
        return st.check(
            "the study locked no steps"
            + (
                f"; {reviews} reviews signed by reviewer keys, each of its locked sample"
                if reviews
                else ""
            )
        )
    study, problem = a.study()
    if study is None:
        st.fail(f"the locked study cannot be rendered: {problem}", a.protocol_seq)
        return st.check("")
    replay, problem = replay_of(a, study)
    if replay is None:
        st.fail(f"protocol.locked steps cannot be read: {problem}", a.protocol_seq)
        return st.check("")
    for reason in step_lock_problems(replay.plans, study):
        st.fail(f"seq {a.protocol_seq}: {reason}", a.protocol_seq)
    for reason in ddx_lock_problems(a.protocol, replay.plans, study.fields, study.item_ids):
        st.fail(f"seq {a.protocol_seq}: {reason} (docs/scoring.md §12)", a.protocol_seq)
    for at, reason in replay.problems:
        st.fail(f"seq {at}: {reason}" if at is not None else reason, at)
    reviews = _check_reviews(st, a, replay)
    decided = sum(v is not None for _, v in replay.decisions.values())
    return st.check(
        f"{replay.rendered} step requests re-rendered byte for byte from the locked templates "
        f"and their recorded inputs, {sum(c.responses for c in replay.calls.values())} step "
        f"responses re-parsed, {len(replay.decisions)} decisions re-derived ({decided} "
        f"decided), {len(replay.excluded)} exclusions justified; every call after its inputs"
        + (
            f"; {reviews} reviews signed by reviewer keys, each of its locked sample"
            if reviews
            else ""
        )
    )


def _judged(a: Archive) -> dict[str, list[tuple[int, bool]]]:
    """Each judge step's judged responses: (response seq, whether its votes were unanimous)."""
    judged: dict[str, list[tuple[int, bool]]] = {}
    for seq in a.of_kind("trial.scored"):
        body = a.body(seq)
        judge = body.get("judge")
        if type(judge) is dict and type(body.get("response_seq")) is int:
            votes = [v.get("vote") for v in judge.get("votes") or [] if type(v) is dict]
            judged.setdefault(str(judge.get("step")), []).append(
                (body["response_seq"], None not in votes and len(set(votes)) == 1)
            )
    return judged


_REVIEW_KINDS = {"judge-label": "judge-label", "reference-set": "reference-set", "contrast": "code"}
"""A locked sample's kind -> the kind of its review.recorded events."""


def _review_misfit(
    a: Archive, seq: int, env: dict[str, Any], body: dict[str, Any], plan: Any
) -> str | None:
    """Why a review.recorded is not a reviewer's review of a locked sample of its kind."""
    role = a.roles.get(str(env.get("actor")))
    name = str(body.get("sample"))
    if role != "reviewer":
        return (
            f"seq {seq}: review.recorded signed by {env.get('actor')!r}, a key with "
            f"the role {role!r}, not 'reviewer'"
        )
    if type(plan) is not dict:
        return f"seq {seq}: review.recorded names sample {name!r}, which was not locked"
    if _REVIEW_KINDS.get(str(plan.get("kind"))) != body.get("kind") or (
        plan.get("kind") == "contrast" and not plan.get("codes")
    ):
        return (
            f"seq {seq}: review.recorded of kind {body.get('kind')!r} names sample "
            f"{name!r}, locked as a {plan.get('kind')!r} sample"
            + (" without codes" if plan.get("kind") == "contrast" else "")
        )
    return None


def _check_reviews(st: _State, a: Archive, replay: Replay | None) -> int:
    """scoring.md §11: each review.recorded by a reviewer key, of a subject of its sample.

    After the seal, with a value of its kind: a judge label; an edit of the item's supplied
    reference sets; declared codes of a contrast case.
    """
    reviews = a.of_kind("review.recorded")
    if not reviews:
        return 0
    plans = a.protocol.get("reviews") if type(a.protocol.get("reviews")) is dict else {}
    seal = next(iter(a.of_kind("scoring.sealed")), None)
    analysed = next(iter(a.of_kind("analysis.result")), None)
    judged = _judged(a)
    for seq in reviews:
        body = a.body(seq)
        name = str(body.get("sample"))
        plan: Any = (plans or {}).get(name)
        misfit = _review_misfit(a, seq, a.envs[seq] or {}, body, plan)
        if misfit is not None:
            st.fail(misfit, seq)
        elif seal is None or seq < seal:
            st.fail(f"seq {seq}: review.recorded before scoring.sealed", seq)
        elif analysed is not None and seq > analysed:
            st.warn(
                f"seq {seq}: review.recorded after the analysis (analysis.result seq "
                f"{analysed}): it is in no result (reviews close at ledger analyze; "
                "ledger review refuses one after it)",
                seq,
            )
        else:
            problem = _review_problem(a, plan, body, judged, replay)
            if problem is not None:
                st.fail(f"seq {seq}: review.recorded {problem} (sample {name!r})", seq)
    return len(reviews)


def _review_problem(
    a: Archive,
    plan: dict[str, Any],
    body: dict[str, Any],
    judged: dict[str, list[tuple[int, bool]]],
    replay: Replay | None,
) -> str | None:
    """Why a review's subject or value does not fit its locked sample, or None."""
    kind = plan.get("kind")
    if kind == "reference-set":
        return _reference_set_problem(a, plan, body, replay)
    if kind == "contrast":
        return _contrast_problem(a, plan, body)
    return _judge_label_problem(a, plan, body, judged, replay)


def _reference_set_problem(
    a: Archive, plan: dict[str, Any], body: dict[str, Any], replay: Replay | None
) -> str | None:
    """scoring.md §11.1: an edit of a sampled item's reference sets (supplied or decided)."""
    subject, value = body.get("subject"), body.get("value")
    study, why = a.study()
    if study is None:
        return f"cannot be checked: the locked items cannot be read ({why})"
    sample = _human.item_sample(study.item_ids, int(plan.get("n", 0)), str(plan.get("seed")))
    if subject not in sample:
        return f"subject {subject!r} is not an item of the sample (re-derived: {sample})"
    reference = str(plan.get("reference"))
    if reference == "supplied":
        sets = _human.supplied_sets(study.fields(str(subject)).get("metadata"))
    elif replay is None or reference not in replay.plans:
        return f"cannot be checked: step {reference!r} is not a locked step"
    else:  # the re-derived decision of the reference step (scoring.md §11.1)
        decided = replay.decisions.get((reference, str(subject)))
        value_of = decided[1] if decided is not None else None
        sets = _human.supplied_sets(
            {f"reference_{k}": v for k, v in value_of.items()} if type(value_of) is dict else None
        )
    if sets is None:
        return f"item {subject!r} has no reference sets (from {reference!r}) to edit"
    problem = _human.edit_problem(value, sets)
    return None if problem is None else f"value: {problem}"


def _contrast_problem(a: Archive, plan: dict[str, Any], body: dict[str, Any]) -> str | None:
    """A contrast review: declared codes of a case the analysis drew."""
    subject, value = body.get("subject"), body.get("value")
    name = str(body.get("sample"))
    result = next(
        (
            a.body(s)
            for s in a.of_kind("analysis.result")
            if a.body(s).get("id") == f"review.{name}"
        ),
        None,
    )
    cases = ((result or {}).get("values") or {}).get("cases")
    if type(cases) is not list:
        return f"cannot be checked: the archive has no drawn review.{name}"
    seqs = [c.get("failed_response_seq") for c in cases if type(c) is dict]
    if subject not in seqs:
        return f"subject {subject!r} is not a case of the sample (cases: {seqs})"
    problem = _human.code_problem(value, [str(c) for c in plan.get("codes") or []])
    return None if problem is None else f"value: {problem}"


def _judge_label_problem(
    a: Archive,
    plan: dict[str, Any],
    body: dict[str, Any],
    judged: dict[str, list[tuple[int, bool]]],
    replay: Replay | None,
) -> str | None:
    """A judge-label review: a label of the judge step, on a response of the re-drawn sample."""
    subject, value = body.get("subject"), body.get("value")
    drawn = review_sample(
        judged.get(str(plan.get("step")), []), int(plan.get("n", 0)), str(plan.get("seed"))
    )
    if subject not in drawn:
        return f"subject {subject!r} is not in the sample (re-derived: {drawn})"
    labels = list(
        ((a.protocol.get("steps") or {}).get(str(plan.get("step"))) or {}).get("labels") or []
    )
    if replay is not None and str(plan.get("step")) in replay.plans:
        labels = list(replay.plans[str(plan.get("step"))].labels)
    if value not in labels:
        return f"value {value!r} is not a label of the sample's judge step"
    return None
