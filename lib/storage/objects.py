"""The object store: long question and answer bodies (later: attachments, the cold tier) beside the table.

One interface, three backends:
    S3Objects      boto3's S3 client (lib/aws.py, with DynamoDB's deadlines and retries) on CHAT_BUCKET; in
                   tests the same client against moto's S3 server
    FolderObjects  the embedded store (lib/embedded/objects.py): files in a folder beside the embedded database,
                   with its durability promise (temp file, fsync, rename, fsync the folder)
    MemoryObjects  CHAT_DATA_DIR=:memory: keeps no object either
`ObjectStore` is what the store is handed: it checksums (sha256, kept in the turn's pointer and verified on
every read), labels every request for the meter (one Usage per request, whatever the backend: a PutObject is
one PutObject on S3 and in the folder), and turns the backends' failures into domain errors. Every S3 request
shape is in this module; every key is built in lib/storage/keys.py.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from lib import logs
from lib.errors import BodyUnavailable, ObjectStoreUnavailable
from lib.storage import keys
from lib.storage.capacity import Meter

_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
TEXT_TYPE = "text/plain; charset=utf-8"  # what an object is stored as unless its writer says otherwise (a body)
_BUSY = "The object store is busy or unreachable right now; nothing was lost. Try again in a moment."


class ObjectMissing(Exception):
    """No object under that key (a backend's answer; ObjectStore turns it into BodyUnavailable)."""


@dataclass(frozen=True)
class BodyRef:
    """The pointer a turn keeps to its body's object: the key, the size in bytes and the sha256 (hex)."""

    key: str
    size: int
    sha256: str

    def record(self) -> dict[str, Any]:
        return {"key": self.key, "size": self.size, "sha256": self.sha256}

    @classmethod
    def from_record(cls, value: Any) -> BodyRef | None:
        """The pointer as stored (a map), or None for anything else (readers skip rather than fail)."""
        try:
            return cls(str(value["key"]), int(value["size"]), str(value["sha256"]))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    modified: _dt.datetime  # UTC


class ObjectBackend(Protocol):
    """What each backend does: one request each (list: one per page of 1,000)."""

    # `content_type=` is passed only for a type other than TEXT_TYPE (an attachment's): S3 stores it, the others
    # ignore it
    def put_bytes(self, key: str, data: bytes, *, sha256: str) -> None: ...

    def get_bytes(self, key: str) -> bytes: ...  # ObjectMissing

    def delete_key(self, key: str) -> None: ...

    def list_pages(self, prefix: str) -> Iterator[list[StoredObject]]: ...

    where: str


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ObjectStore:
    """Bodies in the object store through one backend, metered (lib/storage/capacity.py: kind "object")."""

    def __init__(self, backend: ObjectBackend, meter: Meter | None = None):
        self.backend = backend
        self.meter = meter

    @property
    def where(self) -> str:
        return self.backend.where

    def _count(self, operation: str, size: int = 0, *, ok: bool = True) -> None:
        if self.meter is not None:
            self.meter.count_object_request(operation, size, ok=ok)

    def put_text(self, key: str, text: str) -> BodyRef:
        """Write `text` (UTF-8) under `key` (1 PutObject); its pointer. ObjectStoreUnavailable if the store cannot
        take it (nothing half-written is visible then)."""
        return self.put_data(key, text.encode("utf-8"))

    def get_text(self, ref: BodyRef) -> str:
        """The body a pointer names (1 GetObject), checked against its size and sha256; BodyUnavailable when it is
        missing or damaged, ObjectStoreUnavailable when the store cannot answer."""
        try:
            return self.get_data(ref, what="This long message's full text").decode("utf-8")
        except BodyUnavailable as exc:  # said with what is still shown: the beginning the turn item keeps
            raise BodyUnavailable(f"{exc} Only its beginning is kept in the chat.") from exc

    def put_data(self, key: str, data: bytes, *, content_type: str = TEXT_TYPE) -> BodyRef:
        """Write `data` as is under `key` (1 PutObject): an attachment's bytes (lib/storage/attachments.py), stored
        with `content_type` (its record's media type) where the backend keeps one (S3)."""
        digest = sha256_hex(data)
        typed = {} if content_type == TEXT_TYPE else {"content_type": content_type}
        try:
            self.backend.put_bytes(key, data, sha256=digest, **typed)
        except ObjectStoreUnavailable:
            self._count("PutObject", 0, ok=False)
            raise
        self._count("PutObject", len(data))
        return BodyRef(key, len(data), digest)

    def get_data(self, ref: BodyRef, *, what: str = "This file") -> bytes:
        """The bytes a pointer names (1 GetObject), checked against its size and sha256; BodyUnavailable (saying
        `what` is missing or damaged) or ObjectStoreUnavailable."""
        try:
            data = self.backend.get_bytes(ref.key)
        except ObjectMissing as exc:
            self._count("GetObject", 0, ok=False)
            logs.error("objects.missing", exc_info=False, size=ref.size)
            raise BodyUnavailable(
                f"{what} is missing from the object store. An operator can find why with `python -m lib.admin check`."
            ) from exc
        except ObjectStoreUnavailable:
            self._count("GetObject", 0, ok=False)
            raise
        self._count("GetObject", len(data))
        if len(data) != ref.size or sha256_hex(data) != ref.sha256:
            logs.error("objects.checksum_mismatch", exc_info=False, size=ref.size, found=len(data))
            raise BodyUnavailable(f"{what} is damaged in the object store (its checksum does not match).")
        return data

    def delete_key(self, key: str) -> None:
        """Remove one object (1 DeleteObject; an absent one is not an error)."""
        self.backend.delete_key(key)
        self._count("DeleteObject")

    def listing(self, prefix: str) -> Iterator[StoredObject]:
        """Every object under `prefix` (1 ListObjectsV2 per 1,000)."""
        for page in self.backend.list_pages(prefix):
            self._count("ListObjectsV2")
            yield from page


# --- S3 ---------------------------------------------------------------------------------------------------------


class S3Objects:
    """The bucket, through a boto3 S3 client made by lib/aws.py (deadlines and retries decided there)."""

    def __init__(self, client: Any, bucket: str):
        self.client = client
        self.bucket = bucket
        self.where = f"S3 bucket '{bucket}'"

    def _call(self, operation: str, **params: Any) -> dict:
        """One S3 request; throttling, 5xx and unreachable endpoints (after botocore's retries) are
        ObjectStoreUnavailable, a missing key ObjectMissing, and so is any other refusal (logged with its code)."""
        try:
            return getattr(self.client, operation)(Bucket=self.bucket, **params)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if code in _MISSING:
                raise ObjectMissing(params.get("Key", "")) from exc
            if code == "NoSuchBucket":
                raise ObjectStoreUnavailable(
                    f"The bucket '{self.bucket}' (CHAT_BUCKET) does not exist: an operator must create it (the "
                    "stack's BodiesBucket) or fix CHAT_BUCKET."
                ) from exc
            if status >= 500 or code in ("SlowDown", "Throttling", "ThrottlingException", "RequestTimeout"):
                logs.warning("s3.unavailable", operation=operation, code=code)
                raise ObjectStoreUnavailable(_BUSY) from exc
            # A refusal (AccessDenied, a KMS key, a bad checksum...): a deployment problem the user cannot fix;
            # said as one, logged with its code for the operator, never a page's traceback or a worker's death.
            logs.error("s3.refused", exc_info=False, operation=operation, code=code, status=status)
            raise ObjectStoreUnavailable(
                f"The object store refused the request ({code or status}); nothing was lost. An operator must "
                "check the bucket's settings and the app's permissions."
            ) from exc
        except BotoCoreError as exc:  # connection refused, read timeout past the retries
            logs.warning("s3.unreachable", operation=operation, error_class=type(exc).__name__)
            raise ObjectStoreUnavailable(
                "The object store cannot be reached; nothing was lost. Try again in a moment."
            ) from exc

    def put_bytes(self, key: str, data: bytes, *, sha256: str, content_type: str = "") -> None:
        import base64

        self._call(
            "put_object",
            Key=key,
            Body=data,
            ContentType=content_type or TEXT_TYPE,
            # S3 refuses the upload unless the bytes it received have this checksum: no torn object is stored
            ChecksumSHA256=base64.b64encode(bytes.fromhex(sha256)).decode("ascii"),
        )

    def get_bytes(self, key: str) -> bytes:
        response = self._call("get_object", Key=key)
        try:
            return response["Body"].read()
        except BotoCoreError as exc:  # the body stream timed out or broke
            raise ObjectStoreUnavailable(_BUSY) from exc
        finally:
            response["Body"].close()

    def delete_key(self, key: str) -> None:
        self._call("delete_object", Key=key)

    def list_pages(self, prefix: str) -> Iterator[list[StoredObject]]:
        params: dict[str, Any] = {"Prefix": prefix, "MaxKeys": 1000}
        while True:
            response = self._call("list_objects_v2", **params)
            yield [
                StoredObject(o["Key"], int(o["Size"]), o["LastModified"].astimezone(_dt.UTC))
                for o in response.get("Contents", [])
            ]
            if not response.get("IsTruncated"):
                return
            params["ContinuationToken"] = response["NextContinuationToken"]


# --- in memory (CHAT_DATA_DIR=:memory:) --------------------------------------------------------------------------


class MemoryObjects:
    """Objects in a dict: for a local database that keeps nothing either."""

    where = "memory only (lost when the app stops)"

    def __init__(self) -> None:
        self._objects: dict[str, tuple[bytes, _dt.datetime]] = {}
        self._lock = threading.Lock()

    def put_bytes(self, key: str, data: bytes, *, sha256: str, content_type: str = "") -> None:
        with self._lock:
            self._objects[key] = (bytes(data), _dt.datetime.now(_dt.UTC))

    def get_bytes(self, key: str) -> bytes:
        with self._lock:
            if key not in self._objects:
                raise ObjectMissing(key)
            return self._objects[key][0]

    def delete_key(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)

    def list_pages(self, prefix: str) -> Iterator[list[StoredObject]]:
        with self._lock:
            found = [StoredObject(k, len(d), t) for k, (d, t) in sorted(self._objects.items()) if k.startswith(prefix)]
        yield found


def delete_unpointed(
    objects: ObjectStore,
    orphans: Sequence[StoredObject],
    owner_session: Callable[[str], tuple[str, str]],
    pointed: Callable[[str, str], Callable[[str], bool]],
) -> int:
    """`repair`'s deletion of the orphans an audit found (1 DeleteObject each), grouped by the chat each key names
    (`owner_session`), after that chat's pointers are read again (`pointed(owner, session)`: whether a key is still
    pointed to, read descending where the audit read ascending, so one transaction moving a pointer meanwhile cannot
    slip past both reads). Returns how many were deleted."""
    by_session: dict[tuple[str, str], list[StoredObject]] = defaultdict(list)
    for found in orphans:
        by_session[owner_session(found.key)].append(found)
    deleted = 0
    for (owner, session_id), stored in by_session.items():
        still = pointed(owner, session_id)
        for found in stored:
            if not still(found.key):
                objects.delete_key(found.key)
                deleted += 1
    return deleted


def body_key(user_id: str, session_id: str, message_id: str, part: str) -> str:
    """A fresh object key for a turn's body: a new object id per write, so no pointer's object is overwritten."""
    return keys.body_object_key(user_id, session_id, message_id, part, keys.new_id())
