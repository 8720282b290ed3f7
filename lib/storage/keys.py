"""Every key, time and id format of the single table (DESIGN.md); nothing else builds a key.

Records and their keys:
    list item     pk USER#<user_id>                   sk SES#<last_message_time>#<session_id>
    pinned item   pk USER#<user_id>                   sk SES#PIN#<13 digits: 9999999999999 - pin epoch ms>#<session_id>
                  (a pinned chat's one sidebar row instead of the one above: 'P' sorts after every digit, so the
                  sidebar's descending SES# Query returns pinned rows first, the earliest pinned on top)
    session meta  pk USER#<user_id>#SES#<session_id>  sk SES#META
    message       pk USER#<user_id>#SES#<session_id>  sk MSG#<message_id>
    usage bucket  pk USAGE#<yyyy-mm-dd>               sk USER#<user_id>   (the cost page's ledger)
Reserved sort-key prefixes for the records the context engine and semantic search add:
    summary       pk USER#<user_id>#SES#<session_id>  sk SUM#RUNNING (sorts after SES#META: read first, descending)
    version       pk USER#<user_id>#SES#<session_id>  sk ALT#<message_id>#<nnn> (a turn's kept answers; sorts
                  before every MSG#, and the open Query starts at MSG#, so no page read meets one)
    temporary     pk USER#<user_id>                   sk TMP#<session_id>  (a temporary chat's one row instead of a
                  sidebar row: outside SES#, so no sidebar Query meets it; purge and check find the chat by it)
    memory        pk USER#<user_id>                   sk MEM#<memory_id>  (memory_id: a hash of the normalised text)
    preference    pk USER#<user_id>                   sk PREF#<name>      (e.g. PREF#memory: the user's off switch)
    vector item   pk USER#<user_id>                   sk VEC#...
Projects (lib/storage/projects.py, docs/projects.md):
    project meta  pk USER#<user_id>#PRJ#<project_id>  sk PRJ#META  (name, instructions, last_activity_time)
    project row   pk USER#<user_id>                   sk PRJ#<last_activity_time>#<project_id>  (the project list:
                  PRJ# sorts after PREF#~ ('J' > 'E') and before PURGE# ('R' < 'U'): outside the memory range, the
                  sidebar's SES#, TMP# and VEC#)
    project chat  pk USER#<user_id>#PRJ#<project_id>  sk SES#<last_message_time>#<session_id>  (one project's chats
                  newest first: one Query of the project partition; the chat's meta holds project_id)
Operations:
    user registry pk USERS                            sk USER#<user_id>   (written with a user's first chat)
    purge marker  pk USER#<user_id>                   sk PURGE#<n>        (sessions an admin deletion is removing)
    audit record  pk AUDIT#<yyyy-mm-dd>               sk <key time>#<record id>  (admin actions; lib/storage/audit.py)
    share link    pk USER#<user_id>                   sk LINK#<link_id>   (the owner's list of links; lib/storage/shares.py)
    share         pk SHARE#<sha256 of the token>      sk LINK, PART#<nnnn> (a shared chat's snapshot, found by token)
    spend limit   pk LIMITS                           sk DEFAULT, GROUP#<group>, USER#<user_id>  (one per scope;
                  admins set them on the Spend limits page; lib/storage/limits.py, docs/limits.md)
Object store keys (not table keys; lib/storage/objects.py, docs/objects.md):
    long body     users/<user_id, base64url>/bodies/<session_id>/<message_id>/<input|output>/<object_id>
    attachment    users/<user_id, base64url>/files/<session_id>/<message_id>/<attachment_id>/<original|text>
    archived chat users/<user_id, base64url>/archive/<session_id>/<object_id>  (gzip JSON; docs/archive.md)
Readers classify an item by its sort key (`record_kind`) and skip kinds they do not
know, so adding a record kind to a partition never breaks a page that reads it.

Invariant: every key starts with USER#<user_id>, and user_id comes from the
authenticated identity, so one user's request cannot name another user's item. A user id
never holds '#' (USER#bob#SES#<sid> is Bob's chat): every key builder refuses one that does
(`check_user_id`, InvalidUserId), whoever passes it (the web identity, an admin command).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping

from ulid import ULID

from lib import logs
from lib.errors import InvalidUserId, TimeOutOfRange

USER_PREFIX = "USER#"
SESSION_PREFIX = "SES#"
MESSAGE_PREFIX = "MSG#"
META_SK = "SES#META"
SUMMARY_PREFIX = "SUM#"
MEMORY_PREFIX = "MEM#"
VECTOR_PREFIX = "VEC#"
VERSION_PREFIX = "ALT#"
PURGE_PREFIX = "PURGE#"
PREFERENCE_PREFIX = "PREF#"
PINNED_PREFIX = "SES#PIN#"
TEMPORARY_PREFIX = "TMP#"
PROJECT_PREFIX = "PRJ#"
PROJECT_META_SK = "PRJ#META"
SUMMARY_SK = "SUM#RUNNING"
REGISTRY_PK = "USERS"

# Record kinds, as record_kind names them.
LIST_ROW, META, TURN, SUMMARY, MEMORY, VECTOR, PURGE, UNKNOWN = (
    "list_row",
    "meta",
    "turn",
    "summary",
    "memory",
    "vector",
    "purge",
    "unknown",
)
PREFERENCE = "preference"
PROJECT_ROW, PROJECT_META = "project_row", "project_meta"
TEMPORARY = "temporary"
VERSION = "version"

# ULID: 26 chars of Crockford base32 (no I, L, O, U); sorts in creation order.
_ULID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
# Fixed-length UTC time with milliseconds, so string order is time order.
_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
_LIST_SK_RE = re.compile(r"^SES#(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)#([0-9A-HJKMNP-TV-Z]{26})$")
_PINNED_SK_RE = re.compile(r"^SES#PIN#(\d{13})#([0-9A-HJKMNP-TV-Z]{26})$")
_PIN_TOP = 9_999_999_999_999  # epoch milliseconds of the year 2286: a pin rank is this minus the pin time
_MSG_SK_RE = re.compile(r"^MSG#([0-9A-HJKMNP-TV-Z]{26})$")
_VERSION_SK_RE = re.compile(r"^ALT#([0-9A-HJKMNP-TV-Z]{26})#(\d{3})$")
# What a user id may not hold: '#' (it would reach into another key), control characters (C0, DEL, C1) and lone
# surrogates (DynamoDB cannot store them).
_USER_ID_FORBIDDEN = re.compile("[#\x00-\x1f\x7f-\x9f\ud800-\udfff]")
MAX_USER_ID = 320  # an email address's own bound; the web identity's is lower (lib/web/identity.py)
UNKNOWN_TIME = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)  # what parse_time gives for a stored time it cannot read


def format_time(moment: _dt.datetime) -> str:
    """ISO 8601 UTC with milliseconds, fixed length for every year: 2026-11-06T08:30:45.123Z (0999-... too)."""
    moment = moment.astimezone(_dt.UTC)
    return f"{moment.year:04d}-" + moment.strftime("%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _parsed(text: object) -> _dt.datetime | None:
    if not isinstance(text, str) or not _TIME_RE.match(text):
        return None
    try:
        return _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_dt.UTC)
    except ValueError:  # the right shape, not a date (month 13, year 0)
        return None


def time_or_none(text: object) -> _dt.datetime | None:
    """The datetime of a key time, or None (logged) for anything else a table may hold: a reader shows something
    neutral instead of failing its page."""
    moment = _parsed(text)
    if moment is None:
        logs.warning("keys.malformed_time", length=len(text) if isinstance(text, str) else None)
    return moment


def is_time(text: object) -> bool:
    """True if `text` is a key time (the fixed-length format, and a real date)."""
    return _parsed(text) is not None


def parse_time(text: str) -> _dt.datetime:
    """The datetime of a key time. Never raises: a stored time not in the key format (a bug, a hand edit) gives
    UNKNOWN_TIME and a log line, so no page fails on it; `is_time` tells the two apart."""
    return time_or_none(text) or UNKNOWN_TIME


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


# A context variable, not a global: a thread writing demo history in the past never moves
# anyone else's clock (Streamlit runs each browser session's script in its own thread).
_clock: contextvars.ContextVar[Callable[[], _dt.datetime]] = contextvars.ContextVar("clock", default=_utcnow)


def now() -> str:
    """The current time in key format."""
    return format_time(_clock.get()())


@contextlib.contextmanager
def clock(moment: Callable[[], _dt.datetime]) -> Iterator[None]:
    """Run the block (in this thread) with another clock: for writing history in the past (seed-demo), tests."""
    token = _clock.set(moment)
    try:
        yield
    finally:
        _clock.reset(token)


def later_than(previous: str) -> str:
    """Now, or one millisecond after `previous` if the clock has not passed it.

    A send must move last_message_time strictly forward: an equal time would make
    the Delete of the old list item and the Put of the new one name the same key,
    which DynamoDB rejects inside one transaction, and the sidebar would not move.
    TimeOutOfRange when `previous` is the last millisecond of the year 9999: no key time follows it.
    """
    current = now()
    if current > previous or not is_time(previous):
        return current  # a malformed stored time (`admin check` shows it) never blocks a send
    try:
        return format_time(parse_time(previous) + _dt.timedelta(milliseconds=1))
    except OverflowError:
        raise TimeOutOfRange(
            "This chat's last message is dated at the very end of the year 9999, so no message can follow it; "
            "start a new chat."
        ) from None


# Ids handed out first by new_id in this thread (see `ids`); a context variable, like the clock.
_given_ids: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("given_ids", default=())


def new_id() -> str:
    """A new ULID: 26 chars whose string order is creation order (or the next one `ids` gives)."""
    given = _given_ids.get()
    if given:
        _given_ids.set(given[1:])
        return given[0]
    return str(ULID())


@contextlib.contextmanager
def ids(*given: str) -> Iterator[None]:
    """Run the block (in this thread) with these ids handed out first by new_id, then fresh ones: import-chat names
    a chat it creates by its source (`derived_id`), so importing the same file again finds it."""
    token = _given_ids.set(tuple(given))
    try:
        yield
    finally:
        _given_ids.reset(token)


def derived_id(moment: _dt.datetime, seed: str) -> str:
    """A ULID at `moment` whose other 80 bits are a hash of `seed`: the same seed and moment give the same id."""
    millis = int(moment.timestamp() * 1000)
    digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).digest()
    return str(ULID.from_bytes(millis.to_bytes(6, "big") + digest[:10]))


def is_id(text: object) -> bool:
    """True if `text` is a well-formed ULID (session and message ids)."""
    return isinstance(text, str) and bool(_ULID_RE.match(text))


def check_user_id(user_id: object) -> str:
    """The user id, if a key may be built from it; InvalidUserId if it is empty, longer than MAX_USER_ID, or holds
    '#' (which would let it name another user's items), a control character or a lone surrogate."""
    if not isinstance(user_id, str) or not user_id or len(user_id) > MAX_USER_ID or _USER_ID_FORBIDDEN.search(user_id):
        raise InvalidUserId(
            f"A user id is 1 to {MAX_USER_ID} characters with no '#' and no control characters; no key is built "
            "from any other."
        )
    return user_id


def canonical_user_id(text: str) -> str:
    """The user id a sign-in makes of `text`: spaces trimmed, an email lower-cased (an opaque subject keeps its
    case). lib/web/identity.py applies the same rule; admin commands refuse a --user that differs from it."""
    text = text.strip()
    return text.lower() if "@" in text else text


def user_pk(user_id: str) -> str:
    """The user's partition key; InvalidUserId for an id no key may be built from (check_user_id)."""
    return f"{USER_PREFIX}{check_user_id(user_id)}"


def session_pk(user_id: str, session_id: str) -> str:
    return f"{user_pk(user_id)}#{SESSION_PREFIX}{session_id}"


def list_key(user_id: str, last_message_time: str, session_id: str, pinned_at: str | None = None) -> dict[str, str]:
    """The sidebar record: sorts by last_message_time under the user's pk; a pinned chat's (`pinned_at`, the key
    time it was pinned) sorts by pin time above every unpinned row instead."""
    if pinned_at is not None:
        return {"pk": user_pk(user_id), "sk": f"{PINNED_PREFIX}{pin_rank(pinned_at)}#{session_id}"}
    return {"pk": user_pk(user_id), "sk": f"{SESSION_PREFIX}{last_message_time}#{session_id}"}


def temporary_key(user_id: str, session_id: str) -> dict[str, str]:
    """A temporary chat's row in the user's partition: TMP# sorts between SES# and VEC#, outside the sidebar's,
    the memories' and the vectors' ranges."""
    return {"pk": user_pk(user_id), "sk": f"{TEMPORARY_PREFIX}{session_id}"}


def expire_epoch(at: str, hours: float) -> int:
    """The `expire_at` (epoch seconds, DynamoDB's TTL format) of a record kept `hours` from the key time `at`."""
    return int(parse_time(at).timestamp() + hours * 3600)


def now_epoch() -> int:
    """The current time in `expire_at`'s unit, from the same clock as `now`."""
    return int(_clock.get()().timestamp())


def pin_rank(pinned_at: str) -> str:
    """13 digits that sort descending in pin order: the earliest pin has the highest rank, so the sidebar's
    descending Query lists pinned chats in the order they were pinned. ValueError for a time that is not a key
    time."""
    moment = _parsed(pinned_at)
    if moment is None:
        raise ValueError(f"not a key time: {pinned_at!r}")
    return f"{_PIN_TOP - int(moment.timestamp() * 1000):013d}"


def meta_key(user_id: str, session_id: str) -> dict[str, str]:
    """The session record: found by id; SES#META sorts after every MSG#."""
    return {"pk": session_pk(user_id, session_id), "sk": META_SK}


def message_key(user_id: str, session_id: str, message_id: str) -> dict[str, str]:
    return {"pk": session_pk(user_id, session_id), "sk": f"{MESSAGE_PREFIX}{message_id}"}


def version_key(user_id: str, session_id: str, message_id: str, version: int) -> dict[str, str]:
    """A kept version of a turn (lib/storage/versions.py): 1 to 999."""
    if not is_id(message_id) or not isinstance(version, int) or not 1 <= version <= 999:
        raise ValueError("a version key needs a message id and a version from 1 to 999")
    return {"pk": session_pk(user_id, session_id), "sk": f"{VERSION_PREFIX}{message_id}#{version:03d}"}


def version_range(user_id: str, session_id: str, message_id: str) -> tuple[str, str, str]:
    """(pk, low, high) of a Query that reads one turn's version records and nothing else."""
    return session_pk(user_id, session_id), f"{VERSION_PREFIX}{message_id}#", f"{VERSION_PREFIX}{message_id}#~"


def version_parts(sk: str) -> tuple[str, int]:
    """(message_id, version) of a version record's sort key."""
    match = _VERSION_SK_RE.match(sk)
    if not match:
        raise ValueError(f"not a version sort key: {sk!r}")
    return match.group(1), int(match.group(2))


USAGE_PREFIX = "USAGE#"


def usage_key(day: str, user_id: str) -> dict[str, str]:
    """A usage-ledger bucket: one item per UTC day and user, counters updated with ADD.

    The one key not under USER#: it is admin data (the cost page), written only by
    the ledger from the server's clock and the authenticated user, and read either
    by an admin or, for a non-admin, only at the caller's own sort key.
    """
    return {"pk": usage_pk(day), "sk": user_pk(user_id)}


def usage_pk(day: str) -> str:
    """The partition of one UTC day's usage buckets (every user's: the cost page reads it with one Query)."""
    return f"{USAGE_PREFIX}{day}"


def usage_parts(pk: str, sk: str) -> tuple[str, str]:
    """(day, user_id) of a usage bucket's key; ValueError if it is not one."""
    if not pk.startswith(USAGE_PREFIX) or not sk.startswith(USER_PREFIX):
        raise ValueError(f"not a usage bucket key: {pk!r}, {sk!r}")
    return pk[len(USAGE_PREFIX) :], sk[len(USER_PREFIX) :]


def day_of(time_text: str) -> str:
    """The UTC day (yyyy-mm-dd) of a key time."""
    return time_text[:10]


def is_list_sk(sk: str) -> bool:
    """True for a sidebar row's sort key, pinned or not."""
    return bool(_LIST_SK_RE.match(sk) or _PINNED_SK_RE.match(sk))


def is_pinned_sk(sk: str) -> bool:
    return bool(_PINNED_SK_RE.match(sk))


def is_message_sk(sk: str) -> bool:
    return bool(_MSG_SK_RE.match(sk))


def record_kind(sk: str) -> str:
    """Which record a sort key names (LIST_ROW, META, TURN, SUMMARY, MEMORY, VECTOR, PURGE, PREFERENCE, VERSION,
    AUDIT), or UNKNOWN. AUDIT is only ever valid under an AUDIT#<day> pk (`admin check` flags one anywhere else).

    A malformed sort key under a known prefix (MSG#not-an-id) is UNKNOWN too: readers
    skip it rather than fail on it, and `admin check` reports it.
    """
    if sk == META_SK:
        return META
    if sk == PROJECT_META_SK:
        return PROJECT_META
    if _PROJECT_SK_RE.match(sk):
        return PROJECT_ROW
    if is_message_sk(sk):
        return TURN
    if is_list_sk(sk):
        return LIST_ROW
    if _VERSION_SK_RE.match(sk):
        return VERSION
    for prefix, kind in (
        (SUMMARY_PREFIX, SUMMARY),
        (MEMORY_PREFIX, MEMORY),
        (VECTOR_PREFIX, VECTOR),
        (PURGE_PREFIX, PURGE),
        (PREFERENCE_PREFIX, PREFERENCE),
        (TEMPORARY_PREFIX, TEMPORARY),
    ):
        if sk.startswith(prefix):
            return kind
    if _AUDIT_SK_RE.match(sk):
        return AUDIT
    if _LINK_SK_RE.match(sk):
        return LINK
    return UNKNOWN


def parse_pk(pk: str) -> tuple[str, str | None] | None:
    """(user_id, session_id) of a session partition, (user_id, None) of a user partition, None for any other pk."""
    if not pk.startswith(USER_PREFIX) or f"#{PROJECT_PREFIX}" in pk:  # a project partition: parse_project_pk
        return None
    user_id, marker, session_id = pk[len(USER_PREFIX) :].partition(f"#{SESSION_PREFIX}")
    if not user_id:
        return None
    return (user_id, session_id) if marker else (user_id, None)


def list_row_parts(sk: str) -> tuple[str, str]:
    """(last_message_time, session_id) of an unpinned sidebar row's sort key; ValueError if it is not one."""
    match = _LIST_SK_RE.match(sk)
    if not match:
        raise ValueError(f"not a sidebar row key: {sk!r}")
    return match.group(1), match.group(2)


def row_session_id(sk: str) -> str:
    """The session id of a chat's row in the user's partition (a sidebar row, pinned or not, or a temporary chat's
    row); ValueError if it is not one."""
    match = _LIST_SK_RE.match(sk) or _PINNED_SK_RE.match(sk)
    if match:
        return match.group(2)
    if sk.startswith(TEMPORARY_PREFIX) and is_id(sk[len(TEMPORARY_PREFIX) :]):
        return sk[len(TEMPORARY_PREFIX) :]
    raise ValueError(f"not a sidebar row key: {sk!r}")


def row_time(row: Mapping[str, object]) -> str:
    """The last_message_time of a sidebar row (plain values), leniently: an unpinned row's is in its key, a pinned
    row's in its `last_message_time` attribute (its key sorts by pin time); a malformed row (which `admin check`
    reports) gives "" and still shows in the sidebar instead of failing the page."""
    sk = str(row.get("sk", ""))
    if sk.startswith(PINNED_PREFIX):
        value = row.get("last_message_time")
        return value if isinstance(value, str) else ""
    parts = sk.split("#")
    return parts[1] if len(parts) > 1 else ""


def session_partition_prefix(user_id: str) -> str:
    """The prefix every session partition of a user starts with (user ids never contain '#')."""
    return f"{user_pk(user_id)}#{SESSION_PREFIX}"


def registry_key(user_id: str) -> dict[str, str]:
    """The user registry: one item per user who ever had a chat, so operators list users without a Scan."""
    return {"pk": REGISTRY_PK, "sk": user_pk(user_id)}


def purge_key(user_id: str, part: int) -> dict[str, str]:
    """A marker listing the sessions an admin deletion is removing, so a crashed one resumes where it stopped."""
    return {"pk": user_pk(user_id), "sk": f"{PURGE_PREFIX}{part:04d}"}


def registry_user(sk: str) -> str:
    """The user id of a registry item's sort key."""
    return sk.removeprefix(USER_PREFIX)


def list_row_bound(last_message_time: str) -> str:
    """A sidebar sort key bound: every row of a session last active before this time sorts below it."""
    return f"{SESSION_PREFIX}{last_message_time}"


def session_vector_prefix(session_id: str) -> str:
    """The sort-key prefix, in the user's partition, of the vector items of one session's turns (VEC#<sid>#<mid>)."""
    return f"{VECTOR_PREFIX}{session_id}#"


def vector_key(user_id: str, session_id: str, message_id: str) -> dict[str, str]:
    """A finished turn's vector item in the user's partition (VEC#<sid>#<mid>): one per turn, so a Retry rewrites it."""
    return {"pk": user_pk(user_id), "sk": f"{session_vector_prefix(session_id)}{message_id}"}


def vector_parts(sk: str) -> tuple[str, str]:
    """(session_id, message_id) of a turn's vector sort key; ValueError if it is not one."""
    _, session_id, message_id = sk.split("#", 2) if sk.count("#") == 2 else ("", "", "")
    if not sk.startswith(VECTOR_PREFIX) or not is_id(session_id) or not is_id(message_id):
        raise ValueError(f"not a turn vector key: {sk!r}")
    return session_id, message_id


def summary_key(user_id: str, session_id: str) -> dict[str, str]:
    """The session's one running summary: versioned in place, so the open-session Query reads at most one."""
    return {"pk": session_pk(user_id, session_id), "sk": SUMMARY_SK}


def memory_key(user_id: str, memory_id: str) -> dict[str, str]:
    """One memory in the user's own partition; the id is derived from the text, so a duplicate names the same key."""
    return {"pk": user_pk(user_id), "sk": f"{MEMORY_PREFIX}{memory_id}"}


def memory_id_of(sk: str) -> str:
    """The memory id of a memory's sort key (MEM#<id>); ValueError if it is not one."""
    if not sk.startswith(MEMORY_PREFIX) or len(sk) == len(MEMORY_PREFIX):
        raise ValueError(f"not a memory key: {sk!r}")
    return sk[len(MEMORY_PREFIX) :]


def preference_key(user_id: str, name: str) -> dict[str, str]:
    """A per-user preference (the memory off switch) beside the memories: one Query reads both (MEM# < PREF#)."""
    return {"pk": user_pk(user_id), "sk": f"{PREFERENCE_PREFIX}{name}"}


def memory_range(user_id: str) -> tuple[str, str, str]:
    """(pk, low, high) of a Query that reads a user's memories and preferences and nothing else.

    Between MEM# and PREF#~ nothing else sorts: PURGE# and SES# rows come after PREF#~ ('U' > 'R', 'S' > 'P').
    """
    return user_pk(user_id), MEMORY_PREFIX, PREFERENCE_PREFIX + "~"


def message_id_of(sk: str) -> str:
    """The message id of a turn's sort key; ValueError if it is not one."""
    match = _MSG_SK_RE.match(sk)
    if not match:
        raise ValueError(f"not a turn key: {sk!r}")
    return match.group(1)


def message_sk(message_id: str) -> str:
    """A turn's sort key (range bounds of older-turn Queries)."""
    return f"{MESSAGE_PREFIX}{message_id}"


# --- the audit trail (lib/storage/audit.py) ---------------------------------------------------------------------

AUDIT_PREFIX = "AUDIT#"
AUDIT = "audit"
_DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_AUDIT_SK_RE = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)#([0-9A-HJKMNP-TV-Z]{26})$")


