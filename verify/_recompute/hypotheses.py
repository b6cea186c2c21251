"""``hypothesis.*`` results: each registered test asked of the statistic registry.

Part of the science checks (:mod:`verify._science`); imports nothing from ``ledger``,
``runner`` or ``analysis``.
"""

from __future__ import annotations

from typing import Any

from verify import _ddx, _factorial, _mcqhyp, _qrboot
from verify import _restats as st
from verify._recompute.dataset import _Dataset, _labels, _metric_ds
from verify._recompute.model import SUBSET_MODEL_KEYS, _model
from verify._recompute.pairs import (
    _equivalence,
    _pair_accuracies,
    _paired_items,
    _pairs_by_trial,
    _stimulus_pairs,
    _wrong_counts,
)
from verify._recompute.results import _guard, _Result


def _hypotheses(
    ds: _Dataset,
    plan: dict[str, Any],
    fit: dict[str, Any] | None,
    recorded: dict[str, Any] | None = None,
    suffix: str = "",
) -> list[_Result]:
    design = plan["design"]
    labels = _labels(plan)
    out: list[_Result] = []
    full_ds = ds
    for h in plan["hypotheses"]:
        a, b = h.get("contrast") or (h.get("arm", ""), "")
        test = h["test"]
        sides = h.get("sides") or "two-sided"
        r = _Result(f"hypothesis.{h['id']}", hypothesis=h["id"], lmm=test == "lmm")
        subset = h.get("stimuli")
        hds = full_ds.for_stimuli(subset) if isinstance(subset, list) else full_ds
        if h.get("outcome") in _ddx.METRICS:  # analysis.md §9: the metric is the outcome
            hds = _metric_ds(hds, str(h["outcome"]))
        got = (recorded or {}).get(f"hypothesis.{h['id']}{suffix}")
        rec_subset = got.get("subset_model") if isinstance(got, dict) else None

        def compute(
            h: dict[str, Any] = h,
            a: str = a,
            b: str = b,
            test: str = test,
            sides: str = sides,
            ds: _Dataset = hds,
            rec_subset: Any = rec_subset,
        ) -> dict[str, Any]:
            one = sides == "one-sided"
            if _mcqhyp.is_mcq_hypothesis(h):  # docs/mcq-statistics.md §11
                return _mcqhyp.values_of(ds, plan, h)
            if _qrboot.is_qr(h):  # statistics.md: (question, run) bootstrap as a test
                return _qrboot.values_of(ds, plan, h)
            if test == "factorial":  # analysis.md "Factorial designs"
                return _factorial.factorial_values(ds.analysable(), plan, h, ds.models)
            if test == "lmm":
                model = fit
                sub: dict[str, Any] | None = None
                if isinstance(h.get("stimuli"), list):
                    sub_plan = {
                        **plan,
                        "analysis": {
                            k: v
                            for k, v in (plan.get("analysis") or {}).items()
                            if k != "model_arms"
                        },
                    }
                    result, model = _model(ds, sub_plan, recorded=rec_subset)
                    if model is None:
                        raise st.StatError("the subset's mixed model could not be fitted")
                    sub = {k: result.values.get(k) for k in SUBSET_MODEL_KEYS}
                    sub["stimuli"] = list(h["stimuli"])
                if model is None:
                    raise st.StatError("the mixed model could not be fitted")
                c = st.contrast(model, a, b, sides)
                out = {**c, "singular_fit": model["singular"], "p_raw": c["p"]}
                if sides == "one-sided":
                    both = st.contrast(model, a, b, "two-sided")
                    out["ci_two_sided"] = [both["lower"], both["upper"]]
                if sub is not None:
                    out["subset_model"] = sub
                    if model["_reml_problem"] is not None:
                        out["_reml_problem"] = f"subset model: {model['_reml_problem']}"
                if model["singular"] or not model["converged"]:
                    out["caution"] = None  # text not compared
                return out
            if test == "equivalence":
                return _equivalence(ds, a, b, h["margin_pp"] / 100)
            if test == "paired-t":
                dropped: list[dict[str, Any]] | None = None
                if h.get("pairing") == ["stimulus", "rep"]:
                    xs, ys, dropped = _pairs_by_trial(ds, a, b)
                else:
                    means = _stimulus_pairs(ds, a, b)
                    xs, ys = [x for x, _ in means.values()], [y for _, y in means.values()]
                res = st.paired_t(xs, ys)
                p = res["p_one_sided"] if one else res["p"]
                out = {**res, "p_raw": p, "estimate": res["difference"]}
                if h.get("pairing"):
                    out["pairing"] = list(h["pairing"])
                if dropped is not None:
                    out["n_dropped"] = len(dropped)
                    out["dropped_pairs"] = dropped
                return out
            if test == "independent-t":
                res = st.independent_t(*_pair_accuracies(ds, a, b))
                p = res["p_one_sided"] if one else res["p"]
                return {**res, "p_raw": p, "estimate": res["difference"]}
            if test == "bootstrap":
                return st.bootstrap_diff(
                    *_pair_accuracies(ds, a, b),
                    int(design["bootstrap_iterations"]),
                    design["bootstrap_seed"],
                )
            if test == "mcnemar":
                pairs = _paired_items(ds, a, b)
                if not pairs:
                    raise st.StatError("no paired items")
                mc = st.mcnemar_paired(
                    [bool(x["correct"]) for x, _ in pairs], [bool(y["correct"]) for _, y in pairs]
                )
                return {**mc, "p_raw": mc["p"], "estimate": (mc["b"] - mc["c"]) / len(pairs)}
            if test == "chi-square":
                if labels is None:
                    raise st.StatError("chi-square needs a parser with labels")
                mine = [i for i in ds.analysable_items() if i["arm"] == a]
                counts = _wrong_counts(mine, labels)
                chi = st.chi_square_gof(counts)
                return {**chi, "labels": list(labels), "p_raw": chi["p"]}
            raise st.StatError(f"unknown test {test!r}")

        _guard(r, compute)
        r.values = (
            r.values
            | {
                "alpha": h.get("alpha") or 0.05,
                "sides": sides,
                "min_difference_pp": h.get("min_difference_pp"),
                "correction": h.get("correction", "none"),
                "family": h.get("family"),
            }
            | ({"phase": h["phase"]} if h.get("phase") is not None else {})
            | ({"outcome": h["outcome"]} if h.get("outcome") in _ddx.METRICS else {})
        )
        out.append(r)
    families: dict[tuple[str, str], list[_Result]] = {}
    for h, r in zip(plan["hypotheses"], out, strict=True):
        correction = h.get("correction", "none")
        if correction in ("bonferroni", "holm"):
            families.setdefault((h.get("family") or h["id"], correction), []).append(r)
    for (_, method), members in families.items():
        has_p = [m.status == "ok" and m.values.get("p_raw") is not None for m in members]
        ps = [float(m.values["p_raw"]) if ok else 1.0 for m, ok in zip(members, has_p, strict=True)]
        adjust = st.bonferroni if method == "bonferroni" else st.holm
        for m, ok, p_adj in zip(members, has_p, adjust(ps)["adjusted"], strict=True):
            if ok:
                m.values["p_adjusted"] = p_adj
                m.values["family_size"] = len(members)
    for h, r in zip(plan["hypotheses"], out, strict=True):
        if r.status == "ok" and h["test"] in _mcqhyp.INTERVAL_TESTS:
            r.verdict, r.decided_by = _mcqhyp.decide_interval(h, r.values)
        elif r.status == "ok" and _qrboot.is_qr(h):
            r.verdict, r.decided_by = _qrboot.decide(h, r.values)
        elif r.status == "ok":
            _decide(h, r)
    return out


