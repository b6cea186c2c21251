"""Per-item variants, re-derived from ``docs/variants.md`` alone (independent of ``runner/``).

:class:`Variants` reads ``protocol.locked`` ``variants`` and ``variant_order``, re-expands the
declarations, and gives each (item, variant) its varied item object (the canonical-form dict
the renderer of :mod:`verify._prompts` fills slots from) and, for a permutation, its order
string. Anything that does not follow the page is a :class:`VariantError` naming the item and
the variant.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

__all__ = ["VariantError", "Variants", "back_to_original", "parse_stopwords"]

LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
SPACE = frozenset(" \t\n\x0b\x0c\r")
CLOSING = frozenset("\"')]\u201d\u2019")
REORDER = {"identity", "rotate", "reverse", "swap-distractors", "shuffle", "order", "all-orders"}
TEXT = {
    "keep-first",
    "keep-last",
    "keep-middle",
    "keep-sentences-prefix",
    "keep-first-sentences",
    "keep-last-sentences",
    "keep-sections",
    "keep-salient",
    "drop-field",
}


class VariantError(ValueError):
    """A variant that does not follow ``docs/variants.md`` or cannot apply to an item."""


def back_to_original(order: str, label: str) -> str:
    """§2: the original label of the option a varied trial shows at ``label``."""
    return order[LABELS.index(label)]


def parse_stopwords(data: bytes, name: str) -> frozenset[str]:
    """§3.6: the words of a stop-word file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise VariantError(f"stop-word file {name} is not UTF-8") from None
    found: set[str] = set()
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw
        while line and line[0] in SPACE:
            line = line[1:]
        while line and line[-1] in SPACE:
            line = line[:-1]
        if line == "" or line[0] == "#":
            continue
        if not all(c in "abcdefghijklmnopqrstuvwxyz0123456789" for c in line):
            raise VariantError(f"stop-word file {name} line {number}: {line!r} is not a token")
        found.add(line)
    return frozenset(found)


# ------------------------------------------------------------------------------ §3 helpers


def _word_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] in SPACE:
            i += 1
            continue
        j = i
        while j < n and text[j] not in SPACE:
            j += 1
        spans.append((i, j))
        i = j
    return spans


def _how_many(total: int, fraction: Any) -> int:
    """§3.2, by exact rationals on the decimal the protocol writes."""
    value = Fraction(repr(float(fraction)))
    return max(1, math.floor(value * total + Fraction(1, 2)))


def _sentence_spans(text: str) -> list[tuple[int, int, int]]:
    spans = _word_spans(text)
    out: list[tuple[int, int, int]] = []
    begin = 0
    for k, (s, e) in enumerate(spans):
        word = text[s:e]
        while word and word[-1] in CLOSING:
            word = word[:-1]
        last = k + 1 == len(spans)
        gap = "" if last else text[e : spans[k + 1][0]]
        ends = last or word[-1:] in (".", "!", "?") or gap.count("\n") > 1
        if ends:
            out.append((spans[begin][0], e, k + 1 - begin))
            begin = k + 1
    return out


def _tokens(text: str) -> set[str]:
    out: set[str] = set()
    run: list[str] = []
    for c in text + " ":
        if "A" <= c <= "Z":
            c = chr(ord(c) + 32)
        if "a" <= c <= "z" or "0" <= c <= "9":
            run.append(c)
        elif run:
            out.add("".join(run))
            run = []
    return out


# ------------------------------------------------------------------------------ the variants


