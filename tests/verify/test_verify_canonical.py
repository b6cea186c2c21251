"""The verifier's canonical-JSON fast path equals rfc8785 whenever it is taken."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from verify._canonical import CanonicalError, Canonicalizer

SAFE = 2**53 - 1

texts = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"]),  # no lone surrogates
    max_size=12,
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-SAFE, max_value=SAFE),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(texts, children, max_size=4)
    ),
    max_leaves=20,
)


def _encodings(value: Any) -> list[bytes]:
    out = [json.dumps(value, ensure_ascii=False).encode(), json.dumps(value).encode()]
    with contextlib.suppress(rfc8785.CanonicalizationError):
        out.append(rfc8785.dumps(value))
    return out


@settings(max_examples=400, deadline=None)
@given(values)
def test_fast_path_equals_rfc8785_whenever_taken(value: Any) -> None:
    canon = Canonicalizer()
    for data in _encodings(value):
        parsed, got = canon.parse(data)
        assert got == rfc8785.dumps(parsed)


@settings(max_examples=200, deadline=None)
@given(values)
def test_canonical_bytes_are_a_fixed_point(value: Any) -> None:
    canon = Canonicalizer()
    data = json.dumps(value).encode()
    _, once = canon.parse(data)
    _, twice = canon.parse(once)
    assert once == twice


@pytest.mark.parametrize(
    ("data", "fast"),
    [
        (b'{"b":1,"a":"x"}', True),
        (b'{"a":1.5}', False),
        (b'{"a":1e2}', False),
        (b'{"\xf0\x9f\x98\x80":1,"\xef\xbd\xa1":2}', False),
        (b'{"\\ud83d\\ude00":1}', False),
        (b'{"a":100000000000000000000}', False),
    ],
)
def test_fast_path_selection(data: bytes, fast: bool) -> None:
    canon = Canonicalizer()
    parsed, got = canon.parse(data)
    assert canon.fast_path_taken is fast
    assert got == rfc8785.dumps(parsed)


def test_astral_keys_sort_by_utf16() -> None:
    # U+FF61 sorts after U+1F600 by UTF-16 code units (0xD83D < 0xFF61), before it by code point
    _, got = Canonicalizer().parse('{"\uff61":2,"\U0001f600":1}'.encode())
    assert got == '{"\U0001f600":1,"\uff61":2}'.encode()


def test_large_integer_literals_read_as_doubles() -> None:
    canon = Canonicalizer()
    assert canon.parse(b'{"a":100000000000000000000}')[1] == b'{"a":100000000000000000000}'
    assert canon.parse(b'{"a":9007199254740993}')[1] == b'{"a":9007199254740992}'


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"a":NaN}', "NaN is not a JSON value"),
        (b'{"a":Infinity}', "not a JSON value"),
        (b'{"a":1' + b"0" * 5000 + b"}", "not representable"),
        (b'{"a":"\xff"}', "not valid UTF-8"),
        (b'{"a":1} x', "extra data"),
        (b'{"a":"\\udc80"}', "cannot be canonicalised"),
        (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
    ],
)
def test_refused_inputs(data: bytes, reason: str) -> None:
    with pytest.raises(CanonicalError, match=reason):
        Canonicalizer().parse(data)


@given(values)
def test_shared_strings_parse_the_same(value: Any) -> None:
    """``Canonicalizer(shared=True)`` (the archive reader's) gives equal values and bytes."""
    data = json.dumps(value, ensure_ascii=False).encode("utf-8")
    try:
        plain = Canonicalizer().parse(data)
    except CanonicalError:
        with pytest.raises(CanonicalError):
            Canonicalizer(shared=True).parse(data)
        return
    shared = Canonicalizer(shared=True).parse(data)
    assert shared == plain
    assert json.dumps(shared[0]) == json.dumps(plain[0])  # the same member order too


def test_shared_strings_keep_duplicate_keys_as_the_parser_does() -> None:
    """A key given twice keeps its first place and its last value, as without sharing."""
    data = b'{"b":1,"a":{"x":"same","x":"last"},"b":2}'
    plain, shared = Canonicalizer().parse(data), Canonicalizer(shared=True).parse(data)
    assert shared == plain == ({"b": 2, "a": {"x": "last"}}, b'{"a":{"x":"last"},"b":2}')
    assert list(shared[0]) == list(plain[0]) == ["b", "a"]
    value, _ = Canonicalizer(shared=True).parse(b'{"kind":"trial.scored"}')
    again, _ = Canonicalizer(shared=True).parse(b'{"kind":"trial.scored"}')
    assert next(iter(value)) is next(iter(again)) and value["kind"] is again["kind"]
