"""The ``plan`` check: a locked design plan (``plan/plan.json``) re-derived from its seed.

Written from ``docs/planning.md`` alone. The plan record holds, for every replicate setting
and scenario, each simulated study's verdict, estimate and intervals per hypothesis, and the
aggregates (power, type-I error, coverage, "not computed"). This check

1. recomputes ``inputs_sha256`` from the locked ``protocol.locked`` body and the record's own
   settings and stimuli, so the plan is the locked design's (§5);
2. re-derives every aggregate from the recorded per-study columns (§4);
3. re-simulates the first :data:`RECHECK` studies of every setting and scenario from the seed
   with this verifier's own draw code (§2) and its own statistics (``verify._science``: its
   REML, its tests and decision rules), and compares each verdict (exactly), estimate,
   truth and interval bound (relative :data:`TOLERANCE`).

A study beyond the first :data:`RECHECK` is trusted to the extent the aggregates are: a tamper
that changes one recorded study and its aggregate consistently is caught only in the first
ones (``docs/planning.md`` §7 says so).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np
import rfc8785

from verify._recompute import archive as sci_archive
from verify._recompute import dataset as sci_dataset
from verify._recompute import hypotheses as sci_hypotheses
from verify._recompute import model as sci_model
from verify._recompute import sensitivity as sci_sensitivity
from verify._report import Check, Status

PLAN_PATH = "plan/plan.json"
RECHECK = 1
"""Simulated studies re-run per replicate setting and scenario."""
MAX_TRIALS = 1_000_000
"""The largest simulated study (trials per replicate setting) the check re-simulates."""
TOLERANCE = 1e-4
"""Relative tolerance of a re-simulated study's numbers. Wider than the reanalysis's 1e-6: a
plan records no variance components, so the verifier finds its own REML maxima, and two
maximisers of a flat likelihood (a sensitivity model with six probes) agree to ~1e-5 in the
interval bounds (``docs/planning.md`` §7)."""
AGGREGATE_TOLERANCE = 1e-9
POPULATION_TESTS = ("lmm",)
SENSITIVITY = ("probe_by_arm", "probe_by_arm_arm_residual", "cluster_bootstrap")
INPUT_KEYS = (
    "analysis",
    "arms",
    "design",
    "hypotheses",
    "models",
    "model_order",
    "response",
    "variant_order",
)


class _Mismatch(Exception):
    def __init__(self, where: str, recorded: Any, derived: Any) -> None:
        super().__init__(f"{where}: recorded {recorded!r}, re-derived {derived!r}")


def _close(a: Any, b: Any, tol: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a == b)
    fa, fb = float(a), float(b)
    if not (math.isfinite(fa) and math.isfinite(fb)):
        return fa == fb
    return abs(fa - fb) <= tol * max(abs(fa), abs(fb)) or fa == fb


def _same_objects(where: str, recorded: Any, derived: Any, tol: float) -> None:
    """:func:`_same` where either is an object: both, with the same members, each the same."""
    if not (isinstance(recorded, dict) and isinstance(derived, dict)):
        raise _Mismatch(where, recorded, derived)
    if set(recorded) != set(derived):
        raise _Mismatch(f"{where} (members)", sorted(recorded), sorted(derived))
    for k in recorded:
        _same(f"{where}.{k}", recorded[k], derived[k], tol)


def _same_arrays(where: str, recorded: Any, derived: Any, tol: float) -> None:
    """:func:`_same` where either is an array: both, as long, each element the same."""
    if not (isinstance(recorded, list) and isinstance(derived, list)):
        raise _Mismatch(where, recorded, derived)
    if len(recorded) != len(derived):
        raise _Mismatch(f"{where} (length)", len(recorded), len(derived))
    for i, (x, y) in enumerate(zip(recorded, derived, strict=True)):
        _same(f"{where}[{i}]", x, y, tol)


def _same(where: str, recorded: Any, derived: Any, tol: float) -> None:
    if isinstance(recorded, dict) or isinstance(derived, dict):
        _same_objects(where, recorded, derived, tol)
        return
    if isinstance(recorded, list) or isinstance(derived, list):
        _same_arrays(where, recorded, derived, tol)
        return
    if isinstance(recorded, int | float) and isinstance(derived, int | float):
        if not _close(recorded, derived, tol):
            raise _Mismatch(where, recorded, derived)
        return
    if recorded != derived:
        raise _Mismatch(where, recorded, derived)


# ------------------------------------------------------------------ §5 the inputs' hash


def inputs_sha256(
    protocol: dict[str, Any], settings: dict[str, Any], stimuli: dict[str, Any]
) -> str:
    """§5: SHA-256 of the RFC 8785 JSON of the protocol's plan-shaping members and settings."""
    picked: dict[str, Any] = {k: protocol.get(k) for k in INPUT_KEYS}
    picked["arms"] = {
        arm: {k: v for k, v in (rec or {}).items() if k != "sha256"}
        for arm, rec in (protocol.get("arms") or {}).items()
    }
    design = protocol.get("design") or {}
    picked["design"] = {
        k: design.get(k) for k in ("replicates", "bootstrap_seed", "bootstrap_iterations")
    }
    plan = {k: v for k, v in settings.items() if k != "studies"}
    doc = {"protocol": picked, "plan": plan, "stimuli": stimuli}
    return hashlib.sha256(rfc8785.dumps(doc)).hexdigest()