def audit_pk(day: str) -> str:
    """The partition of one UTC day's audit records (every admin's: the audit page reads a day with one Query).

    Not under USER#, like the usage ledger, for three reasons: a record is about an admin acting on someone (the
    actor is an admin or an OS account, the target may be a user, a file or the whole table), so no one user
    owns it; a record about a user must outlive that user's purge (purge-user deletes everything under
    USER#<id>, and the record of the purge is the proof it ran); and no page a user can open reads a key built
    from anything but their own id, so nothing under AUDIT# is reachable from a user's request.
    ValueError for a day that is not yyyy-mm-dd."""
    if not isinstance(day, str) or not _DAY_RE.match(day):
        raise ValueError(f"an audit day is yyyy-mm-dd, not {day!r}")
    return f"{AUDIT_PREFIX}{day}"


def audit_key(time: str, record_id: str) -> dict[str, str]:
    """An audit record: its day's partition, sorted by time, a fresh ULID per record (two records of one action in
    the same millisecond stay two). ValueError for a time not in key format or an id not a ULID."""
    if not is_time(time) or not is_id(record_id):
        raise ValueError("an audit key needs a key time and a record id (a ULID)")
    return {"pk": audit_pk(day_of(time)), "sk": f"{time}#{record_id}"}


def audit_parts(pk: str, sk: str) -> tuple[str, str, str]:
    """(day, time, record_id) of an audit record's key; ValueError if it is not one (or its time is not its day)."""
    match = _AUDIT_SK_RE.match(sk)
    if not pk.startswith(AUDIT_PREFIX) or not match or day_of(match.group(1)) != pk[len(AUDIT_PREFIX) :]:
        raise ValueError(f"not an audit record key: {pk!r}, {sk!r}")
    return pk[len(AUDIT_PREFIX) :], match.group(1), match.group(2)


