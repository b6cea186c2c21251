"""Files written whole or not at all, and failures described the way a user can act on them.

Every command that writes a file the user asked for (a key, a checkpoint note, a report, an
archive) goes through :func:`write_files`: each file is written to a temporary sibling, flushed
to disk, and only when all of them are there are they renamed into place. A full disk, a
read-only directory or a directory where a file should be leaves the targets as they were and
raises :class:`~ledger.OutputError` naming the target and what to do.

:func:`describe_os_error` and :func:`describe_utf8_error` turn an ``OSError`` or a
``UnicodeDecodeError`` into that one line; the CLI boundary (:mod:`ledger.cliutil`) uses the
same words for a failure no library site caught.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
import sys
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any, BinaryIO

from ledger._errors import OutputError

__all__ = [
    "can_sync_file_system",
    "describe_os_error",
    "describe_utf8_error",
    "fsync_directory",
    "open_regular_file",
    "os_error_advice",
    "os_error_reason",
    "read_regular_file",
    "sync_file_system",
    "write_files",
]

# errno -> (what happened, what to do)
_ERRNO_ADVICE = {
    errno.EACCES: ("permission denied", "choose a writable location or fix its permissions"),
    errno.EPERM: ("operation not permitted", "choose another location or fix its permissions"),
    errno.EROFS: ("read-only file system", "choose a writable location"),
    errno.ENOSPC: ("no space left on the device", "free some space and run the command again"),
    errno.EDQUOT: ("disk quota exceeded", "free some space and run the command again"),
    errno.EISDIR: ("is a directory, where a file is expected", "give a file name"),
    errno.ENOTDIR: ("a path component is a file, where a directory is expected", ""),
    errno.ENOENT: ("no such file or directory", ""),
    errno.EEXIST: ("already exists", ""),
    errno.ENAMETOOLONG: ("file name too long", ""),
}


def os_error_reason(exc: OSError) -> str:
    """What went wrong in a failed file operation, in a few words (``permission denied``)."""
    known = _ERRNO_ADVICE.get(exc.errno or 0)
    return known[0] if known else (exc.strerror or str(exc))


def os_error_advice(exc: OSError) -> str:
    """:func:`os_error_reason` and, where there is one, what to do about it, without the path."""
    reason, advice = _ERRNO_ADVICE.get(exc.errno or 0, (exc.strerror or str(exc), ""))
    return f"{reason}: {advice}" if advice else reason


def describe_os_error(exc: OSError, path: str | os.PathLike[str] | None = None) -> str:
    """One line: the path (``path``, else the one the error names) and :func:`os_error_advice`."""
    if path is not None:
        where = os.fspath(path)
    elif exc.filename is not None:
        where = os.fsdecode(exc.filename)
        if exc.filename2 is not None:
            where = f"{where} -> {os.fsdecode(exc.filename2)}"
    else:
        where = "a file"
    return f"{where}: {os_error_advice(exc)}"


def describe_utf8_error(data: bytes, exc: UnicodeDecodeError) -> str:
    """Where ``data`` stops being UTF-8: the byte, its offset, line and column, and the fix.

    For ``b"ok\\ncaf\\xe9\\n"``: ``not UTF-8: byte 0xe9 at offset 6 (line 2, column 4) is
    invalid (invalid continuation byte); save the file as UTF-8``.
    """
    offset = exc.start
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    byte = data[offset] if offset < len(data) else 0
    return (
        f"not UTF-8: byte {byte:#04x} at offset {offset} (line {line}, column {column}) is "
        f"invalid ({exc.reason}); save the file as UTF-8"
    )


_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOFOLLOW", 0)
)


def open_regular_file(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading in binary, if it is a regular file (never anything else).

    For files a hostile folder (an archive handed to ``ledger view``) may hold: the path is
    examined with ``lstat`` before it is opened, so a named pipe, a device, a socket or a
    symbolic link is never opened (a pipe would block the reader forever); it is opened
    without following links and without blocking, and must still be that regular file.
    Raises ``OSError`` (``errno.EINVAL`` for a file that is not regular) with a reason
    :func:`describe_os_error` renders.
    """
    where = os.fspath(path)
    before = os.lstat(where)
    if not stat.S_ISREG(before.st_mode):
        raise OSError(errno.EINVAL, "not a regular file (never opened)", where)
    fd = os.open(where, _READ_FLAGS)
    try:
        after = os.fstat(fd)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise OSError(errno.EINVAL, "replaced while being opened", where)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file (:func:`open_regular_file`) within ``limit``.

    The size is checked before a byte is read, and again while reading (a file that grows
    meanwhile). Raises ``OSError`` (``errno.EFBIG`` for a file over the limit).
    """
    with open_regular_file(path) as handle:
        if os.fstat(handle.fileno()).st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit:,} bytes", os.fspath(path))
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit:,} bytes", os.fspath(path))
    return data


def fsync_directory(directory: Path) -> None:
    """Make the renames in ``directory`` durable (where the file system supports it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a directory; the data itself is synced
    finally:
        os.close(fd)


_SYNCFS: Any = None


def _syncfs() -> Any:
    """The C library's ``syncfs`` (Linux), or False where there is none."""
    global _SYNCFS
    if _SYNCFS is None:
        _SYNCFS = False
        if sys.platform.startswith("linux"):
            with suppress(OSError, AttributeError):
                _SYNCFS = ctypes.CDLL(None, use_errno=True).syncfs
    return _SYNCFS


def can_sync_file_system() -> bool:
    """True where :func:`sync_file_system` syncs (Linux); elsewhere sync each file."""
    return _syncfs() is not False


def sync_file_system(directory: Path) -> bool:
    """Flush every written file of the file system holding ``directory`` to disk, in one call.

    Linux's ``syncfs(2)``: one journal commit for a directory tree of many thousand new files,
    where an ``fsync`` each would cost a commit apiece. Returns False where the call does not
    exist (the caller then syncs each file itself); raises ``OSError`` when the file system
    reports a write-back error (Linux 5.8 and later), as ``fsync`` would.
    """
    call = _syncfs()
    if call is False:
        return False
    fd = os.open(directory, os.O_RDONLY)
    try:
        if call(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(directory))
    finally:
        os.close(fd)
    return True


def _stage(target: Path, data: bytes) -> Path:
    """Write ``data`` to a new temporary file beside ``target``, flushed to disk; return it."""
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    os.close(fd)
    return temporary


def write_files(
    files: Mapping[Path, bytes | str] | Mapping[str, bytes | str], *, what: str = ""
) -> None:
    """Write every file in ``files`` (path -> bytes, or text written as UTF-8) or none of them.

    Each file is written to a temporary file in its target's directory and synced; only when
    all are written are they renamed over their targets (a rename within one directory does
    not fail for want of space or permission once the temporary file exists), and the
    directories synced. Missing parent directories are created. On failure the temporary
    files and the directories created are removed, the targets are untouched, and
    :class:`~ledger.OutputError` names the target that could not be written, prefixed by
    ``what`` (for example ``"--out "``), and says what to do.
    """
    items = [
        (Path(path), data.encode("utf-8") if isinstance(data, str) else data)
        for path, data in files.items()
    ]
    staged: list[tuple[Path, Path]] = []
    created: list[Path] = []  # directories made here, removed again on failure
    current = Path()
    try:
        for target, data in items:
            current = target
            if target.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
            missing = [d for d in (target.parent, *target.parent.parents) if not d.exists()]
            for directory in reversed(missing):
                directory.mkdir()
                created.append(directory)
            staged.append((_stage(target, data), target))
    except BaseException as exc:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
        for directory in reversed(created):
            with suppress(OSError):
                directory.rmdir()
        if isinstance(exc, OSError):
            raise OutputError(f"{what}{describe_os_error(exc, current)}") from exc
        raise
    for temporary, target in staged:
        os.replace(temporary, target)
    for directory in {target.parent for _, target in staged}:
        fsync_directory(directory)
