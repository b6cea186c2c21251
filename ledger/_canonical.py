"""RFC 8785 (JCS) canonical JSON, with a fast path for the common case.

``rfc8785.dumps`` is the reference; it is pure Python and costs ~20 us for a typical envelope
(~100 us for a request body holding an image). When a value holds no characters outside the
Basic Multilingual Plane, RFC 8785 output is byte-identical to ``json.dumps(sort_keys=True,
separators=(",", ":"), ensure_ascii=False)`` (same escaping rules, same integer form, and code
point order equals UTF-16 order for BMP keys), which runs in C, except for floats. Floats are
written as RFC 8785 section 3.2.2.3 requires (ECMAScript's Number-to-String, from Python's
shortest round-trip ``repr``, exactly as the reference does) by :func:`ecma_number`, and only
the containers on the way to a float are joined in Python; everything else is still encoded in
C. ``tests/ledger/test_canonical.py`` checks both against the reference with hypothesis.
"""

from __future__ import annotations

import json
import math
from typing import Any

import rfc8785

from ledger._errors import CanonicalError

MAX_SAFE_INTEGER = 2**53 - 1

_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
#: The string form ``_ENCODER`` writes (``ensure_ascii=False``), in C
_string = json.encoder.encode_basestring


#: What :func:`_scan` finds in a value: a form only the reference writes, a value the C encoder
#: writes exactly, or one that also holds floats (written by :func:`_encode_with_floats`).
_REFERENCE, _PLAIN, _FLOATS = 0, 1, 2


def _bmp(text: str) -> bool:
    return text.isascii() or max(text, default="") <= "\uffff"


def _scan(value: Any) -> int:
    """Which encoder gives RFC 8785 bytes for ``value``: ``_PLAIN``, ``_FLOATS`` or ``_REFERENCE``.

    Raises :class:`CanonicalError` for integers outside the safe range and non-string keys, so
    every path refuses them with the same message.
    """
    kind = type(value)
    if kind is str:
        return _PLAIN if _bmp(value) else _REFERENCE
    if kind is int:
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise CanonicalError(_big_int_message(value))
        return _PLAIN
    if kind is float:
        # NaN and the infinities go the reference way, which refuses them
        return _FLOATS if math.isfinite(value) else _REFERENCE
    found = _PLAIN
    # Members and items that are strings, integers, null or booleans (most of them) are
    # checked here, as _scan would check them, without a call each.
    if kind is dict:
        for key, sub in value.items():
            if type(key) is not str:
                raise CanonicalError(f"object keys must be strings, got {key!r}")
            if not _bmp(key):
                return _REFERENCE
            sub_kind = type(sub)
            if sub_kind is str:
                if sub.isascii() or _bmp(sub):
                    continue
                return _REFERENCE
            if sub_kind is int:
                if -MAX_SAFE_INTEGER <= sub <= MAX_SAFE_INTEGER:
                    continue
                raise CanonicalError(_big_int_message(sub))
            if sub is None or sub_kind is bool:
                continue
            inner = _scan(sub)
            if inner == _REFERENCE:
                return _REFERENCE
            if inner == _FLOATS:
                found = _FLOATS
        return found
    if kind is list or kind is tuple:
        for item in value:
            item_kind = type(item)
            if item_kind is str:
                if item.isascii() or _bmp(item):
                    continue
                return _REFERENCE
            if item_kind is int:
                if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                    continue
                raise CanonicalError(_big_int_message(item))
            if item is None or item_kind is bool:
                continue
            inner = _scan(item)
            if inner == _REFERENCE:
                return _REFERENCE
            if inner == _FLOATS:
                found = _FLOATS
        return found
    return _PLAIN if value is None or kind is bool else _REFERENCE  # subclasses, other types