def is_audit_pk(pk: str) -> bool:
    return pk.startswith(AUDIT_PREFIX) and bool(_DAY_RE.match(pk[len(AUDIT_PREFIX) :]))


# --- object store keys (lib/storage/objects.py): long bodies, later attachments -------------------------------
# users/<user, base64url>/bodies/<session>/<message>/<input|output>/<object id>. Built only here, on the server,
# from the signed-in user; each write gets a fresh object id, so an object is never overwritten while a pointer
# (a turn, or a kept version of it) may still name it. Attachments will live under users/<user>/files/.
OBJECT_ROOT = "users/"
BODY_PARTS = ("input", "output")
_OBJECT_USER_RE = re.compile(r"^[A-Za-z0-9_-]{1,440}$")


def _object_user(user_id: str) -> str:
    """The user id as one path segment: base64url of its UTF-8, unpadded (reversible; never '/', '.' or '#')."""
    import base64

    return base64.urlsafe_b64encode(check_user_id(user_id).encode("utf-8")).decode("ascii").rstrip("=")


def user_object_prefix(user_id: str) -> str:
    """The prefix of every object of one user (a check or a purge lists it)."""
    return f"{OBJECT_ROOT}{_object_user(user_id)}/"


CHAT_OBJECT_KINDS = {"bodies": "body_object", "files": "attachment_object", "archive": "archive_object"}


