"""What the chat page has loaded, kept in st.session_state between Streamlit reruns.

Streamlit reruns the whole script on every click. This view is why a rerun that
changes nothing costs no DynamoDB request: it queries only on a full page load
(a new browser session), navigation, "Load more" and "Load earlier", and it
applies the results of our own writes (send, finish, rename, feedback) instead of
reading them back.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

from lib.errors import SessionNotFound
from lib.storage.records import Message, Project, ProjectSummary, Session, SessionSummary, Summary
from lib.storage.store import ChatStore


@dataclass
class ChatView:
    user_id: str
    sidebar: list[SessionSummary] | None = None  # None: not loaded yet
    sidebar_cursor: str | None = None
    open_id: str | None = None  # the session in the main pane; None: a new, empty chat
    session: Session | None = None
    messages: list[Message] = field(default_factory=list)  # oldest first
    older_cursor: str | None = None
    not_found: str | None = None  # an id the URL asked for that is not the user's
    summary: Summary | None = None  # the open chat's running summary (read by the same Query as its turns)
    version: int | None = None  # the open chat's hot-tier change counter when it was loaded (None: no hot tier)
    # Projects (docs/projects.md): the list (1 Query, once per browser session), the one chosen in the sidebar
    # (None: all chats) and its chats (1 Query when chosen), all kept current by this session's own writes.
    projects: list[ProjectSummary] | None = None
    project_id: str | None = None
    project_chats: list[SessionSummary] | None = None
    project_cursor: str | None = None
    projects_cursor: str | None = None  # the project list past its first 100 ("More projects")

    def ensure_sidebar(self, store: ChatStore) -> None:
        if self.sidebar is None:
            page = store.list_sessions(self.user_id)
            self.sidebar, self.sidebar_cursor = page.items, page.cursor

    def load_more_sessions(self, store: ChatStore) -> None:
        page = store.list_sessions(self.user_id, cursor=self.sidebar_cursor)
        known = {s.session_id for s in self.sidebar or []}
        # a session sent to since the first page moved to the top; do not list it twice
        self.sidebar = (self.sidebar or []) + [s for s in page.items if s.session_id not in known]
        self.sidebar_cursor = page.cursor

    def navigate(self, store: ChatStore, session_id: str | None, hot=None) -> None:
        """Show `session_id` (1 Query, or none when the hot tier has its first page) or, for None, a new chat."""
        self.open_id, self.session, self.messages, self.older_cursor, self.not_found = None, None, [], None, None
        self.summary, self.version = None, None
        if session_id is None:
            return
        cached = hot.cached_view(self.user_id, session_id) if hot is not None else None
        if cached is not None and cached[0].session is not None and cached[0].session.expired():
            cached = None  # a temporary chat past its time: the store says it is gone
        if cached is not None:
            view, self.version = cached
        else:
            at = hot.known(self.user_id, session_id) if hot is not None else None  # read before the Query
            try:
                view = store.open_session(self.user_id, session_id)
            except SessionNotFound:
                self.not_found = session_id
                return
            if hot is not None:
                hot.cache_view(self.user_id, session_id, view, at)
                self.version = at
        self.open_id, self.session, self.messages, self.older_cursor, self.summary = (
            session_id,
            view.session,
            view.messages,
            view.cursor,
            view.summary,
        )

    def load_earlier(self, store: ChatStore) -> None:
        view = store.open_session(self.user_id, self.open_id, cursor=self.older_cursor)
        self.messages = view.messages + self.messages
        self.older_cursor = view.cursor

    def committed(self, session: Session, message: Message) -> None:
        """A question was committed: the session moves to the top of the sidebar and the turn is appended."""
        self.open_id, self.session, self.not_found = session.session_id, session, None
        self.messages = [m for m in self.messages if m.message_id != message.message_id] + [message]
        if not session.temporary:  # a temporary chat is never in the sidebar
            self._to_top(SessionSummary.of(session))
        if session.project_id is not None and session.project_id == self.project_id and self.project_chats is not None:
            row = replace(SessionSummary.of(session), pinned=False)  # a project lists its chats by time alone
            self.project_chats = [row] + [s for s in self.project_chats if s.session_id != session.session_id]

    def branched(self, session: Session) -> None:
        """A branch was made (lib/turn/branches.py): its row goes to the top of the sidebar, and the next run opens
        it (1 Query: its copied turns and the edited question, which this view has not read)."""
        self._to_top(SessionSummary.of(session))
        self.open_id, self.session, self.messages = None, None, []

    # --- projects ---------------------------------------------------------------------------------------------
    def ensure_projects(self, store: ChatStore) -> None:
        if self.projects is None:
            page = store.projects.list_page(self.user_id)
            self.projects, self.projects_cursor = page.items, page.cursor

    def load_more_projects(self, store: ChatStore) -> None:
        """The next page of the project list (1 Query), after the ones listed."""
        page = store.projects.list_page(self.user_id, cursor=self.projects_cursor)
        known = {p.project_id for p in self.projects or []}
        self.projects = (self.projects or []) + [p for p in page.items if p.project_id not in known]
        self.projects_cursor = page.cursor

    def project_deleted(self, project_id: str) -> None:
        """This session deleted a project: gone from the list, its chats (all moved out) unlabelled, and the
        sidebar shows all chats."""
        self.projects = [p for p in self.projects or [] if p.project_id != project_id]
        if self.project_id == project_id:
            self.project_id, self.project_chats, self.project_cursor = None, None, None
        if self.sidebar is not None:
            self.sidebar = [replace(s, project_id=None) if s.project_id == project_id else s for s in self.sidebar]
        if self.session is not None and self.session.project_id == project_id:
            self.session = replace(self.session, project_id=None)

    def choose_project(self, store: ChatStore, project_id: str | None) -> None:
        """Show one project's chats instead of all chats (1 Query), or all chats again (None: no request)."""
        self.project_id, self.project_chats, self.project_cursor = None, None, None
        if project_id is None:
            return
        page = store.projects.chats(self.user_id, project_id)
        self.project_id, self.project_chats, self.project_cursor = project_id, page.items, page.cursor

    def load_more_project_chats(self, store: ChatStore) -> None:
        page = store.projects.chats(self.user_id, self.project_id, cursor=self.project_cursor)
        known = {s.session_id for s in self.project_chats or []}
        self.project_chats = (self.project_chats or []) + [s for s in page.items if s.session_id not in known]
        self.project_cursor = page.cursor

    def project_saved(self, project: Project) -> None:
        """A project was made, edited or moved up by this session: its row in the list, in its place by activity."""
        row = ProjectSummary.of(project)
        rest = [p for p in self.projects or [] if p.project_id != project.project_id]
        later = [p for p in rest if p.last_activity_time >= row.last_activity_time]
        self.projects = later + [row] + rest[len(later) :]

    def project_name(self, project_id: str | None) -> str | None:
        return next((p.name for p in self.projects or [] if p.project_id == project_id), None)

    def moved(self, session: Session) -> None:
        """The open chat was put in another project (or none): the chosen project's list gains or loses it."""
        self.session = session if session.session_id == self.open_id else self.session
        if self.sidebar is not None:  # its row's project label
            self.sidebar = [
                replace(s, project_id=session.project_id) if s.session_id == session.session_id else s
                for s in self.sidebar
            ]
        if self.project_chats is None:
            return
        rest = [s for s in self.project_chats if s.session_id != session.session_id]
        if session.project_id == self.project_id:
            row = replace(SessionSummary.of(session), pinned=False)
            later = [s for s in rest if s.last_message_time >= row.last_message_time]
            rest = later + [row] + rest[len(later) :]
        self.project_chats = rest

    def saved(self, message: Message) -> None:
        """A turn was finished, failed, restarted or given feedback: replace it in place."""
        self.messages = [message if m.message_id == message.message_id else m for m in self.messages]

    def renamed(self, session: Session) -> None:
        self.session = session
        if self.project_chats is not None:
            self.project_chats = [
                replace(s, title=session.title) if s.session_id == session.session_id else s for s in self.project_chats
            ]
        if self.sidebar is not None:
            self.sidebar = [
                replace(s, title=session.title) if s.session_id == session.session_id else s for s in self.sidebar
            ]

    def pinned(self, session: Session) -> None:
        """A chat was pinned (its row goes under the chats pinned before it) or unpinned (back among the others by
        its last message time; left out when that falls past the loaded page: "Load more" brings it)."""
        self.session = session if session.session_id == self.open_id else self.session
        if self.sidebar is None:
            return
        row = SessionSummary.of(session)
        rest = [s for s in self.sidebar if s.session_id != session.session_id]
        pins = [s for s in rest if s.pinned]
        others = [s for s in rest if not s.pinned]
        if row.pinned:
            self.sidebar = pins + [row] + others
            return
        later = [s for s in others if s.last_message_time >= row.last_message_time]
        earlier = others[len(later) :]
        if earlier or self.sidebar_cursor is None:
            later.append(row)
        self.sidebar = pins + later + earlier

    def _to_top(self, summary: SessionSummary) -> None:
        """A send moves an unpinned chat to the top of the unpinned rows; a pinned one keeps its place."""
        rows = self.sidebar or []
        if summary.pinned and any(s.session_id == summary.session_id for s in rows):
            self.sidebar = [summary if s.session_id == summary.session_id else s for s in rows]
            return
        rest = [s for s in rows if s.session_id != summary.session_id]
        pins = [s for s in rest if s.pinned]
        self.sidebar = pins + [summary] + [s for s in rest if not s.pinned]


MAX_CONTEXT_NOTES = 100  # a note matters while its turn is on screen; older ones are dropped


class ContextNotes:
    """The context loader's sentence under an answer (what was summarised or left out), by message id, in
    session state: bounded, so a long chat does not grow the browser session."""

    def __init__(self, limit: int = MAX_CONTEXT_NOTES):
        self._notes: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def add(self, message_id: str, note: str | None) -> None:
        if note is None:
            return
        self._notes[message_id] = note
        self._notes.move_to_end(message_id)
        while len(self._notes) > self._limit:
            self._notes.popitem(last=False)

    def get(self, message_id: str) -> str | None:
        return self._notes.get(message_id)

    def __len__(self) -> int:
        return len(self._notes)
