"""Reading a file the verifier was handed without trusting it: regular files only, size capped.

Every file the verifier reads goes through :func:`read_regular` (archive files through
:class:`verify._reader.files.ArchiveFiles`, which adds the archive's own rules). The path is
examined with ``lstat`` (or ``stat`` when links may be followed) *before* anything is opened,
so a named pipe, a device or a socket is never opened; then it is opened with ``O_NOFOLLOW``
(unless links may be followed), ``O_NONBLOCK`` and ``O_NOCTTY``, ``fstat`` must show the very
regular file examined first (same device and inode), and its size must be within the caller's
limit before a single byte is read.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

__all__ = ["UnsafeFileError", "describe_mode", "human_bytes", "open_regular", "read_regular"]

_BASE_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class UnsafeFileError(Exception):
    """Internal: a file was not read. The message is the reason, to follow the file's name."""


def human_bytes(n: int) -> str:
    """``n`` bytes as a short exact text: ``1 GiB``, ``64 KiB``, ``1000 bytes``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def describe_mode(mode: int) -> str:
    """What a file of this ``st_mode`` is, as a noun phrase: ``a named pipe (FIFO)``..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def open_regular(
    path: str,
    limit: int,
    *,
    follow_links: bool = False,
    identity: tuple[int, int] | None = None,
) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file of at most ``limit`` bytes.

    ``identity`` is the ``(st_dev, st_ino)`` the caller saw when listing the file; the opened
    file must be that one. Raises :class:`UnsafeFileError` naming the reason; nothing but a
    regular file is ever opened.
    """
    try:
        st = os.stat(path) if follow_links else os.lstat(path)
    except FileNotFoundError:
        raise UnsafeFileError("is missing") from None
    except OSError as exc:
        raise UnsafeFileError(f"cannot be examined ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        what = describe_mode(st.st_mode)
        verb = "followed" if stat.S_ISLNK(st.st_mode) else "opened"
        raise UnsafeFileError(f"is {what}, not a regular file: not {verb}")
    if st.st_size > limit:
        raise UnsafeFileError(
            f"is {st.st_size:,} bytes, more than the {human_bytes(limit)} limit: not read"
        )
    if identity is not None and (st.st_dev, st.st_ino) != identity:
        raise UnsafeFileError("changed after the archive was listed: not read")
    try:
        fd = os.open(path, _BASE_FLAGS | (0 if follow_links else _NOFOLLOW))
    except OSError as exc:
        raise UnsafeFileError(f"cannot be opened ({exc.strerror or exc})") from None
    try:
        _check_opened(os.fstat(fd), st, limit)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _check_opened(opened: os.stat_result, st: os.stat_result, limit: int) -> None:
    """The file opened is the regular file examined, still within ``limit``."""
    if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (
        st.st_dev,
        st.st_ino,
    ):
        raise UnsafeFileError("changed while it was opened: not read")
    if opened.st_size > limit:
        raise UnsafeFileError(
            f"is {opened.st_size:,} bytes, more than the {human_bytes(limit)} limit: not read"
        )


def read_regular(
    path: str,
    limit: int,
    *,
    follow_links: bool = False,
    identity: tuple[int, int] | None = None,
) -> bytes:
    """The bytes of ``path``, read as :func:`open_regular` allows; at most ``limit`` of them."""
    with open_regular(path, limit, follow_links=follow_links, identity=identity) as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise UnsafeFileError(f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise UnsafeFileError(f"grew past the {human_bytes(limit)} limit while read: not read")
    return data