def chat_object_prefixes(user_id: str, session_id: str) -> dict[str, str]:
    """Every object prefix of one chat, by the kind a deletion report counts: its long bodies, its attached files and
    its archive (retention deletes them after the chat's items)."""
    if not is_id(session_id):
        raise ValueError("a chat's object prefix needs its session id")
    base = user_object_prefix(user_id)
    return {kind: f"{base}{folder}/{session_id}/" for folder, kind in CHAT_OBJECT_KINDS.items()}


def body_object_key(user_id: str, session_id: str, message_id: str, part: str, object_id: str) -> str:
    """The object of a turn's long question ("input") or answer ("output")."""
    if part not in BODY_PARTS or not all(is_id(i) for i in (session_id, message_id, object_id)):
        raise ValueError("a body object key needs a session, message and object id and input or output")
    return f"{user_object_prefix(user_id)}bodies/{session_id}/{message_id}/{part}/{object_id}"


def body_object_parts(key: str) -> tuple[str, str, str, str, str]:
    """(user_id, session_id, message_id, part, object_id) of a body object's key; ValueError for anything else
    (a forged key, `..`, a stray object an operator put in the bucket)."""
    import base64
    import binascii

    parts = key.split("/") if isinstance(key, str) else []
    if len(parts) != 7 or parts[0] + "/" != OBJECT_ROOT or parts[2] != "bodies" or parts[5] not in BODY_PARTS:
        raise ValueError("not a body object key")
    if not _OBJECT_USER_RE.match(parts[1]) or not all(is_id(p) for p in (parts[3], parts[4], parts[6])):
        raise ValueError("not a body object key")
    try:
        user_id = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode("utf-8")
        check_user_id(user_id)
    except (binascii.Error, UnicodeDecodeError, InvalidUserId) as exc:
        raise ValueError("not a body object key") from exc
    if _object_user(user_id) != parts[1]:  # one spelling per user: no second key naming the same object
        raise ValueError("not a body object key")
    return user_id, parts[3], parts[4], parts[5], parts[6]


