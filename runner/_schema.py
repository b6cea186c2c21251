"""The keys ``study.toml`` may hold, and where in the file a key (or a problem) sits.

``tomllib`` reports no line numbers, so :class:`LineFinder` finds them by scanning the text, by
the rule of ``docs/study-spec.md`` ("Strict keys and line numbers"):

- the file is cut into *tables* at each header line (``[name]``, ``[[name]]``); the n-th
  ``[[hypotheses]]`` header starts hypothesis n, and the lines before the first header are the
  top-level table; lines inside a multi-line string and comment lines are skipped;
- a key belongs to the deepest table whose header path is a prefix of the key's path;
- within that table, the key's line is the first line on which its name (bare, or quoted with
  ``"`` or ``'``) stands at the start of the line or after ``{``, ``,``, ``.`` or whitespace,
  and is followed by ``=`` or ``.`` (a dotted key); a key inside an inline table or a dotted key
  (``differs_from = { arm = "A", bi = [...] }``) is then looked for from that line on;
- a key that is not written (a missing key) gets its table's header line; a missing table
  gets no line.

:func:`unknown_keys` lists every key the schema does not know, with the nearest valid key
(:func:`difflib.get_close_matches`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "ARM_KEYS",
    "CONDITION_KEYS",
    "CONTRAST_REVIEW_KEYS",
    "DIFFERS_FROM_KEYS",
    "FACTORIAL_KEYS",
    "FACTOR_KEYS",
    "FEWSHOT_KEYS",
    "HYPOTHESIS_KEYS",
    "JUDGE_REVIEW_KEYS",
    "LEVEL_KEYS",
    "MODEL_KEYS",
    "REFERENCE_REVIEW_KEYS",
    "REVIEW_KEYS",
    "SAMPLING_KEYS",
    "SCENARIO_KEYS",
    "SECTIONS",
    "STEP_KEYS",
    "SUBSET_KEYS",
    "TABLE_KEYS",
    "VARIANT_KEYS",
    "WITNESS_KEYS",
    "KeyPath",
    "LineFinder",
    "Unknown",
    "path_of",
    "unknown_keys",
]

KeyPath = tuple[str | int, ...]
"""Where a key sits: table names, array indices, the key."""

SECTIONS: Final = (
    "study",
    "model",
    "models",
    "components",
    "prompt",
    "fewshot",
    "arms",
    "stimuli",
    "design",
    "response",
    "hypotheses",
    "analysis",
    "deviations",
    "variants",
    "witnesses",
    "witnessing",
    "timestamping",
    "steps",
    "reviews",
    "factors",
    "factorial",
    "plan",
    "privacy",
)
"""The top-level tables of a study spec, in the order the docs list them."""

TABLE_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "study": ("id", "title", "origin", "amendable", "phase"),
    "model": (
        "provider",
        "id",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop",
        "logprobs",
    ),
    "prompt": ("item", "option_format", "option_separator"),
    "stimuli": ("directory", "truth", "answer_column", "items", "range"),
    "design": ("replicates", "seed", "bootstrap_seed", "bootstrap_iterations", "blinding_secret"),
    "response": ("format", "parser", "letters", "mode", "ddx"),
    "analysis": ("model", "random_intercept", "exclude_unparseable", "model_arms", "covariates"),
    "witnessing": ("quorum", "interval_trials", "unreachable", "retry_seconds"),
    "timestamping": ("url",),
    "privacy": ("withhold",),
    "factorial": ("base", "factors", "fraction"),
    "plan": (
        "seed",
        "studies",
        "power_target",
        "primary",
        "replicates",
        "sensitivity",
        "max_seconds",
        "scenarios",
    ),
}
"""The keys of each fixed-key section (``components`` and ``arms`` are named by the study)."""

ARM_KEYS: Final = (
    "role",
    "components",
    "differs_from",
    "system",
    "fewshot",
    "sampling",
    "models",
    "replicates",
    "items",
    "variants",
    "after",
    "response_from",
)
MODEL_KEYS: Final = TABLE_KEYS["model"]
"""The keys of ``[model]`` and of each ``[models.<NAME>]``."""
SAMPLING_KEYS: Final = ("max_tokens", "temperature", "top_p", "top_k", "stop")
"""The keys of an arm's ``sampling`` table (``docs/prompts.md`` section 5)."""
SUBSET_KEYS: Final = ("n", "seed")
AFTER_KEYS: Final = ("arm", "answer", "rule")
"""The keys of an arm's ``after`` table (``docs/prompts.md`` section 9)."""
"""The keys of an arm's ``items`` subset table."""
FEWSHOT_KEYS: Final = (
    "examples",
    "rule",
    "count",
    "ids",
    "seed",
    "field",
    "order",
    "style",
    "answer",
)
"""The keys of each ``[fewshot.<NAME>]``."""
VARIANT_KEYS: Final = (
    "kind",
    "k",
    "seed",
    "order",
    "field",
    "fraction",
    "count",
    "labels",
    "labels_from",
    "query",
    "stopwords",
)
"""The keys a ``[variants.<NAME>]`` may hold (``docs/variants.md``; which apply depends on kind)."""
DIFFERS_FROM_KEYS: Final = ("arm", "by", "removes", "adds", "replaces")
"""The keys of an arm's ``differs_from`` (``docs/study-spec.md``): ``by`` (removed or replaced,
as before), or what the arm ``removes``, ``adds`` and ``replaces`` (``{old = "new"}``)."""
FACTOR_KEYS: Final = ("scope", "levels")
"""The keys of each ``[factors.<NAME>]`` (``docs/study-spec.md``, "Factors")."""
LEVEL_KEYS: Final = ("insert", "remove", "replace", "template", "components", "system")
"""The keys of one level of a factor (which apply depends on the factor's scope)."""
EDIT_KEYS: Final = ("field", "text", "file", "at", "separator")
"""The keys of a level's ``insert`` and ``replace`` tables."""
FACTORIAL_KEYS: Final = TABLE_KEYS["factorial"]
"""The keys of ``[factorial]``."""
HYPOTHESIS_KEYS: Final = (
    "id",
    "description",
    "contrast",
    "outcome",
    "test",
    "sides",
    "alpha",
    "min_difference_pp",
    "margin_pp",
    "correction",
    "family",
    "stimuli",
    "pairing",
    "arm",
    "variants",
    "variant",
    "basis",
    "samples",
    "incomplete",
    "min_pp",
    "max_pp",
    "statistic",
    "effect",
    "fallback",
)
WITNESS_KEYS: Final = ("name", "vkey", "url")
"""The keys of each ``[[witnesses]]`` entry (``docs/witness.md`` §8)."""
DEVIATION_KEYS: Final = ("id", "source", "choice", "reason")
"""The keys of each ``[[deviations]]`` entry (a declared deviation from the source protocol)."""
RANGE_KEYS: Final = ("first",)
"""The keys of ``[stimuli] range`` (``docs/prompts.md`` §1.4)."""
DDX_KEYS: Final = ("list", "match", "reference", "grounding", "uncertainty")
"""The keys of ``[response.ddx]`` (``docs/scoring.md`` §12; ``runner._ddx``)."""
STEP_KEYS: Final = (
    "on",
    "models",
    "template",
    "system",
    "parser",
    "labels",
    "schema",
    "on_unparseable",
    "aggregate",
    "sees",
    "keep",
    "verified_by",
    "match_by",
)
"""The keys of each ``[steps.<NAME>]`` (``docs/prompts.md`` section 8; ``runner.steps``)."""
JUDGE_REVIEW_KEYS: Final = ("step",)
"""The keys only a judge-label review sample has (``docs/scoring.md`` section 11)."""
CONTRAST_REVIEW_KEYS: Final = ("failed", "succeeded", "model")
"""The keys only a contrast review sample has (``docs/mcq-statistics.md`` section 9)."""
REFERENCE_REVIEW_KEYS: Final = ("reference",)
"""The keys only a reference-set review sample has (``docs/scoring.md`` section 11)."""
REVIEW_KEYS: Final = (
    "step",
    "failed",
    "succeeded",
    "n",
    "seed",
    "model",
    "description",
    "reference",
    "codes",
)
"""The keys of each ``[reviews.<NAME>]`` of either kind (``docs/study-spec.md``); which of
:data:`JUDGE_REVIEW_KEYS` and :data:`CONTRAST_REVIEW_KEYS` a table has decides its kind."""
SCENARIO_KEYS: Final = (
    "name",
    "description",
    "distribution",
    "rates",
    "models",
    "variants",
    "stimulus_sd",
    "icc",
    "stimulus_arm_sd",
    "residual_sd",
    "parse_failure",
)
"""The keys of each ``[[plan.scenarios]]`` (``docs/planning.md``; ``runner._planspec``)."""
CONDITION_KEYS: Final = ("arm", "variant")
"""The keys of a contrast review's ``failed`` and ``succeeded`` tables."""


