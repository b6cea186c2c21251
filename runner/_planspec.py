"""``[plan]`` and ``[[plan.scenarios]]`` of ``study.toml``: the design diagnostics' settings.

``ledger plan`` (:mod:`analysis._plan`) simulates the study's trial data under each scenario and
runs the study's own registered analysis on it (``docs/planning.md``). This module only reads
and checks the settings; every problem is reported through the spec's collector, naming the
field (``plan.scenarios[0].rates.Z: unknown arm 'Z' (arms: A, B, C)``). The table is part of
``study.toml``, so it is locked and hashed with the spec, and :func:`plan_inputs` is the hash a
recorded plan carries so a plan computed for another design is never locked as this one's.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import rfc8785

__all__ = [
    "COVERAGE_FLOOR",
    "DISTRIBUTIONS",
    "PLAN_FILE",
    "PLAN_VERSION",
    "PlanSpec",
    "Scenario",
    "lock_warnings",
    "parse_plan",
    "plan_inputs",
]

PLAN_FILE: Final = "plan/plan.json"
"""Where ``ledger plan`` writes its record, study-relative; locked with role ``plan``."""
PLAN_VERSION: Final = 1
"""The version of ``plan/plan.json`` (its first member)."""
DISTRIBUTIONS: Final = ("binomial", "normal")
"""How a simulated trial's outcome is drawn (``docs/planning.md`` §2)."""
COVERAGE_FLOOR: Final = 0.90
"""``ledger lock`` warns when a registered interval covers its truth less often than this."""
MAX_STUDIES: Final = 100_000
MAX_SCENARIOS: Final = 50
MAX_SETTINGS: Final = 10
"""A plan has at most this many scenarios and replicate settings (``docs/planning.md`` §1)."""
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
Add = Callable[..., None]


@dataclass(frozen=True)
class Scenario:
    """One simulated world: per-arm rates, shifts, variances and parse failures."""

    name: str
    description: str
    distribution: str
    rates: dict[str, float]
    """Each arm's mean outcome (a success rate; the glyph share for tumbling-E charts)."""
    model_shift: dict[str, float]
    variant_shift: dict[str, float]
    stimulus_sd: float
    stimulus_arm_sd: float
    residual_sd: dict[str, float]
    """Per arm; empty for ``binomial`` (the binomial draw is the residual)."""
    parse_failure: dict[str, float]

    def record(self) -> dict[str, Any]:
        """The scenario as recorded in ``plan/plan.json`` (every arm explicit)."""
        return {
            "name": self.name,
            "description": self.description,
            "distribution": self.distribution,
            "rates": dict(self.rates),
            "models": dict(self.model_shift),
            "variants": dict(self.variant_shift),
            "stimulus_sd": self.stimulus_sd,
            "stimulus_arm_sd": self.stimulus_arm_sd,
            "residual_sd": dict(self.residual_sd),
            "parse_failure": dict(self.parse_failure),
        }


@dataclass(frozen=True)
class PlanSpec:
    """``[plan]``: the simulation's seed, size, targets and scenarios."""

    seed: str
    studies: int
    power_target: float
    primary: tuple[str, ...]
    replicates: tuple[int, ...]
    sensitivity: bool
    max_seconds: float
    scenarios: tuple[Scenario, ...]

    def record(self) -> dict[str, Any]:
        """The settings as recorded in ``plan/plan.json``."""
        return {
            "seed": self.seed,
            "studies": self.studies,
            "power_target": self.power_target,
            "primary": list(self.primary),
            "replicates": list(self.replicates),
            "sensitivity": self.sensitivity,
            "max_seconds": self.max_seconds,
            "scenarios": [s.record() for s in self.scenarios],
        }