# ------------------------------------------------------------------ §2 the simulated trials


def _parts(trial: str) -> tuple[str, str, str, str, int]:
    """(arm, model, stimulus, variant, rep) of a 3-, 4- or 5-part trial id."""
    p = trial.split("|")
    if len(p) == 3:
        return p[0], "", p[1], "", int(p[2])
    if len(p) == 4:
        return p[0], p[1], p[2], "", int(p[3])
    return p[0], p[1], p[2], p[3], int(p[4])


def _setting_trials(schedule: list[str], design_reps: int, reps: int) -> list[str]:
    """§2: the locked schedule's trials, or each of its cells with replicates 1..reps."""
    if reps == design_reps:
        return list(schedule)
    cells = sorted({t.rsplit("|", 1)[0] for t in schedule})
    return [f"{c}|{r}" for c in cells for r in range(1, reps + 1)]


def _clip_mean(m: float, s: float) -> float:
    if s <= 0:
        return min(1.0, max(0.0, m))

    def cdf(x: float) -> float:
        return 0.5 * (1 + math.erf(x / math.sqrt(2)))

    def pdf(x: float) -> float:
        return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)

    a, b = -m / s, (1 - m) / s
    return m * (cdf(b) - cdf(a)) + s * (pdf(a) - pdf(b)) + (1 - cdf(b))


def _arm_cells(keys: list[tuple[str, str, str, str, int]], arm: str) -> list[tuple[str, str]]:
    return sorted({(k[1], k[3]) for k in keys if k[0] == arm})


def _centre(sc: dict[str, Any], arm: str, model: str, variant: str) -> float:
    return float(sc["rates"][arm] + sc["models"].get(model, 0.0) + sc["variants"].get(variant, 0.0))


def population_truth(
    sc: dict[str, Any], keys: list[tuple[str, str, str, str, int]], a: str, b: str
) -> float:
    """§4: the population contrast, each arm averaged over its (model, variant) cells."""
    spread = math.hypot(sc["stimulus_sd"], sc["stimulus_arm_sd"])

    def mean(arm: str) -> float:
        values = [
            _centre(sc, arm, m, v)
            if sc["distribution"] == "normal"
            else _clip_mean(_centre(sc, arm, m, v), spread)
            for m, v in _arm_cells(keys, arm)
        ]
        return float(np.mean(values))

    return mean(a) - mean(b)


Simulated = tuple[list[dict[str, Any]], dict[str, float], dict[tuple[str, str], float]]


