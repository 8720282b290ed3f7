"""The embedded object store: long bodies as files in a folder beside the embedded database (CHAT_OBJECTS_DIR,
default CHAT_DATA_DIR/objects), with the database's promise: acknowledged means durable, and a write that
fails changes nothing visible.

A Python class with the S3 backend's interface (lib/storage/objects.py), not an S3 protocol server: the
durability promise is about files (write a temp file, fsync it, rename it into place, fsync the folder), and
moto's S3 keeps objects in memory (spooled temp files), so making it durable would mean patching its internals as
lib/embedded/moto_patches.py does for DynamoDB, for an API the app uses four calls of. The store above
(checksums, metering, keys) is the same for both, so the requests a turn makes are the same on a laptop and on
AWS.

Layout: <folder>/<key>, the key's '/' as folders (keys are built by lib/storage/keys.py: base64url user ids and
ULIDs, never '..'). A write in progress is <folder>/.tmp/<random>: never listed, never read, and removed at the
next start. The rename is atomic: a reader sees the whole object or none, also after kill -9 or a power cut
(the folder's fsync makes the rename itself durable before the write is acknowledged).
"""

from __future__ import annotations

import datetime as _dt
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from lib import logs
from lib.errors import ObjectStoreUnavailable
from lib.storage.objects import ObjectMissing, StoredObject

TEMP = ".tmp"
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte (os.write may write fewer); tests replace it to fill the disk half-way."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FolderObjects:
    """Objects as files under `folder`; one process writes a folder at a time (the database's lock guards it)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.where = f"local object store in {self.folder}/"
        self.before_rename = None  # called between the temp file's fsync and its rename (tests kill -9 there)
        try:
            (self.folder / TEMP).mkdir(parents=True, exist_ok=True)
            for leftover in (self.folder / TEMP).iterdir():  # writes a crash interrupted: never acknowledged
                leftover.unlink(missing_ok=True)
        except OSError as exc:
            raise ObjectStoreUnavailable(
                f"The local object store folder {self.folder}/ cannot be used ({exc.strerror or exc}): make it "
                "writable, or set CHAT_OBJECTS_DIR to another folder."
            ) from exc

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..", TEMP) for p in parts):  # keys.py never builds one: a bug, refused
            raise ValueError("not an object key")
        return self.folder.joinpath(*parts)

    def put_bytes(self, key: str, data: bytes, *, sha256: str, content_type: str = "") -> None:
        """Temp file, fsync, rename, fsync the folder: acknowledged means durable; a failure leaves nothing (a file
        has no content type: the record keeps the media type)."""
        target = self._path(key)
        temp = self.folder / TEMP / secrets.token_hex(8)
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            if self.before_rename is not None:
                self.before_rename(temp)
            made = _make_folders(target.parent)
            os.replace(temp, target)
            _fsync_folder(target.parent)
            for folder in made:  # a folder made for this object is an entry in its parent: durable too
                _fsync_folder(folder.parent)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            logs.error("objects.local_write_failed", exc_info=False, errno=exc.errno)
            if exc.errno in _NO_ROOM:
                raise ObjectStoreUnavailable(
                    f"The disk holding the local object store {self.folder}/ is full: your message was not saved "
                    "and nothing was changed. Free some space and send it again."
                ) from exc
            raise ObjectStoreUnavailable(
                f"The local object store {self.folder}/ could not be written ({exc.strerror or exc}): your "
                "message was not saved and nothing was changed."
            ) from exc

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise ObjectMissing(key) from exc
        except OSError as exc:
            raise ObjectStoreUnavailable(
                f"The local object store {self.folder}/ could not be read ({exc.strerror or exc})."
            ) from exc

    def delete_key(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
            _fsync_folder(path.parent)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ObjectStoreUnavailable(
                f"The local object store {self.folder}/ could not be changed ({exc.strerror or exc})."
            ) from exc

    def list_pages(self, prefix: str) -> Iterator[list[StoredObject]]:
        found = []
        for root, folders, files in os.walk(self.folder):
            if Path(root) == self.folder:
                folders[:] = [f for f in folders if f != TEMP]
            for name in files:
                path = Path(root) / name
                key = path.relative_to(self.folder).as_posix()
                if key.startswith(prefix):
                    stat = path.stat()
                    found.append(StoredObject(key, stat.st_size, _dt.datetime.fromtimestamp(stat.st_mtime, _dt.UTC)))
        found.sort(key=lambda o: o.key)
        for start in range(0, len(found), 1000):
            yield found[start : start + 1000]
        if not found:
            yield []


def _make_folders(folder: Path) -> list[Path]:
    """Make `folder` and any missing parents; the ones made, deepest first (each must be fsynced in its parent)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        made.mkdir(exist_ok=True)
    return missing
