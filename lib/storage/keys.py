"""Every key, time and id format of the single table (DESIGN.md); nothing else builds a key.

Records and their keys:
    list item     pk USER#<user_id>                   sk SES#<last_message_time>#<session_id>
    session meta  pk USER#<user_id>#SES#<session_id>  sk SES#META
    message       pk USER#<user_id>#SES#<session_id>  sk MSG#<message_id>
    usage bucket  pk USAGE#<yyyy-mm-dd>               sk USER#<user_id>   (the cost page's ledger)
Reserved sort-key prefixes for the records the context engine and semantic search add:
    summary       pk USER#<user_id>#SES#<session_id>  sk SUM#RUNNING (sorts after SES#META: read first, descending)
    version       pk USER#<user_id>#SES#<session_id>  sk ALT#<message_id>#<nnn> (a turn's kept answers; sorts
                  before every MSG#, and the open Query starts at MSG#, so no page read meets one)
    memory        pk USER#<user_id>                   sk MEM#<memory_id>  (memory_id: a hash of the normalised text)
    preference    pk USER#<user_id>                   sk PREF#<name>      (e.g. PREF#memory: the user's off switch)
    vector item   pk USER#<user_id>                   sk VEC#...
Operations:
    user registry pk USERS                            sk USER#<user_id>   (written with a user's first chat)
    purge marker  pk USER#<user_id>                   sk PURGE#<n>        (sessions an admin deletion is removing)
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
from collections.abc import Callable, Iterator

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
VERSION = "version"

# ULID: 26 chars of Crockford base32 (no I, L, O, U); sorts in creation order.
_ULID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
# Fixed-length UTC time with milliseconds, so string order is time order.
_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
_LIST_SK_RE = re.compile(r"^SES#(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)#([0-9A-HJKMNP-TV-Z]{26})$")
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


def list_key(user_id: str, last_message_time: str, session_id: str) -> dict[str, str]:
    """The sidebar record: sorts by last_message_time under the user's pk."""
    return {"pk": user_pk(user_id), "sk": f"{SESSION_PREFIX}{last_message_time}#{session_id}"}


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
    return bool(_LIST_SK_RE.match(sk))


def is_message_sk(sk: str) -> bool:
    return bool(_MSG_SK_RE.match(sk))


def record_kind(sk: str) -> str:
    """Which record a sort key names (LIST_ROW, META, TURN, SUMMARY, MEMORY, VECTOR, PURGE, PREFERENCE), or UNKNOWN.

    A malformed sort key under a known prefix (MSG#not-an-id) is UNKNOWN too: readers
    skip it rather than fail on it, and `admin check` reports it.
    """
    if sk == META_SK:
        return META
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
    ):
        if sk.startswith(prefix):
            return kind
    return UNKNOWN


def parse_pk(pk: str) -> tuple[str, str | None] | None:
    """(user_id, session_id) of a session partition, (user_id, None) of a user partition, None for any other pk."""
    if not pk.startswith(USER_PREFIX):
        return None
    user_id, marker, session_id = pk[len(USER_PREFIX) :].partition(f"#{SESSION_PREFIX}")
    if not user_id:
        return None
    return (user_id, session_id) if marker else (user_id, None)


def list_row_parts(sk: str) -> tuple[str, str]:
    """(last_message_time, session_id) of a sidebar row's sort key; ValueError if it is not one."""
    match = _LIST_SK_RE.match(sk)
    if not match:
        raise ValueError(f"not a sidebar row key: {sk!r}")
    return match.group(1), match.group(2)


def list_row_time(sk: str) -> str:
    """The last_message_time of a sidebar row's sort key, leniently: a malformed row (which `admin check` reports)
    still shows in the sidebar instead of failing the page."""
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
