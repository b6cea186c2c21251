"""The kept envelopes of ``ledger/events.jsonl`` as compact columns, not one dict each (issue 41).

The strict parse (:mod:`verify._reader.events`) reads the events once, in order; every line's
shared envelope (or ``None``) is appended here. What is kept per event:

* ``kind`` and ``actor`` as 2-byte codes into their distinct values, ``seq`` as 8 bytes and
  ``prev`` (64 lowercase hex) as its 32 bytes;
* ``time`` as the 27 ASCII bytes of ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in one byte string;
* ``body`` and ``blobs`` packed: an object becomes a tuple of its values behind one shared tuple
  of its member names (every ``trial.requested`` body shares one), an array a tuple, a string of
  64 lowercase hex digits its 32 bytes (a hex string twice in one envelope is kept once).

Reading an event back (:meth:`EventColumns.__getitem__`, :meth:`EventColumns.body`) rebuilds
the same values in the same member order, so every check reads exactly what the parse gave:
equal dicts, lists, strings and numbers. A line whose envelope was not kept reads as ``None``.
The seqs of each kind are kept as they are appended (:meth:`EventColumns.of_kind`).

A study of 100,000 trials has about 300,000 envelopes: as dicts they took about 1.8 KB each,
packed about 0.4 KB.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, overload

__all__ = ["EventColumns"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_MEMBERS = ("actor", "blobs", "body", "kind", "prev", "seq", "time", "v")
"""The envelope's members in RFC 8785 order (a canonical line's order)."""
_NONE = 0xFFFF  # the code of a line without a kept envelope
_RECENT = 64  # bodies rebuilt lately, kept for a check that reads one event several times
_TIME_BYTES = 27  # len("2026-11-22T10:00:00.123456Z"): the only form a kept envelope's time has


class _Obj(tuple):  # type: ignore[type-arg]
    """A packed JSON object: ``(names, value, value, ...)``, ``names`` shared by equal shapes."""

    __slots__ = ()


class _Arr(tuple):  # type: ignore[type-arg]
    """A packed JSON array: its packed values."""

    __slots__ = ()


_EMPTY_ARR = _Arr()


class _Packer:
    """Packs one envelope's values; a 64-hex string seen twice in it is kept once."""

    __slots__ = ("hexes", "names")

    def __init__(self, names: dict[tuple[str, ...], tuple[str, ...]]) -> None:
        self.names = names
        self.hexes: dict[str, bytes] = {}

    def pack(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            if len(value) == 64 and _HEX64.fullmatch(value) is not None:
                raw = self.hexes.get(value)
                if raw is None:
                    raw = self.hexes[value] = bytes.fromhex(value)
                return raw
            return value
        if kind is dict:
            keys = tuple(value)
            shared = self.names.get(keys)
            if shared is None:
                shared = self.names[keys] = keys
            return _Obj((shared, *map(self.pack, value.values())))
        if kind is list:
            return _Arr(map(self.pack, value)) if value else _EMPTY_ARR
        return value


def _unpack(value: Any) -> Any:
    kind = type(value)
    if kind is bytes:
        return value.hex()
    if kind is _Obj:
        return dict(zip(value[0], map(_unpack, value[1:]), strict=True))
    if kind is _Arr:
        return list(map(_unpack, value))
    return value


class EventColumns(Sequence[dict[str, Any] | None]):
    """Each line's kept envelope, packed; ``columns[i]`` rebuilds line ``i``'s envelope dict.

    Appending ``None`` (a line whose envelope is not kept) or setting a line to ``None`` (a
    faulty line found later) is all that changes it.
    """

    def __init__(self) -> None:
        self._kinds: list[str] = []
        self._kind_codes: dict[str, int] = {}
        self._actors: list[Any] = []
        self._actor_codes: dict[Any, int] = {}
        self._kind = array("H")
        self._actor = array("H")
        self._seq = array("q")
        self._prev = bytearray()
        self._time = bytearray()
        self._body: list[Any] = []
        self._blobs: list[Any] = []
        self._names: dict[tuple[str, ...], tuple[str, ...]] = {}
        # rare: an envelope whose prev is not 64 hex, whose time is not 27 ASCII characters,
        # or whose members are not in RFC 8785 order
        self._odd_prev: dict[int, Any] = {}
        self._odd_time: dict[int, Any] = {}
        self._odd_order: dict[int, tuple[str, ...]] = {}
        self._by_kind: dict[str, list[int]] = {}
        self._recent: dict[int, dict[str, Any]] = {}

    def _code(self, value: Any, codes: dict[Any, int], values: list[Any]) -> int:
        code = codes.get(value)
        if code is None:
            if len(values) >= _NONE:
                raise ValueError("more than 65,534 distinct event kinds or actors")
            code = codes[value] = len(values)
            values.append(value)
        return code

    def append(self, env: dict[str, Any] | None) -> None:
        """Keep line ``len(self)``'s envelope (a shared one: the eight members of §1) or None."""
        index = len(self._kind)
        if env is None:
            self._kind.append(_NONE)
            self._actor.append(_NONE)
            self._seq.append(-1)
            self._prev += bytes(32)
            self._time += bytes(_TIME_BYTES)
            self._body.append(None)
            self._blobs.append(None)
            return
        kind = env["kind"]
        self._kind.append(self._code(kind, self._kind_codes, self._kinds))
        self._actor.append(self._code(env["actor"], self._actor_codes, self._actors))
        self._seq.append(env["seq"])
        prev = env["prev"]
        if type(prev) is str and len(prev) == 64 and _HEX64.fullmatch(prev) is not None:
            self._prev += bytes.fromhex(prev)
        else:
            self._prev += bytes(32)
            self._odd_prev[index] = prev
        if tuple(env) != _MEMBERS:
            self._odd_order[index] = tuple(env)
        time = env["time"]
        if type(time) is str and len(time) == _TIME_BYTES and time.isascii():
            self._time += time.encode("ascii")
        else:
            self._time += bytes(_TIME_BYTES)
            self._odd_time[index] = time
        packer = _Packer(self._names)
        self._body.append(packer.pack(env["body"]))
        self._blobs.append(packer.pack(env["blobs"]))
        self._by_kind.setdefault(kind, []).append(index)

    def drop(self, index: int) -> None:
        """Forget line ``index``'s envelope: it reads as ``None`` from now on."""
        if self._kind[index] == _NONE:
            return
        kind = self._kinds[self._kind[index]]
        seqs = self._by_kind[kind]
        seqs.remove(index)
        if not seqs:
            del self._by_kind[kind]
        self._kind[index] = _NONE
        self._actor[index] = _NONE
        self._seq[index] = -1
        self._body[index] = self._blobs[index] = None
        self._odd_prev.pop(index, None)
        self._odd_time.pop(index, None)
        self._odd_order.pop(index, None)
        self._recent.pop(index, None)

    def __len__(self) -> int:
        return len(self._kind)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any] | None: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any] | None]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        code = self._kind[index]  # raises IndexError past the end
        if code == _NONE:
            return None
        values = {
            "actor": self._actors[self._actor[index]],
            "blobs": _unpack(self._blobs[index]),
            "body": self.body(index),
            "kind": self._kinds[code],
            "prev": self._odd_prev[index]
            if index in self._odd_prev
            else self._prev[32 * index : 32 * index + 32].hex(),
            "seq": self._seq[index],
            "time": self.time(index),
            "v": 1,
        }
        order = self._odd_order.get(index)
        return values if order is None else {name: values[name] for name in order}

    def __setitem__(self, index: int, value: None) -> None:
        if value is not None:
            raise TypeError("an event's envelope can only be dropped (set to None)")
        self.drop(index if index >= 0 else index + len(self))

    def __iter__(self) -> Iterator[dict[str, Any] | None]:
        for index in range(len(self._kind)):
            yield self[index]

    def kept(self, index: int) -> bool:
        """Whether line ``index``'s envelope is kept."""
        return self._kind[index] != _NONE

    def kind(self, index: int) -> str | None:
        """Line ``index``'s kind, or ``None`` when its envelope is not kept."""
        code = self._kind[index]
        return None if code == _NONE else self._kinds[code]

    def actor(self, index: int) -> Any:
        """Line ``index``'s actor, or ``None`` when its envelope is not kept."""
        code = self._actor[index]
        return None if code == _NONE else self._actors[code]

    def time(self, index: int) -> Any:
        """Line ``index``'s time, or ``None`` when its envelope is not kept."""
        if self._kind[index] == _NONE:
            return None
        if index in self._odd_time:
            return self._odd_time[index]
        start = _TIME_BYTES * index
        return self._time[start : start + _TIME_BYTES].decode("ascii")

    def seq(self, index: int) -> int | None:
        """Line ``index``'s envelope ``seq``, or ``None`` when its envelope is not kept."""
        return None if self._kind[index] == _NONE else self._seq[index]

    def body(self, index: int) -> Any:
        """Line ``index``'s body as parsed (a dict), or ``None`` when its envelope is not kept.

        The last bodies read are the same dict when read again (as the parsed envelopes were).
        """
        recent = self._recent.get(index)
        if recent is not None:
            return recent
        packed = self._body[index]
        if packed is None:
            return None
        body = _unpack(packed)
        if len(self._recent) >= _RECENT:
            del self._recent[next(iter(self._recent))]
        self._recent[index] = body
        return body

    def blobs(self, index: int) -> Any:
        """Line ``index``'s blobs object as parsed, or ``None`` when its envelope is not kept."""
        packed = self._blobs[index]
        return None if packed is None else _unpack(packed)

    def of_kind(self, kind: str) -> list[int]:
        """The lines whose kept envelope is of ``kind``, ascending (a copy)."""
        return list(self._by_kind.get(kind, ()))

    def kinds(self) -> dict[str, list[int]]:
        """Each kind's lines, ascending (copies)."""
        return {kind: list(seqs) for kind, seqs in self._by_kind.items()}