def _simulate(
    sc: dict[str, Any],
    keys: list[tuple[str, str, str, str, int]],
    trials: list[str],
    stimuli: dict[str, Any],
    rng: np.random.Generator,
) -> Simulated:
    analysed = sorted(s for s, info in stimuli.items() if not info["control"])
    arms = sorted(sc["rates"])
    zu = rng.standard_normal(len(analysed))
    zw = rng.standard_normal((len(analysed), len(arms)))
    u = {s: sc["stimulus_sd"] * float(zu[i]) for i, s in enumerate(analysed)}
    w = {
        (s, a): sc["stimulus_arm_sd"] * float(zw[i, j])
        for i, s in enumerate(analysed)
        for j, a in enumerate(arms)
    }
    n = len(keys)
    uniform = rng.random(n)
    mean = np.array(
        [_centre(sc, k[0], k[1], k[3]) + u.get(k[2], 0.0) + w.get((k[2], k[0]), 0.0) for k in keys]
    )
    items = np.array([int(stimuli[k[2]]["items"]) for k in keys], dtype=np.int64)
    if sc["distribution"] == "normal":
        values = mean + np.array([sc["residual_sd"][k[0]] for k in keys]) * rng.standard_normal(n)
    else:
        values = rng.binomial(items, np.clip(mean, 0.0, 1.0)) / items
    rows = []
    for i, (k, trial) in enumerate(zip(keys, trials, strict=True)):
        failed = bool(uniform[i] < sc["parse_failure"][k[0]])
        rows.append(
            {
                "trial": trial,
                "arm": k[0],
                "model": k[1],
                "stimulus": k[2],
                "variant": k[3],
                "rep": k[4],
                "response_seq": i,
                "status": "unparseable" if failed else "ok",
                "n_items": int(items[i]),
                "accuracy": 0.0 if failed else float(values[i]),
                "control": bool(stimuli[k[2]]["control"]),
                "excluded": failed,
            }
        )
    return rows, u, w


def _conditional(
    sc: dict[str, Any],
    keys: list[tuple[str, str, str, str, int]],
    u: dict[str, float],
    w: dict[tuple[str, str], float],
    a: str,
    b: str,
    stimuli: list[str],
) -> float:
    def value(arm: str, s: str) -> float:
        got = []
        for m, v in _arm_cells(keys, arm):
            x = _centre(sc, arm, m, v) + u[s] + w[(s, arm)]
            got.append(x if sc["distribution"] == "normal" else min(1.0, max(0.0, x)))
        return float(np.mean(got))

    return float(np.mean([value(a, s) - value(b, s) for s in stimuli]))


def _bounds(lower: Any, upper: Any) -> list[float | None]:
    def one(v: Any) -> float | None:
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

    return [one(lower), one(upper)]


def _rerun(
    protocol: dict[str, Any],
    settings: dict[str, Any],
    sc: dict[str, Any],
    keys: list[tuple[str, str, str, str, int]],
    trials: list[str],
    stimuli: dict[str, Any],
    rng: np.random.Generator,
) -> dict[str, Any]:
    """One simulated study through this verifier's own analysis: per hypothesis numbers."""
    rows, u, w = _simulate(sc, keys, trials, stimuli, rng)
    if (protocol.get("analysis") or {}).get("exclude_unparseable", True) is False:
        for trial in rows:  # analysis.md §2: an unparseable trial then scores 0 and stays
            trial["excluded"] = False
    ds = sci_dataset._Dataset(
        rows,
        sci_dataset.ItemTable(),
        sorted(protocol["arms"]),
        [],
        "",
        {},
        list(protocol.get("model_order") or []),
        bool(protocol.get("variants")),
    )
    _, fit = sci_model._model(ds, protocol)
    tested = sci_hypotheses._hypotheses(ds, protocol, fit)
    analysed = sorted(s for s, i in stimuli.items() if not i["control"])
    out: dict[str, Any] = {}
    for h, r in zip(protocol["hypotheses"], tested, strict=True):
        a, b = h["contrast"]
        subset = [s for s in (h.get("stimuli") or analysed) if s in u]
        v = r.values if r.status == "ok" else {}
        row: dict[str, Any] = {
            "verdict": r.verdict or "not computed",
            "estimate": v.get("estimate"),
            "conditional_truth": _conditional(sc, keys, u, w, a, b, subset),
        }
        if r.status == "ok" and h["test"] != "equivalence" and "lower" in v:
            row["registered"] = _bounds(v.get("lower"), v.get("upper"))
        elif r.status == "ok" and "ci_lower" in v:  # t-tests: their recorded 95% t interval
            row["registered"] = _bounds(v.get("ci_lower"), v.get("ci_upper"))
        if r.status == "ok" and isinstance(v.get("ci_two_sided"), list):
            row["two_sided"] = _bounds(*v["ci_two_sided"])
        out[h["id"]] = row
    if settings["sensitivity"] and any(h["test"] == "lmm" for h in protocol["hypotheses"]):
        sens = sci_sensitivity._sensitivity(ds, protocol, fit, tested, None)
        for c in (sens.values.get("contrasts") or []) if sens is not None else []:
            target = out.get(str(c.get("hypothesis")))
            if target is None:
                continue
            target["sensitivity"] = {
                name: _bounds(c[name]["lower"], c[name]["upper"])
                if isinstance(c.get(name), dict)
                else None
                for name in SENSITIVITY
            } | {"supports": c.get("supports")}
    return out


