"""Factors and factorial designs: ``[factors.NAME]`` and ``[factorial]`` (``docs/study-spec.md``).

A *factor* is a declared transformation with ordered *levels*; the first level is the
reference and makes no change. An item-scope level edits the item's text fields (``insert``
a sentence at a field's start or end, ``remove`` a field, ``replace`` a field) and may set the
item template of its cells (``template``: multiple-choice vs open-ended); a prompt-scope level
adds components to the user text (``components``, after the item block) or to the system prompt
(``system``). ``[factorial]`` crosses the named factors over a declared ``base`` arm (all
cells, or a two-level fraction given by generators) and expands, at lock, into one arm per cell
whose ``protocol.locked`` record carries ``factors = {factor: level}``
(``docs/adr/0007-factorial-designs.md``).

This module holds what the spec, the renderer and the lock share; it imports only ``ledger``
helpers below it (never :mod:`runner.spec`), so the spec can import it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from runner._schema import FACTOR_KEYS, FACTORIAL_KEYS, LEVEL_KEYS

__all__ = [
    "FACTORIAL_KEYS",
    "FACTORIAL_OUTCOMES",
    "FACTOR_KEYS",
    "LEVEL_KEYS",
    "SCOPES",
    "Factor",
    "FactorError",
    "Factorial",
    "ItemEdit",
    "Level",
    "apply_edits",
    "cell_arm_id",
    "design_columns",
    "parse_factorial",
    "parse_factors",
]

SCOPES: Final = ("item", "prompt")
AT: Final = ("start", "end")
NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
"""Factor and level names: no ``.`` (a cell's arm id joins them with ``.``) and no ``|``."""
FIELD_RE: Final = re.compile(r"^[a-z][a-z0-9_]*$")
NOT_TEXT: Final = ("id", "answer", "options", "images", "metadata")
FACTORIAL_OUTCOMES: Final[dict[str, tuple[str, str]]] = {
    "trial_accuracy": ("accuracy", "binomial"),
    # seed 001's differential-diagnosis metrics (a ddx study; docs/scoring.md §12)
    "plausibility": ("plausibility", "gaussian"),
    "h_coverage": ("h_coverage", "gaussian"),
    "s_coverage": ("s_coverage", "gaussian"),
    "breadth": ("breadth", "gaussian"),
    "grounding_rate": ("grounding_rate", "gaussian"),
    "indirect_rate": ("indirect_rate", "gaussian"),
    "uncertainty": ("uncertainty", "binomial"),
}
"""``outcome`` name -> (analysis-dataset column, GEE family) of a ``factorial`` hypothesis.

``binomial`` is the logistic GEE of a 0/1 column; ``gaussian`` the identity-link GEE of a
numeric per-trial column. Adding an outcome (a per-trial metric column of the analysis
dataset) is one entry here (the spec and the analysis read it) and one in the verifier's own
``verify._factorial.OUTCOMES``."""
_GENERATOR: Final = re.compile(
    r"^\s*([A-Za-z0-9_-]+)\s*=\s*(-?)\s*([A-Za-z0-9_-]+(?:\s*\*\s*[A-Za-z0-9_-]+)+)\s*$"
)


class FactorError(ValueError):
    """A factor edit that cannot apply to an item (the message names item, factor, level)."""


@dataclass(frozen=True)
class ItemEdit:
    """One edit of an item's text field: ``insert``, ``remove`` or ``replace``."""

    kind: str
    field: str
    text: str | None = None
    at: str | None = None
    separator: str | None = None
    file: str | None = None
    """The study-relative file the text was read from (None: written inline)."""

    def record(self) -> dict[str, Any]:
        """The edit as ``protocol.locked`` records it (the text always inline)."""
        if self.kind == "remove":
            return {"remove": self.field}
        out: dict[str, Any] = {"field": self.field, "text": self.text}
        if self.kind == "insert":
            out["at"] = self.at
            out["separator"] = self.separator
        if self.file is not None:
            out["file"] = self.file
        return {self.kind: out}


@dataclass(frozen=True)
class Level:
    """One level of a factor: its item edits, template, and added components."""

    name: str
    edits: tuple[ItemEdit, ...] = ()
    template: Path | None = None
    components: tuple[str, ...] = ()
    system: tuple[str, ...] = ()

    @property
    def reference(self) -> bool:
        """Whether the level changes nothing (the first level of every factor)."""
        return not (self.edits or self.template or self.components or self.system)

    def record(self, rel: Any) -> dict[str, Any]:
        """The level as ``protocol.locked`` records it (``rel`` maps a path to its study path)."""
        out: dict[str, Any] = {}
        for edit in self.edits:
            out.update(edit.record())
        if self.template is not None:
            out["template"] = rel(self.template)
        if self.components:
            out["components"] = list(self.components)
        if self.system:
            out["system"] = list(self.system)
        return out


@dataclass(frozen=True)
class Factor:
    """A ``[factors.<NAME>]`` table: its scope and its levels, the reference first."""

    name: str
    scope: str
    levels: tuple[Level, ...]

    @property
    def reference(self) -> str:
        """The reference level's name."""
        return self.levels[0].name

    def level(self, name: str) -> Level:
        """The level called ``name`` (KeyError if none)."""
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(name)

    def record(self, rel: Any) -> dict[str, Any]:
        """The factor as ``protocol.locked`` records it: scope, and the levels in order.

        The levels are a list (canonical JSON sorts an object's keys); the first is the
        reference level.
        """
        return {
            "scope": self.scope,
            "levels": [{"name": lv.name, **lv.record(rel)} for lv in self.levels],
        }


@dataclass(frozen=True)
class Factorial:
    """``[factorial]``: the base arm, the crossed factors, generators, and the cells in order."""

    base: str
    factors: tuple[str, ...]
    generators: tuple[str, ...] = ()
    cells: tuple[dict[str, str], ...] = field(default=())

    def record(self) -> dict[str, Any]:
        """``protocol.locked`` ``factorial``: base, factors, generators, and the cell arms."""
        out: dict[str, Any] = {"base": self.base, "factors": list(self.factors)}
        if self.generators:
            out["fraction"] = {"generators": list(self.generators)}
        out["arms"] = [cell_arm_id(self.base, self.factors, c) for c in self.cells]
        return out


def cell_arm_id(base: str, factors: Sequence[str], cell: Mapping[str, str]) -> str:
    """The arm id of a cell: ``<base>.<level of factor 1>.<level of factor 2>...``."""
    return ".".join([base, *(cell[f] for f in factors)])


def _text_of(
    table: dict[str, Any],
    where: str,
    add: Any,
    inside: Any,
    read: Any,
    rel: Any,
) -> tuple[str | None, str | None]:
    """The ``text`` or ``file`` of an insert/replace table: (text, study path of the file)."""
    has_text, has_file = "text" in table, "file" in table
    if has_text == has_file:
        add(where, 'give exactly one of text = "..." and file = "path"')
        return None, None
    if has_text:
        text = table["text"]
        if not isinstance(text, str):
            add(f"{where}.text", f"must be a string, got {text!r}")
            return None, None
        return text, None
    path_rel = table["file"]
    if not isinstance(path_rel, str) or not path_rel:
        add(f"{where}.file", f"must be a study-relative file path, got {path_rel!r}")
        return None, None
    path = inside(path_rel, f"{where}.file")
    if not path.is_file():
        return None, None
    text = read(path, f"{where}.file")
    if text is None:
        return None, None
    return text.rstrip("\n"), rel(path)


def _field_name(value: Any, where: str, add: Any) -> str | None:
    if not isinstance(value, str) or not FIELD_RE.match(value) or value in NOT_TEXT:
        add(where, f"must name a text field of the items (question, context, ...), got {value!r}")
        return None
    return value


def _level(
    name: str,
    table: Any,
    where: str,
    scope: str,
    add: Any,
    inside: Any,
    read: Any,
    rel: Any,
    components: Mapping[str, Path],
) -> Level | None:
    if not NAME_RE.match(name):
        add(where, "level names are letters, digits, '_' or '-' (at most 32; no '.')")
    if not isinstance(table, dict):
        add(where, "must be a table: {} for the reference level, or the level's edit")
        return None
    _scope_keys(table, where, scope, add)
    edits: list[ItemEdit] = []
    template: Path | None = None
    added: dict[str, tuple[str, ...]] = {}
    if scope == "item":
        edits = _item_edits(table, where, add, inside, read, rel)
        template = _level_template(table, where, add, inside, read)
    else:
        added = _added_components(table, where, add, components, scope)
    return Level(name, tuple(edits), template, added.get("components", ()), added.get("system", ()))


_ITEM_KEYS: Final = ("insert", "remove", "replace", "template")
_PROMPT_KEYS: Final = ("components", "system")


def _scope_keys(table: dict[str, Any], where: str, scope: str, add: Any) -> None:
    """A level edits the item (``scope = "item"``) or adds components (``"prompt"``)."""
    for key in table:
        if key in _ITEM_KEYS and scope != "item":
            add(f"{where}.{key}", f'edits the item: it needs scope = "item", not {scope!r}')
        elif key in _PROMPT_KEYS and scope != "prompt":
            add(
                f"{where}.{key}",
                f'adds prompt components: it needs scope = "prompt", not {scope!r}',
            )


def _item_edits(
    table: dict[str, Any], where: str, add: Any, inside: Any, read: Any, rel: Any
) -> list[ItemEdit]:
    """An item level's edits: ``remove``, then ``replace`` and ``insert``; one per field."""
    edits: list[ItemEdit] = []
    if "remove" in table:
        got = _field_name(table["remove"], f"{where}.remove", add)
        if got is not None:
            edits.append(ItemEdit("remove", got))
    for kind in ("replace", "insert"):
        if kind in table:
            edit = _text_edit(kind, table[kind], where, add, (inside, read, rel))
            if edit is not None:
                edits.append(edit)
    fields = [e.field for e in edits]
    if len(set(fields)) != len(fields):
        add(where, f"edits the field {fields[0]!r} twice; one edit per field")
    return edits


def _text_edit(
    kind: str, sub: Any, where: str, add: Any, files: tuple[Any, Any, Any]
) -> ItemEdit | None:
    """A ``replace`` or ``insert`` edit ``{ field, text | file, at, separator }``."""
    inside, read, rel = files
    if not isinstance(sub, dict):
        add(
            f"{where}.{kind}",
            f'must be a table {{ field = "question", text = "..."}}, got {sub!r}',
        )
        return None
    got = _field_name(sub.get("field"), f"{where}.{kind}.field", add)
    text, file = _text_of(sub, f"{where}.{kind}", add, inside, read, rel)
    if kind != "insert":
        if got is None or text is None:
            return None
        return ItemEdit("replace", got, text, None, None, file)
    at = sub.get("at")
    sep = sub.get("separator", " ")
    if at not in AT:
        add(f"{where}.insert.at", f'must be "start" or "end", got {at!r}')
        at = None
    if not isinstance(sep, str):
        add(f"{where}.insert.separator", f"must be a string, got {sep!r}")
        sep = None
    if got is None or text is None or at is None or sep is None:
        return None
    return ItemEdit("insert", got, text, str(at), str(sep), file)


def _level_template(
    table: dict[str, Any], where: str, add: Any, inside: Any, read: Any
) -> Path | None:
    """An item level's own item ``template`` (read to check it), or None."""
    if "template" not in table:
        return None
    value = table["template"]
    if not isinstance(value, str) or not value:
        add(f"{where}.template", f"must be a study-relative file path, got {value!r}")
        return None
    template: Path = inside(value, f"{where}.template")
    if template.is_file():
        read(template, f"{where}.template")
    return template


def _added_components(
    table: dict[str, Any], where: str, add: Any, components: Mapping[str, Path], scope: str
) -> dict[str, tuple[str, ...]]:
    """A prompt level's ``components`` and ``system``, each a list of the study's components."""
    added: dict[str, tuple[str, ...]] = {}
    for key in _PROMPT_KEYS:
        if key not in table or scope != "prompt":
            continue
        names = table[key]
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(x, str) and x for x in names)
        ):
            add(f"{where}.{key}", "must be a non-empty list of component names")
            continue
        for n in names:
            if n not in components:
                add(f"{where}.{key}", f"unknown component {n!r}")
        added[key] = tuple(names)
    return added


