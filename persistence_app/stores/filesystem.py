"""The `filesystem` provider: one file per object under a local or mounted directory.

Immutable objects are hard links to fully written, fsynced temp files, so a key never holds a
partial or replaced object. Every path component below the root is opened with O_NOFOLLOW
relative to its parent's descriptor, so no symlink is followed, in or out of the root.
Imports no Django.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import stat
from pathlib import Path

from .base import (
    MAX_OBJECT_BYTES,
    ObjectMissing,
    StoreError,
    check_size,
    join_key,
    normalize_prefix,
    write_fenced,
)

__all__ = ["FilesystemStore"]

DIRECTORY_MODE = 0o700  # archive files hold transcripts: owner only, whatever the umask
FILE_MODE = 0o600
LOCK_PREFIX = ".lock-"  # a fenced object's advisory lock file, beside it (flock: per open file, NFS emulates it)
TEMP_PREFIX = ".tmp-"  # temp files live beside their object so link/rename never cross devices
READ_CHUNK_BYTES = 1 << 20

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted under the root must not hang the worker
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

# Conditions that can clear by themselves (I/O hiccups, full disks, descriptor limits, NFS).
# Everything else (EACCES, EROFS, ENOTDIR, ELOOP, EEXIST, EXDEV, hard links unsupported, ...)
# is a configuration problem that a retry cannot fix.
_RETRYABLE_ERRNOS = frozenset(
    {
        errno.EAGAIN,
        errno.EBUSY,
        errno.EDQUOT,
        errno.EINTR,
        errno.EIO,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
        errno.ENOSPC,
        errno.ESTALE,
        errno.ETIMEDOUT,
    }
)


class FilesystemStore:
    def __init__(self, directory: str | os.PathLike[str], *, prefix: str = "") -> None:
        # Relative directories resolve from the server's working directory (spec); the root
        # itself may be a symlink, components below it may not.
        self._root = Path(directory).resolve()
        self._prefix = normalize_prefix(prefix)
        self._unsynced = False  # immutable objects written since the last barrier

    def put(self, key: str, data: bytes, *, immutable: bool) -> None:
        """Immutable objects are linked into place without fsync: a checkpoint's blocks are
        made durable together by barrier() (one syncfs instead of two fsyncs per 64 KiB
        block, which a busy server's own log fsyncs would queue behind). A mutable object
        (`latest`) is written after a barrier, with its file and directory fsynced."""
        *parents, leaf = join_key(self._prefix, key).split("/")
        check_size(key, data)
        try:
            if not immutable:
                self.barrier()
            directory = self._open_directory(parents, create=True, durable=not immutable)
            try:
                self._write(directory, leaf, data, immutable=immutable)
                if immutable:
                    self._unsynced = True
                else:
                    os.fsync(directory)  # the new directory entry is durable before we report success
            finally:
                os.close(directory)
        except OSError as exc:
            raise _store_error("put", key, exc) from exc

    def put_fenced(self, key: str, data: bytes, *, epoch: int) -> None:
        """Read, check the epoch and rename into place under an exclusive flock on a file
        beside the object, which every instance mounting the directory takes."""
        *parents, leaf = join_key(self._prefix, key).split("/")
        check_size(key, data)
        try:
            self.barrier()
            directory = self._open_directory(parents, create=True)
            try:
                lock = os.open(LOCK_PREFIX + leaf, _LOCK_FLAGS, FILE_MODE, dir_fd=directory)
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX)

                    def read() -> tuple[bytes, object] | None:
                        try:
                            descriptor = os.open(leaf, _READ_FLAGS, dir_fd=directory)
                        except FileNotFoundError:
                            return None
                        try:
                            return _read_regular_file(descriptor, key), None
                        finally:
                            os.close(descriptor)

                    def write(version: object | None) -> bool:
                        self._write(directory, leaf, data, immutable=False)
                        os.fsync(directory)
                        return True

                    write_fenced(key, data, epoch, read=read, write=write)
                finally:
                    os.close(lock)  # releases the lock
            finally:
                os.close(directory)
        except OSError as exc:
            raise _store_error("put", key, exc) from exc

    def barrier(self) -> None:
        if not self._unsynced:
            return
        try:
            descriptor = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                _syncfs(descriptor)
            finally:
                os.close(descriptor)
        except OSError as exc:
            raise _store_error("sync", "", exc) from exc
        self._unsynced = False

    def get(self, key: str) -> bytes:
        *parents, leaf = join_key(self._prefix, key).split("/")
        try:
            directory = self._open_directory(parents, create=False)
            try:
                descriptor = os.open(leaf, _READ_FLAGS, dir_fd=directory)
            finally:
                os.close(directory)
            try:
                return _read_regular_file(descriptor, key)
            finally:
                os.close(descriptor)
        except (FileNotFoundError, NotADirectoryError) as exc:
            # ENOTDIR: a parent of the key is a file, so the key cannot exist (object-store semantics)
            raise ObjectMissing(f"object {key!r} does not exist") from exc
        except OSError as exc:
            raise _store_error("get", key, exc) from exc

    def delete(self, key: str) -> None:
        """Unlink the object and its lock file (a fenced object's), then fsync the directory."""
        *parents, leaf = join_key(self._prefix, key).split("/")
        try:
            directory = self._open_directory(parents, create=False)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise _store_error("delete", key, exc) from exc
        try:
            for name in (leaf, LOCK_PREFIX + leaf):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=directory)
            os.fsync(directory)
        except OSError as exc:
            raise _store_error("delete", key, exc) from exc
        finally:
            os.close(directory)

    def delete_under(self, prefix: str, *, max_objects: int) -> int:
        """Walks the prefix's directory bottom up without following symlinks, unlinking files
        and removing the directories it empties."""
        top = self._root / join_key(self._prefix, prefix.rstrip("/"))
        removed = 0
        try:
            for current, directories, files in os.walk(top, topdown=False, followlinks=False):
                for name in files + [d for d in directories if (Path(current) / d).is_symlink()]:
                    if removed >= max_objects:
                        return removed
                    (Path(current) / name).unlink()
                    removed += 1
                with contextlib.suppress(OSError):  # not empty: a file past the bound stays
                    Path(current).rmdir()
        except OSError as exc:
            raise _store_error("delete", prefix, exc) from exc
        return removed

    def close(self) -> None:
        pass

    def _open_directory(self, parents: list[str], *, create: bool, durable: bool = True) -> int:
        """A descriptor of the directory holding the object, walked one O_NOFOLLOW step at a
        time from the root; `create` makes missing directories (0700) and syncs their parents."""
        if create:
            self._root.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
        descriptor = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in parents:
                created = False
                if create:
                    try:
                        os.mkdir(name, DIRECTORY_MODE, dir_fd=descriptor)
                        created = True
                    except FileExistsError:
                        pass
                child = _open_child_directory(name, descriptor)
                if created and durable:
                    os.fsync(descriptor)
                os.close(descriptor)
                descriptor = child
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor

    def _write(self, directory: int, leaf: str, data: bytes, *, immutable: bool) -> None:
        temp = TEMP_PREFIX + secrets.token_hex(8)
        descriptor = os.open(temp, _TEMP_FLAGS, FILE_MODE, dir_fd=directory)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(descriptor, view) :]
                if not immutable:
                    os.fsync(descriptor)
            finally:
                os.close(descriptor)
            if immutable:
                try:
                    os.link(temp, leaf, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
                except FileExistsError:
                    # an earlier attempt of the same upload; but a directory or symlink there is
                    # not an object, and reporting success would lose this one
                    existing = os.stat(leaf, dir_fd=directory, follow_symlinks=False)
                    if not stat.S_ISREG(existing.st_mode):
                        raise
            else:
                os.replace(temp, leaf, src_dir_fd=directory, dst_dir_fd=directory)
        finally:
            try:
                os.unlink(temp, dir_fd=directory)
            except FileNotFoundError:
                pass  # renamed into place


def _open_child_directory(name: str, parent: int) -> int:
    try:
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=parent)
    except NotADirectoryError:
        # O_DIRECTORY reports a symlink as ENOTDIR before O_NOFOLLOW's ELOOP; keep them apart,
        # since a file there means "no such key" but a link is a refusal
        if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
        raise