def own_body_object(user_id: str, key: object) -> str:
    """The key, if it names a body object of this user; ValueError otherwise (another user's prefix, `..`, a
    made-up path): a stored pointer is read only under the reader's own prefix."""
    if not isinstance(key, str) or body_object_parts(key)[0] != user_id:
        raise ValueError("not this user's body object")
    return key


# --- the cold tier (lib/storage/archive.py, docs/archive.md) ----------------------------------------------------
# users/<user, base64url>/archive/<session>/<object id>: one gzip object per archived chat, a fresh object id per
# archive (a chat archived, restored and archived again never overwrites an object a meta may still name).


def archive_object_key(user_id: str, session_id: str, object_id: str) -> str:
    """The object holding one archived chat's items."""
    if not is_id(session_id) or not is_id(object_id):
        raise ValueError("an archive object key needs a session id and an object id")
    return f"{user_object_prefix(user_id)}archive/{session_id}/{object_id}"


def archive_object_parts(key: str) -> tuple[str, str, str]:
    """(user_id, session_id, object_id) of an archive object's key; ValueError for anything else."""
    import base64
    import binascii

    parts = key.split("/") if isinstance(key, str) else []
    if len(parts) != 5 or parts[0] + "/" != OBJECT_ROOT or parts[2] != "archive" or not _OBJECT_USER_RE.match(parts[1]):
        raise ValueError("not an archive object key")
    if not is_id(parts[3]) or not is_id(parts[4]):
        raise ValueError("not an archive object key")
    try:
        user_id = check_user_id(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, InvalidUserId) as exc:
        raise ValueError("not an archive object key") from exc
    if _object_user(user_id) != parts[1]:
        raise ValueError("not an archive object key")
    return user_id, parts[3], parts[4]


