"""Canonical JSON and envelope round trips (hypothesis properties)."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import CanonicalError, FormatError, canonical_json, parse_envelope
from ledger._canonical import ecma_number, loads_json
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


# Every finite double, by its bits: the spread of exponents (subnormals, 1e-7 .. 1e21, huge)
# that plain st.floats() rarely reaches, and the boundaries where the written form changes.
any_double = (
    st.integers(min_value=0, max_value=2**64 - 1)
    .map(lambda bits: struct.unpack("<d", struct.pack("<Q", bits))[0])
    .filter(math.isfinite)
)
FORM_BOUNDARIES = [
    0.0,
    -0.0,
    5e-324,
    2.2250738585072014e-308,
    1e-7,
    9.999999999999999e-8,
    1e-6,
    1.5e-6,
    9.99999e-7,
    1e-5,
    1e-4,
    0.1,
    0.5,
    1.0,
    1.5,
    2.0**52 + 0.5,
    2.0**53,
    2.0**53 + 2,
    1e15 + 0.3,
    1e16,
    1.5e16,
    2.0**60,
    1e20,
    9.999999999999999e20,
    1e21,
    1.7976931348623157e308,
]


floats_to_write = st.one_of(
    any_double, st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(FORM_BOUNDARIES)
)


def _check_float(value: float) -> None:
    assert ecma_number(value).encode() == rfc8785.dumps(value)
    assert ecma_number(-value).encode() == rfc8785.dumps(-value)
    body = {"model": "m", "temperature": value, "messages": [{"t": [value, 1, "\u00e9"]}]}
    assert canonical_json(body) == rfc8785.dumps(body)


@given(floats_to_write)
@settings(max_examples=500)
def test_float_fast_path_equals_rfc8785_reference(value: float) -> None:
    """RFC 8785 3.2.2.3 (ECMAScript Number-to-String) by the fast path equals the reference."""
    _check_float(value)


@pytest.mark.slow
@given(floats_to_write)
@settings(max_examples=20_000, deadline=None)
def test_float_fast_path_equals_rfc8785_reference_many(value: float) -> None:
    """The same property over 20,000 doubles (the slow set)."""
    _check_float(value)


def test_float_bodies_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request body (``temperature`` is a float) no longer goes the pure-Python way."""

    def reference(value: Any) -> bytes:
        raise AssertionError("the reference encoder was used")

    monkeypatch.setattr(rfc8785, "dumps", reference)
    body = {
        "max_tokens": 2048,
        "temperature": 1.0,
        "top_p": 0.95,
        "model": "claude",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "caf\u00e9"}]}],
    }
    assert canonical_json(body) == (
        b'{"max_tokens":2048,"messages":[{"content":[{"text":"caf\xc3\xa9","type":"text"}],'
        b'"role":"user"}],"model":"claude","temperature":1,"top_p":0.95}'
    )


def test_non_finite_floats_are_refused() -> None:
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(CanonicalError):
            canonical_json({"temperature": value})


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


@pytest.mark.parametrize(
    "value",
    [2**53, -(2**53), {"seed": 12345678901234567890}, [0, 2**53], {"a": ["x", -(2**53)]}],
)
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


@given(
    seq=st.integers(min_value=0, max_value=SAFE),
    actor=st.from_regex(r"\A[^\s+]{1,12}\+[0-9a-f]{8}\Z"),
    body=bodies,
    blobs=st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3),
)
@settings(max_examples=300)
def test_the_stores_envelope_bytes_are_the_reference_bytes(
    seq: int, actor: str, body: dict[str, Any], blobs: dict[str, str]
) -> None:
    """build_envelope(prevalidated=True) writes the members around the body's canonical form;
    its bytes are rfc8785's for the whole envelope, or it refuses what the reference refuses."""
    obj = {
        "v": 1,
        "seq": seq,
        "time": "2026-11-22T10:00:00.123456Z",
        "kind": "trial.responded",
        "actor": actor,
        "prev": "ab" * 32,
        "body": body,
        "blobs": blobs,
    }
    try:
        expected = bytes(rfc8785.dumps(obj))
    except (rfc8785.CanonicalizationError, rfc8785.IntegerDomainError, UnicodeEncodeError):
        with pytest.raises(CanonicalError):
            build_envelope(**{k: v for k, v in obj.items() if k != "v"}, prevalidated=True)
        return
    env = build_envelope(**{k: v for k, v in obj.items() if k != "v"}, prevalidated=True)
    assert env.data == expected == canonical_json(obj)


