"""The ``timestamps`` check: RFC 3161 time stamps on the registration checkpoint.

Written from ``docs/witness.md`` §9 and RFC 3161. A study that declared a time-stamping
authority (``protocol.locked`` ``timestamping``) records each token as a
``checkpoint.timestamped`` event: body ``{"size", "tsa", "hash": "sha256", "message_sha256",
"gen_time"}``, blob ``token`` (the DER ``TimeStampResp``). With ``--tsa-cert FILE`` (PEM: the
TSA's root certificate, or several), each token must verify (``rfc3161-client``: the CMS
signature, the signer's certificate chaining to a given root at the token's time, with the
time-stamping EKU) over the note text of the stored checkpoint of that size (the signed lines,
without signatures), whose SHA-256 is ``message_sha256``; and its time must fall between the
checkpoint's last event and the first ``trial.requested`` after it (within the skew).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from verify._archive.view import Archive
from verify._errors import NoteError
from verify._note import parse_note
from verify._report import Check, Status

__all__ = ["TIMESTAMP_KIND", "check_timestamps", "verify_token"]

TIMESTAMP_KIND = "checkpoint.timestamped"


def verify_token(token: bytes, message: bytes, roots_pem: bytes) -> datetime:
    """The time of RFC 3161 ``token`` (a DER TimeStampResp) on ``message``, or ``ValueError``.

    The token must be granted, on SHA-256(``message``), signed by a certificate that chains to
    one of the PEM certificates ``roots_pem`` (at the token's time) with the time-stamping EKU.
    """
    from cryptography import x509
    from rfc3161_client import VerificationError, VerifierBuilder, decode_timestamp_response

    try:
        response = decode_timestamp_response(token)
    except ValueError as exc:
        raise ValueError(f"not a TimeStampResp ({exc})") from None
    if response.status not in (0, 1):
        raise ValueError(f"the TSA did not grant it (PKIStatus {response.status})")
    digest = hashlib.sha256(message).digest()
    if response.tst_info.message_imprint.message != digest:
        raise ValueError(
            f"the token is for a different hash ({response.tst_info.message_imprint.message.hex()}"
            f", not the checkpoint's {digest.hex()})"
        )
    try:
        roots = x509.load_pem_x509_certificates(roots_pem)
    except ValueError as exc:
        raise ValueError(f"--tsa-cert is not PEM certificates ({exc})") from None
    builder = VerifierBuilder()
    for root in roots:
        builder = builder.add_root_certificate(root)
    try:
        builder.build().verify_message(response, message)
    except VerificationError as exc:
        raise ValueError(f"the token does not verify against --tsa-cert: {exc}") from None
    return response.tst_info.gen_time.astimezone(UTC)


def _time(a: Archive, seq: int) -> float | None:
    env = a.envs[seq] if 0 <= seq < a.n else None
    text = env.get("time") if env is not None else None
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


_NAME = "timestamps"


def _token_time(
    a: Archive, seq: int, body: dict[str, Any], size: int, roots: bytes
) -> datetime | Check:
    """The time a ``checkpoint.timestamped`` token gives its checkpoint, or the failing check."""
    raw_size = body.get("size")
    where = f"{TIMESTAMP_KIND} seq {seq}"
    fc = a.stored_checkpoints.get(size)
    if fc is None or fc.note is None:
        return Check(
            _NAME,
            Status.FAIL,
            f"{where}: no checkpoint of size {raw_size!r} to check the token against",
            seq,
        )
    try:
        text, _ = parse_note(fc.note)
    except NoteError as exc:
        return Check(_NAME, Status.FAIL, f"{where}: {fc.where}: {exc}", seq, fc.where)
    message = text.encode("utf-8")
    if body.get("message_sha256") != hashlib.sha256(message).hexdigest():
        return Check(
            _NAME,
            Status.FAIL,
            f"{where}: message_sha256 is not the SHA-256 of the checkpoint of size {size}",
            seq,
        )
    token = a.blob(a.blob_ref(seq, "token"))
    if token is None:
        return Check(_NAME, Status.FAIL, f"{where}: its token blob is missing", seq)
    try:
        when = verify_token(token, message, roots)
    except ValueError as exc:
        return Check(_NAME, Status.FAIL, f"{where}: {exc}", seq)
    claimed = {"hash": "sha256", "gen_time": f"{when:%Y-%m-%dT%H:%M:%SZ}"}
    for field, value in claimed.items():  # the body says what the token says, or nothing
        if body.get(field) != value:
            return Check(
                _NAME,
                Status.FAIL,
                f"{where}: {field} {body.get(field)!r} is not the token's ({value!r})",
                seq,
            )
    return when


def _window_problem(
    a: Archive, seq: int, size: int, when: datetime, skew: float, requests: list[int]
) -> Check | None:
    """The failing check if a token's time is out of its window, within the skew.

    The window: after its checkpoint's last event, before the next trial.requested.
    """
    where = f"{TIMESTAMP_KIND} seq {seq}"
    last = _time(a, size - 1)
    if last is not None and when.timestamp() < last - skew:
        return Check(
            _NAME,
            Status.FAIL,
            f"{where}: the token's time {when:%Y-%m-%dT%H:%M:%SZ}"
            f" is before the checkpoint's last event (seq {size - 1}) by more than "
            f"{skew:g} s",
            seq,
        )
    following = next((s for s in requests if s >= size), None)
    limit = _time(a, following) if following is not None else None
    if limit is not None and when.timestamp() > limit + skew:
        return Check(
            _NAME,
            Status.FAIL,
            f"{where}: the token's time {when:%Y-%m-%dT%H:%M:%SZ}"
            f" is after trial.requested seq {following} by more than {skew:g} s",
            seq,
        )
    return None


def _stamped(a: Archive, events: list[int], roots: bytes) -> dict[int, str] | Check:
    """The time of each verified token by checkpoint size, or the first failing check."""
    stamped: dict[int, str] = {}
    skew = float(getattr(a, "witness_skew", 300.0))
    requests = a.of_kind("trial.requested")
    for seq in events:
        body = a.body(seq)
        raw_size = body.get("size")
        size = raw_size if type(raw_size) is int else -1
        when = _token_time(a, seq, body, size, roots)
        if isinstance(when, Check):
            return when
        problem = _window_problem(a, seq, size, when, skew, requests)
        if problem is not None:
            return problem
        stamped[size] = f"{when:%Y-%m-%dT%H:%M:%SZ}"
    return stamped


def check_timestamps(a: Archive) -> Check | None:
    """The ``timestamps`` check, or None when there is neither a TSA nor ``--tsa-cert``."""
    name = _NAME
    roots: bytes | None = getattr(a, "tsa_roots", None)
    declared = a.protocol.get("timestamping")
    events = a.of_kind(TIMESTAMP_KIND)
    if roots is None and declared is None and not events:
        return None
    registration = [s + 1 for s in a.of_kind("protocol.locked")]
    sizes = {a.body(seq).get("size") for seq in events}
    missing = [s for s in registration if s not in sizes]
    if declared is not None and missing:  # a declared token that is not there: no root needed
        return Check(
            name,
            Status.FAIL,
            f"the study declared a time-stamping authority, but the "
            f"registration checkpoint of size {missing[0]} has no RFC 3161 time stamp "
            f"({TIMESTAMP_KIND})",
            where=f"ledger/checkpoints/{missing[0]:08d}.txt",
        )
    if roots is None:
        return Check(
            name,
            Status.WARN,
            f"{len(events)} RFC 3161 time stamp(s) recorded, not "
            "checked: pass --tsa-cert FILE (the TSA's root certificate) to check them",
        )
    stamped = _stamped(a, events, roots)
    if isinstance(stamped, Check):
        return stamped
    return _result(registration, declared is not None, stamped)


def _result(registration: list[int], declared: bool, stamped: dict[int, str]) -> Check:
    """The check once every token verified: the registration stamped, and when the lock was.

    A registration checkpoint without a token fails when the study declared a TSA, or when
    no token verified at all.
    """
    missing = [s for s in registration if s not in stamped]
    if missing and (declared or not stamped):
        return Check(
            _NAME,
            Status.FAIL,
            f"the registration checkpoint of size {missing[0]} has no RFC 3161 time stamp",
            where=f"ledger/checkpoints/{missing[0]:08d}.txt",
        )
    shown = "; ".join(f"size {s}: time-stamped at {t}" for s, t in sorted(stamped.items()))
    # only a tree that holds the (first) lock says when the study was locked: a token on an
    # earlier, smaller tree says nothing about an event it does not contain
    covering = [t for size, t in stamped.items() if registration and size >= registration[0]]
    claim = (
        f"; locked no later than {min(covering)} (time-stamped by the TSA)"
        if covering
        else "; no token is on a tree that holds the lock: no claim of when it was locked"
    )
    return Check(
        _NAME,
        Status.PASS,
        f"{len(stamped)} RFC 3161 token(s) verify against --tsa-cert ({shown}){claim}",
    )