def _number(
    add: Add,
    value: Any,
    field: str,
    path: tuple[Any, ...],
    low: float,
    high: float,
    *,
    open_high: bool = False,
) -> float | None:
    """A finite number in ``[low, high]`` (``[low, high)`` with ``open_high``), else a problem."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        add(field, f"must be a number, got {value!r}", path)
        return None
    number = float(value)
    if number < low or number > high or (open_high and number >= high):
        closing = ")" if open_high else "]"
        add(field, f"must be in [{low:g}, {high:g}{closing}, got {value!r}", path)
        return None
    return number


def _per_arm(
    add: Add,
    value: Any,
    field: str,
    path: tuple[Any, ...],
    arms: Sequence[str],
    low: float,
    high: float,
    *,
    open_high: bool = False,
    default: float | None = None,
) -> dict[str, float]:
    """A number for every arm, or a table of arms; an arm not named takes ``default``."""
    if value is None:
        return {a: default for a in arms} if default is not None else {}
    if not isinstance(value, dict):
        one = _number(add, value, field, path, low, high, open_high=open_high)
        return {a: one for a in arms} if one is not None else {}
    out: dict[str, float] = {}
    for arm, v in value.items():
        if arm not in arms:
            add(f"{field}.{arm}", f"unknown arm {arm!r} (arms: {', '.join(arms)})", (*path, arm))
            continue
        got = _number(add, v, f"{field}.{arm}", (*path, arm), low, high, open_high=open_high)
        if got is not None:
            out[arm] = got
    for arm in arms:
        if arm not in out and arm not in value:
            if default is None:
                add(field, f"no value for arm {arm!r} (every arm needs one)", path)
            else:
                out[arm] = default
    return out


def _shifts(
    add: Add, value: Any, field: str, path: tuple[Any, ...], known: Sequence[str], what: str
) -> dict[str, float]:
    """``models`` / ``variants``: a shift of the rate in [-1, 1] per named model or variant."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        add(field, f"must be a table of {what} names to rate shifts", path)
        return {}
    out: dict[str, float] = {}
    for name, v in value.items():
        if name not in known:
            listed = ", ".join(known) or f"the study declares no {what}s"
            add(f"{field}.{name}", f"unknown {what} {name!r} ({what}s: {listed})", (*path, name))
            continue
        got = _number(add, v, f"{field}.{name}", (*path, name), -1.0, 1.0)
        if got is not None:
            out[name] = got
    return out


def _scenario(
    add: Add,
    raw: Any,
    index: int,
    arms: Sequence[str],
    models: Sequence[str],
    variants: Sequence[str],
) -> Scenario | None:
    where = f"plan.scenarios[{index}]"
    path: tuple[Any, ...] = ("plan", "scenarios", index)
    if not isinstance(raw, dict):
        add(where, "must be a table: [[plan.scenarios]]", path)
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        add(
            f"{where}.name",
            f"must be a name (letters, digits, '.', '_', '-'), got {name!r}",
            (*path, "name"),
        )
        name = ""
    description = raw.get("description", "")
    if not isinstance(description, str):
        add(f"{where}.description", "must be a string", (*path, "description"))
        description = ""
    distribution = raw.get("distribution", "binomial")
    if distribution not in DISTRIBUTIONS:
        add(
            f"{where}.distribution",
            f"must be one of {', '.join(DISTRIBUTIONS)}, got {distribution!r}",
            (*path, "distribution"),
        )
        distribution = "binomial"
    if "rates" not in raw:
        add(f"{where}.rates", "missing: every arm's mean outcome (a rate in [0, 1])", path)
    rates = _per_arm(add, raw.get("rates", {}), f"{where}.rates", (*path, "rates"), arms, 0, 1)
    stim_arm = _number(
        add,
        raw.get("stimulus_arm_sd", 0.0),
        f"{where}.stimulus_arm_sd",
        (*path, "stimulus_arm_sd"),
        0.0,
        1.0,
    )
    residual: dict[str, float] = {}
    if distribution == "normal":
        if "residual_sd" not in raw:
            add(
                f"{where}.residual_sd",
                "missing: a normal outcome needs the residual SD (a number, or one per arm)",
                path,
            )
        else:
            residual = _per_arm(
                add,
                raw["residual_sd"],
                f"{where}.residual_sd",
                (*path, "residual_sd"),
                arms,
                0.0,
                1.0,
            )
    elif "residual_sd" in raw:
        add(
            f"{where}.residual_sd",
            "only a normal outcome takes a residual SD (the binomial "
            "draw of each trial's items is its residual)",
            (*path, "residual_sd"),
        )
    stim: float | None = 0.0
    if "icc" in raw and "stimulus_sd" in raw:
        add(f"{where}.icc", "give stimulus_sd or icc, not both", (*path, "icc"))
    elif "icc" in raw:
        icc = _number(add, raw["icc"], f"{where}.icc", (*path, "icc"), 0.0, 1.0, open_high=True)
        if distribution != "normal":
            add(
                f"{where}.icc",
                'icc needs distribution = "normal" (it is relative to the '
                "residual variance); give stimulus_sd for a binomial outcome",
                (*path, "icc"),
            )
        elif icc is not None and len(residual) == len(arms):
            mean_res = sum(v * v for v in residual.values()) / len(residual)
            stim = math.sqrt(icc / (1 - icc) * mean_res)
    else:
        stim = _number(
            add,
            raw.get("stimulus_sd", 0.0),
            f"{where}.stimulus_sd",
            (*path, "stimulus_sd"),
            0.0,
            1.0,
        )
    parse = _per_arm(
        add,
        raw.get("parse_failure"),
        f"{where}.parse_failure",
        (*path, "parse_failure"),
        arms,
        0.0,
        1.0,
        open_high=True,
        default=0.0,
    )
    model_shift = _shifts(
        add, raw.get("models"), f"{where}.models", (*path, "models"), models, "model"
    )
    variant_shift = _shifts(
        add, raw.get("variants"), f"{where}.variants", (*path, "variants"), variants, "variant"
    )
    if stim is None or stim_arm is None:
        return None
    return Scenario(
        name,
        description,
        distribution,
        rates,
        model_shift,
        variant_shift,
        stim,
        stim_arm,
        residual,
        parse,
    )