_FORMS: dict[str, Any] = {
    "reference": lambda o: bytes(rfc8785.dumps(o)),
    "ascii escapes": lambda o: json.dumps(o, sort_keys=True, separators=(",", ":")).encode(),
    "members unsorted": lambda o: json.dumps(o, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    ),
    "spaces": lambda o: json.dumps(o, sort_keys=True, ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    ),
    "python floats": lambda o: json.dumps(
        o, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8", "surrogatepass"),
}


@given(
    seq=st.integers(min_value=0, max_value=SAFE),
    actor=st.from_regex(r"\A[^\s+]{1,12}\+[0-9a-f]{8}\Z"),
    body=bodies,
    blobs=st.dictionaries(
        st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,5}\Z"), st.just("cd" * 32), max_size=3
    ),
    form=st.sampled_from(sorted(_FORMS)),
)
@settings(max_examples=150)
def test_an_envelope_is_accepted_exactly_when_its_bytes_are_the_reference_bytes(
    seq: int, actor: str, body: dict[str, Any], blobs: dict[str, str], form: str
) -> None:
    """parse_envelope proves canonical form by joining the checked members around the body's
    and the blobs' canonical forms: bytes written any other way than rfc8785's are refused,
    the reference's are accepted (issue 35: the service's cheaper parse)."""
    obj = {
        "v": 1,
        "seq": seq,
        "time": "2026-11-22T10:00:00.123456Z",
        "kind": "trial.responded",
        "actor": actor,
        "prev": "ab" * 32,
        "body": body,
        "blobs": blobs,
    }
    try:
        data = _FORMS[form](obj)
        reference = bytes(rfc8785.dumps(loads_json(data)))
    except (rfc8785.CanonicalizationError, rfc8785.IntegerDomainError, UnicodeEncodeError):
        with pytest.raises(FormatError):
            parse_envelope(_FORMS[form](obj))
        return
    if data == reference:
        assert parse_envelope(data).data == data
    else:
        with pytest.raises(FormatError, match="not RFC 8785 canonical"):
            parse_envelope(data)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.replace(b'"v":1', b'"v":2'), "unknown envelope version 2"),
        (lambda d: d.replace(b'{"actor"', b'{ "actor"'), "not RFC 8785 canonical"),
        (
            lambda d: d.replace(b'"time":"2026-11-22T10:00:00.123456Z"', b'"time":"2026-11-22"'),
            "is not YYYY-MM-DD",
        ),
        (lambda d: d.replace(b'"kind":"trial.scored"', b'"kind":"Trial"'), "kind 'Trial'"),
        # a final newline (escaped: the bytes stay canonical) is no part of a valid member;
        # "$" in the field rules let it through, which the verifier refuses (issue 35)
        (
            lambda d: d.replace(b'123456Z"', b'123456Z\\n"'),
            "is not YYYY-MM-DDTHH:MM:SS.ffffffZ",
        ),
        (lambda d: d.replace(b'"trial.scored"', b'"trial.scored\\n"'), "is invalid: use dotted"),
        (lambda d: d.replace(b'0000",', b'0000\\n",'), "is not 64 lowercase hex"),
        (lambda d: d.replace(b'2c3d"', b'2c3d\\n"'), "is not <key name>"),
        (lambda d: d[:-1], "not JSON"),
        (lambda d: d.replace(b'"body":{}', b'"body":[]'), "body must be a JSON object"),
        (lambda d: d.replace(b',"v":1', b',"v":1,"x":0'), "unexpected \\['x'\\]"),
    ],
)
def test_bad_envelopes_are_refused(mutate: Any, message: str) -> None:
    env = build_envelope(
        seq=1,
        time="2026-11-22T10:00:00.123456Z",
        kind="trial.scored",
        actor="owner+0a1b2c3d",
        prev="00" * 32,
        body={},
        blobs={},
    )
    with pytest.raises(FormatError, match=message):
        parse_envelope(mutate(env.data))


def test_invalid_calendar_time_is_refused() -> None:
    with pytest.raises(FormatError, match="not a valid date"):
        build_envelope(
            seq=1,
            time="2026-02-30T10:00:00.000000Z",
            kind="a.b",
            actor="o+0a1b2c3d",
            prev="00" * 32,
            body={},
            blobs={},
        )


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": 1, "big": 100000000000000000000}',
        b"{}",
        b"{",
        '{"é": "ü"}'.encode(),
        '{"a": 1}'.encode("utf-16-le"),
        '{"a": 1}'.encode("utf-16"),
        b'\xef\xbb\xbf{"a": 1}',
        b'{"a": "\xed\xa0\x80"}',
    ],
)
def test_loads_json_reads_bytes_as_json_loads_does(data: bytes) -> None:
    """The shortcut for bytes opening an object gives json.loads's value, or its error."""

    def reference() -> Any:
        text = data.decode(json.detect_encoding(data), "surrogatepass")
        return json.loads(text, parse_int=lambda t: int(t) if abs(int(t)) <= SAFE else float(t))

    try:
        expected = reference()
    except ValueError as exc:
        with pytest.raises(type(exc)):
            loads_json(data)
        return
    assert loads_json(data) == expected