# ------------------------------------------------------------------ §4 the aggregates


def _share(flags: list[bool]) -> dict[str, Any]:
    n = len(flags)
    p = sum(flags) / n if n else None
    return {"share": p, "n": n, "mc_se": math.sqrt(p * (1 - p) / n) if p is not None else None}


def _covered(bounds: Any, truth: float) -> bool:
    lo, hi = bounds
    return (lo is None or lo <= truth) and (hi is None or truth <= hi)


def aggregates(
    protocol: dict[str, Any],
    settings: dict[str, Any],
    sc: dict[str, Any],
    keys: list[tuple[str, str, str, str, int]],
    columns: dict[str, Any],
) -> list[dict[str, Any]]:
    """§4: every hypothesis's summary, from the recorded per-study columns."""
    out = []
    for h in protocol["hypotheses"]:
        hid = h["id"]
        col = columns[hid]
        a, b = h["contrast"]
        truth = population_truth(sc, keys, a, b)
        verdicts = col["verdict"]
        sides = h.get("sides") or "two-sided"
        min_pp = h.get("min_difference_pp")
        if h["test"] == "equivalence":
            role = "share supported"
        elif abs(truth) < 1e-12:
            role = "type-I error"
        elif (truth > 0 or sides == "two-sided") and (min_pp is None or truth * 100 >= min_pp):
            role = "power"
        else:
            role = "share supported"
        population = h["test"] in POPULATION_TESTS
        coverage = {}
        for name in ("registered", "two_sided"):
            if name in col:
                coverage[name] = _share(
                    [
                        _covered(bnd, truth if population else t)
                        for bnd, t in zip(col[name], col["conditional_truth"], strict=True)
                        if bnd is not None
                    ]
                )
        counts: dict[str, int] = {}
        for v in verdicts:
            counts[v] = counts.get(v, 0) + 1
        estimates = [e for e in col["estimate"] if isinstance(e, float)]
        entry: dict[str, Any] = {
            "hypothesis": hid,
            "test": h["test"],
            "sides": sides,
            "primary": hid in settings["primary"],
            "truth": truth,
            "estimand": "population" if population else "study stimuli",
            "role": role,
            "supported": _share([v == "supported" for v in verdicts]),
            "not_computed": _share([v == "not computed" for v in verdicts]),
            "verdicts": dict(sorted(counts.items())),
            "coverage": coverage,
            "mean_estimate": float(np.mean(estimates)) if estimates else None,
        }
        sens = col.get("sensitivity")
        if sens is not None:
            entry["sensitivity"] = {
                name: _share([_covered(bnd, truth) for bnd in sens[name] if bnd is not None])
                for name in SENSITIVITY
                if any(bnd is not None for bnd in sens[name])
            }
            entry["sensitivity_supports"] = _share([bool(s) for s in sens["supports"]])
        out.append(entry)
    return out


# ------------------------------------------------------------------ the check


def plan_check(archive: Any) -> Check | None:
    """The ``plan`` check, or None when no ``plan/plan.json`` was locked."""
    data = sci_archive._locked_bytes(archive, PLAN_PATH)
    if data is None:
        return None
    event = archive.current
    seq = event.seq if event is not None else None
    protocol_event = sci_archive._protocol(archive)
    if protocol_event is None:
        return Check("plan", Status.FAIL, "a plan is locked but no protocol.locked.", seq)
    schedule = archive.event_blob(protocol_event, "schedule").decode("utf-8").splitlines()
    ok, message = check_record(protocol_event.body, schedule, data)
    return Check(
        "plan", Status.PASS if ok else Status.FAIL, f"{PLAN_PATH}: {message}.", seq, PLAN_PATH
    )


