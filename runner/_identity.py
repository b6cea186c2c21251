"""What the server says about itself: the model list, and the headers that name a deployment.

A response's ``model`` is what the server *reports*, not proof of which weights answered:
llama-cpp-python's server answers any model name with the one model it loaded and echoes the
requested name. Before a run's first request that costs money, the runner asks the server
which models it serves, where its API has a way to ask (``docs/trials.md`` §2):

- ``openai-compatible``: ``GET {base_url}/models`` (the OpenAI-compatible model list);
- ``anthropic`` (and ``anthropic-batch``): ``GET /v1/models/{id}`` for each locked model id
  (the Models API, which resolves an alias to the snapshot it names; a 404 says "no such
  model");
- ``openai`` and ``gemini``: ``GET {base_url}/models/{id}`` for each locked id;
- ``anthropic-bedrock``: ``GET /foundation-models/{id}`` (``/inference-profiles/{id}``) on the
  Bedrock control plane; ``azure-openai`` and ``anthropic-vertex``: nothing to ask on their
  inference APIs, recorded as such (``docs/backends.md``);
- ``replay``: nothing to ask (the answers come from a recorded ledger): recorded as such;
- ``simulated``: not asked and not recorded (every report labels the data simulated).

:class:`ServerIdentity` is recorded as ``server_identity`` in every ``run.preflight`` and in
``run.started``. :meth:`ServerIdentity.warnings` are the lines the preflight output, ``ledger
status``, the report and the archive print when a locked model is not among the models the
server named, or the server could not be asked. Nothing here proves which model answered; it
records what the server said, and says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner._provenance import model_matches

__all__ = [
    "IDENTITY_HEADERS",
    "Asked",
    "ServerIdentity",
    "identity_headers",
    "identity_warnings",
    "listed_in",
]

#: Response headers recorded because they name the request, the model or the deployment (or
#: the server software): compared case-insensitively, recorded lowercase.
IDENTITY_HEADERS = (
    "request-id",
    "x-request-id",
    "openai-model",
    "x-model-id",
    "x-served-model",
    "azureml-model-deployment",
    "x-amzn-requestid",
    "apim-request-id",
    "x-ms-region",
    "server",
)
#: How long the runner waits for the server to say which models it serves.
ASK_TIMEOUT_SECONDS = 30.0


def identity_headers(headers: Mapping[str, str] | Any) -> dict[str, str]:
    """The :data:`IDENTITY_HEADERS` present in ``headers`` (a mapping or an httpx ``Headers``)."""
    out: dict[str, str] = {}
    for name in IDENTITY_HEADERS:
        value = headers.get(name)
        if isinstance(value, str) and value:
            out[name] = value[:200]
    return out


def listed_in(model_id: str, models: Iterable[str] | None) -> bool | None:
    """Whether ``model_id`` is among ``models`` (equal, or a dated snapshot of it; §2's rule).

    None when the server named no models (it could not be asked, or did not answer).
    """
    if models is None:
        return None
    return any(model_matches(model_id, m) is True for m in models)


@dataclass(frozen=True)
class Asked:
    """One request that asked the server about its models, and what came of it."""

    url: str
    http_status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"url", "http_status", "headers", "error"}`` (``docs/trials.md`` §3)."""
        return {
            "url": self.url,
            "http_status": self.http_status,
            "headers": dict(self.headers),
            "error": self.error,
        }


@dataclass(frozen=True)
class ServerIdentity:
    """What the server said about the models it serves (``server_identity``, §3).

    ``asked``: the requests made (none for a backend with no server to ask, then ``note``
    says why); ``models``: every id the server named, None when no request answered;
    ``listed``: for each locked model id of the session, whether it is among ``models`` (True),
    not among them although the server answered about it (False), or unknown (None: the
    server could not be asked).
    """

    asked: tuple[Asked, ...]
    models: tuple[str, ...] | None
    listed: dict[str, bool | None]
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``server_identity`` (``docs/trials.md`` §3)."""
        return {
            "asked": [a.as_dict() for a in self.asked],
            "models": None if self.models is None else list(self.models),
            "listed": dict(self.listed),
            "note": self.note,
        }

    def warnings(self, where: str) -> list[str]:
        """One line per locked model that is not listed, or that the server was not asked about.

        ``where`` names the server (``the openai-compatible backend at URL``).
        """
        return identity_warnings(self.as_dict(), where)


def identity_warnings(record: Mapping[str, Any], where: str) -> list[str]:
    """The warning lines of a recorded ``server_identity`` (for the runner, status, reports).

    Shared by every reader of the record on the writer's side (the verifier derives its own).
    """
    listed = record.get("listed")
    models = record.get("models")
    named = (
        ", ".join(repr(m) for m in models[:8]) + (" ..." if len(models) > 8 else "")
        if isinstance(models, list) and models
        else "none"
    )
    out: list[str] = []
    if not isinstance(listed, Mapping):
        return out
    for model_id, value in sorted(listed.items()):
        if value is True:
            continue
        if value is False:
            out.append(
                f"the locked model {model_id!r} is not among the models {where} reports "
                f"serving (it named: {named}); its answers report the model the server says, "
                "which proves nothing about which model answered"
            )
        else:
            why = record.get("note") or "; ".join(
                str(a.get("error")) for a in record.get("asked") or [] if a.get("error")
            )
            out.append(
                f"{where} could not be asked whether it serves the locked model {model_id!r}"
                + (f" ({why})" if why else "")
                + "; which model answered is what the server reports, unconfirmed"
            )
    return out


def unanswered(
    model_ids: Sequence[str], asked: Sequence[Asked], note: str | None
) -> ServerIdentity:
    """An identity with no model list: every id unknown (None)."""
    return ServerIdentity(tuple(asked), None, {m: None for m in model_ids}, note)


NOTICE_HEAD = "MODEL IDENTITY NOT CONFIRMED: "
NOTICE_TAIL = (
    ". A response's model id is what the server reports, not proof of which model answered."
)


def session_notice(runs: Iterable[Mapping[str, Any]]) -> str | None:
    """The report's and the archive README's notice (``docs/trials.md`` §2), or None.

    ``runs`` are the ``run.started`` bodies, each with its ``seq``. For each real session that
    recorded ``server_identity``, in seq order, each locked id (sorted) the server did not list
    (``false``) or could not be asked about (``null``), the first time that is said of that id:
    ``the server did not list the locked model 'ID' among its models (run.started seq N)`` or
    ``the server could not be asked whether it serves the locked model 'ID' (run.started seq
    N)``, joined by ``; `` between :data:`NOTICE_HEAD` and :data:`NOTICE_TAIL`. Sessions
    without the record (simulated, or written before it existed) add nothing.
    """
    items: list[str] = []
    said: set[tuple[str, object]] = set()
    for run in sorted(runs, key=lambda r: int(r.get("seq", 0))):
        record = run.get("server_identity")
        if run.get("simulated") is True or not isinstance(record, Mapping):
            continue
        listed = record.get("listed")
        if not isinstance(listed, Mapping):
            continue
        for model_id in sorted(listed):
            value = listed[model_id]
            if value is True or (model_id, value) in said:
                continue
            said.add((model_id, value))
            where = f"(run.started seq {run.get('seq')})"
            items.append(
                f"the server did not list the locked model '{model_id}' among its models {where}"
                if value is False
                else f"the server could not be asked whether it serves the locked model "
                f"'{model_id}' {where}"
            )
    return NOTICE_HEAD + "; ".join(items) + NOTICE_TAIL if items else None


def recorded_warnings(events: Iterable[Any]) -> list[tuple[int, str]]:
    """(seq, line) for ``ledger status`` and ``ledger analyze``: what the server said, recorded.

    ``events`` are ledger events (``seq``, ``kind``, ``body``). Each real ``run.started`` or
    ``run.preflight`` that records ``server_identity`` contributes the locked ids it did not
    confirm (the first event per id and outcome); a real ``run.started`` without the record
    says the server was not asked.
    """
    out: list[tuple[int, str]] = []
    said: set[tuple[str, object]] = set()
    for event in events:
        if event.kind not in ("run.started", "run.preflight"):
            continue
        body = event.body
        if body.get("simulated") is True:
            continue
        record = body.get("server_identity")
        if not isinstance(record, Mapping):
            if event.kind == "run.started":
                out.append(
                    (
                        event.seq,
                        f"run.started seq {event.seq} (backend "
                        f"{body.get('backend')}) records no server_identity: "
                        "the server was not asked which models it serves",
                    )
                )
            continue
        listed = record.get("listed")
        if not isinstance(listed, Mapping):
            continue
        fresh = {m: v for m, v in listed.items() if v is not True and (m, v) not in said}
        said.update(fresh.items())
        if fresh:
            url = body.get("url")
            where = f"the {body.get('backend')} backend" + (f" at {url}" if url else "")
            lines = identity_warnings({**record, "listed": fresh}, where)
            out += [(event.seq, f"{event.kind} seq {event.seq}: {line}") for line in lines]
    return out
