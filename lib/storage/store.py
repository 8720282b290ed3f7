"""ChatStore: the only module that talks to DynamoDB. One table, primary key only (DESIGN.md).

Request budget per action (an extra request is a defect):
    list_sessions    1 Query      open_session   1 Query (summary + meta + 20 turns)
    create_session   1 TransactWriteItems (3 Puts)
    send_message     1 TransactWriteItems (4 actions); on a lost race +1 GetItem and a retry
    finish/fail      1 UpdateItem             rename_session  1 TransactWriteItems (2 Updates)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
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
    SessionChanged,
    SessionNotFound,
    StoreUnavailable,
)
from lib.storage import items, keys, partitions, seen
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
        self, client: Any, table_name: str, meter: Meter | None = None, *, cursor_secret: bytes | str | None = None
    ):
        self._db = Gateway(client, table_name, meter)
        self._table = table_name
        self._cursors = CursorCodec(cursor_secret)
        self.versions = VersionStore(self._db)  # a turn's kept answers: Regenerate, Edit, switching versions

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
    ) -> tuple[Session, Message]:
        """Commit a new session and its pending first question in one transaction: 3 Puts and the user registry.

        The registry Update (pk USERS) is how operators list users without a Scan; it rides in the
        same request, so a new chat stays one request (8 WRU instead of the design's 6).
        """
        session_id, at = keys.new_id(), keys.now()
        message_item, message = items.pending_message(
            user_id, session_id, input_body, system_prompt_id, at, keys.new_id()
        )
        title = items.valid_title(title or default_title(input_body))
        session = Session(session_id, user_id, title, at, at, 1, model=model)
        with self._db.action("create", user_id), self._outcome_checked(user_id, message, committed_index=2):
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
                ],
            )
        return session, message

    def send_message(
        self, user_id: str, session: Session, input_body: str, *, system_prompt_id: str, model: str | None = None
    ) -> tuple[Session, Message]:
        """Commit a pending question and move the session to the top of the sidebar, in one transaction.

        `session.last_message_time` is the :old the caller read with the session:
        no read precedes the write. Raises SessionChanged if other tabs keep winning. `model`: the model id the
        question goes to, kept on the meta in the same Update (the chat's choice for its next question).
        """
        message_id = keys.new_id()
        message_item, message = items.pending_message(
            user_id, session.session_id, input_body, system_prompt_id, session.last_message_time, message_id
        )
        for attempt in range(MAX_RACE_RETRIES + 1):
            at = keys.later_than(session.last_message_time)
            message_item["create_time"] = {"S": at}
            # Action 1 (meta) or 2 (old list item) failing means another tab sent first: our :old is stale. A
            # TransactionConflict anywhere is the same race caught mid-flight. Anything else is not ours to retry.
            with (
                on_condition_failed(actions=(1, 2)) as lost_race,
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
        raise AssertionError("unreachable")

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
        return items.sizes(meta, items.list_item(user_id, session))

    def _send_transaction(
        self, user_id: str, session: Session, message_item: dict, at: str, model: str | None = None
    ) -> None:
        old = session.last_message_time
        chosen = ", model = :model" if model is not None else ""
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
                        # that missed a rename must re-read the meta rather than put the old title back
                        "TableName": self._table,
                        "Key": to_item(keys.meta_key(user_id, session.session_id)),
                        "UpdateExpression": f"SET last_message_time = :new{chosen} ADD message_count :one",
                        "ConditionExpression": "last_message_time = :old AND #title = :title",
                        "ExpressionAttributeNames": {"#title": "title"},
                        "ExpressionAttributeValues": to_item(
                            {":new": at, ":old": old, ":one": 1, ":title": session.title, ":model": model}
                        ),
                    }
                },
                {
                    "Delete": {  # 3. the old sidebar row must exist, or we would leave a second row behind
                        "TableName": self._table,
                        "Key": to_item(keys.list_key(user_id, old, session.session_id)),
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
                {
                    "Put": {  # 4. the new sidebar row, at the top
                        "TableName": self._table,
                        "Item": items.list_item(user_id, replace(session, last_message_time=at)),
                    }
                },
            ],
        )

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
        output_body, truncated = items.fit_answer(user_id, message, storable_text(output_body), fields)
        values = {"output_body": output_body, "output_truncated": truncated, **fields}
        # Every attribute goes through a #placeholder: status and error are reserved words.
        sets = ", ".join(f"#{name} = :{name}" for name in values)
        removes = "" if "error" in values else " REMOVE #error"
        names = {f"#{name}": name for name in (*values, "status", "error")}
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
                "response_start_time, response_end_time, output_truncated, tokens_estimated",
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
                                "ConditionExpression": "last_message_time = :old",
                                "ExpressionAttributeValues": to_item(
                                    {":title": title, ":old": session.last_message_time}
                                ),
                            }
                        },
                        {
                            "Update": {  # the list item; must exist, or the update would create a phantom row
                                "TableName": self._table,
                                "Key": to_item(keys.list_key(user_id, session.last_message_time, session.session_id)),
                                "UpdateExpression": "SET title = :title",
                                "ConditionExpression": "attribute_exists(pk)",
                                "ExpressionAttributeValues": to_item({":title": title}),
                            }
                        },
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

    # --- reads ----------------------------------------------------------

    def get_session(self, user_id: str, session_id: str) -> Session:
        """The session meta by id (1 consistent GetItem); SessionNotFound for unknown or foreign ids."""
        if not keys.is_id(session_id):
            raise SessionNotFound("No such chat.")
        response = self._call("get_item", Key=to_item(keys.meta_key(user_id, session_id)), ConsistentRead=True)
        if "Item" not in response:
            raise SessionNotFound("No such chat.")
        return Session.from_item(from_item(response["Item"]))

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
        """One sidebar page, newest first (1 Query)."""
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
            if not isinstance(sk, str) or not keys.is_list_sk(sk):
                raise InvalidCursor("This page link is not valid any more; reload the list.")
            params["ExclusiveStartKey"] = to_item({"pk": pk, "sk": sk})
        with self._db.action("sidebar", user_id):
            response = self._call("query", **params)
        items = [SessionSummary.from_item(from_item(i)) for i in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        next_cursor = self._cursors.encode(pk, {"sk": last["sk"]["S"]}) if last else None
        return Page(items, next_cursor)

    def open_session(self, user_id: str, session_id: str, *, cursor: str | None = None) -> SessionView:
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
        """Every turn of a session, oldest first, for export (1 Query per 1 MB)."""
        if not keys.is_id(session_id):
            raise SessionNotFound("No such chat.")
        with self._db.action("export", user_id):
            return partitions.session_turns(self._db, user_id, session_id)