def _read_regular_file(descriptor: int, key: str) -> bytes:
    status = os.fstat(descriptor)
    if stat.S_ISDIR(status.st_mode):
        raise ObjectMissing(f"object {key!r} does not exist")  # a key prefix, as in object stores
    if not stat.S_ISREG(status.st_mode):
        raise StoreError(f"filesystem get {key!r}: not a regular file", retryable=False)
    if status.st_size > MAX_OBJECT_BYTES:
        raise StoreError(f"filesystem get {key!r}: over the {MAX_OBJECT_BYTES} byte limit", retryable=False)
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(descriptor, READ_CHUNK_BYTES):
        total += len(chunk)
        if total > MAX_OBJECT_BYTES:  # grew after fstat
            raise StoreError(f"filesystem get {key!r}: over the {MAX_OBJECT_BYTES} byte limit", retryable=False)
        chunks.append(chunk)
    return b"".join(chunks)


def _store_error(operation: str, key: str, exc: OSError) -> StoreError:
    # strerror only: the message reaches sync status and must not carry server paths
    if exc.errno == errno.ELOOP:
        reason = "refuses to follow a symbolic link"
    else:
        reason = exc.strerror or type(exc).__name__
    return StoreError(
        f"filesystem {operation} {key!r}: {reason}",
        retryable=exc.errno in _RETRYABLE_ERRNOS,
        reason=f"the archive failed ({reason})",
    )


_LIBC = ctypes.CDLL(None, use_errno=True)
_SYNCFS = getattr(_LIBC, "syncfs", None)


def _syncfs(descriptor: int) -> None:
    """Flush the filesystem holding `descriptor` (Linux syncfs); sync() where there is none."""
    if _SYNCFS is None:
        os.sync()
        return
    if _SYNCFS(descriptor) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