@dataclass(frozen=True)
class Unknown:
    """One key the schema does not know: its path, its table as written, and a hint."""

    path: KeyPath
    table: str
    hint: str
    section: bool

    @property
    def key(self) -> str:
        """The unknown key itself."""
        return str(self.path[-1])


def _hint(key: str, valid: tuple[str, ...], elsewhere: dict[str, str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    if key in elsewhere:
        return f"{key!r} belongs in {elsewhere[key]}"
    return "valid keys: " + ", ".join(valid)


def _elsewhere() -> dict[str, str]:
    where: dict[str, str] = {}
    for section, keys in TABLE_KEYS.items():
        for key in keys:
            where.setdefault(key, f"[{section}]")
    for key in HYPOTHESIS_KEYS:
        where.setdefault(key, "[[hypotheses]]")
    for key in ARM_KEYS:
        where.setdefault(key, "[arms.<ID>]")
    return where


def _quote(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'


def unknown_keys(data: dict[str, Any]) -> list[Unknown]:
    """Every key of ``data`` (a parsed ``study.toml``) that no section of the schema knows."""
    elsewhere = _elsewhere()
    found: list[Unknown] = []

    def check(table: dict[str, Any], path: KeyPath, name: str, valid: tuple[str, ...]) -> None:
        for key, value in table.items():
            if key not in valid:
                others = {k: v for k, v in elsewhere.items() if v != name}
                found.append(
                    Unknown((*path, key), name, _hint(key, valid, others), isinstance(value, dict))
                )

    for key, value in data.items():
        if key not in SECTIONS:
            close = difflib.get_close_matches(key, SECTIONS, n=1, cutoff=0.6)
            hint = (
                f"did you mean {close[0]!r}?"
                if close
                else (
                    f"{key!r} belongs in {elsewhere[key]}"
                    if key in elsewhere
                    else "sections: " + ", ".join(SECTIONS)
                )
            )
            found.append(Unknown((key,), "", hint, isinstance(value, dict | list)))
    for section, keys in TABLE_KEYS.items():
        table = data.get(section)
        if isinstance(table, dict):
            check(table, (section,), f"[{section}]", keys)
    response = data.get("response")
    ddx = response.get("ddx") if isinstance(response, dict) else None
    if isinstance(ddx, dict):
        check(ddx, ("response", "ddx"), "[response.ddx]", DDX_KEYS)
    arms = data.get("arms")
    if isinstance(arms, dict):
        for arm_id, arm in arms.items():
            if not isinstance(arm, dict):
                continue
            name = f"[arms.{_quote(arm_id)}]"
            check(arm, ("arms", arm_id), name, ARM_KEYS)
            for sub, keys in (
                ("differs_from", DIFFERS_FROM_KEYS),
                ("sampling", SAMPLING_KEYS),
                ("items", SUBSET_KEYS),
                ("after", AFTER_KEYS),
            ):
                inner = arm.get(sub)
                if isinstance(inner, dict):
                    check(inner, ("arms", arm_id, sub), f"[arms.{_quote(arm_id)}.{sub}]", keys)
    for section, keys in (
        ("models", MODEL_KEYS),
        ("fewshot", FEWSHOT_KEYS),
        ("variants", VARIANT_KEYS),
        ("steps", STEP_KEYS),
    ):
        named = data.get(section)
        if isinstance(named, dict):
            for name, table in named.items():
                if isinstance(table, dict):
                    check(table, (section, name), f"[{section}.{_quote(name)}]", keys)
    _factor_unknowns(data, check)
    hypotheses = data.get("hypotheses")
    if isinstance(hypotheses, list):
        for index, hypothesis in enumerate(hypotheses):
            if isinstance(hypothesis, dict):
                label = hypothesis.get("id")
                name = f"[[hypotheses]] #{index + 1}" + (
                    f" ({label})" if isinstance(label, str) and label else ""
                )
                check(hypothesis, ("hypotheses", index), name, HYPOTHESIS_KEYS)
    witnesses = data.get("witnesses")
    if isinstance(witnesses, list):
        for index, witness in enumerate(witnesses):
            if isinstance(witness, dict):
                check(witness, ("witnesses", index), f"[[witnesses]] #{index + 1}", WITNESS_KEYS)
    reviews = data.get("reviews")
    if isinstance(reviews, dict):
        for name, review in reviews.items():
            if not isinstance(review, dict):
                continue
            label = f"[reviews.{_quote(name)}]"
            check(review, ("reviews", name), label, REVIEW_KEYS)
            for side in ("failed", "succeeded"):
                inner = review.get(side)
                if isinstance(inner, dict):
                    check(inner, ("reviews", name, side), f"{label} {side}", CONDITION_KEYS)
    plan = data.get("plan")
    scenarios = plan.get("scenarios") if isinstance(plan, dict) else None
    if isinstance(scenarios, list):
        for index, scenario in enumerate(scenarios):
            if isinstance(scenario, dict):
                check(
                    scenario,
                    ("plan", "scenarios", index),
                    f"[[plan.scenarios]] #{index + 1}",
                    SCENARIO_KEYS,
                )
    deviations = data.get("deviations")
    if isinstance(deviations, list):
        for index, deviation in enumerate(deviations):
            if isinstance(deviation, dict):
                check(
                    deviation, ("deviations", index), f"[[deviations]] #{index + 1}", DEVIATION_KEYS
                )
    return found


def _factor_unknowns(data: dict[str, Any], check: Any) -> None:
    """Unknown keys of ``[factors.<NAME>]``, their levels and edit tables, and fraction."""
    factors = data.get("factors")
    if isinstance(factors, dict):
        for name, table in factors.items():
            if not isinstance(table, dict):
                continue
            label = f"[factors.{_quote(name)}]"
            check(table, ("factors", name), label, FACTOR_KEYS)
            levels = table.get("levels")
            if not isinstance(levels, dict):
                continue
            for level, edit in levels.items():
                if not isinstance(edit, dict):
                    continue
                where = ("factors", name, "levels", level)
                check(edit, where, f"{label} level {level}", LEVEL_KEYS)
                for sub in ("insert", "replace"):
                    inner = edit.get(sub)
                    if isinstance(inner, dict):
                        check(inner, (*where, sub), f"{label} level {level} {sub}", EDIT_KEYS)
    factorial = data.get("factorial")
    fraction = factorial.get("fraction") if isinstance(factorial, dict) else None
    if isinstance(fraction, dict):
        check(fraction, ("factorial", "fraction"), "[factorial] fraction", ("generators",))


# ------------------------------------------------------------------------------ lines

_BARE: Final = re.compile(r"[A-Za-z0-9_-]+")
_HEADER: Final = re.compile(r"^\s*(\[\[?)(.*?)(\]\]?)\s*(?:#.*)?$")


def _dotted(text: str) -> list[str] | None:
    """The parts of a dotted key (``arms."v1.2"``), or None if it is not one."""
    parts: list[str] = []
    rest = text.strip()
    while rest:
        if rest[0] in "\"'":
            end = rest.find(rest[0], 1)
            if end < 0:
                return None
            parts.append(rest[1:end])
            rest = rest[end + 1 :].lstrip()
        else:
            match = _BARE.match(rest)
            if match is None:
                return None
            parts.append(match.group(0))
            rest = rest[match.end() :].lstrip()
        if rest.startswith("."):
            rest = rest[1:].lstrip()
            if not rest:
                return None
        elif rest:
            return None
    return parts or None


@dataclass(frozen=True)
class _Table:
    path: KeyPath
    header: int | None  # 1-based line of the header, None for the top-level table
    lines: tuple[tuple[int, str], ...]  # (1-based number, text) of its key lines


class LineFinder:
    """Finds the line of a key of ``study.toml`` by the rule of the module docstring."""

    def __init__(self, text: str) -> None:
        """Cut ``text`` into tables at its header lines."""
        tables: list[_Table] = []
        path: KeyPath = ()
        header: int | None = None
        lines: list[tuple[int, str]] = []
        arrays: dict[tuple[str, ...], int] = {}
        in_string: str | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            if in_string is not None:
                if line.count(in_string) % 2 == 1:
                    in_string = None
                continue
            stripped = line.strip()
            if stripped.startswith("#") or not stripped:
                continue
            match = _HEADER.match(line)
            parts = _dotted(match.group(2)) if match else None
            if match and parts and len(match.group(1)) == len(match.group(3)):
                tables.append(_Table(path, header, tuple(lines)))
                path, header, lines = self._path(parts, match.group(1) == "[[", arrays), number, []
                continue
            lines.append((number, line))
            for quote in ('"""', "'''"):
                if line.count(quote) % 2 == 1:
                    in_string = quote
                    break
        tables.append(_Table(path, header, tuple(lines)))
        self._tables = tables

    @staticmethod
    def _path(parts: list[str], array: bool, arrays: dict[tuple[str, ...], int]) -> KeyPath:
        out: list[str | int] = []
        for i, part in enumerate(parts):
            out.append(part)
            prefix = tuple(parts[: i + 1])
            last = i == len(parts) - 1
            if array and last:
                arrays[prefix] = arrays.get(prefix, 0) + 1
                out.append(arrays[prefix] - 1)
            elif prefix in arrays:
                out.append(arrays[prefix] - 1)
        return tuple(out)

    def _owner(self, path: KeyPath) -> _Table | None:
        best: _Table | None = None
        for table in self._tables:
            n = len(table.path)
            if path[:n] == table.path and (best is None or n > len(best.path)):
                best = table
        return best

    @staticmethod
    def _key_line(lines: Iterator[tuple[int, str]], name: str) -> int | None:
        names = "|".join(re.escape(n) for n in (name, f'"{name}"', f"'{name}'"))
        pattern = re.compile(rf"(?:^|[\s{{,.])(?:{names})\s*[=.]")
        for number, line in lines:
            if pattern.search(line):
                return number
        return None

    def line(self, path: KeyPath) -> int | None:
        """The 1-based line of the key at ``path`` (see the module docstring), or None."""
        table = self._owner(path)
        if table is None:
            return None
        relative = [p for p in path[len(table.path) :] if isinstance(p, str)]
        if not relative:
            return table.header
        found = self._key_line(iter(table.lines), relative[0])
        if found is None:
            return table.header
        if len(relative) > 1:
            later = ((n, text) for n, text in table.lines if n >= found)
            inner = self._key_line(later, relative[-1])
            if inner is not None:
                return inner
        return found


def path_of(field: str) -> KeyPath:
    """The key path of a problem's field name (``hypotheses[2].alpha``, ``arms.B.role``)."""
    for prefix in ("arms.", "components."):
        if field.startswith(prefix):
            rest = field[len(prefix) :]
            if prefix == "arms.":
                for key in ("differs_from", *ARM_KEYS):
                    if rest.endswith("." + key):
                        return ("arms", rest[: -len(key) - 1], key)
            return (prefix[:-1], rest)
    match = re.fullmatch(r"(hypotheses|witnesses)\[(\d+)\](?:\.(\w+))?", field)
    if match:
        table, index = match.group(1), int(match.group(2))
        return (table, index) if match.group(3) is None else (table, index, match.group(3))
    return tuple(field.split("."))
