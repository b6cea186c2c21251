"""Every result of analysis.md §3 recomputed, in the order the writer records them.

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

from typing import Any

from verify import _ddx, _mcqhyp, _qrboot
from verify import _restats as st
from verify import _statistics as registry
from verify._recompute.archive import _Archive
from verify._recompute.dataset import _Dataset, _restrict
from verify._recompute.descriptive import _descriptive
from verify._recompute.exploratory import _exploratory
from verify._recompute.hypotheses import _hypotheses
from verify._recompute.model import _model
from verify._recompute.results import _guard, _Result
from verify._recompute.reviews import _reviews
from verify._recompute.sensitivity import _sensitivity, _sensitivity_per_model


def _multiplicity(tested: list[_Result]) -> _Result:
    def compute() -> dict[str, Any]:
        rows = [
            (r.hypothesis, r.values["p_raw"])
            for r in tested
            if r.status == "ok" and r.values.get("p_raw") is not None
        ]
        if not rows and all(r.status == "ok" for r in tested):
            # docs/analysis.md: interval tests only, nothing to correct
            return {
                "hypotheses": [],
                "note": "no registered test gives a p-value (interval "
                "tests only): nothing to correct",
            }
        if not rows:
            raise st.StatError("no hypothesis produced a p-value")
        ps = [float(p) for _, p in rows]
        return {
            "hypotheses": [h for h, _ in rows],
            "bonferroni": st.bonferroni(ps),
            "holm": st.holm(ps),
        }

    return _guard(_Result("exploratory.multiplicity", lmm=any(r.lmm for r in tested)), compute)


def _phases(archive: _Archive) -> tuple[dict[str, int], dict[str, int]] | None:
    """(trial id -> phase index, phase name -> index) of a study locked in phases, else None.

    A phase's trials are those its ``schedule`` blob adds after the previous phase's
    (``docs/study-spec.md``, "Phases"); the ``schedule`` and ``phases`` checks verify the
    blobs themselves.
    """
    locked = archive.of("protocol.locked")
    if len(locked) < 2:
        return None
    trials: dict[str, int] = {}
    names: dict[str, int] = {}
    for index, event in enumerate(locked):
        archive.at(event)
        phase = event.body.get("phase")
        if isinstance(phase, dict) and isinstance(phase.get("name"), str):
            names[phase["name"]] = index
        text = archive.event_blob(event, "schedule").decode("utf-8", "replace")
        for trial in text.splitlines():
            trials.setdefault(trial, index)
    return trials, names


def _named_for(results: list[_Result], name: str) -> list[_Result]:
    """One model's results, named ``<id>@<model>`` (analysis.md §4)."""
    for r in results:
        r.id += f"@{name}"
        r.hypothesis = f"{r.hypothesis}@{name}"
        r.values["model"] = name
    return results


def _interleaved(pooled: list[_Result], per_model: list[list[_Result]]) -> list[_Result]:
    """Each pooled result followed by every model's own."""
    return [r for i, one in enumerate(pooled) for r in [one] + [res[i] for res in per_model]]


def _tested(
    ds: _Dataset,
    plan: dict[str, Any],
    fit: dict[str, Any] | None,
    out: list[_Result],
    recorded: dict[str, Any],
) -> list[_Result]:
    """The hypotheses' results (pooled, then each model's); each model's fit goes to ``out``."""
    tested = _hypotheses(ds, plan, fit, recorded)
    if not ds.several_models:
        return tested
    # analysis.md §4: each model's own fit and verdicts, named <id>@<model>
    per_model: list[list[_Result]] = []
    for name in ds.models:
        sub = ds.for_model(name)
        sub_model, sub_fit = _model(sub, plan, recorded=recorded.get(f"model.lmm@{name}"))
        sub_model.id += f"@{name}"
        out.append(sub_model)
        per_model.append(_named_for(_hypotheses(sub, plan, sub_fit, recorded, f"@{name}"), name))
    return _interleaved(tested, per_model)


