"""The verifier's worker processes: how many, and how they start (issue 41).

The per-event work that does not depend on the order of the events (the Ed25519 signature of
each event, the SHA-256 of each file of an archive) is handed to a pool of worker processes in
chunks; everything that depends on order (the sequence, the chain, the tree, the keys, every
archive and science check) stays in the main process. Each worker returns its chunk's results
(failures as ``(seq, reason)``, digests by path) and the main process records them exactly as
the inline path would: a check keeps its first failure by seq, so the report does not depend
on the number of workers or on the order in which chunks come back.

``jobs`` 0 means one worker per CPU this process may run on (:func:`available_cpus`). Workers
are forked where the platform can (Linux: they start in milliseconds and share the verifier's
imported modules), spawned elsewhere.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

__all__ = [
    "AUTO_JOBS",
    "ChildError",
    "available_cpus",
    "forked",
    "resolve_jobs",
    "worker_pool",
]

T = TypeVar("T")

AUTO_JOBS = 0
"""``jobs`` that asks for one worker per available CPU."""


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        try:
            return max(1, len(getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def resolve_jobs(jobs: int | None) -> int:
    """``jobs`` as a number of processes: :data:`AUTO_JOBS` (or None) is :func:`available_cpus`.

    Raises ValueError for a negative ``jobs``.
    """
    if jobs is None or jobs == AUTO_JOBS:
        return available_cpus()
    if jobs < 0:
        raise ValueError(f"jobs is {jobs}, expected 0 (one per CPU) or a positive number")
    return int(jobs)


def worker_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` worker processes, forked where the platform can fork, else spawned."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context(method))


class ChildError(Exception):
    """A forked child (:func:`forked`) stopped without handing back its result."""


def forked(fn: Callable[[], T], what: str) -> Callable[[], T]:
    """Start ``fn()`` in a forked child process; return the function that waits for its result.

    The child sees this process as it is at the fork (every envelope, file hash and parsed
    table already in memory, shared until written) and hands back ``fn()``'s return value,
    pickled through a pipe. Waiting raises :class:`ChildError` naming ``what`` when the child
    raised or exited without a result. Where the platform cannot fork, ``fn()`` runs here and
    now.
    """
    if not hasattr(os, "fork") or "fork" not in multiprocessing.get_all_start_methods():
        value = fn()
        return lambda: value
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, hand the result over, exit without any cleanup of the parent's
        code = 0
        try:
            os.close(read_fd)
            try:
                data = pickle.dumps((True, fn()), protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException as exc:  # handed to the parent, which fails closed
                data = pickle.dumps((False, f"{type(exc).__name__}: {exc}"))
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)

    def wait() -> T:
        with os.fdopen(read_fd, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(pid, 0)
        if not data:
            raise ChildError(
                f"the process checking {what} exited with status "
                f"{os.waitstatus_to_exitcode(status)} before handing back its result"
            )
        ok, value = pickle.loads(data)  # written by this program's own child, just now
        if not ok:
            raise ChildError(f"the process checking {what} stopped: {value}")
        result: T = value
        return result

    return wait
