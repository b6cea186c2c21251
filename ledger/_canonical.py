"""RFC 8785 (JCS) canonical JSON, with a fast path for the common case.

``rfc8785.dumps`` is the reference; it is pure Python and costs ~20 us for a typical envelope.
When a value holds no floats and no characters outside the Basic Multilingual Plane, RFC 8785
output is byte-identical to ``json.dumps(sort_keys=True, separators=(",", ":"),
ensure_ascii=False)`` (same escaping rules, same integer form, and code point order equals UTF-16
order for BMP keys), which runs in C. ``tests/test_canonical.py`` checks the equivalence with
hypothesis.
"""

from __future__ import annotations

import json
from typing import Any

import rfc8785

from ledger._errors import CanonicalError

MAX_SAFE_INTEGER = 2**53 - 1

_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def simple_json(value: Any) -> bool:
    """Return True when the fast encoder gives RFC 8785 bytes for ``value``.

    Raises :class:`CanonicalError` for integers outside the safe range and non-string keys, so
    both paths refuse them with the same message.
    """
    kind = type(value)
    if kind is str:
        return value.isascii() or max(value, default="") <= "\uffff"
    if kind is int:
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise CanonicalError(_big_int_message(value))
        return True
    if kind is dict:
        for key, sub in value.items():
            if type(key) is not str:
                raise CanonicalError(f"object keys must be strings, got {key!r}")
            if not (key.isascii() or max(key, default="") <= "\uffff"):
                return False
            if not simple_json(sub):
                return False
        return True
    if kind is list or kind is tuple:
        return all(simple_json(item) for item in value)
    return value is None or kind is bool  # floats, subclasses and the rest go the reference way


def _big_int_message(value: int) -> str:
    return (
        f"integer {value} is outside the JSON-safe range +/-(2^53 - 1); "
        f'write it as a decimal string instead (for example "seed": "{value}")'
    )


def _parse_int(text: str) -> int | float:
    value = int(text)
    # An integer literal beyond 2^53 - 1 is how RFC 8785 writes a large *double* (1e20 is
    # written 100000000000000000000), so it is read back as a float, as JSON.parse would.
    return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else float(value)


def loads_json(data: bytes | str) -> Any:
    """Parse JSON as RFC 8785 does: numbers are doubles, so big integer literals become floats."""
    return json.loads(data, parse_int=_parse_int)


def fast_canonical_json(value: Any) -> bytes:
    """Encode a value for which :func:`simple_json` returned True (no checks of its own)."""
    return _ENCODER.encode(value).encode("utf-8")


def canonical_json(value: Any) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of a JSON value.

    Raises:
        CanonicalError: for integers beyond 2^53 - 1 (write them as strings), NaN or infinite
            floats, non-string object keys, lone surrogates, or non-JSON types.
    """
    try:
        if simple_json(value):
            return _ENCODER.encode(value).encode("utf-8")
        return bytes(rfc8785.dumps(value))
    except CanonicalError:
        raise
    except rfc8785.IntegerDomainError as exc:
        raise CanonicalError(
            "an integer is outside the JSON-safe range +/-(2^53 - 1); write it as a decimal string"
        ) from exc
    except (rfc8785.CanonicalizationError, ValueError, TypeError, UnicodeEncodeError) as exc:
        raise CanonicalError(f"value cannot be written as canonical JSON: {exc}") from exc
