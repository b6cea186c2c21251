"""Per-item variants (``docs/variants.md``, normative): option orders and text truncations.

A variant is a deterministic transformation of one :class:`~runner._items.Item`: a permutation
of its options with the answer key remapped (an *order* string, section 2), or a
transformation of one named text field (section 3). :class:`VariantSpec` is one
``[variants.NAME]`` table; :func:`expand` turns the declarations into the study's variant order
(``all-orders`` expanded); :func:`apply` gives the varied item, or raises
:class:`VariantError` naming the item and the variant when it cannot apply.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Final

from runner._items import OPTION_LABELS, Item

__all__ = [
    "FIELD_KINDS",
    "KINDS",
    "PERMUTATION_KINDS",
    "Variant",
    "VariantError",
    "VariantSpec",
    "apply",
    "back_map",
    "expand",
    "order_of",
    "read_stopwords",
    "sentences",
    "shuffle_order",
    "words",
]

PERMUTATION_KINDS: Final = (
    "identity",
    "rotate",
    "reverse",
    "swap-distractors",
    "shuffle",
    "order",
    "all-orders",
)
"""Kinds that reorder the options (section 2)."""
FIELD_KINDS: Final = (
    "keep-first",
    "keep-last",
    "keep-middle",
    "keep-sentences-prefix",
    "keep-first-sentences",
    "keep-last-sentences",
    "keep-sections",
    "keep-salient",
    "drop-field",
)
"""Kinds that transform a text field (section 3)."""
KINDS: Final = PERMUTATION_KINDS + FIELD_KINDS
KIND_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "identity": (),
    "rotate": ("k",),
    "reverse": (),
    "swap-distractors": (),
    "shuffle": ("seed",),
    "order": ("order",),
    "all-orders": (),
    "keep-first": ("field", "fraction"),
    "keep-last": ("field", "fraction"),
    "keep-middle": ("field", "fraction"),
    "keep-sentences-prefix": ("field", "fraction"),
    "keep-first-sentences": ("field", "count"),
    "keep-last-sentences": ("field", "count"),
    "keep-sections": ("field", "labels", "labels_from"),
    "keep-salient": ("field", "count", "query", "stopwords"),
    "drop-field": ("field",),
}
"""The keys each kind takes besides ``kind`` (``docs/variants.md`` section 1)."""
NOT_TEXT_FIELDS: Final = frozenset({"id", "answer", "options", "images", "metadata", "rationale"})
MAX_ALL_ORDERS: Final = 6
WHITESPACE: Final = " \t\n\x0b\x0c\r"
_WORD: Final = re.compile(r"[^ \t\n\x0b\x0c\r]+")
_TOKEN: Final = re.compile(r"[a-z0-9]+")
_CLOSERS: Final = "\"')]\u201d\u2019"


class VariantError(ValueError):
    """A variant that cannot apply to an item (the message names both)."""


@dataclass(frozen=True)
class VariantSpec:
    """One ``[variants.NAME]`` declaration, with its parameters as written."""

    name: str
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)
    stopwords: frozenset[str] | None = None

    def record(self) -> dict[str, Any]:
        """The declaration as ``protocol.locked`` records it: ``kind`` and its keys."""
        return {"kind": self.kind, **dict(self.params)}


@dataclass(frozen=True)
class Variant:
    """One variant of the variant order: its name and definition (``all-orders`` expanded).

    ``declared`` is the name of the declaration it comes from; ``fixed_order`` is the order of
    an expanded ``all-orders`` variant.
    """

    name: str
    spec: VariantSpec
    fixed_order: str | None = None

    @property
    def declared(self) -> str:
        """The ``[variants.NAME]`` this variant comes from."""
        return self.spec.name

    @property
    def permutes(self) -> bool:
        """Whether the variant reorders the options (else it transforms a text field)."""
        return self.spec.kind in PERMUTATION_KINDS


def expand(specs: Sequence[VariantSpec], option_counts: Sequence[int]) -> list[Variant]:
    """The variant order: each declaration, ``all-orders`` replaced by its n! orders.

    ``option_counts`` are the option counts of the items (``all-orders`` needs one count, at
    most :data:`MAX_ALL_ORDERS`). Raises :class:`VariantError` when it cannot expand.
    """
    declared = {s.name for s in specs}
    out: list[Variant] = []
    for spec in specs:
        if spec.kind != "all-orders":
            out.append(Variant(spec.name, spec))
            continue
        counts = sorted(set(option_counts))
        if len(counts) != 1:
            raise VariantError(
                f"variant {spec.name!r} (all-orders): the items have "
                f"{', '.join(map(str, counts)) or 'no'} options; all-orders needs every item to "
                "have the same number"
            )
        n = counts[0]
        if n > MAX_ALL_ORDERS:
            raise VariantError(
                f"variant {spec.name!r} (all-orders): {n} options give {math.factorial(n)} "
                f"orders; at most {MAX_ALL_ORDERS} options ({math.factorial(MAX_ALL_ORDERS)})"
            )
        for index, perm in enumerate(itertools.permutations(OPTION_LABELS[:n]), start=1):
            name = f"{spec.name}-{index}"
            if name in declared:
                raise VariantError(
                    f"variant {spec.name!r} (all-orders) expands to {name!r}, which is also a "
                    "declared variant"
                )
            out.append(Variant(name, spec, "".join(perm)))
    return out


# ------------------------------------------------------------------------------ §2 orders


def shuffle_order(seed: str, item_id: str, n: int) -> str:
    """Section 2.5: the seeded SHA-256 Fisher-Yates order of ``n`` labels for one item."""
    a = list(range(n))
    for i in range(n - 1, 0, -1):
        h = int.from_bytes(hashlib.sha256(f"{seed}|{item_id}|{i}".encode()).digest(), "big")
        j = h % (i + 1)
        a[i], a[j] = a[j], a[i]
    return "".join(OPTION_LABELS[p] for p in a)


def _where(variant: Variant, item: Item) -> str:
    return f"item {item.id!r}, variant {variant.name!r} ({variant.spec.kind})"


def _rotated(variant: Variant, item: Item, labels: str, k: int) -> str:
    """``rotate``: the labels rotated by ``k`` (less than their number)."""
    n = len(labels)
    if k >= n:
        raise VariantError(
            f"{_where(variant, item)}: cannot rotate {n} options by k = {k} (k must be "
            f"less than the number of options)"
        )
    return "".join(labels[(j - k) % n] for j in range(n))


def _swapped(variant: Variant, item: Item, labels: str) -> str:
    """``swap-distractors``: the first two distractors swapped (the key stays)."""
    distractors = [i for i, label in enumerate(labels) if label != item.answer]
    if len(distractors) < 2:
        raise VariantError(
            f"{_where(variant, item)}: {len(distractors)} distractor(s); swapping needs two"
        )
    chars = list(labels)
    d1, d2 = distractors[0], distractors[1]
    chars[d1], chars[d2] = chars[d2], chars[d1]
    return "".join(chars)


def order_of(variant: Variant, item: Item) -> str:
    """The order string (section 2) of a permutation variant for ``item``.

    Raises :class:`VariantError` when it cannot apply (no options, ``k`` too large, ...).
    """
    n = len(item.options)
    labels = OPTION_LABELS[:n]
    kind = variant.spec.kind
    params = variant.spec.params
    if n < 2:
        raise VariantError(f"{_where(variant, item)}: the item has no options to reorder")
    if variant.fixed_order is not None:
        order = variant.fixed_order
    elif kind == "identity":
        order = labels
    elif kind == "rotate":
        order = _rotated(variant, item, labels, int(params["k"]))
    elif kind == "reverse":
        order = labels[::-1]
    elif kind == "swap-distractors":
        order = _swapped(variant, item, labels)
    elif kind == "shuffle":
        order = shuffle_order(str(params["seed"]), item.id, n)
    elif kind == "order":
        order = str(params["order"])
    else:
        raise VariantError(f"{_where(variant, item)}: not a permutation")
    if len(order) != n or sorted(order) != list(labels):
        lost = [label for label in labels if label not in order]
        key = f" (the key {item.answer} would be lost)" if item.answer in lost else ""
        raise VariantError(
            f"{_where(variant, item)}: order {order!r} is not a permutation of the item's "
            f"labels {labels}: each must appear exactly once{key}"
        )
    return order


def back_map(order: str, label: str) -> str:
    """The original label of the option shown at ``label`` under ``order`` (section 2)."""
    return order[OPTION_LABELS.index(label)]


def permute(item: Item, order: str) -> Item:
    """The item with its options in ``order`` and its key remapped (section 2)."""
    labels = OPTION_LABELS[: len(item.options)]
    options = [item.options[labels.index(c)] for c in order]
    data = dict(item.data)
    data["options"] = options
    data["answer"] = labels[order.index(item.answer)]
    return Item(item.id, data, item.line)


def check_remap(original: Item, varied: Item, order: str, name: str) -> None:
    """Section 2's lock check: the key keeps its option text and no option is lost."""
    where = f"item {original.id!r}, variant {name!r}"
    if sorted(varied.options) != sorted(original.options):
        raise VariantError(f"{where}: the varied options are not the item's options")
    new_key = varied.answer
    if new_key not in varied.labels:
        raise VariantError(f"{where}: the remapped key {new_key!r} is not a label")
    if (
        varied.options[varied.labels.index(new_key)]
        != original.options[original.labels.index(original.answer)]
    ):
        raise VariantError(
            f"{where}: the permutation {order!r} does not remap the key: option {new_key} of the "
            f"varied item is not the original key {original.answer}'s text"
        )
    if back_map(order, new_key) != original.answer:
        raise VariantError(f"{where}: key {new_key} does not map back to {original.answer}")