def is_archive_object(key: str) -> bool:
    try:
        archive_object_parts(key)
    except ValueError:
        return False
    return True


def own_archive_object(user_id: str, session_id: str, key: object) -> str:
    """The key, if it names an archive object of this user's chat; ValueError otherwise (a meta's pointer is read
    only under its own user's prefix and chat)."""
    if not isinstance(key, str) or archive_object_parts(key)[:2] != (user_id, session_id):
        raise ValueError("not this chat's archive object")
    return key


# --- attachments (lib/storage/attachments.py, docs/attachments.md) ----------------------------------------------
# users/<user, base64url>/files/<session>/<message>/<attachment id>/<original|text>: a file attached to a question,
# as uploaded ("original") and its extracted text ("text", text files and PDFs). Built here from the signed-in user
# and ids the server made; read only when it parses as this user's (own_attachment_object).
ATTACHMENT_PARTS = ("original", "text")


def attachment_object_key(user_id: str, session_id: str, message_id: str, attachment_id: str, part: str) -> str:
    """The object of one attachment's bytes ("original") or extracted text ("text")."""
    if part not in ATTACHMENT_PARTS or not all(is_id(i) for i in (session_id, message_id, attachment_id)):
        raise ValueError("an attachment key needs a session, message and attachment id and original or text")
    return f"{user_object_prefix(user_id)}files/{session_id}/{message_id}/{attachment_id}/{part}"


