"""Property: any sequence of appends, in any batching, verifies independently."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from helpers import fixed_clock, fixed_key
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import EventSpec, Ledger
from verify import verify_ledger_file

SAFE = 2**53 - 1
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE, max_value=SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
events = st.tuples(
    st.sampled_from(["trial.requested", "trial.responded", "trial.failed", "run.started"]),
    st.dictionaries(st.text(max_size=8), values, max_size=4),
    st.dictionaries(st.from_regex(r"\A[a-z][a-z0-9_]{0,6}\Z"), st.binary(max_size=64), max_size=2),
)
batches = st.lists(st.lists(events, min_size=1, max_size=6), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(batches=batches, checkpoint_after=st.integers(min_value=0, max_value=5))
def test_any_appended_sequence_verifies(
    batches: list[list[tuple[str, dict[str, Any], dict[str, bytes]]]], checkpoint_after: int
) -> None:
    owner = fixed_key("example.org/owner")
    runner = fixed_key("example.org/runner")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.db"
        with Ledger.create(path, origin="example.org/prop", key=owner, clock=fixed_clock()) as log:
            log.add_key(runner.vkey, "runner", key=owner)
            for number, batch in enumerate(batches):
                specs = [EventSpec(kind, body, blobs) for kind, body, blobs in batch]
                if len(specs) == 1:
                    log.append(specs[0].kind, specs[0].body, key=runner, blobs=specs[0].blobs)
                else:
                    log.append_many(specs, key=runner)
                if number == checkpoint_after:
                    log.sign_checkpoint([owner, runner])
            expected = 2 + sum(len(b) for b in batches)
            assert log.size == expected
        report = verify_ledger_file(path)
        assert report.ok, report.failures
        assert report.size == expected