class Variants:
    """The locked variants of a study (``protocol.locked`` ``variants``, ``variant_order``).

    ``read(path)`` returns the locked bytes of a study-relative path (the stop-word files).
    """

    def __init__(
        self,
        protocol: Mapping[str, Any],
        read: Callable[[str], bytes | None],
        option_counts: list[int],
    ) -> None:
        """Read and re-expand the declarations; :class:`VariantError` names the first fault."""
        declared = protocol.get("variants")
        if type(declared) is not dict or not declared:
            raise VariantError("protocol.locked variants is not an object of declarations")
        self.declared: dict[str, dict[str, Any]] = {}
        self.stopwords: dict[str, frozenset[str]] = {}
        for name, table in declared.items():
            self._declare(name, table, read)
        order = protocol.get("variant_order")
        if type(order) is not list or any(type(v) is not str for v in order):
            raise VariantError("protocol.locked variant_order is not a list of names")
        # re-expand in declaration order: canonical JSON sorts the declarations' names, so
        # the declaration order is the order of first appearance in variant_order
        self.defs: dict[str, tuple[str, str | None]] = {}  # name -> (declaration, fixed order)
        expected: list[str] = []
        for base in self._declaration_order(order):
            if self.declared[base]["kind"] != "all-orders":
                expected.append(base)
                self.defs[base] = (base, None)
                continue
            counts = sorted(set(option_counts))
            if len(counts) != 1 or counts[0] > 6:
                raise VariantError(
                    f"variant {base!r} (all-orders): the items have {counts} options"
                )
            for index, perm in enumerate(_permutations(LABELS[: counts[0]]), start=1):
                expected.append(f"{base}-{index}")
                self.defs[f"{base}-{index}"] = (base, perm)
        if expected != order:
            raise VariantError(
                f"protocol.locked variant_order {order!r} is not the expansion of the "
                f"declarations ({expected!r})"
            )
        self.order: list[str] = list(order)

    def kind(self, name: str) -> str:
        """The kind of variant ``name`` (``order`` for an expanded ``all-orders``)."""
        base, fixed = self.defs[name]
        return "order" if fixed is not None else str(self.declared[base]["kind"])

    def of_arm(self, arm_variants: Any) -> list[str]:
        """The variants an arm runs: all, or those its locked ``variants`` list names."""
        if arm_variants is None:
            return list(self.order)
        return [v for v in self.order if v in arm_variants or self.defs[v][0] in arm_variants]

    def _declare(self, name: str, table: Any, read: Callable[[str], bytes | None]) -> None:
        """Check one declaration and keep it (with a keep-salient one's stopwords)."""
        if type(table) is not dict or table.get("kind") not in REORDER | TEXT:
            raise VariantError(f"protocol.locked variants.{name}: not a declaration of a kind")
        _check_declaration(name, table)
        self.declared[name] = table
        if table["kind"] == "keep-salient":
            path = table.get("stopwords")
            data = read(path) if type(path) is str else None
            if data is None:
                raise VariantError(
                    f"protocol.locked variants.{name}.stopwords: {path!r} is not a locked file"
                )
            self.stopwords[name] = parse_stopwords(data, str(path))

    def _declaration_order(self, order: list[str]) -> list[str]:
        """The declarations in order of first appearance in ``variant_order``, every one."""
        seen: list[str] = []
        for name in order:
            base = name if name in self.declared else name.rsplit("-", 1)[0]
            if base not in self.declared:
                raise VariantError(f"protocol.locked variant_order: {name!r} is not declared")
            if base not in seen:
                seen.append(base)
        if sorted(seen) != sorted(self.declared):
            raise VariantError("protocol.locked variant_order does not list every declaration")
        return seen

    def order_for(self, name: str, item: Mapping[str, Any]) -> str | None:
        """§2: the order string of a permutation variant for the item (None: a text variant)."""
        base, fixed = self.defs[name]
        table = self.declared[base]
        kind = table["kind"]
        if kind in TEXT:
            return None
        where = f"item {item.get('id')!r}, variant {name!r}"
        options = item.get("options")
        if type(options) is not list or len(options) < 2:
            raise VariantError(f"{where}: the item has no options to reorder")
        labels = LABELS[: len(options)]
        if fixed is not None:
            result = fixed
        else:
            result = _ORDERS.get(kind, _declared_order)(where, table, item, labels)
        if sorted(result) != sorted(labels):
            raise VariantError(f"{where}: {result!r} is not a permutation of {labels}")
        return result

    def apply(self, name: str, item: Mapping[str, Any]) -> dict[str, Any]:
        """The varied item (a new canonical-form dict) of variant ``name``."""
        if name not in self.defs:
            raise VariantError(f"variant {name!r} is not in protocol.locked variant_order")
        order = self.order_for(name, item)
        out = dict(item)
        where = f"item {item.get('id')!r}, variant {name!r}"
        if order is not None:
            options = list(item["options"])
            labels = LABELS[: len(options)]
            out["options"] = [options[labels.index(c)] for c in order]
            answer = item.get("answer")
            if type(answer) is not str or answer not in order:
                raise VariantError(f"{where}: the key {answer!r} is not an option label")
            out["answer"] = labels[order.index(answer)]
            if out["options"][labels.index(out["answer"])] != options[labels.index(answer)]:
                raise VariantError(f"{where}: the permutation does not remap the key")
            return out
        table = self.declared[self.defs[name][0]]
        kind = table["kind"]
        field = table.get("field")
        if type(field) is not str:
            raise VariantError(f"{where}: the declaration names no field")
        text = item.get(field)
        if type(text) is not str:
            raise VariantError(f"{where}: the item has no text field {field!r}")
        if kind == "drop-field":
            del out[field]
            return out
        spans = _word_spans(text)
        if not spans:
            raise VariantError(f"{where}: field {field!r} has no words")
        w = len(spans)
        if kind in ("keep-first", "keep-last", "keep-middle", "keep-sentences-prefix"):
            k = _how_many(w, table.get("fraction"))
            if kind == "keep-first":
                first, last = 0, k - 1
            elif kind == "keep-last":
                first, last = w - k, w - 1
            elif kind == "keep-middle":
                first = (w - k) // 2
                last = first + k - 1
            else:
                sents = _sentence_spans(text)
                taken, words_used = 0, 0
                for _, _, count in sents:
                    if taken and words_used + count > k:
                        break
                    taken += 1
                    words_used += count
                out[field] = text[sents[0][0] : sents[taken - 1][1]]
                return out
            out[field] = text[spans[first][0] : spans[last][1]]
            return out
        sents = _sentence_spans(text)
        if kind in ("keep-first-sentences", "keep-last-sentences"):
            c = min(int(table.get("count", 0)), len(sents))
            chosen = sents[:c] if kind == "keep-first-sentences" else sents[len(sents) - c :]
            out[field] = text[chosen[0][0] : chosen[-1][1]]
            return out
        if kind == "keep-sections":
            source = table.get("labels_from", "context_labels")
            metadata = item.get("metadata") or {}
            section_labels = metadata.get(source) if type(metadata) is dict else None
            paragraphs = text.split("\n\n")
            if type(section_labels) is not list or len(section_labels) != len(paragraphs):
                raise VariantError(f"{where}: not one label per paragraph")
            wanted = table.get("labels") or []
            kept = [p for p, lab in zip(paragraphs, section_labels, strict=True) if lab in wanted]
            if not kept:
                raise VariantError(f"{where}: no paragraph has a wanted label")
            out[field] = "\n\n".join(kept)
            return out
        # keep-salient
        query = item.get(table.get("query", "question"))
        if type(query) is not str:
            raise VariantError(f"{where}: the item has no query field")
        words = _tokens(query) - self.stopwords.get(self.defs[name][0], frozenset())
        ranked = sorted(
            range(len(sents)),
            key=lambda s: (-len(words & _tokens(text[sents[s][0] : sents[s][1]])), s),
        )
        keep = sorted(ranked[: int(table.get("count", 0))])
        out[field] = " ".join(text[sents[s][0] : sents[s][1]] for s in keep)
        return out