def attachment_object_parts(key: str) -> tuple[str, str, str, str, str]:
    """(user_id, session_id, message_id, attachment_id, part) of an attachment object's key; ValueError for
    anything else (a forged key, `..`, another kind of object)."""
    import base64
    import binascii

    parts = key.split("/") if isinstance(key, str) else []
    if len(parts) != 7 or parts[0] + "/" != OBJECT_ROOT or parts[2] != "files" or parts[6] not in ATTACHMENT_PARTS:
        raise ValueError("not an attachment object key")
    if not _OBJECT_USER_RE.match(parts[1]) or not all(is_id(p) for p in parts[3:6]):
        raise ValueError("not an attachment object key")
    try:
        user_id = check_user_id(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, InvalidUserId) as exc:
        raise ValueError("not an attachment object key") from exc
    if _object_user(user_id) != parts[1]:  # one spelling per user: no second key naming the same object
        raise ValueError("not an attachment object key")
    return user_id, parts[3], parts[4], parts[5], parts[6]


def is_attachment_object(key: str) -> bool:
    try:
        attachment_object_parts(key)
    except ValueError:
        return False
    return True


def own_attachment_object(user_id: str, session_id: str, key: object) -> str:
    """The key, if it names an attachment object of this user's chat; ValueError otherwise (another user's prefix,
    another chat, `..`, a made-up path): a stored record is read only under its reader's own prefix."""
    if not isinstance(key, str) or attachment_object_parts(key)[:2] != (user_id, session_id):
        raise ValueError("not this chat's attachment object")
    return key


# --- share links (lib/storage/shares.py, docs/sharing.md) --------------------------------------------------------
# The owner's index record lives in the owner's partition, under LINK#: 'L' sorts before MEM#, so it is outside the
# memory range (MEM# to PREF#~), the sidebar (SES#), the vectors (VEC#) and the purge markers (PURGE#).
# The share itself is found by the viewer, another user, from the token alone: it cannot be under USER#<owner>
# (the viewer's request builds no key from anyone else's id), so it has its own partition, named by the token's
# SHA-256 (only the hash is stored: a table export holds no live link).
LINK_PREFIX = "LINK#"
LINK = "link"
SHARE_PREFIX = "SHARE#"
SHARE_HEAD_SK = "LINK"
SHARE_PART_PREFIX = "PART#"
_LINK_SK_RE = re.compile(r"^LINK#([0-9A-HJKMNP-TV-Z]{26})$")
_TOKEN_HASH_RE = re.compile(r"^[0-9a-f]{64}$")


def token_hash(token: str) -> str:
    """The SHA-256 (hex) of a share token, whatever it is (a malformed or made-up one too: every lookup does the
    same work)."""
    return hashlib.sha256(str(token).encode("utf-8", "surrogatepass")).hexdigest()


def _checked_hash(digest: str) -> str:
    if not isinstance(digest, str) or not _TOKEN_HASH_RE.match(digest):
        raise ValueError("a share key needs a token hash (64 hex digits)")
    return digest


def share_pk(digest: str) -> str:
    """The partition of one share: its head and its snapshot's parts."""
    return f"{SHARE_PREFIX}{_checked_hash(digest)}"


def share_digest(pk: str) -> str:
    """The token hash a share's partition key holds (share_pk read back); '' for a key that is not a share's."""
    digest = pk[len(SHARE_PREFIX) :] if pk.startswith(SHARE_PREFIX) else ""
    return digest if _TOKEN_HASH_RE.match(digest) else ""


def share_head_key(digest: str) -> dict[str, str]:
    """The share record (owner, chat, title, snapshot version, parts, view_count); sorts before its parts."""
    return {"pk": share_pk(digest), "sk": SHARE_HEAD_SK}


def share_part_key(digest: str, part: int) -> dict[str, str]:
    """One chunk of a share's snapshot (PART#0000 ...)."""
    if not isinstance(part, int) or not 0 <= part <= 9999:
        raise ValueError("a share part is 0 to 9999")
    return {"pk": share_pk(digest), "sk": f"{SHARE_PART_PREFIX}{part:04d}"}


