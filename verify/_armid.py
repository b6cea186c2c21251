"""Arm identity, re-derived from ``docs/prompts.md`` §3.1 (imports nothing from the writer).

Version 2 (``protocol.locked`` ``arm_identity: 2``): an arm's hash is the SHA-256 of the RFC 8785
canonical JSON of its *identity object*: its record (less ``role`` and ``sha256``), the hashes of
its component files, the item template in force, the prompt formats, its few-shot set, its factor
levels, the model tables it names, the steps, the variants and the hashes of the template and
schema files. Version 1 (no ``arm_identity``) is the SHA-256 of the arm's own text; the archive
check (:mod:`verify._archive.protocol`) keeps checking that for old archives.

Everything here takes untrusted data: a member of the wrong type is a problem string naming it,
never an exception.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from verify._canonical import CanonicalError, canonical_json

__all__ = ["KNOWN_VERSIONS", "IdentityProblem", "identity", "identity_version"]

KNOWN_VERSIONS = (1, 2)
"""The ``arm_identity`` values this verifier knows (1 = the member is absent)."""


class IdentityProblem(ValueError):
    """An identity object cannot be built; the message names the member at fault."""


def identity_version(protocol: Mapping[str, Any]) -> int:
    """``protocol.locked`` ``arm_identity`` (1 when absent); :class:`IdentityProblem` if unknown."""
    if "arm_identity" not in protocol:
        return 1
    version = protocol["arm_identity"]
    if type(version) is not int or version not in KNOWN_VERSIONS or version == 1:
        raise IdentityProblem(
            f"protocol.locked arm_identity {version!r} is not a known version (2, or absent for 1)"
        )
    return version


def _obj(value: Any, what: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise IdentityProblem(f"{what} is not an object")
    return value


def _names(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if type(value) is not list or any(type(v) is not str for v in value):
        raise IdentityProblem(f"{what} is not a list of names")
    return value


def _template(protocol: dict[str, Any], record: dict[str, Any], arm: str) -> str | None:
    chosen = record.get("factors")
    if chosen is not None:
        factors = _obj(protocol.get("factors"), "protocol.locked factors")
        for factor, level in _obj(chosen, f"arms.{arm}.factors").items():
            found = _level(factors, factor, level, arm)
            if found.get("template") is not None:
                if type(found["template"]) is not str:
                    raise IdentityProblem(f"factors.{factor} level {level}: template is not a path")
                return str(found["template"])
    prompt = protocol.get("prompt")
    if prompt is None:
        return None
    item = _obj(prompt, "protocol.locked prompt").get("item")
    if item is not None and type(item) is not str:
        raise IdentityProblem("protocol.locked prompt.item is not a path")
    return item


def _level(factors: dict[str, Any], factor: str, level: Any, arm: str) -> dict[str, Any]:
    table = _obj(factors.get(factor), f"protocol.locked factors.{factor} (arm {arm})")
    levels = table.get("levels")
    if type(levels) is list:
        for lv in levels:
            if type(lv) is dict and lv.get("name") == level:
                return lv
    raise IdentityProblem(f"arm {arm}: factor {factor} has no level {level!r} in protocol.locked")


def _component_hashes(
    record: dict[str, Any], arm: str, component_hash: Callable[[str], str | None]
) -> dict[str, str]:
    """The SHA-256 of each component and system file the arm names (none for a reserved name)."""
    hashes: dict[str, str] = {}
    names = _names(record.get("components"), f"arms.{arm}.components")
    for name in names + _names(record.get("system"), f"arms.{arm}.system"):
        digest = component_hash(name)
        if digest is not None:
            hashes[name] = digest
    return hashes


def _fewshot(
    body: Mapping[str, Any], record: dict[str, Any], arm: str, locked: Callable[[Any, str], None]
) -> dict[str, Any]:
    """The few-shot set the arm draws from; its answer template is a locked file."""
    sets = _obj(body.get("fewshot"), "protocol.locked fewshot")
    chosen = record["fewshot"]
    fewshot = _obj(
        sets.get(chosen) if type(chosen) is str else None,
        f"protocol.locked fewshot.{chosen} (arm {arm})",
    )
    if fewshot.get("answer") is not None:
        locked(fewshot["answer"], f"fewshot.{chosen}.answer")
    return fewshot


def _models(body: Mapping[str, Any], record: dict[str, Any], arm: str) -> dict[str, Any]:
    """The locked model tables of the models the arm names, each of them locked."""
    tables = _obj(body["models"], "protocol.locked models")
    chosen_models = _names(record["models"], f"arms.{arm}.models")
    missing = [m for m in chosen_models if m not in tables]
    if missing:
        raise IdentityProblem(f"arm {arm}: model {missing[0]} is not in protocol.locked models")
    return {m: tables[m] for m in chosen_models}


def _steps(body: Mapping[str, Any], locked: Callable[[Any, str], None]) -> dict[str, Any]:
    """The locked steps; each one's template and schema are locked files."""
    steps = _obj(body["steps"], "protocol.locked steps")
    for name, step in steps.items():
        for member in ("template", "schema"):
            if _obj(step, f"steps.{name}").get(member) is not None:
                locked(step[member], f"steps.{name}.{member}")
    return steps


def identity(
    protocol: Mapping[str, Any],
    arm: str,
    component_hash: Callable[[str], str | None],
    file_hash: Callable[[str], str | None],
) -> tuple[dict[str, Any], bytes, str]:
    """(identity object, its canonical JSON, its SHA-256) of ``arm`` under version 2.

    ``component_hash(name)`` is the SHA-256 of the locked file ``[components]`` maps ``name``
    to, ``None`` for a reserved name with no file; ``file_hash(path)`` that of a locked file, or
    ``None`` when no such file is locked. Raises :class:`IdentityProblem` naming what is wrong.
    """
    body = dict(protocol)
    arms = _obj(body.get("arms"), "protocol.locked arms")
    record = _obj(arms.get(arm), f"protocol.locked arms.{arm}")
    obj: dict[str, Any] = {
        "arm_identity": 2,
        "record": {k: v for k, v in record.items() if k not in ("role", "sha256")},
    }
    files: dict[str, str] = {}

    def locked(path: Any, what: str) -> None:
        if type(path) is not str:
            raise IdentityProblem(f"{what} is not a path")
        digest = file_hash(path)
        if digest is None:
            raise IdentityProblem(f"{what} {path} is not a locked file")
        files[path] = digest

    obj["components"] = _component_hashes(record, arm, component_hash)
    template = _template(body, record, arm)
    if template is not None:
        obj["template"] = template
        locked(template, f"arm {arm}: item template")
    if "prompt" in body:
        obj["prompt"] = body["prompt"]
    if record.get("fewshot") is not None:
        obj["fewshot"] = _fewshot(body, record, arm, locked)
    if record.get("factors"):
        factors = _obj(body.get("factors"), "protocol.locked factors")
        obj["levels"] = {
            f: _level(factors, f, lv, arm)
            for f, lv in _obj(record["factors"], f"arms.{arm}.factors").items()
        }
    if "model" in body:
        obj["model"] = body["model"]
    if record.get("models") is not None and "models" in body:
        obj["models"] = _models(body, record, arm)
    if "steps" in body:
        obj["steps"] = _steps(body, locked)
    if "variants" in body:
        obj["variants"] = body["variants"]
    obj["files"] = files
    try:
        data = canonical_json(obj)
    except CanonicalError as exc:
        raise IdentityProblem(f"arm {arm}: the identity object {exc}") from None
    return obj, data, hashlib.sha256(data).hexdigest()