def parse_plan(
    data: Mapping[str, Any],
    add: Add,
    *,
    arms: Sequence[str],
    models: Sequence[str],
    variants: Sequence[str],
    hypotheses: Sequence[str],
    arm_replicates: bool,
) -> PlanSpec | None:
    """Validate ``[plan]`` of a parsed spec; ``None`` when the study has none.

    ``add(field, message, path)`` reports a problem. ``arms``, ``models`` and ``variants`` are
    the names a scenario may use; ``hypotheses`` the registered ids (``primary`` names some);
    ``arm_replicates`` is true when an arm declares its own replicate count (then ``replicates``
    cannot be given: a plan setting gives every cell the same count).
    """
    raw = data.get("plan")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        add("plan", "must be a table: [plan]", ("plan",))
        return None
    seed = raw.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        add("plan.seed", f"must be a non-negative integer, got {seed!r}", ("plan", "seed"))
        seed = 0
    studies = raw.get("studies", 200)
    if (
        isinstance(studies, bool)
        or not isinstance(studies, int)
        or not (10 <= studies <= MAX_STUDIES)
    ):
        add(
            "plan.studies",
            f"must be an integer from 10 to {MAX_STUDIES:,}, got {studies!r}",
            ("plan", "studies"),
        )
        studies = 200
    target = _number(
        add, raw.get("power_target", 0.8), "plan.power_target", ("plan", "power_target"), 0.0, 1.0
    )
    primary_raw = raw.get("primary", list(hypotheses[:1]))
    primary: list[str] = []
    if not isinstance(primary_raw, list) or not all(isinstance(p, str) for p in primary_raw):
        add("plan.primary", "must be a list of hypothesis ids", ("plan", "primary"))
    else:
        for p in primary_raw:
            if p not in hypotheses:
                add(
                    "plan.primary",
                    f"unknown hypothesis {p!r} (hypotheses: {', '.join(hypotheses) or 'none'})",
                    ("plan", "primary"),
                )
            else:
                primary.append(p)
    reps_raw = raw.get("replicates")
    reps: list[int] = []
    if reps_raw is not None:
        if arm_replicates:
            add(
                "plan.replicates",
                "an arm declares its own replicates: the plan simulates the "
                "locked design only (leave plan.replicates out)",
                ("plan", "replicates"),
            )
        elif (
            not isinstance(reps_raw, list)
            or not reps_raw
            or len(reps_raw) > MAX_SETTINGS
            or not all(
                isinstance(r, int) and not isinstance(r, bool) and 2 <= r <= 10_000
                for r in reps_raw
            )
        ):
            add(
                "plan.replicates",
                f"must be a list of at most {MAX_SETTINGS} replicate counts "
                f"from 2 to 10,000, got {reps_raw!r}",
                ("plan", "replicates"),
            )
        else:
            reps = list(dict.fromkeys(reps_raw))
    sensitivity = raw.get("sensitivity", True)
    if not isinstance(sensitivity, bool):
        add(
            "plan.sensitivity",
            f"must be true or false, got {sensitivity!r}",
            ("plan", "sensitivity"),
        )
        sensitivity = True
    max_seconds = _number(
        add, raw.get("max_seconds", 300), "plan.max_seconds", ("plan", "max_seconds"), 1.0, 86_400.0
    )
    scenarios_raw = raw.get("scenarios")
    scenarios: list[Scenario] = []
    if not isinstance(scenarios_raw, list) or not scenarios_raw:
        add("plan.scenarios", "at least one [[plan.scenarios]] is needed", ("plan",))
    elif len(scenarios_raw) > MAX_SCENARIOS:
        add(
            "plan.scenarios",
            f"{len(scenarios_raw)} scenarios, more than the {MAX_SCENARIOS} a plan may have",
            ("plan",),
        )
    else:
        names: set[str] = set()
        for i, entry in enumerate(scenarios_raw):
            got = _scenario(add, entry, i, arms, models, variants)
            if got is None:
                continue
            if got.name in names:
                add(
                    f"plan.scenarios[{i}].name",
                    f"duplicate scenario name {got.name!r}",
                    ("plan", "scenarios", i, "name"),
                )
            names.add(got.name)
            scenarios.append(got)
    return PlanSpec(
        str(seed),
        int(studies),
        target if target is not None else 0.8,
        tuple(primary),
        tuple(reps),
        sensitivity,
        max_seconds if max_seconds is not None else 300.0,
        tuple(scenarios),
    )