_KEYS: dict[str, tuple[str, ...]] = {
    "rotate": ("k",),
    "shuffle": ("seed",),
    "order": ("order",),
    "keep-first": ("field", "fraction"),
    "keep-last": ("field", "fraction"),
    "keep-middle": ("field", "fraction"),
    "keep-sentences-prefix": ("field", "fraction"),
    "keep-first-sentences": ("field", "count"),
    "keep-last-sentences": ("field", "count"),
    "keep-sections": ("field", "labels"),
    "keep-salient": ("field", "count", "stopwords"),
    "drop-field": ("field",),
}
"""§1: the keys each kind needs (``labels_from`` and ``query`` have defaults)."""


def _positive_int(value: Any) -> bool:
    return type(value) is int and value >= 1


def _seed(value: Any) -> bool:
    return (type(value) is int and value >= 0) or (type(value) is str and value.isdigit())


def _fraction(value: Any) -> bool:
    return type(value) in (int, float) and 0 < value < 1


def _labels(value: Any) -> bool:
    return type(value) is list and bool(value) and all(type(v) is str for v in value)


def _text(value: Any) -> bool:
    return type(value) is str and value != ""


_VALUE_RULES: dict[str, Callable[[Any], bool]] = {
    "k": _positive_int,
    "count": _positive_int,
    "seed": _seed,
    "fraction": _fraction,
    "labels": _labels,
    **dict.fromkeys(("order", "field", "labels_from", "query", "stopwords", "kind"), _text),
}
"""§1: the type each key of a variant declaration must have; a key not here is refused."""


