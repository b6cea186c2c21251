"""``[arms.<ID>]``: the prompt arms and their per-arm settings (``docs/prompts.md``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from runner.spec._collector import Collector
from runner.spec._components import RESERVED_COMPONENTS
from runner.spec._data_arm import data_arm
from runner.spec._differs import parse_differs
from runner.spec._fields import ID_RE, MAX_REPLICATES, int_seed, section_table, string
from runner.spec._models import providers, sampling_params
from runner.spec._state import Loading
from runner.spec._types import Arm, FewShotSpec, ModelSpec
from runner.variants import VariantSpec

ARM_ROLES: Final = ("full", "matched-control", "vehicle", "dismantling", "factorial")


def parse_arms(st: Loading) -> None:
    """``[arms.<ID>]``: each arm's role, components and settings (``docs/prompts.md``)."""
    st.arms = _arms(st.c, st.data, st.components, st.models, providers(st), st.fewshot)


def arm_runs(variants: Iterable[VariantSpec], arm: Arm, name: str) -> bool:
    """Whether ``arm`` runs the variant ``name`` (``original`` alone in a study without any)."""
    declared = {v.name: v for v in variants}
    if not declared:
        return name == "original"
    spec = declared.get(name)
    if spec is None:
        base = name.rsplit("-", 1)[0]
        spec = declared.get(base)
        if spec is None or spec.kind != "all-orders" or not name.rsplit("-", 1)[1].isdigit():
            return False
    return arm.variants is None or name in arm.variants or spec.name in arm.variants


def _arm_settings(
    c: Collector,
    spec: dict[str, Any],
    where: str,
    components: dict[str, Path],
    models: dict[str, ModelSpec] | None,
    providers: list[str],
    fewshot: dict[str, FewShotSpec],
) -> dict[str, Any]:
    """The per-arm request settings of ``docs/prompts.md`` (system, fewshot, sampling, ...)."""
    out: dict[str, Any] = {}
    system = spec.get("system")
    if system is not None:
        if (
            not isinstance(system, list)
            or not system
            or not all(isinstance(x, str) for x in system)
        ):
            c.add(f"{where}.system", "must be a non-empty list of component names")
        else:
            for name in system:
                if name not in components:
                    c.add(f"{where}.system", f"unknown component {name!r}")
            out["system"] = tuple(system)
    if "fewshot" in spec:
        name = spec["fewshot"]
        if not isinstance(name, str) or name not in fewshot:
            known = ", ".join(fewshot) or "none declared"
            c.add(f"{where}.fewshot", f"unknown example set {name!r} (example sets: {known})")
        else:
            out["fewshot"] = name
    arm_models = spec.get("models")
    chosen = list(models) if models is not None else []
    if arm_models is not None:
        if models is None:
            c.add(f"{where}.models", "applies to a study with [models.<NAME>] tables")
        elif (
            not isinstance(arm_models, list)
            or not arm_models
            or not all(isinstance(x, str) for x in arm_models)
        ):
            c.add(f"{where}.models", "must be a non-empty list of model names")
        else:
            for name in arm_models:
                if name not in models:
                    known = ", ".join(models)
                    c.add(f"{where}.models", f"unknown model {name!r} (models: {known})")
            if len(set(arm_models)) != len(arm_models):
                c.add(f"{where}.models", "a model is listed twice")
            out["models"] = tuple(arm_models)
            chosen = list(arm_models)
    sampling = spec.get("sampling")
    if sampling is not None:
        if not isinstance(sampling, dict):
            c.add(f"{where}.sampling", "must be a table, e.g. { temperature = 0.7, top_p = 0.95 }")
        else:
            arm_providers = (
                [models[m].provider for m in chosen if m in models]
                if models is not None
                else providers
            )
            result: dict[str, Any] = {}
            for provider in dict.fromkeys(arm_providers):
                result = sampling_params(c, sampling, f"{where}.sampling", provider, full=False)
            out["sampling"] = result
    if "replicates" in spec:
        reps = spec["replicates"]
        if isinstance(reps, bool) or not isinstance(reps, int) or not 0 < reps <= MAX_REPLICATES:
            c.add(
                f"{where}.replicates",
                f"must be an integer from 1 to {MAX_REPLICATES:,}, got {reps!r}",
            )
        else:
            out["replicates"] = reps
    if "variants" in spec:
        names = spec["variants"]
        if not isinstance(names, list) or not names or not all(isinstance(x, str) for x in names):
            c.add(f"{where}.variants", "must be a non-empty list of variant names")
        elif len(set(names)) != len(names):
            c.add(f"{where}.variants", "a variant is listed twice")
        else:
            out["variants"] = tuple(names)
    after = spec.get("after")
    if after is not None:
        if (
            not isinstance(after, dict)
            or not isinstance(after.get("arm"), str)
            or any(k not in ("arm", "answer", "rule") for k in after)
            or not all(isinstance(v, str) and v for v in after.values())
        ):
            c.add(
                f"{where}.after",
                'must be { arm = "A" } with, optionally, answer = "<trial '
                'step>" and rule = "next-option"',
            )
        elif after.get("rule", "next-option") != "next-option":
            c.add(f"{where}.after.rule", f"unknown rule {after['rule']!r}; use next-option")
        elif "rule" in after and "answer" not in after:
            c.add(
                f"{where}.after.rule",
                'next-option needs the prior\'s answer (answer = "<trial step>")',
            )
        else:
            out["after"] = dict(after)
    subset = spec.get("items")
    if subset is not None:
        if not isinstance(subset, dict):
            c.add(f"{where}.items", "must be a table { n = 100, seed = 7 }")
        else:
            n = subset.get("n")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                c.add(f"{where}.items.n", f"must be an integer >= 1, got {n!r}")
            seed = int_seed(c, subset, "seed", f"{where}.items")
            if isinstance(n, int) and not isinstance(n, bool) and n >= 1 and seed:
                out["subset"] = (n, seed)
    return out


