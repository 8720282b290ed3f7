"""ChatStore: the only module that talks to DynamoDB. One table, primary key only (DESIGN.md).

Request budget per action (an extra request is a defect):
    list_sessions    1 Query      open_session   1 Query (summary + meta + 20 turns)
    create_session   1 TransactWriteItems (3 Puts)
    send_message     1 TransactWriteItems (4 actions); on a lost race +1 GetItem and a retry
    (a chat in a project: +2 actions in create and send, +1 in rename: lib/storage/projects.py)
    finish/fail      1 UpdateItem             rename_session  1 TransactWriteItems (2 Updates)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from lib import logs
from lib.errors import (
    ChatError,
    InvalidCursor,
    ItemTooLarge,
    MessageNotFound,
    MessageNotPending,
    MessageTooLarge,
    OutcomeUnknown,
    ProjectNotFound,
    SessionChanged,
    SessionNotFound,
    StoreUnavailable,
    TemporaryChat,
)
from lib.storage import attachments as attachment_rows
from lib.storage import items, keys, partitions, seen
from lib.storage import projects as project_rows
from lib.storage.archive import ArchiveStore
from lib.storage.attachments import Attachments, Upload
from lib.storage.bodies import DEFAULT_MAX_QUESTION_BYTES, POINTERS, Bodies
from lib.storage.capacity import Meter
from lib.storage.cursor import CursorCodec
from lib.storage.gateway import (
    Gateway,
    cancellation_codes,
    error_code,
    from_item,
    on_condition_failed,
    storable_text,
    to_item,
)
from lib.storage.items import (
    ANSWER_RESERVE_BYTES,
    QUESTION_LIMIT_BYTES,
    TITLE_MAX_CHARS,
    default_title,
)
from lib.storage.itemsize import item_size
from lib.storage.objects import ObjectStore
from lib.storage.projects import ProjectStore
from lib.storage.records import (
    DONE,
    FAILED,
    PENDING,
    Message,
    Page,
    Session,
    SessionSummary,
    SessionView,
    Summary,
)
from lib.storage.versions import VersionStore

# Re-exported: callers import these from the store they write through.
__all__ = [
    "ANSWER_RESERVE_BYTES",
    "QUESTION_LIMIT_BYTES",
    "TITLE_MAX_CHARS",
    "ChatStore",
    "default_title",
    "from_item",
    "to_item",
]

SIDEBAR_PAGE = 20
TURNS_PAGE = 20
MAX_RACE_RETRIES = 3


class ChatStore:
    """Sessions and turns of every user on one DynamoDB table; handed its client."""

    def __init__(
        self,
        client: Any,
        table_name: str,
        meter: Meter | None = None,
        *,
        cursor_secret: bytes | str | None = None,
        objects: ObjectStore | None = None,
        max_question_bytes: int = DEFAULT_MAX_QUESTION_BYTES,
    ):
        self._db = Gateway(client, table_name, meter)
        self._table = table_name
        self._cursors = CursorCodec(cursor_secret)
        self.versions = VersionStore(self._db)  # a turn's kept answers: Regenerate, Edit, switching versions
        # Long bodies in the object store, written before the DynamoDB write that points at them (docs/objects.md)
        self.bodies = Bodies(self._db, objects, max_question_bytes)
        # Files attached to a question: objects first, then the turn's records in the same transaction as ever
        self.attachments = Attachments(self._db, objects)
        self.projects = ProjectStore(self._db, self._cursors)  # projects and a chat's place in one (docs/projects.md)
        # The cold tier (docs/archive.md): an archived chat is restored when it is opened or sent to
        self.archive = ArchiveStore(self._db, objects)

    def _call(self, operation: str, **params: Any) -> dict:
        return self._db.call(operation, **params)

    # --- writes ---------------------------------------------------------

    def create_session(
        self,
        user_id: str,
        input_body: str,
        *,
        system_prompt_id: str,
        title: str | None = None,
        model: str | None = None,
        temporary_hours: float | None = None,
        project_id: str | None = None,
        attachments: Sequence[Upload] = (),
        branched_from: tuple[str, str] | None = None,
    ) -> tuple[Session, Message]:
        """Commit a new session and its pending first question in one transaction: 3 Puts and the user registry.
        `attachments`: files written to the object store first (lib/storage/attachments.py), recorded on the turn.

        The registry Update (pk USERS) is how operators list users without a Scan; it rides in the
        same request, so a new chat stays one request (8 WRU instead of the design's 6). `temporary_hours`: a
        temporary chat, whose meta, row and turns expire that long after now (its row is TMP#, not a sidebar row).
        `project_id`: a chat started in that project (+ a ConditionCheck of the project and a Put of its row there;
        ProjectNotFound for a malformed, unknown or foreign id; TemporaryChat with `temporary_hours`).
        `branched_from`: (session id, message id) of the question a branch was made from, kept on the meta.
        """
        if project_id is not None:
            project_rows.checked_id(project_id)
            if temporary_hours is not None:
                raise TemporaryChat("A temporary chat is not kept, so it cannot be started in a project.")
        if temporary_hours is not None and attachments:
            raise TemporaryChat(NO_FILES_IN_A_TEMPORARY_CHAT)
        session_id, at = keys.new_id(), keys.now()
        message_item, message = self.bodies.pending_message(
            user_id,
            session_id,
            input_body,
            system_prompt_id,
            at,
            keys.new_id(),
            action="create",
            inline=temporary_hours is not None,
        )
        message_item, message = self._attached(user_id, message_item, message, attachments, action="create")
        title = items.valid_title(title or default_title(input_body))
        expire_at = keys.expire_epoch(at, temporary_hours) if temporary_hours is not None else None
        session = Session(
            session_id,
            user_id,
            title,
            at,
            at,
            1,
            model=model,
            expire_at=expire_at,
            project_id=project_id,
            branched_from=branched_from,
        )
        message_item, message = _expiring(message_item, message, expire_at)
        if project_id is None:
            self._create_transaction(user_id, session, message_item, message, at)
            return session, message
        for _attempt in range(MAX_RACE_RETRIES + 1):
            # Action 4 is the project's ConditionCheck: failed, the project is not this user's; in a conflict (an
            # edit or a move of the project at that moment) nothing was written, so the same items are sent again.
            with on_condition_failed(actions=(4,)) as refused:
                self._create_transaction(user_id, session, message_item, message, at)
            if not refused:
                return session, message
            if cancellation_codes(refused.exc)[4:5] == ["ConditionalCheckFailed"]:
                raise ProjectNotFound("No such project (it may have been deleted); the chat was not started.")
        raise SessionChanged("This project kept changing in another tab; your question was not sent. Send it again.")

    def _create_transaction(self, user_id: str, session: Session, message_item: dict, message: Message, at: str):
        with (
            self._duplicate_refused(),
            self._db.action("create", user_id),
            self._outcome_checked(user_id, message, committed_index=2),
        ):
            self._call(
                "transact_write_items",
                TransactItems=[
                    {
                        "Put": {  # meta; the condition makes a duplicated id fail instead of overwriting a session
                            "TableName": self._table,
                            "Item": items.meta_item(user_id, session),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {"Put": {"TableName": self._table, "Item": items.list_item(user_id, session)}},
                    {
                        "Put": {  # the question, durable before the model is called
                            "TableName": self._table,
                            "Item": message_item,
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {
                        "Update": {  # the registry: no condition, so it can never cancel a user's first question
                            "TableName": self._table,
                            "Key": to_item(keys.registry_key(user_id)),
                            "UpdateExpression": "SET user_id = :u, first_time = if_not_exists(first_time, :at), "
                            "last_create_time = :at",
                            "ExpressionAttributeValues": to_item({":u": user_id, ":at": at}),
                        }
                    },
                    *project_rows.chat_created(self._table, user_id, session),
                ],
            )

    def _attached(
        self, user_id: str, item: dict, message: Message, uploads: Sequence[Upload], *, action: str
    ) -> tuple[dict, Message]:
        """The pending turn with its attachments' records, their objects written first (none: unchanged)."""
        if not uploads:
            return item, message
        stored = self.attachments.store(user_id, message.session_id, message.message_id, uploads, action=action)
        item[attachment_rows.ITEM_ATTRIBUTE] = attachment_rows.item_value(stored)
        return item, replace(message, attachments=stored, size=item_size(item))

    @staticmethod
    @contextlib.contextmanager
    def _duplicate_refused() -> Iterator[None]:
        """A create refused by the meta's own condition (action 0, and only that: a conflict is another matter)
        means a chat of this id exists: a named copy (Continue in my own chat) made by two tabs at once."""
        try:
            yield
        except ClientError as exc:
            if error_code(exc) == "TransactionCanceledException" and cancellation_codes(exc)[:1] == [
                "ConditionalCheckFailed"
            ]:
                raise SessionChanged("This chat was just created in another tab; open it from your chats.") from exc
            raise

    def send_message(
        self,
        user_id: str,
        session: Session,
        input_body: str,
        *,
        system_prompt_id: str,
        model: str | None = None,
        attachments: Sequence[Upload] = (),
        branched_from: tuple[str, str] | None = None,
    ) -> tuple[Session, Message]:
        """Commit a pending question and move the session to the top of the sidebar, in one transaction.

        `session.last_message_time` is the :old the caller read with the session:
        no read precedes the write. Raises SessionChanged if other tabs keep winning. `model`: the model id the
        question goes to, kept on the meta in the same Update (the chat's choice for its next question).
        """
        _not_expired(session)  # before any request: an expired chat's question is not even uploaded
        if session.temporary and attachments:
            raise TemporaryChat(NO_FILES_IN_A_TEMPORARY_CHAT)
        session = self._restored(user_id, session)  # an archived chat is put back first (docs/archive.md)
        message_id = keys.new_id()
        message_item, message = self.bodies.pending_message(
            user_id,
            session.session_id,
            input_body,
            system_prompt_id,
            session.last_message_time,
            message_id,
            action="send",
            inline=session.temporary,
        )
        message_item, message = self._attached(user_id, message_item, message, attachments, action="send")
        message_item, message = _expiring(message_item, message, session.expire_at)
        for attempt in range(MAX_RACE_RETRIES + 1):
            at = keys.later_than(session.last_message_time)
            message_item["create_time"] = {"S": at}
            # Action 1 (meta) or 2 (old list item) failing means another tab sent first: our :old is stale. A
            # TransactionConflict anywhere is the same race caught mid-flight. Anything else is not ours to retry.
            with (
                on_condition_failed(actions=(1, 2, 3, 4)) as lost_race,  # 3, 4: a pinned or project chat's rows
                self._db.action("send", user_id, prior=self._session_sizes(user_id, session)),
                self._outcome_checked(user_id, message, committed_index=0),
            ):
                self._send_transaction(user_id, session, message_item, at, model)
            if not lost_race:
                sent = replace(session, last_message_time=at, message_count=session.message_count + 1)
                sent = replace(sent, model=model) if model is not None else sent
                return sent, replace(message, create_time=at)
            if attempt == MAX_RACE_RETRIES:
                raise SessionChanged(
                    "This chat kept changing in another tab; your question was not sent. Reload and send again."
                ) from lost_race.exc
            with self._db.action("send", user_id):
                session = self.get_session(user_id, session.session_id)
            session = self._restored(user_id, session)  # archived since this tab read it
        raise AssertionError("unreachable")

    def _restored(self, user_id: str, session: Session) -> Session:
        """The session, live: an archived one is restored first (lib/storage/archive.py; ArchiveUnavailable if its
        object is missing or damaged, and nothing is sent)."""
        if session.archive is None:
            return session
        self.archive.restore(user_id, session)
        with self._db.action("restore", user_id):
            return self.get_session(user_id, session.session_id)

    @contextlib.contextmanager
    def _outcome_checked(self, user_id: str, message: Message, *, committed_index: int) -> Iterator[None]:
        """Around a transaction that puts a fresh pending question: find out what happened when the answer is lost.

        Two ways a committed question can look like a failure: the response was lost
        (OutcomeUnknown), or botocore resent a transaction that had committed and the
        resend was cancelled because our fresh message id already exists (real
        DynamoDB answers such a resend through its ClientRequestToken instead;
        emulators do not). A fresh ULID is written by no one else, so its existence
        means our transaction committed: the caller goes on as if it had succeeded.
        One consistent GetItem, on the error path only.
        """
        try:
            yield
        except ClientError as exc:
            codes = cancellation_codes(exc) if error_code(exc) == "TransactionCanceledException" else []
            if (
                len(codes) > committed_index
                and codes[committed_index] == "ConditionalCheckFailed"
                and self._message_exists(user_id, message)
            ):
                logs.warning("turn.commit_resent", session_id=message.session_id, message_id=message.message_id)
                return
            raise
        except OutcomeUnknown as exc:
            try:
                exists = self._message_exists(user_id, message)
            except StoreUnavailable:
                raise StoreUnavailable(
                    "The chat database did not confirm whether your message was saved. Reload the chat to see "
                    "whether it is there before sending it again."
                ) from exc
            logs.warning(
                "turn.commit_outcome_unknown",
                session_id=message.session_id,
                message_id=message.message_id,
                committed=exists,
            )
            if not exists:
                raise StoreUnavailable(
                    "Your message was not saved: the chat database did not answer. Nothing was changed; send it again."
                ) from exc

    def _message_exists(self, user_id: str, message: Message) -> bool:
        response = self._call(
            "get_item",
            Key=to_item(keys.message_key(user_id, message.session_id, message.message_id)),
            ConsistentRead=True,
            ProjectionExpression="pk",
        )
        return "Item" in response

    def _session_sizes(self, user_id: str, session: Session) -> dict[tuple[str, str], int]:
        """Sizes of the meta and sidebar row a send or rename replaces (the store wrote them, so it knows them)."""
        meta = items.meta_item(user_id, session)
        return items.sizes(meta, items.list_item(user_id, session)) | project_rows.project_sizes(user_id, session)

    def _send_transaction(
        self, user_id: str, session: Session, message_item: dict, at: str, model: str | None = None
    ) -> None:
        old = session.last_message_time
        chosen = ", model = :model" if model is not None else ""
        project, in_project = project_rows.meta_condition(session)
        self._call(
            "transact_write_items",
            TransactItems=[
                {
                    "Put": {  # 1. the pending question; a fresh ULID never exists, the condition guards a replay
                        "TableName": self._table,
                        "Item": message_item,
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {
                    "Update": {  # 2. move the meta forward only from the time we read: two tabs cannot both win;
                        # and only under the title we read: action 4 writes the sidebar row with it, so a tab
                        # that missed a rename must re-read the meta rather than put the old title back; and in the
                        # project we read, whose row of the chat moves below (a tab that missed a move re-reads)
                        "TableName": self._table,
                        "Key": to_item(keys.meta_key(user_id, session.session_id)),
                        "UpdateExpression": f"SET last_message_time = :new{chosen} ADD message_count :one",
                        # and not archived since it was read (a tab that still showed it): it re-reads and restores
                        "ConditionExpression": f"last_message_time = :old AND #title = :title AND {project} AND "
                        "attribute_not_exists(#archive)",
                        "ExpressionAttributeNames": {"#title": "title", "#archive": "archive"},
                        "ExpressionAttributeValues": to_item(
                            {":new": at, ":old": old, ":one": 1, ":title": session.title, ":model": model, **in_project}
                        ),
                    }
                },
                *self._row_moves(user_id, session, at),
                *project_rows.chat_row_moves(self._table, user_id, session, at),  # the project's list of its chats
            ],
        )

    def _row_moves(self, user_id: str, session: Session, at: str) -> list[dict]:
        """The send's sidebar actions (3 and 4). An unpinned row's key holds the time, so it moves: Delete the old
        row, Put the new one at the top. A pinned row's key holds the pin time, so it stays where it is and only
        its last_message_time changes (one Update: a Delete and a Put of the same key may not share a transaction).
        Either way the row we name must exist: a tab that missed a pin or an unpin fails here and re-reads."""
        if session.temporary:
            return []  # its TMP# row names no time: nothing in the user's partition moves
        old_key = items.list_item(user_id, session)
        if session.pinned_at is not None:
            return [
                {
                    "Update": {  # 3. the pinned row keeps its place; the condition: it is still pinned as we read
                        "TableName": self._table,
                        "Key": {"pk": old_key["pk"], "sk": old_key["sk"]},
                        "UpdateExpression": "SET last_message_time = :new",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeValues": to_item({":new": at}),
                    }
                }
            ]
        return [
            {
                "Delete": {  # 3. the old sidebar row must exist, or we would leave a second row behind
                    "TableName": self._table,
                    "Key": {"pk": old_key["pk"], "sk": old_key["sk"]},
                    "ConditionExpression": "attribute_exists(pk)",
                }
            },
            {
                "Put": {  # 4. the new sidebar row, at the top
                    "TableName": self._table,
                    "Item": items.list_item(user_id, replace(session, last_message_time=at)),
                }
            },
        ]

    def finish_message(
        self,
        user_id: str,
        message: Message,
        *,
        output_body: str,
        input_token: int,
        output_token: int,
        response_start_time: str,
        response_end_time: str,
        model: str | None = None,
        context: list[dict] | None = None,
    ) -> Message:
        """Fill in the answer and mark the turn done (1 UpdateItem). Does not move the sidebar.

        `context`: what the model saw (Context.sources_record(): ids and token counts, never text)."""
        with self._db.action("finish", user_id, prior=self._message_size(user_id, message)):
            return self._complete(
                user_id,
                message,
                DONE,
                output_body=output_body,
                input_token=input_token,
                output_token=output_token,
                response_start_time=response_start_time,
                response_end_time=response_end_time,
                model=model,
                context=context or None,
            )

    def fail_message(
        self,
        user_id: str,
        message: Message,
        *,
        output_body: str,
        error: str,
        input_token: int = 0,
        output_token: int = 0,
        response_start_time: str | None = None,
        response_end_time: str | None = None,
        model: str | None = None,
        context: list[dict] | None = None,
        started_before: str | None = None,
        action: str = "fail",
        tokens_estimated: bool = False,
    ) -> Message:
        """Mark the turn failed, keeping the partial answer and why (1 UpdateItem). MessageNotPending if it was
        saved meanwhile (or, with `started_before`, restarted by a Retry at or after that time); MessageNotFound if
        it does not exist. `action` labels the request for the meter ("admin" for the pending sweep)."""
        with self._db.action(action, user_id, prior=self._message_size(user_id, message)):
            return self._complete(
                user_id,
                message,
                FAILED,
                output_body=output_body,
                input_token=input_token,
                output_token=output_token,
                response_start_time=response_start_time,
                response_end_time=response_end_time or keys.now(),
                model=model,
                error=error,
                context=context or None,
                started_before=started_before,
                tokens_estimated=True if tokens_estimated else None,
            )

    def _complete(
        self,
        user_id: str,
        message: Message,
        status: str,
        *,
        output_body: str,
        started_before: str | None = None,
        **fields: Any,
    ) -> Message:
        if fields.get("context") is not None:  # the bounded string form (lib/storage/seen.py)
            fields["context"] = seen.encode(seen.compact(fields["context"])) or None
        fields = {k: storable_text(v) if isinstance(v, str) else v for k, v in fields.items() if v is not None}
        # A long answer goes to the object store first (1 PutObject), then this UpdateItem points at it.
        values, dropped = self.bodies.answer_values(user_id, message, storable_text(output_body), fields)
        # Every attribute goes through a #placeholder: status and error are reserved words.
        sets = ", ".join(f"#{name} = :{name}" for name in values)
        dropped = [f"#{name}" for name in ([] if "error" in values else ["error"]) + dropped]
        removes = f" REMOVE {', '.join(dropped)}" if dropped else ""
        names = {f"#{name}": name for name in (*values, "status", "error", POINTERS["output"])}
        # Only a pending turn can be completed: a second finisher (the other
        # tab, a late retry) fails instead of overwriting the answer, and a
        # key that does not exist (a foreign or made-up id) is never created.
        condition, guard = "#status = :pending", {}
        if started_before is not None:  # nor one a Retry restarted after the caller judged it stale
            condition += " AND (attribute_not_exists(attempt_time) OR attempt_time < :started_before)"
            guard = {":started_before": started_before}
        return self._update_message(
            user_id,
            message,
            UpdateExpression=f"SET {sets}, #status = :status{removes}",
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=to_item(
                {**{f":{k}": v for k, v in values.items()}, ":status": status, ":pending": PENDING, **guard}
            ),
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            refused=lambda old: (
                MessageNotFound("That message does not exist.")
                if old is None
                else MessageNotPending("This answer was already saved (perhaps from another tab).")
            ),
        )

    def restart_message(self, user_id: str, message: Message) -> Message:
        """Put a failed or interrupted turn back to pending for Retry: the same question, no duplicate (1 UpdateItem).

        Only from the attempt the caller saw: two tabs (or replicas) retrying the same turn at once both read
        the same attempt_time, the first moves it, and the second is refused (MessageNotPending) instead of
        starting a second answer of one turn."""
        seen = (
            ("attempt_time = :seen", {":seen": message.attempt_time})
            if message.attempt_time
            else ("attribute_not_exists(attempt_time)", {})
        )
        with self._db.action("retry", user_id, prior=self._message_size(user_id, message)):
            return self._update_message(
                user_id,
                message,
                UpdateExpression="SET #status = :pending, attempt_time = :now REMOVE output_body, #error, "
                "response_start_time, response_end_time, output_truncated, tokens_estimated, output_object",
                # A done turn is never reopened; a pending one only when the caller saw it stale; and only the
                # attempt the caller saw, so one Retry wins.
                ConditionExpression=f"#status IN (:failed, :pending) AND {seen[0]}",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ExpressionAttributeNames={"#status": "status", "#error": "error"},
                ExpressionAttributeValues=to_item(
                    {
                        ":pending": PENDING,
                        ":failed": FAILED,
                        ":now": keys.later_than(message.attempt_time or ""),
                        **seen[1],
                    }
                ),
                refused=lambda old: MessageNotPending(
                    "This turn already has an answer."
                    if old and old.get("status", {}).get("S") == DONE
                    else "This answer is already being written again (in another tab); reload the chat to follow it."
                ),
            )

    def set_feedback(self, user_id: str, message: Message, value: int | None) -> Message:
        """Store thumbs up (1) / down (0) on the turn, or clear it (1 UpdateItem)."""
        params: dict[str, Any] = (
            {"UpdateExpression": "REMOVE feedback"}
            if value is None
            else {
                "UpdateExpression": "SET feedback = :v",
                "ExpressionAttributeValues": to_item({":v": int(bool(value))}),
            }
        )
        with self._db.action("feedback", user_id, prior=self._message_size(user_id, message)):
            return self._update_message(
                user_id,
                message,
                ConditionExpression="attribute_exists(pk)",  # no stray item
                refused=lambda old: MessageNotFound("That message does not exist."),
                **params,
            )

    @staticmethod
    def _message_size(user_id: str, message: Message) -> dict[tuple[str, str], int]:
        key = keys.message_key(user_id, message.session_id, message.message_id)
        return {(key["pk"], key["sk"]): message.size} if message.size else {}

    def _update_message(
        self, user_id: str, message: Message, *, refused: Callable[[dict | None], ChatError], **params: Any
    ) -> Message:
        """One conditional UpdateItem of a turn, returning the turn as stored; a failed condition raises refused(old item)."""
        try:
            with on_condition_failed(refused):
                response = self._call(
                    "update_item",
                    Key=to_item(keys.message_key(user_id, message.session_id, message.message_id)),
                    ReturnValues="ALL_NEW",
                    **params,
                )
        except ItemTooLarge as exc:  # _fit_answer keeps answers under the limit; this is the service's last word
            raise MessageTooLarge("This turn would pass DynamoDB's 400 KB item limit; it was not changed.") from exc
        attributes = response["Attributes"]
        return Message.from_item(from_item(attributes), size=item_size(attributes))

    def rename_session(self, user_id: str, session: Session, title: str, *, action: str = "rename") -> Session:
        """Set the title on the meta and the list item in one transaction of 2 Updates.

        `action` labels the requests for the meter: "title" when the model wrote the title. SessionChanged when
        other tabs keep moving the session; a cancellation for any other reason propagates as what it is.
        """
        title = items.valid_title(title)
        for attempt in range(MAX_RACE_RETRIES + 1):
            project, in_project = project_rows.meta_condition(session)
            # Only a failed condition (the meta moved on, the row we name is gone) or a conflict is another tab's
            # race, worth a re-read and a retry.
            with (
                on_condition_failed() as lost_race,
                self._db.action(action, user_id, prior=self._session_sizes(user_id, session)),
            ):
                self._call(
                    "transact_write_items",
                    TransactItems=[
                        {
                            "Update": {  # the meta, only if the sidebar row we name below is still current
                                "TableName": self._table,
                                "Key": to_item(keys.meta_key(user_id, session.session_id)),
                                "UpdateExpression": "SET title = :title",
                                "ConditionExpression": f"last_message_time = :old AND {project}",
                                "ExpressionAttributeValues": to_item(
                                    {":title": title, ":old": session.last_message_time, **in_project}
                                ),
                            }
                        },
                        *self._row_title(user_id, session, title),
                        *project_rows.chat_row_title(self._table, user_id, session, title),
                    ],
                )
            if not lost_race:
                return replace(session, title=title)
            if attempt == MAX_RACE_RETRIES:
                raise SessionChanged(
                    "This chat kept changing in another tab; reload and rename again."
                ) from lost_race.exc
            with self._db.action(action, user_id):
                session = self.get_session(user_id, session.session_id)
        raise AssertionError("unreachable")

    def set_pinned(self, user_id: str, session: Session, pinned: bool) -> Session:
        """Pin a chat (its sidebar row moves above every unpinned one, after the chats pinned before it) or unpin it
        (the row goes back to its place by last message time), in one transaction of 3 actions: Update the meta's
        `pinned_at`, Delete the old row, Put the new one. The last message time never changes.

        Two tabs pinning at once: one wins, the other re-reads the meta and finds the chat already as it asked
        (no second row, no error). SessionChanged when other tabs keep moving the chat."""
        if session.temporary:
            raise TemporaryChat("A temporary chat is not in your chat list, so it cannot be pinned.")
        for attempt in range(MAX_RACE_RETRIES + 1):
            if (session.pinned_at is not None) == pinned:
                return session
            target = replace(session, pinned_at=keys.now() if pinned else None)
            if pinned:  # only from unpinned, as we read it
                update, state = "SET pinned_at = :pin", "attribute_not_exists(pinned_at)"
                values = {":pin": target.pinned_at}
            else:  # only from the pin we read: the row we delete below is that pin's
                update, state = "REMOVE pinned_at", "pinned_at = :pin"
                values = {":pin": session.pinned_at}
            old_row, new_row = items.list_item(user_id, session), items.list_item(user_id, target)
            # the new row carries the project as read: a move meanwhile fails this and re-reads (no stale label)
            project, in_project = project_rows.meta_condition(session)
            values.update(in_project)
            with (
                on_condition_failed() as lost_race,
                self._db.action("pin", user_id, prior=self._session_sizes(user_id, session)),
            ):
                self._call(
                    "transact_write_items",
                    TransactItems=[
                        {
                            "Update": {  # the meta: only at the time and title we read, whose row we move below
                                "TableName": self._table,
                                "Key": to_item(keys.meta_key(user_id, session.session_id)),
                                "UpdateExpression": update,
                                "ConditionExpression": f"last_message_time = :old AND #title = :title AND {state} "
                                f"AND {project}",
                                "ExpressionAttributeNames": {"#title": "title"},
                                "ExpressionAttributeValues": to_item(
                                    {**values, ":old": session.last_message_time, ":title": session.title}
                                ),
                            }
                        },
                        {
                            "Delete": {  # the row as we read it must exist, or a second row would be left behind
                                "TableName": self._table,
                                "Key": {"pk": old_row["pk"], "sk": old_row["sk"]},
                                "ConditionExpression": "attribute_exists(pk)",
                            }
                        },
                        {"Put": {"TableName": self._table, "Item": new_row}},
                    ],
                )
            if not lost_race:
                return target
            if attempt == MAX_RACE_RETRIES:
                raise SessionChanged("This chat kept changing in another tab; reload and try again.") from lost_race.exc
            with self._db.action("pin", user_id):
                session = self.get_session(user_id, session.session_id)
        raise AssertionError("unreachable")

    def _row_title(self, user_id: str, session: Session, title: str) -> list[dict]:
        """The rename's sidebar action: the row (pinned or not) must exist, or the update would create a phantom
        row. A temporary chat has no sidebar row: its title lives on the meta alone."""
        if session.temporary:
            return []
        row = items.list_item(user_id, session)
        return [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": {"pk": row["pk"], "sk": row["sk"]},
                    "UpdateExpression": "SET title = :title",
                    "ConditionExpression": "attribute_exists(pk)",
                    "ExpressionAttributeValues": to_item({":title": title}),
                }
            }
        ]

    # --- reads ----------------------------------------------------------

    def get_session(self, user_id: str, session_id: str) -> Session:
        """The session meta by id (1 consistent GetItem); SessionNotFound for unknown or foreign ids."""
        if not keys.is_id(session_id):
            raise SessionNotFound("No such chat.")
        response = self._call("get_item", Key=to_item(keys.meta_key(user_id, session_id)), ConsistentRead=True)
        if "Item" not in response:
            raise SessionNotFound("No such chat.")
        return _not_expired(Session.from_item(from_item(response["Item"])))

    def titles(self, user_id: str, session_ids: Iterable[str]) -> dict[str, str]:
        """The current title of each of these chats of the user that exists (1 BatchGetItem per 100, eventually
        consistent: a rename a moment ago may show a moment later). Other ids are left out, never read."""
        wanted = sorted({s for s in session_ids if keys.is_id(s)})
        if not wanted:
            return {}
        with self._db.action("search", user_id):  # read for the search page
            metas = self._db.batch_get([keys.meta_key(user_id, s) for s in wanted], consistent=False)
        return {m["session_id"]["S"]: m["title"]["S"] for m in metas if "session_id" in m and "title" in m}

    def list_sessions(self, user_id: str, *, cursor: str | None = None, limit: int = SIDEBAR_PAGE) -> Page:
        """One sidebar page: pinned chats first (in pin order), then the rest newest first (1 Query)."""
        pk = keys.user_pk(user_id)
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": to_item({":pk": pk, ":prefix": keys.SESSION_PREFIX}),
            "ScanIndexForward": False,  # newest first
            "Limit": limit,
            "ConsistentRead": True,  # a session just sent to is at the top on the next load
        }
        if cursor is not None:
            sk = self._cursors.decode(pk, cursor).get("sk")
            if not isinstance(sk, str) or not keys.is_list_sk(sk):  # a pinned row or an unpinned one
                raise InvalidCursor("This page link is not valid any more; reload the list.")
            params["ExclusiveStartKey"] = to_item({"pk": pk, "sk": sk})
        with self._db.action("sidebar", user_id):
            response = self._call("query", **params)
        items = [SessionSummary.from_item(from_item(i)) for i in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        next_cursor = self._cursors.encode(pk, {"sk": last["sk"]["S"]}) if last else None
        return Page(items, next_cursor)

    def open_session(
        self, user_id: str, session_id: str, *, cursor: str | None = None, _restores: int = 0
    ) -> SessionView:
        """The session meta, its running summary if any, and its newest turns (1 Query, Limit 21), or an older page.

        SUM#RUNNING sorts after SES#META, which sorts after every MSG#: descending, the
        summary and the meta come first. The design's read stays exactly Limit 21: a session
        with a summary (a long one) shows 19 turns on its first page instead of 20, rather
        than every open reading (and paying for) a 22nd item.
        """
        if not keys.is_id(session_id):
            raise SessionNotFound("No such chat.")
        pk = keys.session_pk(user_id, session_id)
        params: dict[str, Any] = {
            # From MSG# up: the summary, the meta and the turns; a turn's kept versions (ALT#) sort below it
            "KeyConditionExpression": "pk = :pk AND sk >= :turns",
            "ExpressionAttributeValues": to_item({":pk": pk, ":turns": keys.MESSAGE_PREFIX}),
            "ScanIndexForward": False,  # SUM# and SES#META sort after every MSG#, so they come first
            "Limit": TURNS_PAGE + 1,
            "ConsistentRead": True,
        }
        remaining = None
        if cursor is not None:
            state = self._cursors.decode(pk, cursor)
            sk, remaining = state.get("sk"), state.get("left")
            if not isinstance(sk, str) or not keys.is_message_sk(sk) or not isinstance(remaining, int):
                raise InvalidCursor("This page link is not valid any more; reload the chat.")
            params["ExclusiveStartKey"] = to_item({"pk": pk, "sk": sk})
            params["Limit"] = TURNS_PAGE
        with self._db.action("open", user_id):
            response = self._call("query", **params)
        session, summary, messages = None, None, []
        # Classify by sort key: other record kinds may share the partition (whatever comes
        # later); a reader skips what it does not know instead of failing.
        for item in response.get("Items", []):
            kind = keys.record_kind(item["sk"]["S"])
            if kind == keys.META and cursor is None:
                session = Session.from_item(from_item(item))
            elif kind == keys.SUMMARY and cursor is None:
                summary = Summary.from_item(from_item(item))
            elif kind == keys.TURN:
                messages.append(Message.from_item(from_item(item), size=item_size(item)))
            elif kind != keys.SUMMARY:
                logs.warning("store.unknown_record", kind=kind, operation="open_session")
        last_sk = response["LastEvaluatedKey"]["sk"]["S"] if response.get("LastEvaluatedKey") else None
        if cursor is None:
            if session is None:
                raise SessionNotFound("No such chat.")
            _not_expired(session)
            if session.archive is not None:  # in the cold tier: restored, then read as any chat (docs/archive.md)
                if _restores >= 2:  # archived again at once, twice: not worth a third round
                    raise SessionChanged("This chat kept changing while it was being restored; open it again.")
                self.archive.restore(user_id, session)
                return self.open_session(user_id, session_id, _restores=_restores + 1)
            remaining = session.message_count
        remaining -= len(messages)
        # message_count tells us when the oldest turn is loaded, which saves the
        # empty extra Query a bare LastEvaluatedKey would cost at a page boundary.
        next_cursor = (
            self._cursors.encode(pk, {"sk": last_sk, "left": remaining}) if last_sk and remaining > 0 else None
        )
        messages.reverse()  # oldest first, for display
        return SessionView(session, messages, next_cursor, summary)

    def all_messages(self, user_id: str, session_id: str) -> list[Message]:
        """Every turn of a session, oldest first, bodies whole, for export (1 Query per 1 MB, and 1 GetObject per
        long body: BodyUnavailable rather than an export that silently holds only a long body's beginning)."""
        if not keys.is_id(session_id):
            raise SessionNotFound("No such chat.")
        with self._db.action("export", user_id):
            turns = partitions.session_turns(self._db, user_id, session_id)
        return [self.bodies.whole(user_id, m, action="export") for m in turns]


# Files live in the object store, which a temporary chat's expiry (DynamoDB TTL on its items) never reaches.
NO_FILES_IN_A_TEMPORARY_CHAT = (
    "A temporary chat takes no files: they would be kept after the chat is deleted. Paste the text instead, or "
    "attach the file in a normal chat."
)


def _expiring(item: dict, message: Message, expire_at: int | None) -> tuple[dict, Message]:
    """A temporary chat's pending turn carries the chat's `expire_at`, so TTL deletes it with the chat."""
    if expire_at is None:
        return item, message
    item = {**item, "expire_at": {"N": str(expire_at)}}
    return item, replace(message, expire_at=expire_at, size=item_size(item))


def _not_expired(session: Session) -> Session:
    """The session, unless it is a temporary chat past its `expire_at`: TTL deletes it within days, and until then
    it reads as gone (SessionNotFound), so it is never shown or sent to after its time."""
    if session.expired():
        raise SessionNotFound("This temporary chat has expired and is deleted; start a new chat.")
    return session
