"""RFC 8785 (JCS) canonical-form check for envelope bytes, with a fast path.

:meth:`Canonicalizer.parse` parses envelope bytes and returns the parsed value with its canonical
bytes.  The fast path uses the standard library's C JSON encoder with sorted keys; it is taken only
when it provably equals RFC 8785:

* no JSON number with a fraction or exponent, and no integer literal beyond 2^53 - 1, occurred
  (integers print the same in Python and in ECMAScript up to 2^53 - 1; larger literals are read as
  the doubles they denote, as ``docs/ledger-format.md`` §1 says, and take the slow path);
* no byte ``>= 0xF0`` and no ``\\uD…`` escape occurs, so no string holds a character outside the
  Basic Multilingual Plane, and sorting keys by code point equals sorting them by UTF-16 code units;
* string escaping of both is identical (``\\" \\\\ \\b \\f \\n \\r \\t``, other controls
  as lowercase ``\\u00xx``, everything else literal UTF-8).

Otherwise ``rfc8785.dumps`` is used.  ``tests/verify/test_verify_canonical.py`` checks the
equivalence with hypothesis.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from sys import intern
from typing import Any

import rfc8785

__all__ = ["MAX_SAFE_INTEGER", "CanonicalError", "Canonicalizer", "canonical_json"]

MAX_SAFE_INTEGER = 2**53 - 1

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD]")
_BELOW_F0 = bytes(range(0xF0))


def _may_hold_astral(data: bytes) -> bool:
    """Whether ``data`` may encode a character beyond U+FFFF (a byte >= 0xF0 or a \\uD escape).

    Conservative (an escaped backslash followed by ``uD`` also counts) and cheap: ``isascii`` and
    ``in`` on one byte run in C without a regex for almost every envelope.
    """
    if b"\\" in data and _SURROGATE_ESCAPE.search(data) is not None:
        return True
    return not data.isascii() and len(data.translate(None, _BELOW_F0)) > 0


SHARED_STRING_CHARS = 48
"""Strings up to this length are shared by :class:`Canonicalizer` ``(shared=True)``."""


def _shared_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A parsed object whose keys and short string values are the one shared copy of their text.

    Built like the parser's own object (a key given twice keeps its first place and its last
    value), so only memory differs: a study's hundreds of thousands of envelopes repeat the same
    keys and many values (issue 41).
    """
    return {
        intern(k): (intern(v) if type(v) is str and len(v) <= SHARED_STRING_CHARS else v)
        for k, v in pairs
    }


class CanonicalError(ValueError):
    """Internal: the bytes are not JSON that JCS can represent (caught and reported as a FAIL)."""


def _no_constant(name: str) -> Any:
    raise CanonicalError(f"{name} is not a JSON value")


_FAST_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)


def _make_fast_encode() -> Callable[[Any], str]:
    """``_FAST_ENCODER.encode`` without rebuilding the C encoder on every call."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the pure-Python encoder gives the same bytes
        return _FAST_ENCODER.encode
    c_encode = make(
        None,  # no circular-reference markers: values come from the JSON parser
        _FAST_ENCODER.default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        True,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )

    def encode(value: Any) -> str:
        return "".join(c_encode(value, 0))

    return encode


_fast_encode = _make_fast_encode()


class Canonicalizer:
    """Parses JSON bytes and produces their RFC 8785 canonical form.

    One instance per thread (it keeps per-parse state); ``fast_path_taken`` tells whether the last
    :meth:`parse` used the fast path.
    """

    __slots__ = ("_decoder", "_float_seen", "_scan", "fast_path_taken")

    def __init__(self, shared: bool = False) -> None:
        """``shared``: every key and short string value is interned (:func:`_shared_object`).

        For a reader that keeps what it parses: equal values, less memory, a little more time.
        """
        self._float_seen = False
        self.fast_path_taken = False
        self._decoder = json.JSONDecoder(
            parse_float=self._parse_float,
            parse_int=self._parse_int,
            parse_constant=_no_constant,
            object_pairs_hook=_shared_object if shared else None,
        )
        # the C scanner itself, without raw_decode's wrapper
        self._scan = self._decoder.scan_once  # type: ignore[attr-defined]

    def _parse_float(self, text: str) -> float:
        self._float_seen = True
        return float(text)

    def _parse_int(self, text: str) -> int | float:
        # docs/ledger-format.md §1: a reader treats every JSON number as the double it denotes, so
        # an integer literal beyond 2^53 - 1 is read as a double (as ECMAScript JSON.parse does).
        if len(text) < 16:  # at most 15 digits: always within 2^53 - 1
            return int(text)
        if len(text) <= 20:
            n = int(text)
            if -MAX_SAFE_INTEGER <= n <= MAX_SAFE_INTEGER:
                return n
        self._float_seen = True
        return float(text)  # never int(): huge literals would hit int's digit limit

    def parse(self, data: bytes) -> tuple[Any, bytes]:
        """Parse UTF-8 JSON ``data``; return ``(value, canonical bytes)``.

        Raises :class:`CanonicalError` when ``data`` is not UTF-8 JSON, holds NaN or a number
        that is infinite as a double, or cannot be canonicalised (lone surrogates).
        """
        self._float_seen = False
        self.fast_path_taken = False
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CanonicalError(f"not valid UTF-8 at byte {exc.start}") from None
        try:
            value, end = self._scan(text, 0)
        except StopIteration as exc:
            raise CanonicalError(f"not JSON: expecting value at character {exc.value}") from None
        except json.JSONDecodeError as exc:
            raise CanonicalError(f"not JSON: {exc.msg} at character {exc.pos}") from None
        except RecursionError:
            raise CanonicalError("not JSON: nested too deeply") from None
        except ValueError as exc:
            raise CanonicalError(f"not JSON: {exc}") from None
        if end != len(text):
            raise CanonicalError(f"not JSON: extra data at character {end}")
        if not self._float_seen and data.isascii() and b"\\" not in data:
            # the commonest case, inlined: no number but integers, no character beyond ASCII
            # and no escape at all, so nothing can differ from RFC 8785 but key order
            self.fast_path_taken = True
            return value, _fast_encode(value).encode("ascii")
        return value, self.dumps(value, data)

    def dumps(self, value: Any, source: bytes | None = None) -> bytes:
        """Return the canonical bytes of a value just parsed from ``source`` by :meth:`parse`."""
        try:
            if not self._float_seen and source is not None and not _may_hold_astral(source):
                self.fast_path_taken = True
                return _fast_encode(value).encode("utf-8")
            return rfc8785.dumps(value)
        except (UnicodeEncodeError, rfc8785.CanonicalizationError) as exc:
            raise CanonicalError(f"cannot be canonicalised: {exc}") from None
        except (ValueError, RecursionError) as exc:
            raise CanonicalError(f"cannot be canonicalised: {exc}") from None


def canonical_json(value: Any) -> bytes:
    """Return the RFC 8785 canonical bytes of a JSON value (``rfc8785.dumps``, errors wrapped)."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, ValueError, RecursionError) as exc:
        raise CanonicalError(f"cannot be canonicalised: {exc}") from None