def _arms(
    c: Collector,
    data: dict[str, Any],
    components: dict[str, Path],
    models: dict[str, ModelSpec] | None,
    providers: list[str],
    fewshot: dict[str, FewShotSpec],
) -> dict[str, Arm]:
    raw = section_table(c, data, "arms")
    arms: dict[str, Arm] = {}
    for arm_id, spec in raw.items():
        where = f"arms.{arm_id}"
        if not ID_RE.match(arm_id):
            c.add(where, "arm ids are letters, digits, '.', '_' or '-'")
        if not isinstance(spec, dict):
            c.add(where, "must be a table")
            continue
        role = string(c, spec, "role", where)
        if role and role not in ARM_ROLES:
            c.add(f"{where}.role", f"unknown role {role!r}; use one of {', '.join(ARM_ROLES)}")
        if "response_from" in spec:
            arms[arm_id] = data_arm(c, spec, where, arm_id, role)
            continue
        comps = spec.get("components")
        names: tuple[str, ...] = ()
        if not isinstance(comps, list) or not all(isinstance(x, str) for x in comps):
            c.add(f"{where}.components", "must be a list of component names")
        else:
            names = tuple(comps)
            for name in names:
                if name not in components and name not in RESERVED_COMPONENTS:
                    c.add(f"{where}.components", f"unknown component {name!r}")
            if len(set(names)) != len(names):
                c.add(f"{where}.components", "a component is listed twice")
        differs = spec.get("differs_from")
        decl: tuple[str, tuple[str, ...]] | None = None
        claims: dict[str, Any] | None = None
        if differs is not None:
            decl, claims = parse_differs(c, differs, where)
        settings = _arm_settings(c, spec, where, components, models, providers, fewshot)
        arms[arm_id] = Arm(arm_id, role, names, decl, **settings, differs=claims)
    for arm in arms.values():
        if arm.differs_from and arm.differs_from[0] not in arms:
            c.add(f"arms.{arm.id}.differs_from", f"unknown arm {arm.differs_from[0]!r}")
    if raw and not arms:
        c.add("arms", "declare at least one arm")
    return arms


def check_after(c: Collector, arms: dict[str, Arm], base: str | None) -> None:
    """Each ``after`` names a first stage: an arm (a factorial cell too) run from a model.

    Checked once the factorial cells exist, so a second stage may follow a cell (seed 001's
    belief and binary-agreement arms follow the open-ended default cell). Naming the factorial
    base is reported by :func:`_factorial_arms`.
    """
    for arm in arms.values():
        if arm.after is None or arm.after["arm"] == base:
            continue
        prior = arms.get(arm.after["arm"])
        if prior is not None and prior.response_from is not None:
            c.add(
                f"arms.{arm.id}.after",
                f"arm {prior.id!r} takes its responses from "
                "data; a second stage follows a model's answer",
            )
        elif prior is None or prior.id == arm.id:
            c.add(f"arms.{arm.id}.after", f"unknown arm {arm.after['arm']!r}")
        elif prior.after is not None:
            c.add(
                f"arms.{arm.id}.after",
                f"arm {prior.id!r} is itself answer-dependent; "
                "a second stage follows a first stage only",
            )