# ------------------------------------------------------------------------------ §3 text


def words(text: str) -> list[tuple[int, int]]:
    """Section 3.1: (start, end) of every word (a maximal run of non-ASCII-whitespace)."""
    return [(m.start(), m.end()) for m in _WORD.finditer(text)]


def kept_count(total: int, fraction: float) -> int:
    """Section 3.2: ``max(1, floor(W x fraction + 1/2))`` on the fraction's exact decimal."""
    exact = Fraction(repr(float(fraction)))
    return max(1, math.floor(total * exact + Fraction(1, 2)))


def sentences(text: str, spans: list[tuple[int, int]] | None = None) -> list[tuple[int, int, int]]:
    """Section 3.3: (start, end, word count) of every sentence (``spans``: its words, if known)."""
    spans = words(text) if spans is None else spans
    out: list[tuple[int, int, int]] = []
    first = 0
    for index, (start, end) in enumerate(spans):
        word = text[start:end].rstrip(_CLOSERS)
        last = index == len(spans) - 1
        gap = text[end : spans[index + 1][0]] if not last else ""
        if word.endswith((".", "!", "?")) or gap.count("\n") >= 2 or last:
            out.append((spans[first][0], end, index - first + 1))
            first = index + 1
    return out


def tokens(text: str) -> set[str]:
    """Section 3.5: the distinct tokens of a text (ASCII letters lowercased, runs of a-z0-9)."""
    lowered = "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)
    return set(_TOKEN.findall(lowered))