def _decide(h: dict[str, Any], r: _Result) -> None:
    v = r.values
    test = h["test"]
    alpha = v["alpha"]
    min_pp = v.get("min_difference_pp")
    if test == "equivalence":
        r.verdict = "supported" if v["holds"] else "not supported"
        r.decided_by = {
            "rule": "max per-group |difference| < margin",
            "max_abs_diff": v["max_abs_diff"],
            "group": v["group"],
            "margin": v["margin"],
            "_group_ok": v.get("_group_ok", []),
        }
        return
    if test == "bootstrap":
        lower, upper, est = v["lower"], v["upper"], v["estimate"]
        if h.get("sides") == "one-sided":
            ok = lower is not None and lower > 0
            rule = "95% bootstrap CI lower bound > 0"
        else:
            ok = (lower is not None and lower > 0) or (upper is not None and upper < 0)
            rule = "95% bootstrap CI excludes 0"
        if min_pp is not None:
            ok = ok and est * 100 >= min_pp
            rule += f" and estimate >= {min_pp} pp"
        r.verdict = "supported" if ok else "not supported"
        r.decided_by = {"rule": rule, "estimate": est, "lower": lower, "upper": upper}
        return
    p = v.get("p_adjusted", v.get("p_raw"))
    estimate = v.get("estimate")
    ok = p is not None and p < alpha
    rule = f"p{' (adjusted)' if 'p_adjusted' in v else ''} < {alpha}"
    if test in ("lmm", "paired-t", "independent-t", "mcnemar", "gee") and (
        h.get("sides") == "one-sided"
    ):
        ok = ok and estimate is not None and estimate > 0
        rule += " and the estimate in the predicted direction"
    if min_pp is not None and estimate is not None:
        ok = ok and estimate * 100 >= min_pp
        rule += f" and estimate >= {min_pp} pp"
    r.verdict = "supported" if ok else "not supported"
    r.decided_by = {"rule": rule, "p": p, "estimate": estimate}