def _identity_order(where: str, table: dict[str, Any], item: Mapping[str, Any], labels: str) -> str:
    """§2 ``identity``: the options as written."""
    return labels


def _rotate(where: str, table: dict[str, Any], item: Mapping[str, Any], labels: str) -> str:
    """§2 ``rotate``: every option moved ``k`` places on, wrapping round."""
    n = len(labels)
    k = table.get("k")
    if type(k) is not int or k < 1 or k >= n:
        raise VariantError(f"{where}: rotate k={k!r} does not apply to {n} options")
    return "".join(labels[(p - k) % n] for p in range(n))


def _reverse(where: str, table: dict[str, Any], item: Mapping[str, Any], labels: str) -> str:
    """§2 ``reverse``: the options last to first."""
    return "".join(reversed(labels))


def _swap_distractors(
    where: str, table: dict[str, Any], item: Mapping[str, Any], labels: str
) -> str:
    """§2 ``swap-distractors``: the first two options that are not the answer swapped."""
    others = [p for p in range(len(labels)) if labels[p] != item.get("answer")]
    if len(others) < 2:
        raise VariantError(f"{where}: fewer than two distractors")
    chars = list(labels)
    chars[others[0]], chars[others[1]] = labels[others[1]], labels[others[0]]
    return "".join(chars)


def _shuffle(where: str, table: dict[str, Any], item: Mapping[str, Any], labels: str) -> str:
    """§2 ``shuffle``: a Fisher-Yates shuffle drawn from SHA-256("{seed}|{item}|{i}")."""
    seed = table.get("seed")
    if type(seed) is int:
        seed = str(seed)
    if type(seed) is not str or not seed.isdigit():
        raise VariantError(f"{where}: seed {seed!r} is not a decimal integer")
    n = len(labels)
    index = list(range(n))
    for i in range(n - 1, 0, -1):
        digest = hashlib.sha256(f"{seed}|{item['id']}|{i}".encode()).hexdigest()
        j = int(digest, 16) % (i + 1)
        index[i], index[j] = index[j], index[i]
    return "".join(labels[p] for p in index)


def _declared_order(where: str, table: dict[str, Any], item: Mapping[str, Any], labels: str) -> str:
    """§2 ``order``: the order the declaration gives."""
    return str(table.get("order"))


_ORDERS: dict[str, Callable[[str, dict[str, Any], Mapping[str, Any], str], str]] = {
    "identity": _identity_order,
    "rotate": _rotate,
    "reverse": _reverse,
    "swap-distractors": _swap_distractors,
    "shuffle": _shuffle,
    "order": _declared_order,
}
"""§2: how each permutation kind orders an item's options (all-orders: fixed per variant)."""


def _check_declaration(name: str, table: dict[str, Any]) -> None:
    """§1: every key a kind needs, of its type; :class:`VariantError` naming the first fault."""
    where = f"protocol.locked variants.{name}"
    for key in _KEYS.get(str(table["kind"]), ()):
        if key not in table:
            raise VariantError(f"{where}: kind {table['kind']!r} needs {key!r}")
    for key, value in table.items():
        rule = _VALUE_RULES.get(key)
        if rule is None or not rule(value):
            raise VariantError(f"{where}.{key}: {value!r} is not what docs/variants.md §1 allows")


def _permutations(labels: str) -> list[str]:
    """Every order of ``labels`` in lexicographic order (§2.7), without itertools."""
    if len(labels) <= 1:
        return [labels]
    out: list[str] = []
    for i, c in enumerate(labels):
        out.extend(c + rest for rest in _permutations(labels[:i] + labels[i + 1 :]))
    return out
