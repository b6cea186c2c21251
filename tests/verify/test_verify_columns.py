"""The verifier's packed event columns give back exactly the envelopes the strict parse kept."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verify._reader.columns import EventColumns

HEX = "ab" * 32
OTHER_HEX = "0f" * 32


def envelope(seq: int, kind: str = "trial.requested", **body: Any) -> dict[str, Any]:
    """A shared envelope (the eight members of ledger-format §1, in RFC 8785 order)."""
    return {
        "actor": "example.org/study/owner+0123abcd",
        "blobs": {"request": HEX},
        "body": {"request_sha256": HEX, "trial": f"A|s|{seq}", **body},
        "kind": kind,
        "prev": OTHER_HEX,
        "seq": seq,
        "time": "2026-11-28T10:00:00.000001Z",
        "v": 1,
    }


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from([HEX, OTHER_HEX, HEX.upper(), HEX[:-1], "", "0" * 64]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=5), max_size=6))
def test_bodies_read_back_equal_with_their_member_order(bodies: list[dict[str, Any]]) -> None:
    columns = EventColumns()
    envs = [envelope(i, body=b) for i, b in enumerate(bodies)]
    for env in envs:
        columns.append(env)
    assert len(columns) == len(envs)
    for i, env in enumerate(envs):
        got = columns[i]
        assert got == env
        assert list(got or {}) == list(env)
        assert list((got or {})["body"]) == list(env["body"])
        assert repr(got) == repr(env)  # same types: 1 is not 1.0 nor True, "" is not None
    assert list(columns) == envs


def test_types_survive_exactly() -> None:
    body = {"t": True, "one": 1, "f": 1.0, "neg0": -0.0, "n": None, "big": "9" * 20, "l": []}
    columns = EventColumns()
    columns.append(envelope(0, **body))
    got = columns.body(0)
    assert got is not None
    for name, value in body.items():
        assert type(got[name]) is type(value), name
        assert repr(got[name]) == repr(value), name


def test_dropped_and_missing_lines_read_as_none_and_leave_the_kind_index() -> None:
    columns = EventColumns()
    columns.append(envelope(0, kind="ledger.genesis"))
    columns.append(None)
    columns.append(envelope(2))
    columns.append(envelope(3))
    assert columns[1] is None and columns.kind(1) is None and columns.body(1) is None
    assert columns.of_kind("trial.requested") == [2, 3]
    columns[-1] = None
    assert columns[3] is None and columns.blobs(3) is None and not columns.kept(3)
    assert columns.of_kind("trial.requested") == [2]
    assert columns.kinds() == {"ledger.genesis": [0], "trial.requested": [2]}
    with pytest.raises(TypeError, match="can only be dropped"):
        columns[2] = envelope(2)  # type: ignore[assignment]


def test_unusual_envelopes_keep_their_prev_seq_and_member_order() -> None:
    env = envelope(7)
    env["prev"] = "not hex"
    env["seq"] = 9  # a seq other than its line: the ledger checks report it; kept as read
    shuffled = {k: env[k] for k in reversed(list(env))}
    columns = EventColumns()
    columns.append(shuffled)
    for time in ("2026-11-28T10:00:00Z", "2026-11-28T10:00:00.00000\u00e9Z", 17):
        columns.append({**envelope(len(columns)), "time": time})
    got = columns[0]
    assert got == shuffled and list(got or {}) == list(shuffled)
    assert columns.seq(0) == 9 and columns.actor(0) == env["actor"]
    assert columns.time(0) == env["time"]
    assert [columns.time(i) for i in (1, 2, 3)] == [
        "2026-11-28T10:00:00Z",
        "2026-11-28T10:00:00.00000\u00e9Z",
        17,
    ]


def test_a_body_read_twice_is_one_dict_until_it_is_forgotten() -> None:
    columns = EventColumns()
    for i in range(200):
        columns.append(envelope(i))
    first = columns.body(0)
    assert columns.body(0) is first
    for i in range(1, 200):
        columns.body(i)
    again = columns.body(0)
    assert again == first and again is not first


def test_bodies_by_seq_look_up_as_the_dict_of_those_bodies_would() -> None:
    from verify._archive.view import Bodies

    columns = EventColumns()
    for i in range(6):
        columns.append(envelope(i, kind="trial.requested" if i % 2 else "trial.responded"))
    seqs = columns.of_kind("trial.requested")
    bodies = Bodies(columns, seqs)
    as_dict = {seq: columns.body(seq) for seq in seqs}
    assert dict(bodies) == as_dict and list(bodies) == [1, 3, 5] and len(bodies) == 3
    for key in (1, 2, 5, 6, -1, True, 1.0, 3.5, "1", None):
        assert (key in bodies) == (key in as_dict), key
        assert bodies.get(key, "absent") == as_dict.get(key, "absent"), key
    with pytest.raises(TypeError):
        bodies.get([1])  # type: ignore[call-overload]
    with pytest.raises(KeyError):
        bodies[2]