def check_record(
    protocol: dict[str, Any], schedule: list[str], data: bytes, recheck: int = RECHECK
) -> tuple[bool, str]:
    """Re-derive a plan record against the locked ``protocol`` body and ``schedule``.

    Returns ``(True, what was re-derived)`` or ``(False, the first difference)``; never
    raises for a malformed record.
    """
    try:
        record = json.loads(data)
    except ValueError as exc:
        return False, f"not JSON: {exc}"
    if not isinstance(record, dict) or record.get("version") != 1:
        got = record.get("version") if isinstance(record, dict) else None
        return False, f"version {got!r} is not 1 (the only version this verifier reads)"
    try:
        return _check(protocol, schedule, record, recheck)
    except _Mismatch as exc:
        return False, str(exc)
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
        return False, f"malformed record ({type(exc).__name__}: {exc})"


def _check(
    protocol: dict[str, Any], schedule: list[str], record: dict[str, Any], recheck: int
) -> tuple[bool, str]:
    settings, stimuli = record["settings"], record["stimuli"]
    want = inputs_sha256(protocol, settings, stimuli)
    if record.get("inputs_sha256") != want:
        return False, (
            f"inputs_sha256 {record.get('inputs_sha256')} is not the locked "
            f"design's ({want}): the plan was computed for another design or plan"
        )
    design_reps = int((protocol.get("design") or {}).get("replicates", 0))
    studies = settings["studies"]
    if isinstance(studies, bool) or not isinstance(studies, int) or not 10 <= studies <= 100_000:
        return False, f"settings.studies {studies!r} is not from 10 to 100,000"
    if len(settings["scenarios"]) > 50 or len(settings["replicates"]) > 10:
        return False, "more than 50 scenarios or 10 replicate settings (planning.md §1)"
    for reps in settings["replicates"]:
        if isinstance(reps, bool) or not isinstance(reps, int) or not 2 <= reps <= 10_000:
            return False, f"settings.replicates {reps!r} is not from 2 to 10,000"
        cells = len({t.rsplit("|", 1)[0] for t in schedule})
        if cells * reps > MAX_TRIALS:
            return False, (
                f"a replicate setting of {reps} gives {cells * reps:,} trials, more "
                f"than the {MAX_TRIALS:,} this verifier re-simulates"
            )
    analysed = {_parts(t)[2] for t in schedule}
    if set(stimuli) != analysed:
        return False, f"its stimuli {sorted(stimuli)} are not the schedule's {sorted(analysed)}"
    reps_list = list(settings["replicates"]) or [design_reps]
    expected = [(r, s["name"]) for r in reps_list for s in settings["scenarios"]]
    got = [(res["replicates"], res["scenario"]) for res in record["results"]]
    if got != expected:
        return False, f"results {got} are not the settings' {expected}"
    rerun = 0
    count = len(settings["scenarios"])
    for si, reps in enumerate(reps_list):
        trials = _setting_trials(schedule, design_reps, reps)
        pairs = sorted((_parts(t), t) for t in trials)
        keys = [k for k, _ in pairs]
        ordered = [t for _, t in pairs]
        for ci, sc in enumerate(settings["scenarios"]):
            res = record["results"][si * count + ci]
            where = f"results[{si * count + ci}]"
            if res["trials"] != len(trials):
                raise _Mismatch(f"{where}.trials", res["trials"], len(trials))
            columns = res["studies"]
            _same(
                f"{where}.hypotheses",
                res["hypotheses"],
                aggregates(protocol, settings, sc, keys, columns),
                AGGREGATE_TOLERANCE,
            )
            for k in range(min(recheck, int(settings["studies"]))):
                rng = np.random.default_rng([int(settings["seed"]), si, ci, k])
                derived = _rerun(protocol, settings, sc, keys, ordered, stimuli, rng)
                _compare_study(f"{where}.studies", columns, derived, k)
                rerun += 1
    total = int(settings["studies"]) * len(expected)
    return True, (
        f"the locked design's plan (inputs_sha256); every aggregate of its {total} "
        f"simulated studies re-derived; {rerun} studies re-simulated from seed "
        f"{settings['seed']} and re-analysed with equal verdicts and intervals"
    )