def read_stopwords(data: bytes, name: str) -> frozenset[str]:
    """Section 3.6: the stop words of a stop-word file (:class:`VariantError` naming a line)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise VariantError(f"{name}: not UTF-8 (byte {exc.start})") from None
    out: set[str] = set()
    for number, line in enumerate(text.split("\n"), start=1):
        word = line.strip(WHITESPACE)
        if not word or word.startswith("#"):
            continue
        if not re.fullmatch(r"[a-z0-9]+", word):
            raise VariantError(
                f"{name}:{number}: {word!r} is not a stop word (lowercase a-z and 0-9 only)"
            )
        out.add(word)
    return frozenset(out)


def _field(variant: Variant, item: Item) -> tuple[str, str]:
    name = str(variant.spec.params["field"])
    value = item.data.get(name)
    if not isinstance(value, str):
        raise VariantError(f"{_where(variant, item)}: the item has no text field {name!r}")
    if variant.spec.kind != "drop-field" and _WORD.search(value) is None:
        raise VariantError(f"{_where(variant, item)}: field {name!r} has no words")
    return name, value


def transform_text(variant: Variant, item: Item) -> str | None:
    """The new text of the variant's field (section 3); None for ``drop-field``."""
    kind = variant.spec.kind
    params = variant.spec.params
    name, text = _field(variant, item)
    if kind == "drop-field":
        return None
    spans = words(text)
    total = len(spans)
    if kind in ("keep-first", "keep-last", "keep-middle"):
        k = kept_count(total, float(params["fraction"]))
        start = (
            0 if kind == "keep-first" else total - k if kind == "keep-last" else ((total - k) // 2)
        )
        return text[spans[start][0] : spans[start + k - 1][1]]
    sents = sentences(text, spans)
    if kind == "keep-sentences-prefix":
        k = kept_count(total, float(params["fraction"]))
        kept, used = 1, sents[0][2]
        while kept < len(sents) and used + sents[kept][2] <= k:
            used += sents[kept][2]
            kept += 1
        return text[sents[0][0] : sents[kept - 1][1]]
    if kind == "keep-first-sentences":
        c = min(int(params["count"]), len(sents))
        return text[sents[0][0] : sents[c - 1][1]]
    if kind == "keep-last-sentences":
        c = min(int(params["count"]), len(sents))
        return text[sents[-c][0] : sents[-1][1]]
    if kind == "keep-sections":
        source = str(params.get("labels_from", "context_labels"))
        labels = item.metadata.get(source)
        paragraphs = text.split("\n\n")
        if not isinstance(labels, list) or len(labels) != len(paragraphs):
            have = f"{len(labels)} labels" if isinstance(labels, list) else "no label list"
            raise VariantError(
                f"{_where(variant, item)}: field {name!r} has {len(paragraphs)} paragraph(s) "
                f"but metadata {source!r} has {have}; one label per paragraph is needed"
            )
        wanted = set(params["labels"])
        kept_paragraphs = [
            p for p, label in zip(paragraphs, labels, strict=True) if label in wanted
        ]
        if not kept_paragraphs:
            raise VariantError(
                f"{_where(variant, item)}: no paragraph is labelled "
                f"{', '.join(sorted(wanted))} (its labels: {', '.join(labels)})"
            )
        return "\n\n".join(kept_paragraphs)
    if kind == "keep-salient":
        query_field = str(params.get("query", "question"))
        query = item.data.get(query_field)
        if not isinstance(query, str):
            raise VariantError(
                f"{_where(variant, item)}: the item has no query field {query_field!r}"
            )
        stop = variant.spec.stopwords or frozenset()
        wanted = tokens(query) - stop
        scored = [
            (-len(wanted & tokens(text[s:e])), index) for index, (s, e, _) in enumerate(sents)
        ]
        chosen = sorted(index for _, index in sorted(scored)[: int(params["count"])])
        return " ".join(text[sents[i][0] : sents[i][1]] for i in chosen)
    raise VariantError(f"{_where(variant, item)}: unknown kind")


def apply(variant: Variant, item: Item) -> Item:
    """The varied item (``docs/variants.md``); :class:`VariantError` when it cannot apply."""
    if variant.permutes:
        order = order_of(variant, item)
        varied = permute(item, order)
        check_remap(item, varied, order, variant.name)
        return varied
    new = transform_text(variant, item)
    data = dict(item.data)
    name = str(variant.spec.params["field"])
    if new is None:
        del data[name]
    else:
        data[name] = new
    return Item(item.id, data, item.line)


def variant_order(variant: Variant, item: Item) -> str | None:
    """The order string of a permutation variant for ``item`` (None for a text variant)."""
    return order_of(variant, item) if variant.permutes else None


def stopwords_of(path: Path, display: str) -> frozenset[str]:
    """The stop words of a study's stop-word file (section 3.6)."""
    return read_stopwords(path.read_bytes(), display)