def _ddx_results(ds: _Dataset, plan: dict[str, Any], recorded: dict[str, Any]) -> list[_Result]:
    """analysis.md §9: the metrics per arm (and model), the hypotheses, multiplicity."""
    ddx_out = [
        _guard(
            _Result("descriptive.ddx"),
            lambda: _ddx.ddx_descriptive(ds.trials, ds.several_models),
        )
    ]
    tested = _hypotheses(ds, plan, None, recorded)
    if ds.several_models:
        per = [
            _named_for(_hypotheses(ds.for_model(name), plan, None, recorded, f"@{name}"), name)
            for name in ds.models
        ]
        tested = _interleaved(tested, per)
    return [*ddx_out, *tested, _multiplicity(tested)]


def _kind_descriptives(ds: _Dataset, plan: dict[str, Any]) -> list[_Result]:
    """``descriptive.mcq`` and ``descriptive.qr_bootstrap`` of a plan registering their kinds."""
    out = []
    if registry.registers_mcq(plan):  # docs/mcq-statistics.md §11
        out.append(_guard(_Result("descriptive.mcq"), lambda: _mcqhyp.descriptive_values(ds, plan)))
    if _qrboot.registers_qr(plan):
        out.append(
            _guard(
                _Result("descriptive.qr_bootstrap"), lambda: _qrboot.descriptive_values(ds, plan)
            )
        )
    return out


def _phased(
    ds: _Dataset,
    plan: dict[str, Any],
    fit: dict[str, Any] | None,
    out: list[_Result],
    recorded: dict[str, Any],
    phases: tuple[dict[str, int], dict[str, int]],
) -> tuple[list[_Result], dict[str, Any]]:
    """docs/analysis.md "Phases": (the results, the last phase's plan).

    A hypothesis of phase k is tested, with its own mixed model, on the trials of phases up
    to k; the last phase's on all of them.
    """
    trial_phase, index = phases
    level_of = {h["id"]: index.get(h.get("phase"), 0) for h in plan["hypotheses"]}
    last = max(trial_phase.values())
    tested: list[_Result] = []
    last_plan = plan
    for level in sorted(set(level_of.values())):
        part = {
            **plan,
            "hypotheses": [h for h in plan["hypotheses"] if level_of[h["id"]] == level],
        }
        last_plan = {**plan, "hypotheses": []}
        if level >= last:
            tested += _tested(ds, part, fit, out, recorded)
            last_plan = part
            continue
        sub = _restrict(ds, {t for t, p in trial_phase.items() if p <= level})
        _, sub_fit = _model(sub, plan)
        tested += _tested(sub, part, sub_fit, [], recorded)
    order = {h["id"]: i for i, h in enumerate(plan["hypotheses"])}
    tested.sort(key=lambda r: order[str(r.hypothesis).split("@", 1)[0]])
    return tested, last_plan


def _recompute(
    ds: _Dataset,
    plan: dict[str, Any],
    phases: tuple[dict[str, int], dict[str, int]] | None = None,
    recorded: dict[str, Any] | None = None,
) -> list[_Result]:
    """Every result of analysis.md §3; ``recorded`` maps result ids to their recorded values."""
    recorded = recorded or {}
    if not ds.trials:
        return [_Result("descriptive.arms", status="failed")] + [
            _Result(
                f"hypothesis.{h['id']}", hypothesis=h["id"], status="failed", verdict="not computed"
            )
            for h in plan["hypotheses"]
        ]
    if ds.ddx:
        return _ddx_results(ds, plan, recorded)
    out = _descriptive(ds) + _kind_descriptives(ds, plan)
    model, fit = _model(ds, plan, recorded=recorded.get("model.lmm"))
    out.append(model)
    if phases is None:
        tested, last_plan = _tested(ds, plan, fit, out, recorded), plan
    else:
        tested, last_plan = _phased(ds, plan, fit, out, recorded, phases)
    out.extend(tested)
    out.extend(_exploratory(ds, plan, recorded))
    out.append(_multiplicity(tested))
    # the whole data's hypotheses only (docs/analysis.md "Phases")
    sens = _sensitivity(ds, last_plan, fit, tested, recorded.get("sensitivity.lmm"))
    if sens is not None:
        out.append(sens)
    out.extend(_sensitivity_per_model(ds, last_plan, tested, recorded))
    out.extend(_reviews(ds, plan))
    return out