def _compare_study(where: str, columns: dict[str, Any], derived: dict[str, Any], k: int) -> None:
    for hid, row in derived.items():
        col = columns[hid]
        at = f"{where}.{hid}[{k}]"
        _same(f"{at}.verdict", col["verdict"][k], row["verdict"], 0.0)
        for name in ("estimate", "conditional_truth"):
            _same(f"{at}.{name}", col[name][k], row[name], TOLERANCE)
        for name in ("registered", "two_sided"):
            if name in col or name in row:
                _same(
                    f"{at}.{name}", (col.get(name) or [None] * (k + 1))[k], row.get(name), TOLERANCE
                )
        if "sensitivity" in row or "sensitivity" in col:
            sens = col.get("sensitivity") or {}
            recorded = {n: sens.get(n, [None] * (k + 1))[k] for n in (*SENSITIVITY, "supports")}
            _same(f"{at}.sensitivity", recorded, row.get("sensitivity"), TOLERANCE)


# ------------------------------------------------------------------ §8 the report's section

REPORT_HEADING = "Sample-size justification (ledger plan, locked before the run)"
REPORT_CAPTION = (
    "Design diagnostics by simulation: share of simulated studies with a supported verdict "
    "(power where the scenario's contrast is an effect, type-I error where it is 0), share "
    "not computed, and how often each interval covers its truth"
)
REPORT_HEADER = [
    "scenario",
    "replicates",
    "hypothesis",
    "truth",
    "P(supported)",
    "not computed",
    "coverage: registered",
    "two-sided",
    "sensitivity (per-arm residual)",
]


def _percent(entry: Any) -> str:
    share = entry.get("share") if isinstance(entry, dict) else None
    if isinstance(share, bool) or not isinstance(share, int | float):
        return "–"
    return f"{share * 100:.1f}%"


def report_text(record: dict[str, Any], seq: int, sha256: str) -> str:
    """§8: the paragraph the report prints above the plan's table."""
    s = record["settings"]
    per = len(s["scenarios"])
    names = ", ".join(str(x["name"]) for x in s["scenarios"])
    reps = ", ".join(
        str(record["results"][i]["replicates"]) for i in range(0, len(record["results"]), per)
    )
    primary = ", ".join(s["primary"]) if s["primary"] else "none"
    return (
        f"plan/plan.json locked at seq {seq} (SHA-256 {sha256[:16]}…): {s['studies']} "
        f"simulated studies per scenario ({names}) and replicate setting ({reps}), seed "
        f"{s['seed']}, each analysed with the registered analysis; power target "
        f"{float(s['power_target']) * 100:.0f}% for the primary hypotheses ({primary})."
    )


def report_rows(record: dict[str, Any]) -> list[list[str]]:
    """§8: the rows of the plan's table, per setting, scenario and hypothesis."""
    out = []
    for res in record["results"]:
        for h in res["hypotheses"]:
            suffix = (
                " power"
                if h["role"] == "power"
                else (" type I" if h["role"] == "type-I error" else "")
            )
            name = f"{h['hypothesis']} (primary)" if h["primary"] else str(h["hypothesis"])
            out.append(
                [
                    str(res["scenario"]),
                    str(res["replicates"]),
                    name,
                    f"{h['truth'] * 100:+.1f} pp",
                    _percent(h["supported"]) + suffix,
                    _percent(h["not_computed"]),
                    _percent(h["coverage"].get("registered")),
                    _percent(h["coverage"].get("two_sided")),
                    _percent((h.get("sensitivity") or {}).get("probe_by_arm_arm_residual")),
                ]
            )
    return out


def locked_record(data: bytes | None) -> dict[str, Any] | None:
    """The locked plan record if it is a readable version-1 record, else None.

    Without one the report has no plan section; the ``plan`` check says why.
    """
    if data is None:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) and record.get("version") == 1 else None
