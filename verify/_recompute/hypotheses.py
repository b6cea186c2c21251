"""``hypothesis.*`` results: each registered test asked of the statistic registry.

Per hypothesis: its dataset (a stimulus subset, a ddx metric as the outcome), its kind's
values (:mod:`verify._statistics`), the common members, the family corrections and the
kind's decision rule (analysis.md §3). Part of the science checks (:mod:`verify._science`);
imports nothing from ``ledger``, ``runner`` or ``analysis``.
"""

from __future__ import annotations

from typing import Any

from verify import _ddx
from verify import _restats as st
from verify import _statistics as registry
from verify._recompute.dataset import _Dataset, _labels, _metric_ds
from verify._recompute.results import _guard, _Result
from verify._statistics import Case

CORRECTIONS = ("bonferroni", "holm")
"""analysis.md §3: the family corrections a hypothesis can name."""


def _case(
    ds: _Dataset,
    plan: dict[str, Any],
    h: dict[str, Any],
    fit: dict[str, Any] | None,
    recorded: Any,
) -> Case:
    """The hypothesis on its own dataset: its stimuli's, with a ddx metric as the outcome."""
    a, b = h.get("contrast") or (h.get("arm", ""), "")
    subset = h.get("stimuli")
    hds = ds.for_stimuli(subset) if isinstance(subset, list) else ds
    if h.get("outcome") in _ddx.METRICS:  # analysis.md §9: the metric is the outcome
        hds = _metric_ds(hds, str(h["outcome"]))
    rec_subset = recorded.get("subset_model") if isinstance(recorded, dict) else None
    sides = h.get("sides") or "two-sided"
    return Case(hds, plan, h, fit, a, b, sides, rec_subset)


def _common(h: dict[str, Any], sides: str) -> dict[str, Any]:
    """The members every hypothesis result records besides its kind's (analysis.md §3)."""
    return (
        {
            "alpha": h.get("alpha") or 0.05,
            "sides": sides,
            "min_difference_pp": h.get("min_difference_pp"),
            "correction": h.get("correction", "none"),
            "family": h.get("family"),
        }
        | ({"phase": h["phase"]} if h.get("phase") is not None else {})
        | ({"outcome": h["outcome"]} if h.get("outcome") in _ddx.METRICS else {})
    )


def _one(case: Case) -> _Result:
    h = case.h
    kind = registry.get(h["test"])
    r = _Result(
        f"hypothesis.{h['id']}", hypothesis=h["id"], lmm=kind is not None and kind.mixed_model
    )

    def compute() -> dict[str, Any]:
        if kind is None:
            raise st.StatError(f"unknown test {h['test']!r}")
        return kind.values(case)

    _guard(r, compute)
    r.values = r.values | _common(h, case.sides)
    return r


def _correct(plan: dict[str, Any], out: list[_Result]) -> None:
    """Bonferroni or Holm within each family: ``p_adjusted`` and ``family_size``."""
    families: dict[tuple[str, str], list[_Result]] = {}
    for h, r in zip(plan["hypotheses"], out, strict=True):
        correction = h.get("correction", "none")
        if correction in CORRECTIONS:
            families.setdefault((h.get("family") or h["id"], correction), []).append(r)
    for (_, method), members in families.items():
        has_p = [m.status == "ok" and m.values.get("p_raw") is not None for m in members]
        ps = [float(m.values["p_raw"]) if ok else 1.0 for m, ok in zip(members, has_p, strict=True)]
        adjust = st.bonferroni if method == "bonferroni" else st.holm
        for m, ok, p_adj in zip(members, has_p, adjust(ps)["adjusted"], strict=True):
            if ok:
                m.values["p_adjusted"] = p_adj
                m.values["family_size"] = len(members)


def _hypotheses(
    ds: _Dataset,
    plan: dict[str, Any],
    fit: dict[str, Any] | None,
    recorded: dict[str, Any] | None = None,
    suffix: str = "",
) -> list[_Result]:
    """Every registered hypothesis's result, in the plan's order (analysis.md §3)."""
    # read before any hypothesis: a plan without a design, or whose response cannot give the
    # parser's labels, stops the check here (analysis.md §3 needs both)
    plan["design"]
    _labels(plan)
    out: list[_Result] = []
    for h in plan["hypotheses"]:
        got = (recorded or {}).get(f"hypothesis.{h['id']}{suffix}")
        out.append(_one(_case(ds, plan, h, fit, got)))
    _correct(plan, out)
    for h, r in zip(plan["hypotheses"], out, strict=True):
        kind = registry.get(h["test"])
        if r.status == "ok" and kind is not None:
            r.verdict, r.decided_by = kind.decide(h, r.values)
    return out