def link_key(user_id: str, link_id: str) -> dict[str, str]:
    """The owner's index record of one link; ValueError for a link id that is not a ULID (a forged one)."""
    if not is_id(link_id):
        raise ValueError("a link id is a ULID")
    return {"pk": user_pk(user_id), "sk": f"{LINK_PREFIX}{link_id}"}


def link_id_of(sk: str) -> str:
    """The link id of an owner's link record's sort key; ValueError if it is not one."""
    match = _LINK_SK_RE.match(sk)
    if not match:
        raise ValueError(f"not a link key: {sk!r}")
    return match.group(1)


# --- spend limits (docs/limits.md) --------------------------------------------------------------------------------

LIMITS_PK = "LIMITS"
LIMIT_DEFAULT_SK = "DEFAULT"
GROUP_PREFIX = "GROUP#"
MAX_GROUP_NAME = 128
_GROUP_FORBIDDEN = re.compile("[#\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def check_group(name: object) -> str:
    """A group name a limit key may be built from: 1 to 128 characters, no '#', no control characters;
    InvalidUserId otherwise (the same rule as a user id's)."""
    if not isinstance(name, str) or not name or len(name) > MAX_GROUP_NAME or _GROUP_FORBIDDEN.search(name):
        raise InvalidUserId(f"A group name is 1 to {MAX_GROUP_NAME} characters with no '#' and no control characters.")
    return name


def limit_key(kind: str, name: str | None = None) -> dict[str, str]:
    """The one spend-limit record of a scope: kind 'default' (no name), 'group' or 'user'."""
    if kind == "default":
        return {"pk": LIMITS_PK, "sk": LIMIT_DEFAULT_SK}
    if kind == "group":
        return {"pk": LIMITS_PK, "sk": f"{GROUP_PREFIX}{check_group(name)}"}
    if kind == "user":
        return {"pk": LIMITS_PK, "sk": user_pk(name)}
    raise ValueError(f"not a limit scope: {kind!r}")


def limit_parts(sk: str) -> tuple[str, str | None]:
    """(kind, name) of a spend-limit record's sort key; ValueError if it is not one."""
    if sk == LIMIT_DEFAULT_SK:
        return "default", None
    if sk.startswith(GROUP_PREFIX) and len(sk) > len(GROUP_PREFIX):
        return "group", sk[len(GROUP_PREFIX) :]
    if sk.startswith(USER_PREFIX) and len(sk) > len(USER_PREFIX):
        return "user", sk[len(USER_PREFIX) :]
    raise ValueError(f"not a spend-limit key: {sk!r}")


def month_days(day: str) -> list[str]:
    """The UTC days of `day`'s month up to and including it (yyyy-mm-01 ... day)."""
    first = _dt.date.fromisoformat(day).replace(day=1)
    return [(first + _dt.timedelta(days=i)).isoformat() for i in range(_dt.date.fromisoformat(day).day)]


# --- projects (lib/storage/projects.py, docs/projects.md) ---------------------------------------------------------

_PROJECT_SK_RE = re.compile(r"^PRJ#(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)#([0-9A-HJKMNP-TV-Z]{26})$")


def _project_id(project_id: object) -> str:
    if not is_id(project_id):
        raise ValueError("a project id is a ULID")
    return project_id  # type: ignore[return-value]


def project_pk(user_id: str, project_id: str) -> str:
    """The partition of one project: its meta and its chats' rows. ValueError for an id that is not a ULID."""
    return f"{user_pk(user_id)}#{PROJECT_PREFIX}{_project_id(project_id)}"


def project_partition_prefix(user_id: str) -> str:
    """The prefix every project partition of a user starts with (the deep Scan of purge-user and check --user)."""
    return f"{user_pk(user_id)}#{PROJECT_PREFIX}"


def project_meta_key(user_id: str, project_id: str) -> dict[str, str]:
    """The project record, found by id: name, instructions, create and last activity times."""
    return {"pk": project_pk(user_id, project_id), "sk": PROJECT_META_SK}


def project_row_key(user_id: str, last_activity_time: str, project_id: str) -> dict[str, str]:
    """The project's row in the user's project list, sorted by its last activity (the meta's last_activity_time)."""
    return {"pk": user_pk(user_id), "sk": f"{PROJECT_PREFIX}{last_activity_time}#{_project_id(project_id)}"}


def project_chat_key(user_id: str, project_id: str, last_message_time: str, session_id: str) -> dict[str, str]:
    """A chat's row in its project's partition, sorted by the chat's last_message_time (as its sidebar row)."""
    return {"pk": project_pk(user_id, project_id), "sk": f"{SESSION_PREFIX}{last_message_time}#{session_id}"}


def project_row_parts(sk: str) -> tuple[str, str]:
    """(last_activity_time, project_id) of a project row's sort key; ValueError if it is not one."""
    match = _PROJECT_SK_RE.match(sk)
    if not match:
        raise ValueError(f"not a project row key: {sk!r}")
    return match.group(1), match.group(2)


def parse_project_pk(pk: str) -> tuple[str, str] | None:
    """(user_id, project_id) of a project partition's pk, None for any other pk."""
    if not pk.startswith(USER_PREFIX):
        return None
    user_id, marker, project_id = pk[len(USER_PREFIX) :].partition(f"#{PROJECT_PREFIX}")
    return (user_id, project_id) if marker and user_id and is_id(project_id) else None
