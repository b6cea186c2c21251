"""``sensitivity.lmm`` (statistics.md "Sensitivity"), every fit checked by the own REML.

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

import math
from typing import Any

# scipy is imported inside the functions that use it: the checks before the science ones load
# none of it (tests/verify/test_verify_imports.py).
import numpy as np

from verify import _restats as st
from verify import _statistics as registry
from verify._recompute.compare import _fmt
from verify._recompute.dataset import _Dataset
from verify._recompute.model import _model, unreadable_variances
from verify._recompute.results import _guard, _obj_of, _Result
from verify._reml import RemlModel, check_point

SENSITIVITY_MODELS = ("registered", "probe_by_arm", "probe_by_arm_arm_residual")
"""statistics.md "Sensitivity": the models of ``sensitivity.lmm``, in order."""


SENSITIVITY_NAMES = {
    "registered": "registered random-intercept (Satterthwaite df, expected information)",
    "probe_by_arm": "probe-by-arm",
    "probe_by_arm_arm_residual": "probe-by-arm with a residual variance per arm",
}


def _without_df_method_where_unrecorded(contrasts: list[dict[str, Any]], recorded: Any) -> None:
    """An archive written before ``df_method`` was recorded: the member is not recomputed.

    ``docs/archive-format.md`` §5: every sensitivity df this tool ever wrote is Satterthwaite's
    with the expected information, so a model's row without ``df_method`` means just that.
    """
    by_id = {_obj_of(x).get("hypothesis"): _obj_of(x) for x in recorded or []}
    for row in contrasts:
        old = by_id.get(row.get("hypothesis"), {})
        for name in SENSITIVITY_MODELS:
            rec, new = old.get(name), row.get(name)
            if isinstance(rec, dict) and isinstance(new, dict) and "df_method" not in rec:
                new.pop("df_method", None)


def _unfittable(arms: list[str], groups: list[str], y: list[float], per_arm: bool) -> str | None:
    """statistics.md "Sensitivity": why a probe-by-arm model cannot be fitted, or None."""
    probes = sorted(set(groups))
    if len(probes) < 3:
        return f"fewer than 3 probes ({len(probes)})"
    cells: dict[tuple[str, str], list[float]] = {}
    for a, g, v in zip(arms, groups, y, strict=True):
        cells.setdefault((g, a), []).append(v)
    for g in probes:
        if len({a for (gg, a) in cells if gg == g}) < 2:
            return f"probe {g!r} has one arm"
    if max(len(c) for c in cells.values()) < 2:
        return "no cell with two trials"
    if per_arm:
        for arm in sorted(set(arms)):
            spread = [max(c) - min(c) for (_, a), c in cells.items() if a == arm]
            if max(spread) <= 0:
                return f"arm {arm} has zero residual variance"
    return None


def _unexplained(y: Any, exog: Any, cells: list[str], arm: list[str]) -> dict[str, float]:
    """statistics.md "Sensitivity": per arm, the squares left by ``X`` and the cell indicators.

    The cell means are removed from ``y`` and every column of ``X`` (Frisch–Waugh), then the
    centred ``y`` is regressed on the centred ``X``.
    """
    rows_of: dict[str, list[int]] = {}
    for i, c in enumerate(cells):
        rows_of.setdefault(c, []).append(i)
    data = np.column_stack([exog, y])
    for rows in rows_of.values():
        data[rows] -= data[rows].mean(axis=0)
    beta = np.linalg.lstsq(data[:, :-1], data[:, -1], rcond=None)[0]
    left = (data[:, -1] - data[:, :-1] @ beta) ** 2
    return {a: float(sum(left[i] for i, x in enumerate(arm) if x == a)) for a in sorted(set(arm))}


def _support(h: dict[str, Any], registered: dict[str, Any], p: Any, est: Any) -> bool | None:
    if not isinstance(p, float) or not isinstance(est, float) or not math.isfinite(p):
        return None
    raw, adjusted = registered.get("p_raw"), registered.get("p_adjusted")
    factor = adjusted / raw if isinstance(adjusted, float) and raw else 1.0
    ok = min(1.0, p * factor) < float(h.get("alpha") or 0.05)
    if (h.get("sides") or "two-sided") == "one-sided":
        ok = ok and est > 0
    if h.get("min_difference_pp") is not None:
        ok = ok and est * 100 >= float(h["min_difference_pp"])
    return bool(ok)


def _of_the_model(h: dict[str, Any]) -> bool:
    """A hypothesis testing a contrast of the mixed model (its kind's ``mixed_model``)."""
    kind = registry.get(h["test"])
    return kind is not None and kind.mixed_model


def _probe_diffs(block: _Block, a: str, b: str) -> list[float]:
    """Per probe: the mean over models of the (model, probe) cells' a − b (statistics.md)."""
    per_cell: dict[tuple[str, str, str], list[float]] = {}
    for v, aa, gg, mm in zip(block.y, block.arm, block.groups, block.fit["_models"], strict=True):
        per_cell.setdefault((gg, mm, aa), []).append(float(v))
    diffs = []
    for g in sorted(set(block.groups)):
        ds_g = [
            float(np.mean(per_cell[(g, m, a)])) - float(np.mean(per_cell[(g, m, b)]))
            for m in sorted({mm for gg, mm, _ in per_cell if gg == g})
            if (g, m, a) in per_cell and (g, m, b) in per_cell
        ]
        if ds_g:
            diffs.append(float(np.mean(ds_g)))
    return diffs


def _cluster_bootstrap(
    block: _Block, a: str, b: str, sides: str, design: dict[str, Any]
) -> dict[str, Any]:
    """The probe bootstrap of a − b and whether its interval supports the hypothesis."""
    boot = st.probe_bootstrap(
        _probe_diffs(block, a, b),
        int(design["bootstrap_iterations"]),
        design["bootstrap_seed"],
        sides,
    )
    lower, upper = boot["lower"], boot["upper"]
    excludes = lower > 0 or (upper is not None and upper < 0)
    boot["supports"] = bool(lower > 0 if sides == "one-sided" else excludes)
    return boot


def _recorded_variances(
    rec_models: Any, name: str, names: list[str], where: str
) -> tuple[list[float] | None, str | None]:
    """A recorded sensitivity model's variance components, and why they cannot be read.

    Nothing recorded to check (no such model, or one recorded as not fitted: compared as
    such) gives ``(None, None)``; a model recorded as fitted must record every variance as a
    finite number, else ``(None, problem)`` naming ``<where>.<name>.variances.<v>`` of each
    (the verifier does not fit its own in place of a point it cannot read). An integer counts:
    RFC 8785 JSON writes a float with no fraction as one, so a variance on the boundary
    (exactly 0) reads back as ``0``, not ``0.0``.
    """
    got = rec_models.get(name) if isinstance(rec_models, dict) else None
    if not isinstance(got, dict) or got.get("fitted") is not True:
        return None, None
    variances = got.get("variances")
    if not isinstance(variances, dict):
        return None, (
            f"the recorded variance components cannot be read ({where}.{name}.variances "
            f"{'missing' if 'variances' not in got else 'recorded ' + _fmt(variances)}, "
            "an object of finite numbers for a fitted model): the verifier checks the recorded "
            "point, it does not fit its own in its place"
        )
    problem = unreadable_variances(variances, names, f"{where}.{name}.variances")
    if problem is not None:
        return None, problem
    return [float(variances[n]) for n in names], None


class _Block:
    """The sensitivity models of one registered fit (the whole data's, or a subset's)."""

    def __init__(self, fit: dict[str, Any], where: str) -> None:
        self.fit = fit
        self.where = where
        """Where the recorded models sit in the result (``values.models`` or a subset row's)."""
        self.y = np.asarray(fit["_y"], dtype=np.float64)
        self.arm, self.groups = list(fit["_arm"]), list(fit["_groups"])
        self.others = list(fit["arms"][1:])
        factor = (
            ("model", list(fit["_models"]), fit["factor_references"][0])
            if fit.get("factors")
            else None
        )
        self.exog, _, _ = st._design(self.y, np.asarray(self.arm), fit["arms"][0], factor, False)
        self.cells = [f"{g}|{a}" for g, a in zip(self.groups, self.arm, strict=True)]
        self.params: dict[str, Any] = {}
        self.reml: dict[str, RemlModel] = {}
        self.problems: list[str] = []
        self.models: dict[str, Any] = {}

    def fit_models(self, rec_models: Any) -> None:
        """The registered model at its recorded point, then each probe-by-arm model."""
        fit, y = self.fit, self.y
        reg = RemlModel(y, self.exog, self.groups, [self.groups])
        self.params["registered"] = np.array([fit["group_variance"], fit["residual_variance"]])
        self.reg_ll = reg.loglik(self.params["registered"])
        self.reml["registered"] = reg
        self.models["registered"] = {
            "fitted": True,
            "log_likelihood": self.reg_ll,
            "variances": {"group": fit["group_variance"], "residual": fit["residual_variance"]},
        }
        left = (
            _unexplained(y, self.exog, self.cells, self.arm)
            if _unfittable(self.arm, self.groups, list(y), False) is None
            else {}
        )
        tiny = 1e-12 * max(float(np.sum((y - y.mean()) ** 2)), 1e-300)
        for name in SENSITIVITY_MODELS[1:]:
            reason = self._why_not(name, left, tiny)
            if reason is not None:
                self.models[name] = {"fitted": False, "reason": reason}
                continue
            self.models[name] = self._fit_one(name, rec_models)

    def _why_not(self, name: str, left: dict[str, float], tiny: float) -> str | None:
        """statistics.md "Sensitivity": why the model cannot be fitted, or None."""
        per_arm = name == "probe_by_arm_arm_residual"
        reason = _unfittable(self.arm, self.groups, list(self.y), per_arm)
        if reason is not None:
            return reason
        if not per_arm:
            if sum(left.values()) <= tiny:
                return "no residual variation within the probe x arm cells"
            return None
        return next(
            (f"arm {a} has zero residual variance" for a in sorted(left) if left[a] <= tiny),
            None,
        )

    def _fit_one(self, name: str, rec_models: Any) -> dict[str, Any]:
        """One probe-by-arm model: at its recorded point if that is a REML maximum."""
        from scipy import stats as sps

        per_arm = name == "probe_by_arm_arm_residual"
        classes = self.arm if per_arm else None
        names = ["group", "group_by_arm"] + (
            [f"residual[{c}]" for c in sorted(set(self.arm))] if per_arm else ["residual"]
        )
        model = RemlModel(self.y, self.exog, self.groups, [self.groups, self.cells], classes)
        at, unreadable = _recorded_variances(rec_models, name, names, self.where)
        if unreadable is not None:
            self.problems.append(unreadable)
        if at is not None:
            point, problem = check_point(model, at)
            if problem is not None:
                self.problems.append(f"sensitivity model {name}: {problem}")
                point = model.maximise()
        else:
            point = model.maximise()
        self.reml[name] = model
        self.params[name] = point.params
        entry: dict[str, Any] = {
            "fitted": True,
            "log_likelihood": point.loglik,
            "variances": dict(zip(names, (float(v) for v in point.params), strict=True)),
        }
        if name == "probe_by_arm":
            chi2 = max(0.0, 2.0 * (point.loglik - self.reg_ll))
            entry["lrt_chi2"] = chi2
            entry["lrt_p"] = 0.5 * float(sps.chi2.sf(chi2, 1)) if chi2 > 0 else 1.0
        return entry

    def row(
        self, h: dict[str, Any], hyp: _Result | None, suffix: str, design: dict[str, Any]
    ) -> dict[str, Any]:
        """One hypothesis's contrast under every model and the probe bootstrap."""
        a, b = h["contrast"]
        sides = h.get("sides") or "two-sided"
        registered = hyp.values if hyp is not None else {}
        weights = np.zeros(self.exog.shape[1])
        for level, sign in ((a, 1.0), (b, -1.0)):
            if level in self.others:
                weights[1 + self.others.index(level)] += sign
        row: dict[str, Any] = {
            "hypothesis": h["id"] + suffix,
            "a": a,
            "b": b,
            "sides": sides,
            "as_registered": {
                k: registered.get(k) for k in ("estimate", "lower", "upper", "p_raw", "p_adjusted")
            },
            "registered_verdict": hyp.verdict if hyp is not None else None,
        }
        for name in SENSITIVITY_MODELS:
            row[name] = None
            if name in self.reml:
                c = st.satterthwaite(self.reml[name], self.params[name], weights, sides)
                c["supports"] = _support(h, registered, c["p"], c["estimate"])
                row[name] = c
        row["cluster_bootstrap"] = _cluster_bootstrap(self, a, b, sides, design)
        primary = next((m for m in SENSITIVITY_MODELS[:0:-1] if row[m] is not None), None)
        row["primary"] = primary
        row["supports"] = row[primary]["supports"] if primary else None
        if row["registered_verdict"] == "supported" and row["supports"] is False:
            row["flag"] = None  # text not compared
        return row


def _block(
    fit: dict[str, Any],
    hyps: list[dict[str, Any]],
    rec_models: Any,
    by_id: dict[str | None, _Result],
    suffix: str,
    design: dict[str, Any],
    where: str = "values.models",
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """(models, contrast rows, REML problems) of one registered fit.

    ``where`` is where ``rec_models`` sits in the recorded result, for the messages.
    """
    block = _Block(fit, where)
    block.fit_models(rec_models)
    rows = [block.row(h, by_id.get(h["id"] + suffix), suffix, design) for h in hyps]
    return block.models, rows, block.problems


def _recorded_row(rec_rows: Any, hypothesis: str) -> dict[str, Any]:
    return next(
        (_obj_of(x) for x in rec_rows or [] if _obj_of(x).get("hypothesis") == hypothesis), {}
    )


def _subset_row(
    ds: _Dataset,
    plan: dict[str, Any],
    h: dict[str, Any],
    by_id: dict[str | None, _Result],
    rec_rows: Any,
    suffix: str,
) -> tuple[dict[str, Any], list[str]]:
    """statistics.md "Sensitivity": a subset hypothesis's row, from the subset's own models."""
    sub_plan = {
        **plan,
        "analysis": {k: v for k, v in (plan.get("analysis") or {}).items() if k != "model_arms"},
    }
    rec_hyp = by_id.get(h["id"])
    rec_subset = rec_hyp.values.get("subset_model") if rec_hyp is not None else None
    _, sub_fit = _model(
        ds.for_stimuli(list(h["stimuli"])),
        sub_plan,
        recorded=rec_subset if isinstance(rec_subset, dict) else None,
    )
    if sub_fit is None:
        return {"hypothesis": h["id"] + suffix, "stimuli": list(h["stimuli"]), "error": None}, []
    rec_row = _recorded_row(rec_rows, h["id"] + suffix)
    sub_models, rows, sub_problems = _block(
        sub_fit,
        [h],
        rec_row.get("subset_models"),
        by_id,
        suffix,
        plan["design"],
        f"values.contrasts[{h['id'] + suffix}].subset_models",
    )
    rows[0]["stimuli"] = list(h["stimuli"])
    rows[0]["subset_models"] = sub_models
    return rows[0], [f"{h['id']}: {x}" for x in sub_problems]


def _sensitivity(
    ds: _Dataset,
    plan: dict[str, Any],
    fit: dict[str, Any] | None,
    tested: list[_Result],
    recorded: dict[str, Any] | None,
    model: str | None = None,
) -> _Result | None:
    """``sensitivity.lmm`` (statistics.md "Sensitivity"), every fit checked by the own REML.

    With several models ``fit`` is the pooled model (the model a fixed factor in every
    sensitivity model); ``model`` gives ``sensitivity.lmm@<model>`` on that model's dataset and
    fit, its rows the ``<id>@<model>`` hypotheses.
    """
    mixed = [h for h in plan["hypotheses"] if _of_the_model(h)]
    lmm = [h for h in mixed if not h.get("stimuli")]
    subsets = [h for h in mixed if h.get("stimuli")]
    if not (lmm or subsets):
        return None
    suffix = f"@{model}" if model is not None else ""
    design = plan["design"]
    by_id = {x.hypothesis: x for x in tested}
    rec_models = (recorded or {}).get("models") if isinstance(recorded, dict) else None

    def compute() -> dict[str, Any]:
        if fit is None:
            raise st.StatError("the registered mixed model could not be fitted")
        models, contrasts, problems = _block(fit, lmm, rec_models, by_id, suffix, design)
        rec_rows = (recorded or {}).get("contrasts") if isinstance(recorded, dict) else None
        for h in subsets:  # statistics.md "Sensitivity": the subset's own models
            row, sub_problems = _subset_row(ds, plan, h, by_id, rec_rows, suffix)
            contrasts.append(row)
            problems += sub_problems
        _without_df_method_where_unrecorded(contrasts, rec_rows)
        out: dict[str, Any] = {
            "group_col": fit["_group_col"],
            "reference": fit["arms"][0],
            "n_groups": fit["n_groups"],
            "models": models,
            "contrasts": contrasts,
        }
        if fit.get("factors"):  # the pooled fit of several models
            out["factors"] = list(fit["factors"])
            out["factor_references"] = list(fit["factor_references"])
        if model is not None:
            out["model"] = model
        if problems:
            out["_reml_problem"] = "; ".join(problems)
        return out

    return _guard(_Result(f"sensitivity.lmm{suffix}"), compute)


def _sensitivity_per_model(
    ds: _Dataset, plan: dict[str, Any], tested: list[_Result], recorded: dict[str, Any]
) -> list[_Result]:
    """``sensitivity.lmm@<model>`` per model in model order (statistics.md "Sensitivity")."""
    if not ds.several_models:
        return []
    out = []
    for name in ds.models:
        sub = ds.for_model(name)
        _, sub_fit = _model(sub, plan, recorded=recorded.get(f"model.lmm@{name}"))
        r = _sensitivity(
            sub, plan, sub_fit, tested, recorded.get(f"sensitivity.lmm@{name}"), model=name
        )
        if r is not None:
            out.append(r)
    return out