def ecma_number(value: float) -> str:
    """A finite float as RFC 8785 writes it (ECMAScript Number-to-String, RFC 8785 3.2.2.3).

    The digits are Python's shortest round-trip ``repr`` (the ``k`` digits ECMAScript asks
    for); the form follows ECMA-262 7.1.12.1: plain digits up to 21 integer digits, ``0.000ddd``
    down to 1e-6, exponent form (``1e+21``, ``1.5e-7``) beyond; ``-0`` is ``0``. Equal to
    ``rfc8785.dumps`` for every finite float (``tests/ledger/test_canonical.py``).
    """
    if value == 0:
        return "0"
    text = repr(value)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exp_text = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    if frac == "0":
        frac = ""
    if not exp_text:
        # repr is already positional (1e-4 <= |value| < 1e16): ``ddd.ddd``, ``ddd`` or ``0.0ddd``
        return f"{sign}{whole}.{frac}" if frac else sign + whole
    exponent = int(exp_text)
    digits = whole + frac  # repr's exponent form has one digit before the point
    if 0 < exponent < 21:
        # an integer below 1e21 (every double of 1e16 or more is one): all its digits
        return sign + digits + "0" * (exponent + 1 - len(digits))
    if -7 < exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    point = f"{whole}.{frac}" if frac else whole
    return f"{sign}{point}e{'+' if exponent > 0 else '-'}{abs(exponent)}"


def _encode_with_floats(value: Any) -> str:
    """RFC 8785 text of a value :func:`_scan` found ``_FLOATS`` (or ``_PLAIN``) for.

    Floats by :func:`ecma_number`; strings by the C function the C encoder itself uses;
    containers joined here, keys in code point order (which is UTF-16 order for BMP keys).
    """
    kind = type(value)
    if kind is str:
        return _string(value)
    if kind is float:
        return ecma_number(value)
    if kind is dict:
        encode = _encode_with_floats
        parts = [f"{_string(k)}:{encode(value[k])}" for k in sorted(value)]
        return "{" + ",".join(parts) + "}"
    if kind is list or kind is tuple:
        return "[" + ",".join(map(_encode_with_floats, value)) + "]"
    if kind is int:
        return int.__repr__(value)
    return "null" if value is None else "true" if value else "false"


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


_DECODER = json.JSONDecoder(parse_int=_parse_int)
"""The decoder of :func:`loads_json`, made once (``json.loads`` with arguments makes one a call)."""


def loads_json(data: bytes | str) -> Any:
    """Parse JSON as RFC 8785 does: numbers are doubles, so big integer literals become floats.

    The same result and errors as ``json.loads(data, parse_int=...)``, without building a
    decoder per call.
    """
    if type(data) is bytes and data[:1] == b"{" and data[1:2] != b"\x00":
        # what json.detect_encoding says of bytes that open an object with a non-NUL byte
        return _DECODER.decode(data.decode("utf-8", "surrogatepass"))
    if isinstance(data, bytes | bytearray):
        return _DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))
    if isinstance(data, str) and not data.startswith("\ufeff"):
        return _DECODER.decode(data)
    return json.loads(data, parse_int=_parse_int)  # its own message for a BOM or a wrong type


def canonical_json(value: Any) -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of a JSON value.

    Raises:
        CanonicalError: for integers beyond 2^53 - 1 (write them as strings), NaN or infinite
            floats, non-string object keys, lone surrogates, or non-JSON types.
    """
    try:
        found = _scan(value)
        if found == _PLAIN:
            return _ENCODER.encode(value).encode("utf-8")
        if found == _FLOATS:
            return _encode_with_floats(value).encode("utf-8")
        return bytes(rfc8785.dumps(value))
    except CanonicalError:
        raise
    except rfc8785.IntegerDomainError as exc:
        raise CanonicalError(
            "an integer is outside the JSON-safe range +/-(2^53 - 1); write it as a decimal string"
        ) from exc
    except (rfc8785.CanonicalizationError, ValueError, TypeError, UnicodeEncodeError) as exc:
        raise CanonicalError(f"value cannot be written as canonical JSON: {exc}") from exc
