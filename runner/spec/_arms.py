"""``[arms.<ID>]``: the prompt arms and their per-arm settings (``docs/prompts.md``)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from runner._variants import VariantSpec
from runner.spec._collector import Collector
from runner.spec._components import RESERVED_COMPONENTS
from runner.spec._data_arm import data_arm
from runner.spec._differs import parse_differs
from runner.spec._fields import ID_RE, MAX_REPLICATES, int_seed, section_table, string
from runner.spec._models import providers, sampling_params
from runner.spec._state import Loading
from runner.spec._types import Arm, FewShotSpec, ModelSpec

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


def _names(value: Any) -> bool:
    """Whether ``value`` is a non-empty list of strings."""
    return isinstance(value, list) and bool(value) and all(isinstance(x, str) for x in value)


def _system(
    c: Collector, spec: dict[str, Any], where: str, components: dict[str, Path]
) -> dict[str, Any]:
    """``system``: components sent as the system prompt (``docs/prompts.md``)."""
    system = spec.get("system")
    if system is None:
        return {}
    if not _names(system):
        c.add(f"{where}.system", "must be a non-empty list of component names")
        return {}
    for name in system:
        if name not in components:
            c.add(f"{where}.system", f"unknown component {name!r}")
    return {"system": tuple(system)}


def _fewshot_set(
    c: Collector, spec: dict[str, Any], where: str, fewshot: dict[str, FewShotSpec]
) -> dict[str, Any]:
    """``fewshot``: the name of a ``[fewshot.<NAME>]`` example set."""
    if "fewshot" not in spec:
        return {}
    name = spec["fewshot"]
    if not isinstance(name, str) or name not in fewshot:
        known = ", ".join(fewshot) or "none declared"
        c.add(f"{where}.fewshot", f"unknown example set {name!r} (example sets: {known})")
        return {}
    return {"fewshot": name}


def _arm_models(
    c: Collector, spec: dict[str, Any], where: str, models: dict[str, ModelSpec] | None
) -> dict[str, Any]:
    """``models``: the models the arm runs, of a study with ``[models.<NAME>]`` tables."""
    arm_models = spec.get("models")
    if arm_models is None:
        return {}
    if models is None:
        c.add(f"{where}.models", "applies to a study with [models.<NAME>] tables")
        return {}
    if not _names(arm_models):
        c.add(f"{where}.models", "must be a non-empty list of model names")
        return {}
    for name in arm_models:
        if name not in models:
            known = ", ".join(models)
            c.add(f"{where}.models", f"unknown model {name!r} (models: {known})")
    if len(set(arm_models)) != len(arm_models):
        c.add(f"{where}.models", "a model is listed twice")
    return {"models": tuple(arm_models)}


def _arm_sampling(
    c: Collector, spec: dict[str, Any], where: str, arm_providers: list[str]
) -> dict[str, Any]:
    """``sampling``: parameters checked against the provider of each model the arm runs."""
    sampling = spec.get("sampling")
    if sampling is None:
        return {}
    if not isinstance(sampling, dict):
        c.add(f"{where}.sampling", "must be a table, e.g. { temperature = 0.7, top_p = 0.95 }")
        return {}
    result: dict[str, Any] = {}
    for provider in dict.fromkeys(arm_providers):
        result = sampling_params(c, sampling, f"{where}.sampling", provider, full=False)
    return {"sampling": result}


def _replicates(c: Collector, spec: dict[str, Any], where: str) -> dict[str, Any]:
    """``replicates``: the arm's own number of replicates."""
    if "replicates" not in spec:
        return {}
    reps = spec["replicates"]
    if isinstance(reps, bool) or not isinstance(reps, int) or not 0 < reps <= MAX_REPLICATES:
        c.add(
            f"{where}.replicates",
            f"must be an integer from 1 to {MAX_REPLICATES:,}, got {reps!r}",
        )
        return {}
    return {"replicates": reps}


def _arm_variants(c: Collector, spec: dict[str, Any], where: str) -> dict[str, Any]:
    """``variants``: the variants the arm runs (checked against ``[variants]`` later)."""
    if "variants" not in spec:
        return {}
    names = spec["variants"]
    if not _names(names):
        c.add(f"{where}.variants", "must be a non-empty list of variant names")
        return {}
    if len(set(names)) != len(names):
        c.add(f"{where}.variants", "a variant is listed twice")
        return {}
    return {"variants": tuple(names)}


def _after(c: Collector, spec: dict[str, Any], where: str) -> dict[str, Any]:
    """``after``: an answer-dependent arm's first stage (``docs/prompts.md`` §9)."""
    after = spec.get("after")
    if after is None:
        return {}
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
        return {"after": dict(after)}
    return {}


def _subset(c: Collector, spec: dict[str, Any], where: str) -> dict[str, Any]:
    """``items = { n, seed }``: a seeded subset of the items the arm runs."""
    subset = spec.get("items")
    if subset is None:
        return {}
    if not isinstance(subset, dict):
        c.add(f"{where}.items", "must be a table { n = 100, seed = 7 }")
        return {}
    n = subset.get("n")
    good = isinstance(n, int) and not isinstance(n, bool) and n >= 1
    if not good:
        c.add(f"{where}.items.n", f"must be an integer >= 1, got {n!r}")
    seed = int_seed(c, subset, "seed", f"{where}.items")
    return {"subset": (n, seed)} if good and seed else {}


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
    out = _system(c, spec, where, components)
    out |= _fewshot_set(c, spec, where, fewshot)
    out |= _arm_models(c, spec, where, models)
    if models is None:
        arm_providers = providers
    else:
        chosen = out.get("models", list(models))
        arm_providers = [models[m].provider for m in chosen if m in models]
    out |= _arm_sampling(c, spec, where, arm_providers)
    out |= _replicates(c, spec, where)
    out |= _arm_variants(c, spec, where)
    out |= _after(c, spec, where)
    return out | _subset(c, spec, where)


def _components(
    c: Collector, spec: dict[str, Any], where: str, components: dict[str, Path]
) -> tuple[str, ...]:
    """An arm's ``components``: declared (or reserved) names, each once."""
    comps = spec.get("components")
    if not isinstance(comps, list) or not all(isinstance(x, str) for x in comps):
        c.add(f"{where}.components", "must be a list of component names")
        return ()
    for name in comps:
        if name not in components and name not in RESERVED_COMPONENTS:
            c.add(f"{where}.components", f"unknown component {name!r}")
    if len(set(comps)) != len(comps):
        c.add(f"{where}.components", "a component is listed twice")
    return tuple(comps)


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
        names = _components(c, spec, where, components)
        differs = spec.get("differs_from")
        decl, claims = parse_differs(c, differs, where) if differs is not None else (None, None)
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
