"""``model.lmm``: the registered mixed model, checked to be a REML maximum (statistics.md).

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import math
from typing import Any

from verify import _restats as st
from verify._recompute.compare import _fmt
from verify._recompute.dataset import _Dataset
from verify._recompute.results import _guard, _Result


def _reference(plan: dict[str, Any]) -> str:
    arms: dict[str, Any] = plan["arms"]
    full = [a for a in sorted(arms) if (arms[a] or {}).get("role") == "full"]
    return full[0] if full else min(arms)


def _finite_number(value: Any) -> bool:
    """A JSON number that is finite (RFC 8785 writes a float with no fraction as an integer)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def unreadable_variances(recorded: dict[str, Any], keys: list[str], path: str) -> str | None:
    """Why the recorded variance components ``keys`` of ``recorded`` cannot be read, or None.

    A fitted model records each as a finite number; the verifier checks that point to be a
    REML maximum of its own likelihood and evaluates the model there (statistics.md, "the
    verifier's check of a mixed model"). It never fits its own in place of a point that is
    missing or garbled: the archive omitted what it must record, and that is a FAIL naming
    ``path.<key>`` for each.
    """
    bad = [
        f"{path}.{k} " + ("missing" if k not in recorded else f"recorded {_fmt(recorded[k])}")
        for k in keys
        if not _finite_number(recorded.get(k))
    ]
    if not bad:
        return None
    return (
        f"the recorded variance components cannot be read ({'; '.join(bad)}; each must be a "
        "finite number): the verifier checks the recorded point, it does not fit its own in "
        "its place"
    )


def _recorded_point(
    recorded: Any, path: str = "values"
) -> tuple[tuple[float, float] | None, list[str], str | None]:
    """The recorded ``(σ²_g, σ²_e)`` of a mixed-model result, its warnings, and any problem.

    Nothing recorded to check (no result, a failed one: ``{}``, or a not applicable one:
    only ``reason``) gives no point and no problem: the verifier's own optimum decides the
    status, which is compared. A result that records a fit must record both variances as
    finite numbers, else the problem (:func:`unreadable_variances`).
    """
    if not isinstance(recorded, dict) or not set(recorded) - {"reason"}:
        return None, [], None
    warned = recorded.get("warnings")
    texts = [w for w in warned if isinstance(w, str)] if isinstance(warned, list) else []
    keys = ["group_variance", "residual_variance"]
    problem = unreadable_variances(recorded, keys, path)
    if problem is not None:
        return None, texts, problem
    return (float(recorded[keys[0]]), float(recorded[keys[1]])), texts, None


def _groups(ds: _Dataset, t: list[dict[str, Any]], group: str) -> list[Any]:
    """Each trial's random-intercept group: a column of the trial table, or its source."""
    if group == "source":
        if any(r["stimulus"] not in ds.sources for r in t):
            raise st.StatError("a stimulus has no source")
        return [ds.sources[r["stimulus"]] for r in t]
    if group in ("stimulus", "arm", "trial", "rep"):
        return [r[group] for r in t]
    raise st.StatError(f"no column {group!r} in the trial table")


def _model_factor(ds: _Dataset, t: list[dict[str, Any]]) -> tuple[str, list[Any], Any] | None:
    """With several models: the model as a fixed factor, its first level the reference."""
    if not ds.several_models:
        return None
    seen = {r["model"] for r in t}
    first = next((m for m in ds.models if m in seen), ds.models[0])
    return ("model", [r["model"] for r in t], first)


def _model_values(fit: dict[str, Any], group: str, ref: str, interaction: bool) -> dict[str, Any]:
    """What ``model.lmm`` records of a fit (the REML check's verdict kept, not compared)."""
    values = {k: v for k, v in fit.items() if not k.startswith("_")}
    values["_reml_problem"] = fit["_reml_problem"]
    values.update(outcome="accuracy", arm_col="arm", group_col=group, reference=ref)
    if interaction:
        cells = [n for n in fit["_names"] if ":" in n]
        values["interaction_test"] = st.wald(fit, cells)
    if fit["singular"] or not fit["converged"]:
        values["caution"] = None  # text not compared
    return values


def _model(
    ds: _Dataset,
    plan: dict[str, Any],
    interaction: bool = False,
    recorded: dict[str, Any] | None = None,
    path: str = "values",
) -> tuple[_Result, dict[str, Any] | None]:
    """``model.lmm`` (analysis.md §3-4): arm, and the model as a factor with several models.

    ``interaction`` gives ``exploratory.arm_by_model`` instead: the arm x model cells too, with
    the joint Wald test of those cells. ``recorded`` is the recorded result's ``values``: its
    variance components are checked to be a REML maximum and everything else is evaluated
    there (statistics.md, "the verifier's check of a mixed model"); variances it cannot read
    are the result's ``_reml_problem`` (a FAIL naming ``path.<member>``), never replaced by the
    verifier's own fit. ``path`` is where ``recorded`` sits in the result (``values``, or
    ``values.subset_model`` for a hypothesis's own model).
    """
    at, recorded_warnings, unreadable = _recorded_point(recorded, path)
    group = str((plan.get("analysis") or {}).get("random_intercept", "stimulus"))
    reference = _reference(plan)
    holder: list[dict[str, Any]] = []

    model_arms = (plan.get("analysis") or {}).get("model_arms")

    def compute() -> dict[str, Any]:
        t = ds.analysable()
        if isinstance(model_arms, list):
            t = [r for r in t if str(r["arm"]) in set(model_arms)]
        groups = _groups(ds, t, group)
        present = {str(r["arm"]) for r in t}
        ref = reference if reference in present or not present else min(present)
        fit = st.mixed_model(
            [r["accuracy"] for r in t],
            [r["arm"] for r in t],
            groups,
            ref,
            factor=_model_factor(ds, t),
            interaction=interaction,
            at=at,
            recorded_warnings=recorded_warnings,
        )
        fit.update(
            _y=[r["accuracy"] for r in t],
            _arm=[str(r["arm"]) for r in t],
            _groups=[str(g) for g in groups],
            _group_col=group,
            _models=[str(r["model"]) for r in t],
        )
        if unreadable is not None:
            fit["_reml_problem"] = unreadable
        holder.append(fit)
        return _model_values(fit, group, ref, interaction)

    name = "exploratory.arm_by_model" if interaction else "model.lmm"
    result = _guard(_Result(name, lmm=True), compute)
    return result, (holder[0] if holder else None)


SUBSET_MODEL_KEYS = (
    "n_obs",
    "n_groups",
    "group_variance",
    "residual_variance",
    "log_likelihood",
    "converged",
    "singular",
    "warnings",
)
"""What an lmm hypothesis on a stimulus subset records of its own fit (analysis.md §3)."""
