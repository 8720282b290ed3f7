"""Every admin command that acts on data is audited: a `started` record before it acts, its outcome after.

Fail closed: if the `started` record cannot be written, the command is refused before it reads or changes
anything (exit 2). The closing record (ok / refused / failed, with a reason code, the same request id) is
written after; if that one cannot be written the command has already acted, so it says so on stderr and exits 3:
the `started` record stands as proof the action was attempted. Exceptions (docs/audit.md): `restore` and
`import-table` are recorded once, after they succeed, into the database they filled (before a restore, the table
the record would go into is the one being replaced, and opening it would hold the folder the restore must take;
import-table refuses a table that holds any item, so a record written first would refuse every import; a refused
one changed nothing and is in the log only); `backup` and `create-table` write the JSON log line only (a backup
runs beside the app, which holds the local database; create-table runs before there is a table).

The actor is `cli:<os user>`, the account of the process's real uid (not $USER, which the caller sets).
"""

from __future__ import annotations

import argparse
import contextvars
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lib import logs
from lib.config import Settings
from lib.errors import AuditUnavailable, ChatError
from lib.storage import keys
from lib.storage.audit import FAILED, OK, REFUSED, STARTED, AuditLog, cli_actor

LOG_ONLY = ("create-table", "backup")  # see the module docstring
AFTER_ONLY = ("restore", "import-table")
EXIT_AUDIT_CLOSE_FAILED = 3
ALL_USERS, TABLE = "all-users", "table"
# The arguments a record may carry: flags, numbers and file names. Never a search query or a question file's text.
_DETAIL_ARGS = (
    "dry_run",
    "deep",
    "usage",
    "json",
    "rebuild",
    "merge",
    "force",
    "older_than",
    "within_days",
    "days",
    "top",
    "budget",
    "timeout",
    "session",
    "out",
    "file",
    "questions",
    "probe_user",
    "allow_aws",
)
_notes: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("audit_notes", default=None)
_request: contextvars.ContextVar[str] = contextvars.ContextVar("audit_request", default="")


def current_request_id() -> str:
    """The request id of the audited command being run ('' outside one): reports quote it."""
    return _request.get()


def os_user() -> str:
    """The name of the process's real uid (what the OS says, not an environment variable); uid<n> without one."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return f"uid{os.getuid()}"


def note(**fields: Any) -> None:
    """Add counts (numbers and flags only) to the closing record of the command being run, e.g. purge-user's
    per-kind counts; a no-op outside an audited command."""
    notes = _notes.get()
    if notes is not None:
        notes.update({k: v for k, v in fields.items() if isinstance(v, (int, float, bool))})


def target_of(args: argparse.Namespace) -> str:
    """What the command acts on: a user id, a file name, every user, or the table."""
    if getattr(args, "user", None):
        return args.user
    if getattr(args, "all", False) or args.command in ("retention", "sweep-pending", "users", "reindex"):
        return ALL_USERS
    for name in ("file", "out"):
        if getattr(args, name, None):
            return Path(getattr(args, name)).name
    return TABLE


def detail_of(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _DETAIL_ARGS:
        value = getattr(args, name, None)
        if value is None or value is False:
            continue
        out[name] = Path(value).name if name in ("out", "file", "questions") else value
    return out


def _reason(text: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", text).lower()[:48] or "error"


def _closing(command: str, code: int) -> tuple[str, str | None]:
    if code == 0:
        return OK, None
    if command == "check" and code == 1:
        return OK, "violations_found"  # check ran; what it found is its answer, not a failure
    if code == 2:
        return REFUSED, "refused"
    return FAILED, f"exit_{code}"


def run(
    args: argparse.Namespace,
    settings: Settings,
    act: Callable[[], int],
    *,
    audit: Callable[[], AuditLog] | None = None,
) -> int:
    """Run `act` (the command) between its two audit records; see the module docstring for the order."""
    if args.command in LOG_ONLY:
        logs.event("audit.log_only", audit_action=f"admin.{args.command}", actor=cli_actor(os_user()))
        return act()
    opened: list[AuditLog] = []

    def opener() -> AuditLog:  # opened once, on first use (after the act, for restore)
        if not opened:
            opened.append(audit() if audit else _open(settings))
        return opened[0]

    actor, action, target = cli_actor(os_user()), f"admin.{args.command}", target_of(args)
    request_id = keys.new_id()
    if args.command not in AFTER_ONLY:
        try:
            log = opener()
            log.record(actor, action, target, STARTED, detail_of(args), request_id=request_id)
        except (AuditUnavailable, ChatError) as exc:
            logs.warning(
                "admin.refused", command=args.command, reason="audit_unwritten", error_class=type(exc).__name__
            )
            print(
                f"{args.command}: refused before it did anything: its audit record could not be written ({exc})",
                file=sys.stderr,
            )
            return 2
    token, request_token = _notes.set({}), _request.set(request_id)
    try:
        try:
            code = act()
        except BaseException as exc:  # recorded, then raised as before (a crash, ^C)
            _close(opener, actor, action, target, request_id, FAILED, _reason(type(exc).__name__), args, {})
            raise
        notes = _notes.get() or {}
    finally:
        _notes.reset(token)
        _request.reset(request_token)
    if args.command in AFTER_ONLY and code != 0:
        logs.warning("audit.log_only", audit_action=action, actor=actor, exit_code=code)  # nothing was restored
        return code
    outcome, reason = _closing(args.command, code)
    closed = _close(opener, actor, action, target, request_id, outcome, reason, args, {"exit_code": code, **notes})
    if args.command == "restore" and settings.backend == "local":  # the folder is the app's again, not ours
        from lib.database import MEMORY, stop_local_server

        stop_local_server(None if settings.data_dir == MEMORY else settings.data_dir)
    if not closed:
        return EXIT_AUDIT_CLOSE_FAILED if code == 0 else code
    return code


def _close(opener, actor, action, target, request_id, outcome, reason, args, detail) -> bool:
    try:
        if args.command in AFTER_ONLY:
            detail = {**detail_of(args), **detail}
        opener().record(actor, action, target, outcome, detail, reason=reason, request_id=request_id)
    except (AuditUnavailable, ChatError) as exc:
        print(
            f"{args.command}: it ran, but its closing audit record could not be written ({exc}); the record of its "
            f"start (request id {request_id}) stands. Tell whoever reviews the audit trail.",
            file=sys.stderr,
        )
        return False
    return True


def _open(settings: Settings) -> AuditLog:
    from lib.database import open_database

    database = open_database(settings)
    return AuditLog(database.client, database.table, database.meter, retention_days=settings.audit_days)