def parse_factors(
    raw: Any,
    add: Any,
    inside: Any,
    read: Any,
    rel: Any,
    components: Mapping[str, Path],
) -> dict[str, Factor]:
    """Validate the ``factors`` section of a parsed ``study.toml``.

    ``add(field, message)`` records a problem; ``inside(rel, where)`` resolves a study path
    (recording a problem if it is outside the study or missing); ``read(path, where)`` returns
    a file's UTF-8 text or None; ``rel(path)`` the study-relative path.
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw or not all(isinstance(v, dict) for v in raw.values()):
        add("factors", "declare each factor as a [factors.<NAME>] table")
        return {}
    out: dict[str, Factor] = {}
    for name, table in raw.items():
        factor = _factor(name, table, add, inside, read, rel, components)
        if factor is not None:
            out[name] = factor
    return out


def _factor(
    name: str,
    table: dict[str, Any],
    add: Any,
    inside: Any,
    read: Any,
    rel: Any,
    components: Mapping[str, Path],
) -> Factor | None:
    """One ``[factors.<NAME>]`` table: its scope and levels, the reference level first."""
    where = f"factors.{name}"
    if not NAME_RE.match(name):
        add(where, "factor names are letters, digits, '_' or '-' (at most 32; no '.')")
    scope = table.get("scope")
    if scope not in SCOPES:
        add(f"{where}.scope", f'must be "item" or "prompt", got {scope!r}')
        return None
    levels_raw = table.get("levels")
    if not isinstance(levels_raw, dict) or len(levels_raw) < 2:
        add(
            f"{where}.levels",
            "must be a table of at least two levels, the reference "
            "level first: levels.none = {}, levels.<NAME> = { <edit> }",
        )
        return None
    levels: list[Level] = []
    for lname, ltable in levels_raw.items():
        lv = _level(
            lname, ltable, f"{where}.levels.{lname}", scope, add, inside, read, rel, components
        )
        if lv is not None:
            levels.append(lv)
    if len(levels) != len(levels_raw):
        return None
    if not levels[0].reference or _nonempty(levels_raw[levels[0].name]):
        add(
            f"{where}.levels.{levels[0].name}",
            "the first level is the reference level and must be {} (no edit)",
        )
        return None
    for lv in levels[1:]:
        if lv.reference:
            add(
                f"{where}.levels.{lv.name}",
                "makes no edit: only the first (reference) "
                "level is {}; a second level without an edit would be a silent null arm",
            )
    return Factor(name, str(scope), tuple(levels))


def _nonempty(table: Any) -> bool:
    """Whether a level table as written has any key (the reference level must have none)."""
    return isinstance(table, dict) and bool(table)


def _generators(
    value: Any,
    factors: Sequence[str],
    known: Mapping[str, Factor],
    add: Any,
) -> tuple[tuple[str, ...], dict[str, tuple[bool, tuple[str, ...]]]]:
    """``fraction = { generators = ["C = A*B"] }``: the texts and {generated: (negated, of)}."""
    where = "factorial.fraction"
    if not isinstance(value, dict) or set(value) != {"generators"}:
        add(where, 'must be { generators = ["C = A*B", ...] }')
        return (), {}
    gens = value["generators"]
    if not isinstance(gens, list) or not gens or not all(isinstance(g, str) for g in gens):
        add(f"{where}.generators", 'must be a non-empty list of "C = A*B" strings')
        return (), {}
    parsed: dict[str, tuple[bool, tuple[str, ...]]] = {}
    for g in gens:
        got = _generator(g, factors, parsed)
        if isinstance(got, str):
            add(f"{where}.generators", got)
        else:
            parsed[got[0]] = got[1]
    for f in factors:
        if f in known and len(known[f].levels) != 2:
            add(
                where,
                f"a fractional design needs two-level factors; {f!r} has {len(known[f].levels)}",
            )
            return (), {}
    for target, (_, of) in parsed.items():
        if any(o in parsed for o in of):
            add(
                f"{where}.generators",
                f"{target!r} is generated from a generated factor; "
                "generate from the base factors only",
            )
            return (), {}
    return tuple(gens), parsed


def _generator(
    g: str, factors: Sequence[str], parsed: Mapping[str, Any]
) -> tuple[str, tuple[bool, tuple[str, ...]]] | str:
    """One generator ``"C = A*B"``: (target, (negated, of)), or why it cannot be one."""
    m = _GENERATOR.match(g)
    if m is None:
        return (
            f"{g!r} is not \"C = A*B\" (a factor = an optional '-' "
            "and a product of two or more other factors)"
        )
    target, neg = m.group(1), m.group(2) == "-"
    of = tuple(p.strip() for p in m.group(3).split("*"))
    bad = [f for f in (target, *of) if f not in factors]
    if bad:
        return f"{g!r}: {bad[0]!r} is not a factor of [factorial]"
    if target in of or len(set(of)) != len(of):
        return f"{g!r}: a factor appears twice"
    if target in parsed:
        return f"{target!r} is generated twice"
    return target, (neg, of)


def parse_factorial(
    raw: Any,
    factors: Mapping[str, Factor],
    arms: Mapping[str, Any],
    add: Any,
) -> Factorial | None:
    """Validate ``[factorial]`` and list its cells (full crossing or the generated fraction).

    Cells are in crossing order: the first factor's levels vary slowest. In a fraction, the
    base (not generated) factors are crossed and each generated factor's level is the product
    of its generators' codes (reference level -1, the other +1), negated for ``C = -A*B``.
    """
    if raw is None:
        return None
    if not isinstance(raw, dict):
        add("factorial", "must be a table")
        return None
    base = _base_arm(raw.get("base"), arms, add)
    names = _crossed(raw.get("factors"), factors, add)
    if names is None:
        return None
    gens: tuple[str, ...] = ()
    parsed: dict[str, tuple[bool, tuple[str, ...]]] = {}
    if "fraction" in raw:
        gens, parsed = _generators(raw["fraction"], names, factors, add)
        if not gens:
            return None
    cells = _cells(names, factors, parsed)
    if base is None:
        return None
    ids = [cell_arm_id(base, names, c) for c in cells]
    for arm_id in ids:
        if arm_id in arms:
            add("factorial", f"cell arm {arm_id!r} clashes with a declared arm")
        if len(arm_id) > 64:
            add(
                "factorial",
                f"cell arm id {arm_id!r} is longer than 64 characters; use shorter level names",
            )
    return Factorial(base, tuple(names), gens, tuple(cells))


def _base_arm(base: Any, arms: Mapping[str, Any], add: Any) -> str | None:
    """``[factorial] base``: a declared arm with ``role = "factorial"`` (None if undeclared)."""
    if not isinstance(base, str) or base not in arms:
        add("factorial.base", f"must name a declared arm, got {base!r}")
        return None
    if getattr(arms[base], "role", None) != "factorial":
        add(
            "factorial.base",
            f'arm {base!r} is the template of the cells: give it role = "factorial"',
        )
    return base


def _crossed(names: Any, factors: Mapping[str, Factor], add: Any) -> list[str] | None:
    """``[factorial] factors``: distinct declared factor names, or None."""
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        add("factorial.factors", "must be a non-empty list of factor names")
        return None
    if len(set(names)) != len(names):
        add("factorial.factors", f"names a factor twice: {names!r}")
        return None
    unknown = [n for n in names if n not in factors]
    if unknown:
        add(
            "factorial.factors",
            f"unknown factor {unknown[0]!r} (factors: {', '.join(factors) or 'none declared'})",
        )
        return None
    return names


def _cells(
    names: list[str],
    factors: Mapping[str, Factor],
    parsed: Mapping[str, tuple[bool, tuple[str, ...]]],
) -> list[dict[str, str]]:
    """The cells in crossing order (the generated factors' levels from their generators)."""
    free = [n for n in names if n not in parsed]
    cells: list[dict[str, str]] = []
    for combo in itertools.product(*(factors[n].levels for n in free)):
        cell = {n: lv.name for n, lv in zip(free, combo, strict=True)}
        for target, (neg, of) in parsed.items():
            code = -1 if neg else 1
            for o in of:
                code *= -1 if cell[o] == factors[o].reference else 1
            cell[target] = factors[target].levels[0 if code < 0 else 1].name
        cells.append({n: cell[n] for n in names})
    return cells


def apply_edits(
    fields: Mapping[str, Any],
    edits: Sequence[tuple[str, str, ItemEdit]],
    item_id: str,
) -> dict[str, Any]:
    """The item with the edits applied in order: each ``(factor, level, edit)``.

    ``remove`` deletes the field; ``replace`` sets it; ``insert`` puts the text before
    (``at = "start"``: ``text + separator + value``) or after (``value + separator + text``)
    the field's value. A field the item lacks (or that is not text) raises
    :class:`FactorError` naming item, factor, level and field.
    """
    out = dict(fields)
    for factor, level, edit in edits:
        value = out.get(edit.field)
        if not isinstance(value, str):
            raise FactorError(
                f"item {item_id!r}: factor {factor!r} level {level!r} {edit.kind}s field "
                f"{edit.field!r}, which the item lacks (its text fields: "
                f"{', '.join(k for k, v in out.items() if isinstance(v, str) and k not in NOT_TEXT) or 'none'})"  # noqa: E501
            )
        if edit.kind == "remove":
            del out[edit.field]
        elif edit.kind == "replace":
            out[edit.field] = edit.text
        elif edit.at == "start":
            out[edit.field] = f"{edit.text}{edit.separator}{value}"
        else:
            out[edit.field] = f"{value}{edit.separator}{edit.text}"
    return out


def design_columns(
    factors: Sequence[tuple[str, Sequence[str]]],
    interactions: Sequence[Sequence[str]],
) -> list[tuple[str, dict[str, str]]]:
    """The factorial model's columns (after the intercept): name and the levels it is 1 at.

    ``factors`` is each crossed factor with its levels (reference first). Main effects first,
    in factor order, one treatment dummy ``f[T.level]`` per non-reference level; then each
    interaction (factor names in factor order), the products of its factors' dummies, the
    first factor's levels varying slowest: ``a[T.x]:b[T.y]``.
    """
    levels = dict(factors)
    cols: list[tuple[str, dict[str, str]]] = []
    for name, lv in factors:
        cols.extend((f"{name}[T.{x}]", {name: x}) for x in lv[1:])
    for inter in interactions:
        for combo in itertools.product(*(levels[f][1:] for f in inter)):
            label = ":".join(f"{f}[T.{x}]" for f, x in zip(inter, combo, strict=True))
            cols.append((label, dict(zip(inter, combo, strict=True))))
    return cols
