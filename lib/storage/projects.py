"""Projects: a name, shared instructions and the chats put in it (docs/projects.md). Reached as `store.projects`.

    project meta  pk USER#<u>#PRJ#<pid>  sk PRJ#META                     found by id (name, instructions, times)
    project row   pk USER#<u>            sk PRJ#<last_activity_time>#<pid>  sorts the project list (name copied)
    project chat  pk USER#<u>#PRJ#<pid>  sk SES#<last_message_time>#<sid>  one project's chats, newest first
and the chat's session meta holds `project_id`. The chat rows move with the chat's sidebar row in the same
transactions (store.send_message, create_session, rename_session use the hooks at the end of this module), so a
chat is in its project's list exactly when its meta says so.

The project row moves forward (`touch`) after a send or a new chat in the project, in its own transaction, and
only when the activity moved by ACTIVITY_STEP_S or more: two sends to two chats of one project never cancel each
other (neither names the project's records), and a busy project costs one extra request a minute, not one per
question. Its condition is the activity and name as read; a loser re-reads and stops when the project is already
as recent as its own step would make it.

Requests: create 1 TransactWriteItems (2 Puts); list 1 Query; a project's chats 1 Query; get 1 GetItem; edit 1
UpdateItem (instructions only) or 1 TransactWriteItems (2 Updates: a new name is copied to the row); move a chat
1 TransactWriteItems (Update the meta, Delete the old row, Put the new one, ConditionCheck the target project);
touch 1 TransactWriteItems (Update the meta, Delete the old row, Put the new one); a lost race +1 GetItem and a retry.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import replace
from typing import Any

from lib import logs
from lib.errors import InvalidCursor, InvalidProject, ProjectNotFound, SessionChanged, SessionNotFound, TemporaryChat
from lib.storage import items, keys
from lib.storage.cursor import CursorCodec
from lib.storage.gateway import Gateway, cancellation_codes, from_item, on_condition_failed, storable_text, to_item
from lib.storage.records import Page, Project, ProjectSummary, Session, SessionSummary

NAME_MAX_CHARS = 80
INSTRUCTIONS_MAX_CHARS = 4_000
ACTIVITY_STEP_S = 60  # the project row moves forward only by at least this much (see the module docstring)
PROJECT_LIST_LIMIT = 100  # projects listed, most recently active first
PROJECT_CHATS_PAGE = 20
MAX_RACE_RETRIES = 3
DELETE_PAGE = 100  # a deletion reads its project's chats this many at a time
MAX_DELETE_PASSES = 1_000  # 100,000 chats; past it the project is left marked (deleting it again goes on)
_NOT_FOUND = "No such project (it may have been deleted, or the link is not yours)."


def valid_name(name: object) -> str:
    """The name on one line, as plain text; InvalidProject unless it is 1 to NAME_MAX_CHARS characters."""
    text = " ".join(storable_text(str(name if name is not None else "")).split())
    if not text or len(text) > NAME_MAX_CHARS:
        raise InvalidProject(f"A project name must be 1 to {NAME_MAX_CHARS} characters.")
    return text


def valid_instructions(text: object) -> str:
    """The instructions, trimmed; InvalidProject over INSTRUCTIONS_MAX_CHARS (before any request)."""
    text = storable_text(str(text if text is not None else "")).strip()
    if len(text) > INSTRUCTIONS_MAX_CHARS:
        raise InvalidProject(
            f"The instructions are {len(text):,} characters; at most {INSTRUCTIONS_MAX_CHARS:,}. Shorten them, then save."
        )
    return text


def checked_id(project_id: object) -> str:
    """The project id if it can name a project; ProjectNotFound for a malformed one (no request is made)."""
    if not keys.is_id(project_id):
        raise ProjectNotFound(_NOT_FOUND)
    return project_id  # type: ignore[return-value]


def _row_item(user_id: str, project: Project) -> dict:
    return to_item(
        {
            **keys.project_row_key(user_id, project.last_activity_time, project.project_id),
            "project_id": project.project_id,
            "name": project.name,
        }
    )


def _meta_item(user_id: str, project: Project) -> dict:
    return to_item(
        {
            **keys.project_meta_key(user_id, project.project_id),
            "project_id": project.project_id,
            "user_id": user_id,
            "name": project.name,
            "instructions": project.instructions or None,
            "create_time": project.create_time,
            "last_activity_time": project.last_activity_time,
        }
    )


class ProjectStore:
    """The project records of one table, through the chat store's gateway (one meter, one error map)."""

    def __init__(self, db: Gateway, cursors: CursorCodec | None = None):
        self._db = db
        self._cursors = cursors or CursorCodec(None)

    @classmethod
    def on(cls, client: Any, table: str, meter: Any = None) -> ProjectStore:
        """A project store of its own over this table and client (the context engine's, for the instructions)."""
        return cls(Gateway(client, table, meter))

    # --- projects ---------------------------------------------------------------------------------------------

    def create(self, user_id: str, name: str, instructions: str = "") -> Project:
        """A new project (1 TransactWriteItems: Put the meta, Put its row at the top of the list)."""
        at = keys.now()
        project = Project(keys.new_id(), valid_name(name), valid_instructions(instructions), at, at)
        with self._db.action("project", user_id):
            self._db.call(
                "transact_write_items",
                TransactItems=[
                    {
                        "Put": {  # a duplicated id fails instead of overwriting a project
                            "TableName": self._db.table,
                            "Item": _meta_item(user_id, project),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    {"Put": {"TableName": self._db.table, "Item": _row_item(user_id, project)}},
                ],
            )
        return project

    def list(self, user_id: str, *, limit: int | None = None) -> list[ProjectSummary]:
        """The user's most recently active projects (the first page of `list_page`: 1 Query)."""
        return self.list_page(user_id, limit=limit).items

    def list_page(self, user_id: str, *, cursor: str | None = None, limit: int | None = None) -> Page:
        """One page of the user's projects, most recently active first (1 Query of the PRJ# rows; the name rides on
        the row); `cursor` (signed, from the page before) continues past the first PROJECT_LIST_LIMIT.
        InvalidCursor for a cursor that is not this list's."""
        pk = keys.user_pk(user_id)
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": to_item({":pk": pk, ":prefix": keys.PROJECT_PREFIX}),
            "ScanIndexForward": False,
            "Limit": limit or PROJECT_LIST_LIMIT,
            "ConsistentRead": True,
        }
        if cursor is not None:
            sk = self._cursors.decode(pk, cursor).get("sk")
            if not isinstance(sk, str) or keys.record_kind(sk) != keys.PROJECT_ROW:
                raise InvalidCursor("This page link is not valid any more; reload the list.")
            params["ExclusiveStartKey"] = to_item({"pk": pk, "sk": sk})
        with self._db.action("project", user_id):
            response = self._db.call("query", **params)
        found = []
        for item in map(from_item, response.get("Items", [])):
            if keys.record_kind(item["sk"]) == keys.PROJECT_ROW:
                found.append(ProjectSummary.from_item(item))
            else:
                logs.warning("store.unknown_record", kind=keys.record_kind(item["sk"]), operation="list_projects")
        last = response.get("LastEvaluatedKey")
        return Page(found, self._cursors.encode(pk, {"sk": last["sk"]["S"]}) if last else None)

    def get(self, user_id: str, project_id: str, *, action: str = "project") -> Project:
        """The project meta by id (1 consistent GetItem); ProjectNotFound for a malformed, unknown or foreign id."""
        key = keys.project_meta_key(user_id, checked_id(project_id))
        with self._db.action(action, user_id):
            item = self._db.call("get_item", Key=to_item(key), ConsistentRead=True).get("Item")
        if item is None:
            raise ProjectNotFound(_NOT_FOUND)
        return Project.from_item(from_item(item))

    def chats(self, user_id: str, project_id: str, *, cursor: str | None = None) -> Page:
        """One page of a project's chats, newest first (1 Query of the project partition's SES# rows)."""
        pk = keys.project_pk(user_id, checked_id(project_id))
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": to_item({":pk": pk, ":prefix": keys.SESSION_PREFIX}),
            "ScanIndexForward": False,
            "Limit": PROJECT_CHATS_PAGE,
            "ConsistentRead": True,
        }
        if cursor is not None:
            sk = self._cursors.decode(pk, cursor).get("sk")
            if not isinstance(sk, str) or keys.record_kind(sk) != keys.LIST_ROW:
                raise InvalidCursor("This page link is not valid any more; reload the list.")
            params["ExclusiveStartKey"] = to_item({"pk": pk, "sk": sk})
        with self._db.action("project", user_id):
            response = self._db.call("query", **params)
        rows = [SessionSummary.from_item(from_item(i)) for i in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return Page(rows, self._cursors.encode(pk, {"sk": last["sk"]["S"]}) if last else None)

    def edit(self, user_id: str, project: Project, name: str, instructions: str) -> Project:
        """Save a new name and instructions: 1 UpdateItem of the meta when the name stays, else 1 TransactWriteItems
        that also copies the name to the project's row (its place in the list does not change). SessionChanged-like
        races (the row moved meanwhile) re-read and retry; ProjectNotFound if it is gone."""
        name, instructions = valid_name(name), valid_instructions(instructions)
        for attempt in range(MAX_RACE_RETRIES + 1):
            edited = replace(project, name=name, instructions=instructions)
            sets = (
                "SET #name = :name, instructions = :text" if instructions else "SET #name = :name REMOVE instructions"
            )
            values = {":name": name, ":text": instructions or None}
            update = {
                "Key": to_item(keys.project_meta_key(user_id, project.project_id)),
                "UpdateExpression": sets,
                "ExpressionAttributeNames": {"#name": "name"},
            }
            if name == project.name:
                with (
                    on_condition_failed(ProjectNotFound(_NOT_FOUND)),
                    self._db.action("project", user_id),
                ):
                    self._db.call(  # the project must exist (an edit never creates one) and not be being deleted
                        "update_item",
                        ConditionExpression="attribute_exists(pk) AND attribute_not_exists(deleting)",
                        ExpressionAttributeValues=to_item(values),
                        **update,
                    )
                return edited
            row = keys.project_row_key(user_id, project.last_activity_time, project.project_id)
            with on_condition_failed() as lost_race, self._db.action("project", user_id):
                self._db.call(
                    "transact_write_items",
                    TransactItems=[
                        {
                            "Update": {  # only while the row we name below is the current one
                                "TableName": self._db.table,
                                **update,
                                "ConditionExpression": "last_activity_time = :old AND attribute_not_exists(deleting)",
                                "ExpressionAttributeValues": to_item({**values, ":old": project.last_activity_time}),
                            }
                        },
                        {
                            "Update": {  # the row's copy of the name; it must exist, or we would make a phantom row
                                "TableName": self._db.table,
                                "Key": to_item(row),
                                "UpdateExpression": "SET #name = :name",
                                "ConditionExpression": "attribute_exists(pk)",
                                "ExpressionAttributeNames": {"#name": "name"},
                                "ExpressionAttributeValues": to_item({":name": name}),
                            }
                        },
                    ],
                )
            if not lost_race:
                return edited
            if attempt == MAX_RACE_RETRIES:
                raise SessionChanged("This project kept changing in another tab; reload and save again.")
            project = self.get(user_id, project.project_id)  # ProjectNotFound if it is gone
            if project.deleting:
                raise ProjectNotFound(_NOT_FOUND)
        raise AssertionError("unreachable")

    def touch(self, user_id: str, project: Project, at: str) -> Project:
        """Move the project to the top of the list at `at` (a send's or a new chat's time), unless it is already
        within ACTIVITY_STEP_S of it (no request). 1 TransactWriteItems; a lost race +1 GetItem and, if still
        behind, a retry. Never raises a race: the chat's own write has committed, the list order is a hint."""
        for _attempt in range(MAX_RACE_RETRIES + 1):
            if not _behind(project.last_activity_time, at):
                return project
            moved = replace(project, last_activity_time=at)
            old_row = keys.project_row_key(user_id, project.last_activity_time, project.project_id)
            with on_condition_failed() as lost_race, self._db.action("project", user_id):
                self._db.call(
                    "transact_write_items",
                    TransactItems=[
                        {
                            "Update": {  # from the activity and name we read: the row we move carries that name
                                "TableName": self._db.table,
                                "Key": to_item(keys.project_meta_key(user_id, project.project_id)),
                                "UpdateExpression": "SET last_activity_time = :new",
                                # a project being deleted keeps its row where the deletion will look for it
                                "ConditionExpression": "last_activity_time = :old AND #name = :name AND "
                                "attribute_not_exists(deleting)",
                                "ExpressionAttributeNames": {"#name": "name"},
                                "ExpressionAttributeValues": to_item(
                                    {":new": at, ":old": project.last_activity_time, ":name": project.name}
                                ),
                            }
                        },
                        {
                            "Delete": {  # the old row must exist, or a second row would be left behind
                                "TableName": self._db.table,
                                "Key": to_item(old_row),
                                "ConditionExpression": "attribute_exists(pk)",
                            }
                        },
                        {"Put": {"TableName": self._db.table, "Item": _row_item(user_id, moved)}},
                    ],
                )
            if not lost_race:
                return moved
            try:
                project = self.get(user_id, project.project_id)  # another send moved it (or a rename): as it is now
            except ProjectNotFound:
                return project
            if project.deleting:
                return project
        logs.warning("project.touch_kept_changing", project_id=project.project_id)
        return project

    # --- a chat's project ---------------------------------------------------------------------------------------

    def move_chat(self, user_id: str, session: Session, project_id: str | None) -> Session:
        """Put the chat in project `project_id` (None: in no project), in one transaction: Update the meta's
        project_id (on the time, title and project the tab read), Delete the old project's row of the chat (must
        exist), Put the new one, ConditionCheck the target project. Two tabs moving one chat at once: the second
        re-reads and moves it from where the first put it, so it ends in exactly one project with one row.
        TemporaryChat for a temporary chat; ProjectNotFound for a target that is not the user's."""
        if session.temporary:
            raise TemporaryChat("A temporary chat is not kept, so it cannot be put in a project.")
        if project_id is not None:
            checked_id(project_id)
        for attempt in range(MAX_RACE_RETRIES + 1):
            if session.project_id == project_id:
                return session
            target = replace(session, project_id=project_id)
            clause, values = meta_condition(session)
            actions: list[dict] = [
                {
                    "Update": {  # the meta, only as the tab read it: the rows named below are that state's
                        "TableName": self._db.table,
                        "Key": to_item(keys.meta_key(user_id, session.session_id)),
                        "UpdateExpression": "SET project_id = :to" if project_id else "REMOVE project_id",
                        "ConditionExpression": f"last_message_time = :old AND #title = :title AND {clause}",
                        "ExpressionAttributeNames": {"#title": "title"},
                        "ExpressionAttributeValues": to_item(
                            {
                                **values,
                                ":old": session.last_message_time,
                                ":title": session.title,
                                ":to": project_id,
                            }
                        ),
                    }
                },
                _sidebar_label(self._db.table, user_id, session, project_id),
            ]
            if session.project_id is not None:
                old = items.project_chat_item(user_id, session)
                actions.append(
                    {
                        "Delete": {  # the chat's row in the project it leaves: must exist, or one would be left
                            "TableName": self._db.table,
                            "Key": {"pk": old["pk"], "sk": old["sk"]},
                            "ConditionExpression": "attribute_exists(pk)",
                        }
                    }
                )
            if project_id is not None:
                actions.append({"Put": {"TableName": self._db.table, "Item": items.project_chat_item(user_id, target)}})
                actions.append(
                    {
                        "ConditionCheck": {  # the target is this user's project, exists, and is not being deleted
                            "TableName": self._db.table,
                            "Key": to_item(keys.project_meta_key(user_id, project_id)),
                            "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(deleting)",
                        }
                    }
                )
            with on_condition_failed() as refused, self._db.action("project", user_id):
                self._db.call("transact_write_items", TransactItems=actions)
            if not refused:
                return target
            codes = cancellation_codes(refused.exc) if refused.exc is not None else []
            if project_id is not None and codes and codes[-1] == "ConditionalCheckFailed":
                raise ProjectNotFound(_NOT_FOUND) from refused.exc
            if attempt == MAX_RACE_RETRIES:
                raise SessionChanged("This chat kept changing in another tab; reload and try again.") from refused.exc
            session = self._session(user_id, session.session_id)
        raise AssertionError("unreachable")

    def _session(self, user_id: str, session_id: str) -> Session:
        with self._db.action("project", user_id):
            item = self._db.call("get_item", Key=to_item(keys.meta_key(user_id, session_id)), ConsistentRead=True).get(
                "Item"
            )
        if item is None:
            raise SessionNotFound("No such chat.")
        return Session.from_item(from_item(item))

    # --- deleting a project -------------------------------------------------------------------------------------

    def delete(self, user_id: str, project_id: str, *, on_moved: Any = None) -> list[Session]:
        """Delete the project; its chats are not deleted: each leaves it (as Move to project, No project would) in
        its own transaction. Returns the chats moved out (`on_moved(session)` is called after each). Steps:
          1. UpdateItem of the meta: SET deleting (if not set). From this write on, no chat can join the project (the
             ConditionChecks of a new chat and of a move into it refuse it) and its row stays where it is (touch and
             rename refuse it), so the row named in step 3 is the one this write returns.
          2. Query the project's chats from the top (100 a page, consistent), and per chat 1 GetItem of its meta and
             1 TransactWriteItems (move_chat to no project); a row whose chat names another project (or has no
             meta) is only a stale copy: 1 DeleteItem. Again from the top until none is left: a send moves a chat's
             row up past where a cursor would be, so a re-read from the top is what finds it.
          3. TransactWriteItems: Delete the meta (only while marked), Delete its row.
        A crash leaves the project marked with some chats moved out; deleting it again finishes the job.
        ProjectNotFound for a malformed, unknown or foreign id."""
        key = keys.project_meta_key(user_id, checked_id(project_id))
        with on_condition_failed(ProjectNotFound(_NOT_FOUND)), self._db.action("project", user_id):
            marked = self._db.call(  # only an existing project: the mark never creates one
                "update_item",
                Key=to_item(key),
                UpdateExpression="SET deleting = if_not_exists(deleting, :at)",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues=to_item({":at": keys.now()}),
                ReturnValues="ALL_NEW",
            )
        project = Project.from_item(from_item(marked["Attributes"]))
        moved: list[Session] = []
        pk = keys.project_pk(user_id, project_id)
        for _pass in range(MAX_DELETE_PASSES):
            with self._db.action("project", user_id):
                rows = self._db.call(
                    "query",
                    KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
                    ExpressionAttributeValues=to_item({":pk": pk, ":prefix": keys.SESSION_PREFIX}),
                    Limit=DELETE_PAGE,
                    ConsistentRead=True,
                ).get("Items", [])
            if not rows:
                break
            for row in map(from_item, rows):
                session_id = keys.row_session_id(row["sk"])
                try:
                    session = self._session(user_id, session_id)
                except SessionNotFound:
                    session = None
                if session is not None and session.project_id == project_id:
                    out = self.move_chat(user_id, session, None)
                    moved.append(out)
                    if on_moved is not None:
                        on_moved(out)
                else:  # its chat names another project or none, or is gone: a stale copy
                    self._delete_chat_row(user_id, row)
        else:
            raise SessionChanged("This project's chats kept changing while it was being deleted; delete it again.")
        row_key = keys.project_row_key(user_id, project.last_activity_time, project_id)
        with on_condition_failed() as gone, self._db.action("project", user_id):
            self._db.call(
                "transact_write_items",
                TransactItems=[
                    {
                        "Delete": {  # only the marked meta (the mark froze its row's time)
                            "TableName": self._db.table,
                            "Key": to_item(key),
                            "ConditionExpression": "attribute_exists(deleting)",
                        }
                    },
                    {"Delete": {"TableName": self._db.table, "Key": to_item(row_key)}},
                ],
            )
        if gone:  # another tab finished the same deletion first
            logs.warning("project.delete_finished_elsewhere", project_id=project_id)
        return moved

    def exists(self, user_id: str, project_id: str) -> bool:
        """True if the user's project meta exists (1 consistent GetItem of its key only; repair asks)."""
        item = self._db.call(
            "get_item",
            Key=to_item(keys.project_meta_key(user_id, checked_id(project_id))),
            ConsistentRead=True,
            ProjectionExpression="pk",
        ).get("Item")
        return item is not None

    def _delete_chat_row(self, user_id: str, row: dict) -> None:
        """A project chat row its chat's meta does not back (the meta names another project, none, or is gone)."""
        with self._db.action("project", user_id):
            self._db.call("delete_item", Key=to_item({"pk": row["pk"], "sk": row["sk"]}))

    # --- repair (python -m lib.admin repair; lib/ops/repair.py decides which) --------------------------------------

    def repair_chat_rows(self, user_id: str, session: Session, rows: list[dict]) -> bool:
        """Leave the chat's project rows as its meta says: exactly one, at its time and title, in the project the
        meta names (none when it names none), in one transaction conditional on the meta as the check read it.
        False (nothing written) if the chat changed since."""
        clause, values = meta_condition(session)
        right = items.project_chat_item(user_id, session) if session.project_id else None
        actions: list[dict] = [
            {
                "ConditionCheck": {  # the meta as the check saw it: the rows below are that state's
                    "TableName": self._db.table,
                    "Key": to_item(keys.meta_key(user_id, session.session_id)),
                    "ConditionExpression": f"last_message_time = :t AND #title = :title AND {clause}",
                    "ExpressionAttributeNames": {"#title": "title"},
                    "ExpressionAttributeValues": to_item(
                        {**values, ":t": session.last_message_time, ":title": session.title}
                    ),
                }
            }
        ]
        actions += [
            {"Delete": {"TableName": self._db.table, "Key": to_item({"pk": r["pk"], "sk": r["sk"]})}}
            for r in rows
            if right is None or (r["pk"], r["sk"]) != (right["pk"]["S"], right["sk"]["S"])
        ]
        if right is not None:
            actions.append({"Put": {"TableName": self._db.table, "Item": right}})
        with on_condition_failed() as changed:
            self._db.call("transact_write_items", TransactItems=actions)
        return not changed

    def repair_orphan_row(self, row: dict) -> bool:
        """Delete a project chat row whose chat has no meta any more (1 DeleteItem): a copy of nothing."""
        with on_condition_failed() as changed:
            self._db.call(
                "delete_item",
                Key=to_item({"pk": row["pk"], "sk": row["sk"]}),
                ConditionExpression="attribute_exists(pk)",
            )
        return not changed

    def leave_missing(self, user_id: str, session: Session) -> bool:
        """A chat whose meta names a project that does not exist leaves it (what deleting the project does): 1
        TransactWriteItems: REMOVE the meta's project_id (only while it names that project), its sidebar row's label,
        and a ConditionCheck that the project is indeed gone."""
        actions = [
            {
                "Update": {
                    "TableName": self._db.table,
                    "Key": to_item(keys.meta_key(user_id, session.session_id)),
                    "UpdateExpression": "REMOVE project_id",
                    "ConditionExpression": "project_id = :project AND last_message_time = :t",
                    "ExpressionAttributeValues": to_item(
                        {":project": session.project_id, ":t": session.last_message_time}
                    ),
                }
            },
            _sidebar_label(self._db.table, user_id, session, None),
            {
                "ConditionCheck": {  # made meanwhile? then the chat is in it after all: leave it alone
                    "TableName": self._db.table,
                    "Key": to_item(keys.project_meta_key(user_id, session.project_id)),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ]
        with on_condition_failed() as changed:
            self._db.call("transact_write_items", TransactItems=actions)
        return not changed

    def repair_project_row(self, user_id: str, meta: dict, rows: list[dict]) -> bool:
        """Leave the project exactly one row, at its meta's last_activity_time with its name (1 TransactWriteItems,
        on the meta as the check read it), or, with no meta, delete its rows."""
        actions: list[dict] = []
        right = None
        if meta is not None:
            project = Project.from_item(meta)
            right = _row_item(user_id, project)
            actions.append(
                {
                    "ConditionCheck": {
                        "TableName": self._db.table,
                        "Key": to_item(keys.project_meta_key(user_id, project.project_id)),
                        "ConditionExpression": "last_activity_time = :old AND #name = :name",
                        "ExpressionAttributeNames": {"#name": "name"},
                        "ExpressionAttributeValues": to_item(
                            {":old": project.last_activity_time, ":name": project.name}
                        ),
                    }
                }
            )
        actions += [
            {"Delete": {"TableName": self._db.table, "Key": to_item({"pk": r["pk"], "sk": r["sk"]})}}
            for r in rows
            if right is None or r["sk"] != right["sk"]["S"]
        ]
        if right is not None:
            actions.append({"Put": {"TableName": self._db.table, "Item": right}})
        if not actions:
            return True
        with on_condition_failed() as changed:
            self._db.call("transact_write_items", TransactItems=actions)
        return not changed


def _sidebar_label(table: str, user_id: str, session: Session, project_id: str | None) -> dict:
    """The chat's sidebar row's copy of its project (the "All chats" label): the row as the tab read it must exist,
    or the update would make a phantom row."""
    row = items.list_item(user_id, session)
    return {
        "Update": {
            "TableName": table,
            "Key": {"pk": row["pk"], "sk": row["sk"]},
            "UpdateExpression": "SET project_id = :to" if project_id else "REMOVE project_id",
            "ConditionExpression": "attribute_exists(pk)",
            **({"ExpressionAttributeValues": to_item({":to": project_id})} if project_id else {}),
        }
    }


def _behind(activity: str, at: str) -> bool:
    """True if `at` is ACTIVITY_STEP_S or more after the project's activity (a malformed stored time: behind)."""
    if not keys.is_time(activity):
        return True
    return keys.parse_time(at) - keys.parse_time(activity) >= _dt.timedelta(seconds=ACTIVITY_STEP_S)


# --- hooks of the chat store's transactions (lib/storage/store.py) ---------------------------------------------


def meta_condition(session: Session) -> tuple[str, dict]:
    """The meta's project as the tab read it: a send or rename that missed a move fails and re-reads, instead of
    moving (or renaming) a row in the project the chat has left."""
    if session.project_id is None:
        return "attribute_not_exists(project_id)", {}
    return "project_id = :project", {":project": session.project_id}


def chat_row_moves(table: str, user_id: str, session: Session, at: str) -> list[dict]:
    """A send's actions on the chat's project row: Delete the old one (must exist), Put the new one at `at`."""
    if session.project_id is None:
        return []
    old = items.project_chat_item(user_id, session)
    return [
        {
            "Delete": {
                "TableName": table,
                "Key": {"pk": old["pk"], "sk": old["sk"]},
                "ConditionExpression": "attribute_exists(pk)",
            }
        },
        {"Put": {"TableName": table, "Item": items.project_chat_item(user_id, replace(session, last_message_time=at))}},
    ]


def chat_row_title(table: str, user_id: str, session: Session, title: str) -> list[dict]:
    """A rename's action on the chat's project row: its copy of the title (the row must exist)."""
    if session.project_id is None:
        return []
    row = items.project_chat_item(user_id, session)
    return [
        {
            "Update": {
                "TableName": table,
                "Key": {"pk": row["pk"], "sk": row["sk"]},
                "UpdateExpression": "SET title = :title",
                "ConditionExpression": "attribute_exists(pk)",
                "ExpressionAttributeValues": to_item({":title": title}),
            }
        }
    ]


def chat_created(table: str, user_id: str, session: Session) -> list[dict]:
    """A new chat's actions in its project: ConditionCheck the project exists (a forged or deleted id cancels the
    chat), Put the chat's project row."""
    if session.project_id is None:
        return []
    return [
        {
            "ConditionCheck": {  # exists, and is not being deleted (its chats are leaving it)
                "TableName": table,
                "Key": to_item(keys.project_meta_key(user_id, session.project_id)),
                "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(deleting)",
            }
        },
        {"Put": {"TableName": table, "Item": items.project_chat_item(user_id, session)}},
    ]


def project_sizes(user_id: str, session: Session) -> dict[tuple[str, str], int]:
    """The size of the project row a send or rename replaces (for the meter)."""
    return items.sizes(items.project_chat_item(user_id, session)) if session.project_id else {}
