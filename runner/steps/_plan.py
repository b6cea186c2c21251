"""The preflight candidates of a study with steps (``docs/trials.md`` §3, §5).

Its trials, then its step calls: a trial whose request cannot be rendered yet (its item
template reads a step's output, or it is a second stage) is built with those slots empty; so
is a step call whose inputs do not exist yet. Every step of the session's models that still
has calls to make contributes its first call per model.
"""

from __future__ import annotations

from runner._preflight import Planned, request_shape
from runner._request import RequestBuilder, Trial
from runner._session import Session
from runner._state import StudyState
from runner.spec import Study
from runner.steps._core import StepCall, StepSpec, trial_step_calls
from runner.steps._state import StepWork, prior_values


def step_study_plan(
    session: Session, trials: list[Trial], state: StudyState, *, check: bool
) -> list[Planned]:
    """The preflight candidates of a study with steps: its trials, then its step calls."""
    assert session.steps is not None
    work = session.steps
    work.load(session.log)
    study, builder = session.study, session.builder
    renderer = builder.renderer
    planned: list[Planned] = []
    built: set[tuple[str, str | None, str, str | None]] = set()
    for trial in trials:
        key = (trial.arm, trial.model, trial.stimulus, trial.variant)
        if key in built:
            continue
        built.add(key)
        values = work.item_inputs(trial.stimulus) if work.item_steps_final(trial.stimulus) else None
        after = study.arms[trial.arm].after
        prior = {} if after is None else prior_values(study, work, state, trial, after)
        if values is not None and isinstance(prior, dict):
            renderer.step_values[trial.stimulus] = values
            renderer.prior_values[trial.id] = prior
            body = builder.body(trial)
            planned.append(Planned(trial, body, request_shape(body)))
            continue
        planned.append(stand_in(study, builder, trial))
    planned += step_candidates(session, trials, check=check)
    return planned


def stand_in(study: Study, builder: RequestBuilder, trial: Trial) -> Planned:
    """A trial's request with its undecided slots (``steps.*``, ``prior.*``) empty."""
    renderer = builder.renderer
    steps = sorted(
        {
            s.name
            for t in renderer.item_templates()
            for s in t.slots()
            if s.name.startswith("steps.")
        }
    )
    prior = sorted(
        {
            s.name
            for name in study.arms[trial.arm].components
            for s in (
                renderer.component_templates[name].slots()
                if name in renderer.component_templates
                else ()
            )
            if s.name.startswith("prior.")
        }
    )
    saved = renderer.step_values.get(trial.stimulus), renderer.prior_values.get(trial.id)
    renderer.step_values[trial.stimulus] = {s: "" for s in steps}
    renderer.prior_values[trial.id] = {s: "" for s in prior}
    try:
        body = builder.body(trial)
    finally:  # the stand-in values never reach a real request
        for table, key, value in (
            (renderer.step_values, trial.stimulus, saved[0]),
            (renderer.prior_values, trial.id, saved[1]),
        ):
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
    empty = tuple(steps) + tuple(prior)
    return Planned(trial, body, request_shape(body), empty)


def step_candidates(session: Session, trials: list[Trial], *, check: bool) -> list[Planned]:
    """For each step and model of the session with calls still to make, its first call.

    Item steps: the first call in call order that is not final (with ``check``, the first
    call). Trial steps: the call on the first trial of ``trials`` (else the first answered
    trial whose call is not final). Inputs that do not exist yet are sent empty.
    """
    assert session.steps is not None
    work = session.steps
    out: list[Planned] = []
    for name, spec in session.study.steps.items():
        for model in spec.models:
            if model not in session.selected:
                continue
            if spec.on == "item":
                call = _item_candidate(work, name, model, check=check)
            else:
                call = _trial_candidate(work, spec, trials, model, check=check)
            if call is not None:
                out.append(step_request(session, call))
    return out


def _due(work: StepWork, call: StepCall, *, check: bool) -> bool:
    """Whether ``call`` still has to be made (with ``check``: any call will do)."""
    record = work.calls.get(call.id)
    return check or record is None or not record.final


def _item_candidate(
    work: StepWork, name: str, model: str | None, *, check: bool
) -> StepCall | None:
    """The first call of item step ``name`` for ``model`` that is due."""
    return next(
        (c for c in work.item_calls[name] if c.model == model and _due(work, c, check=check)),
        None,
    )


def _trial_candidate(
    work: StepWork, spec: StepSpec, trials: list[Trial], model: str | None, *, check: bool
) -> StepCall | None:
    """The call of trial step ``spec`` for ``model`` on the first trial where it is due."""
    units = [(t.id, t.stimulus) for t in trials] + [
        (t, work.trial_stimulus.get(t, "")) for t in work.responses
    ]
    for trial_id, stimulus in units:
        candidate = next(c for c in trial_step_calls(spec, trial_id, stimulus) if c.model == model)
        if _due(work, candidate, check=check):
            return candidate
    return None


def step_request(session: Session, call: StepCall) -> Planned:
    """A step call's request: as it will be sent, or with its undecided inputs empty."""
    assert session.steps is not None
    work = session.steps
    values = None
    if call.trial is None or call.trial in work.responses:
        values = work.inputs(call)
    empty: tuple[str, ...] = ()
    if values is None:
        values = work.render.rough_values(call)
        given = work.render.rough_values(call)
        items = session.builder.renderer.items
        known = (
            set(session.builder.renderer.values(items.by_id[call.stimulus]))
            if (items is not None and call.stimulus in items.by_id)
            else set()
        )
        empty = tuple(sorted(k for k in given if k not in known))
    body = work.render.body(call, values)
    return Planned(call, body, request_shape(body), empty)
