"""RFC 3161 time stamps on a study's registration checkpoint (``docs/witness.md`` §9).

A study may declare a time-stamping authority (``[timestamping] url``). After ``ledger lock``
has committed the lock (and its witnesses cosigned), the registration checkpoint's note text
(origin, size, root: the signed lines, without any signature) is sent to the TSA as an RFC 3161
``TimeStampReq`` (SHA-256 message imprint, a nonce, the TSA's certificate requested), with the
``rfc3161-client`` library building the request and reading the answer. The token is checked
(granted, the imprint is the checkpoint's SHA-256, the nonce is ours) and appended to the ledger
as a ``checkpoint.timestamped`` event (owner), the ``TimeStampResp`` as its blob ``token``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ledger import Event, Ledger, SigningKey
from runner._errors import StudyError

__all__ = [
    "TIMESTAMP_KIND",
    "TimestampError",
    "TimestampSpec",
    "parse_timestamping",
    "request_timestamp",
    "timestamp_checkpoint",
]

TIMESTAMP_KIND = "checkpoint.timestamped"
TIMESTAMPING_KEYS = ("url",)


class TimestampError(StudyError):
    """The time-stamping authority could not be reached, refused, or answered wrongly."""


@dataclass(frozen=True)
class TimestampSpec:
    """``[timestamping]``: the TSA's URL (``application/timestamp-query`` is POSTed to it)."""

    url: str

    def record(self) -> dict[str, str]:
        """The locked form (``protocol.locked`` ``timestamping``)."""
        return {"url": self.url}


def parse_timestamping(data: dict[str, Any], add: Any) -> TimestampSpec | None:
    """Validate ``[timestamping]`` of a parsed spec; None when absent."""
    from urllib.parse import urlsplit

    table = data.get("timestamping")
    if table is None:
        return None
    if not isinstance(table, dict):
        add("timestamping", "must be a table")
        return None
    url = table.get("url")
    if not isinstance(url, str) or not url:
        add(
            "timestamping.url",
            f"must be the URL of an RFC 3161 time-stamping authority, got {url!r}",
        )
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        add("timestamping.url", f"{url!r} is not an http(s) URL")
        return None
    return TimestampSpec(url)


def request_timestamp(url: str, message: bytes, *, timeout: float = 30.0) -> bytes:
    """Get an RFC 3161 time stamp on SHA-256(``message``) from the TSA at ``url``.

    Returns the DER ``TimeStampResp``. Raises :class:`TimestampError` when the TSA cannot be
    reached, does not grant the request, or answers with a token on another hash or nonce.
    """
    import httpx
    from rfc3161_client import (
        HashAlgorithm,
        TimestampRequestBuilder,
        decode_timestamp_response,
    )

    request = (
        TimestampRequestBuilder()
        .data(message)
        .hash_algorithm(HashAlgorithm.SHA256)
        .cert_request(cert_request=True)
        .build()
    )
    try:
        answer = httpx.post(
            url,
            content=request.as_bytes(),
            timeout=timeout,
            headers={"Content-Type": "application/timestamp-query"},
        )
    except httpx.HTTPError as exc:
        raise TimestampError(f"time-stamping authority {url}: {type(exc).__name__}: {exc}") from exc
    if answer.status_code != 200:
        raise TimestampError(
            f"time-stamping authority {url} answered HTTP {answer.status_code}: {answer.text[:200]}"
        )
    try:
        response = decode_timestamp_response(answer.content)
    except ValueError as exc:
        raise TimestampError(f"time-stamping authority {url}: not a TimeStampResp ({exc})") from exc
    if response.status not in (0, 1):
        raise TimestampError(
            f"time-stamping authority {url} refused the request (PKIStatus "
            f"{response.status}: {response.status_string})"
        )
    digest = hashlib.sha256(message).digest()
    if response.tst_info.message_imprint.message != digest:
        raise TimestampError(
            f"time-stamping authority {url} answered with a token for a different hash "
            f"({response.tst_info.message_imprint.message.hex()}, not the checkpoint's "
            f"{digest.hex()}); refused"
        )
    if response.tst_info.nonce != request.nonce:
        raise TimestampError(
            f"time-stamping authority {url}: the token's nonce is not the request's; refused"
        )
    return bytes(answer.content)


def timestamp_checkpoint(log: Ledger, key: SigningKey, spec: TimestampSpec, size: int) -> Event:
    """Time-stamp the stored checkpoint of ``size`` and record it (``checkpoint.timestamped``)."""
    from rfc3161_client import decode_timestamp_response

    note = next((cp.note for cp in log.checkpoints() if cp.size == size), None)
    if note is None:
        raise TimestampError(f"{log.path}: no checkpoint of size {size} to time-stamp")
    text = note.partition("\n\n")[0] + "\n"
    token = request_timestamp(spec.url, text.encode("utf-8"))
    stamped = decode_timestamp_response(token).tst_info.gen_time
    return log.append(
        TIMESTAMP_KIND,
        {
            "size": size,
            "tsa": spec.url,
            "hash": "sha256",
            "message_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "gen_time": stamped.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        key=key,
        blobs={"token": token},
    )