def plan_inputs(
    protocol: Mapping[str, Any], plan: Mapping[str, Any], stimuli: Mapping[str, Any]
) -> str:
    """SHA-256 (hex) of what a plan's simulation depends on, as RFC 8785 JSON.

    ``{"analysis", "arms", "design", "hypotheses", "models", "model_order", "response",
    "variant_order"}`` of the ``protocol.locked`` body (absent members as null; each arm
    without its ``sha256``; of ``design`` only ``replicates``, ``bootstrap_seed`` and
    ``bootstrap_iterations``), the plan's settings (``plan``, without ``studies``, which
    ``ledger plan --studies`` may lower) and the simulated stimuli (``stimuli``: id -> items,
    control). ``docs/planning.md`` §5; the verifier recomputes it from the locked protocol.
    """
    plan = {k: v for k, v in plan.items() if k != "studies"}
    keys = (
        "analysis",
        "arms",
        "design",
        "hypotheses",
        "models",
        "model_order",
        "response",
        "variant_order",
    )
    arms = {
        k: {m: v for m, v in (a or {}).items() if m != "sha256"}
        for k, a in (protocol.get("arms") or {}).items()
    }
    picked = {k: protocol.get(k) for k in keys} | {"arms": arms}
    design = dict(picked.get("design") or {})
    picked["design"] = {
        k: design.get(k) for k in ("replicates", "bootstrap_seed", "bootstrap_iterations")
    }
    data = {"protocol": picked, "plan": dict(plan), "stimuli": dict(stimuli)}
    return hashlib.sha256(rfc8785.dumps(_plain(data))).hexdigest()


def _plain(value: Any) -> Any:
    """JSON-ready: tuples as lists, floats kept (RFC 8785 writes them canonically)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def lock_warnings(record: Mapping[str, Any]) -> list[str]:
    """The lock's warnings from a plan record (``docs/planning.md`` §6).

    One line per hypothesis and interval whose coverage of its truth is below
    :data:`COVERAGE_FLOOR` in some setting and scenario (the registered interval, and an
    ``lmm`` hypothesis's two-sided one), listing each; one line per primary hypothesis whose
    power is below the declared ``power_target`` somewhere.
    """
    target = float(record["settings"]["power_target"])
    low: dict[tuple[str, str], list[str]] = {}
    weak: dict[str, list[str]] = {}
    for res in record["results"]:
        where = f"{res['scenario']} at {res['replicates']} replicates"
        for h in res["hypotheses"]:
            for name, cov in h["coverage"].items():
                if cov["share"] is not None and cov["share"] < COVERAGE_FLOOR:
                    low.setdefault((h["hypothesis"], name), []).append(
                        f"{where}: {cov['share']:.1%} of {cov['n']}"
                    )
            share = h["supported"]["share"]
            if h["primary"] and h["role"] == "power" and share is not None and share < target:
                weak.setdefault(h["hypothesis"], []).append(f"{where}: {share:.1%}")
    out = []
    for (hid, name), places in low.items():
        label = "registered interval" if name == "registered" else "two-sided registered interval"
        out.append(
            f"plan: the {label} of {hid} covers its truth in less than "
            f"{COVERAGE_FLOOR:.0%} of the simulated studies ({'; '.join(places)})"
        )
    for hid, places in weak.items():
        out.append(
            f"plan: primary hypothesis {hid} has power below the target {target:.0%} "
            f"({'; '.join(places)})"
        )
    return out
