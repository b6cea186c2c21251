"""Canonical JSON and envelope round trips (hypothesis properties)."""

from __future__ import annotations

from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import CanonicalError, FormatError, canonical_json, parse_envelope
from ledger._canonical import loads_json
from ledger._envelope import build_envelope

SAFE = 2**53 - 1
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE, max_value=SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
@settings(max_examples=400)
def test_canonical_equals_rfc8785_reference(value: Any) -> None:
    try:
        expected = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        with pytest.raises(CanonicalError):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


@given(json_values)
def test_canonical_is_idempotent(value: Any) -> None:
    try:
        data = canonical_json(value)
    except CanonicalError:
        return
    assert canonical_json(loads_json(data)) == data


def test_utf16_key_order_differs_from_code_point_order() -> None:
    value = {"\U0001f600": 1, "\ufb01": 2}  # UTF-16 puts the surrogate pair first
    assert canonical_json(value) == rfc8785.dumps(value)
    assert canonical_json(value).index("\U0001f600".encode()) < canonical_json(value).index(
        "\ufb01".encode()
    )


@pytest.mark.parametrize("value", [2**53, -(2**53), {"seed": 12345678901234567890}])
def test_big_integers_are_refused_with_advice(value: Any) -> None:
    with pytest.raises(CanonicalError, match="write it as a decimal string"):
        canonical_json(value)


def test_largest_safe_integer_is_accepted() -> None:
    assert canonical_json(SAFE) == b"9007199254740991"


bodies = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


@given(
    seq=st.integers(min_value=0, max_value=SAFE),
    kind=st.from_regex(r"\A[a-z][a-z0-9_]{0,8}(\.[a-z][a-z0-9_]{0,8}){1,2}\Z"),
    body=bodies,
)
@settings(max_examples=200)
def test_envelope_round_trip(seq: int, kind: str, body: dict[str, Any]) -> None:
    try:
        env = build_envelope(
            seq=seq,
            time="2026-11-22T10:00:00.123456Z",
            kind=kind,
            actor="owner+0a1b2c3d",
            prev="ab" * 32,
            body=body,
            blobs={"x": "cd" * 32},
        )
    except CanonicalError:
        return
    back = parse_envelope(env.data)
    assert back.data == env.data
    assert (back.seq, back.kind, back.actor, back.prev) == (seq, kind, "owner+0a1b2c3d", "ab" * 32)
    assert canonical_json(back.as_dict()) == env.data


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.replace(b'"v":1', b'"v":2'), "unknown envelope version 2"),
        (lambda d: d.replace(b'{"actor"', b'{ "actor"'), "not RFC 8785 canonical"),
        (lambda d: d.replace(b'"time":"2026-11-22T10:00:00.123456Z"', b'"time":"2026-11-22"'),
         "is not YYYY-MM-DD"),
        (lambda d: d.replace(b'"kind":"trial.scored"', b'"kind":"Trial"'), "kind 'Trial'"),
        (lambda d: d[:-1], "not JSON"),
        (lambda d: d.replace(b'"body":{}', b'"body":[]'), "body must be a JSON object"),
        (lambda d: d.replace(b',"v":1', b',"v":1,"x":0'), "unexpected \\['x'\\]"),
    ],
)
def test_bad_envelopes_are_refused(mutate: Any, message: str) -> None:
    env = build_envelope(
        seq=1, time="2026-11-22T10:00:00.123456Z", kind="trial.scored",
        actor="owner+0a1b2c3d", prev="00" * 32, body={}, blobs={},
    )
    with pytest.raises(FormatError, match=message):
        parse_envelope(mutate(env.data))


def test_invalid_calendar_time_is_refused() -> None:
    with pytest.raises(FormatError, match="not a valid date"):
        build_envelope(
            seq=1, time="2026-02-30T10:00:00.000000Z", kind="a.b", actor="o+0a1b2c3d",
            prev="00" * 32, body={}, blobs={},
        )
