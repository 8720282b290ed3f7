"""Projects on the page (docs/projects.md): the sidebar's Projects section (choose one, New project, Edit project)
and the chat header's "Project: <name>" and "Move to project". A name is shown as text, never as Markdown.

Requests: the project list is 1 Query once per browser session, and only when needed (the Projects section
opened, a chat in a project shown, Move to project opened): a browser session that never meets a project reads
nothing more than before. Choosing a project is 1 Query (its chats), the Edit
form's instructions 1 GetItem once per browser session and project (the same read the prompt uses, kept in the
ContextCache); every write of this session updates what is shown without reading it back.
"""

from __future__ import annotations

import streamlit as st

from lib.context.cache import cache_in
from lib.errors import ChatError
from lib.storage.projects import INSTRUCTIONS_MAX_CHARS, NAME_MAX_CHARS
from lib.web.chat_view import ChatView
from lib.web.render import plain_label

SECTION = "projects-section"  # the sidebar's Projects section is open (closed until opened, or a project is chosen)
FILTER = "project-filter"  # the sidebar's selectbox: None (all chats) or a project id
NEW_POPOVER, EDIT_POPOVER, MOVE_POPOVER = "new-project-popover", "edit-project-popover", "move-project-popover"
ERROR = "project_error"
ALL_CHATS = "All chats"
NONE = ""  # the selectboxes' "All chats" / "No project" option (a string: None is no selection to a widget)


def _shown_error() -> None:
    if st.session_state.get(ERROR):
        st.error(st.session_state.pop(ERROR), icon=":material/error:")


def sidebar_section(svc, me, view: ChatView) -> None:
    """The Projects section: a selectbox of All chats and the projects by last activity, New project, and (with
    one chosen) Edit project."""
    store, user_id = svc.store, me.user_id
    # A disclosure button, not an expander: the section is drawn (and the list read) only once it is opened
    opened = bool(st.session_state.get(SECTION)) or view.project_id is not None
    st.button(
        "Projects",
        icon=":material/expand_less:" if opened else ":material/folder:",
        key="projects-toggle",
        type="tertiary",
        width="stretch",
        help="Hide projects" if opened else "Show your projects",
        on_click=_flip,
        args=(view,),
    )
    if opened and _listed(svc, view):
        with st.container(border=True):
            _section(svc, me, view, store, user_id)


def _flip(view: ChatView) -> None:
    """Open or close the Projects section; closing it shows all chats again (no request)."""
    opened = bool(st.session_state.get(SECTION)) or view.project_id is not None
    st.session_state[SECTION] = not opened
    if opened:
        view.project_id, view.project_chats, view.project_cursor = None, None, None


def _listed(svc, view: ChatView) -> bool:
    """The project list, read once per browser session (1 Query); False (and why, shown) if it cannot be read."""
    try:
        view.ensure_projects(svc.store)
    except ChatError as exc:
        st.error(str(exc), icon=":material/error:")
        return False
    return True


def _section(svc, me, view: ChatView, store, user_id: str) -> None:
    names = {p.project_id: p.name for p in view.projects or []}
    options = [NONE, *names]
    if view.project_id is not None and view.project_id not in names:
        options.append(view.project_id)  # chosen, and past the listed ones: still shown as chosen
    if st.session_state.get(FILTER) != (view.project_id or NONE):
        st.session_state[FILTER] = view.project_id or NONE

    def chosen() -> None:
        try:
            view.choose_project(store, st.session_state[FILTER] or None)
        except ChatError as exc:
            st.session_state[ERROR] = str(exc)
            st.session_state[FILTER] = view.project_id or NONE

    st.selectbox(  # options are plain text: a name like ![x](url) is shown as typed and fetches nothing
        "Projects",
        options,
        format_func=lambda pid: names.get(pid, "(a project)") if pid else ALL_CHATS,
        key=FILTER,
        on_change=chosen,
    )
    with st.container(horizontal=True, gap="small"):
        with st.popover("New project", icon=":material/create_new_folder:", key=NEW_POPOVER, on_change="rerun"):
            _project_form(svc, me, view, None)
        if view.project_id is not None:
            with st.popover("Edit project", icon=":material/edit:", key=EDIT_POPOVER, on_change="rerun"):
                # Read only while open (1 GetItem, once per browser session and project: the prompt's own read)
                project = (
                    svc.engine.project(cache_in(st.session_state), user_id, view.project_id)
                    if st.session_state.get(EDIT_POPOVER)
                    else None
                )
                if project is None and not st.session_state.get(EDIT_POPOVER):
                    pass
                elif project is None:
                    st.warning("This project could not be read; reload the page.", icon=":material/error:")
                else:
                    _project_form(svc, me, view, project)
    _shown_error()


def _project_form(svc, me, view: ChatView, project) -> None:
    """New project (project None) or Edit project: a name and the instructions every chat in it gets."""
    key = project.project_id if project is not None else "new"
    with st.form(f"project-form-{key}", border=False, clear_on_submit=project is None):
        st.text_input("Name", value=project.name if project else "", max_chars=NAME_MAX_CHARS, key=f"pname-{key}")
        st.text_area(
            "Instructions for every chat in this project",
            value=project.instructions if project else "",
            max_chars=INSTRUCTIONS_MAX_CHARS,
            height=150,
            key=f"ptext-{key}",
            help="Added to the model's instructions for each question in this project's chats.",
        )
        st.form_submit_button(
            "Save" if project else "Create project", type="primary", on_click=_save, args=(svc, me, view, project)
        )


def _save(svc, me, view: ChatView, project) -> None:
    """Runs before the page: a saved project closes its popover and shows at once; a refused one says why."""
    key = project.project_id if project is not None else "new"
    name, text = st.session_state.get(f"pname-{key}", ""), st.session_state.get(f"ptext-{key}", "")
    try:
        if project is None:
            saved = svc.store.projects.create(me.user_id, name, text)
            view.project_id, view.project_chats, view.project_cursor = saved.project_id, [], None  # no chat yet
            st.session_state[NEW_POPOVER] = False
        else:
            saved = svc.store.projects.edit(me.user_id, project, name, text)
            st.session_state[EDIT_POPOVER] = False
    except ChatError as exc:
        st.session_state[ERROR] = str(exc)
        return
    cache_in(st.session_state).learn_project(me.user_id, saved)
    view.project_saved(saved)
    st.session_state.pop(FILTER, None)  # the selectbox follows the view on the next draw


def header_controls(svc, me, view: ChatView, adopt) -> None:
    """In the chat header's row: "Move to project" (a temporary chat has none: it cannot be in a project)."""
    session = view.session
    if session.temporary:
        return
    with st.popover("Move to project", icon=":material/drive_file_move:", key=MOVE_POPOVER, on_change="rerun"):
        if not st.session_state.get(MOVE_POPOVER) or not _listed(svc, view):
            return  # drawn (and the list read) only while open
        names = {p.project_id: p.name for p in view.projects or []}
        options = [NONE, *names]
        if session.project_id is not None and session.project_id not in names:
            options.append(session.project_id)
        with st.form("move-project", border=False):
            st.selectbox(
                "Project",
                options,
                index=options.index(session.project_id or NONE),
                format_func=lambda pid: names.get(pid, "(a project)") if pid else "No project",
                key="move-target",
            )
            st.form_submit_button("Move", type="primary", on_click=_move, args=(svc, me, view, adopt))
        _shown_error()


def project_line(svc, view: ChatView) -> None:
    """'Project: <name>' under the chat's title, the name as text (the list read once if not yet: 1 Query)."""
    session = view.session
    if session is not None and session.project_id is not None and _listed(svc, view):
        name = view.project_name(session.project_id) or "a project not in your list"
        st.caption(f":material/folder: Project: {plain_label(name)}")


def _move(svc, me, view: ChatView, adopt) -> None:
    try:
        written = svc.chat.move(me.user_id, view.session, st.session_state.get("move-target") or None)
    except ChatError as exc:
        st.session_state[ERROR] = str(exc)
        return
    view.moved(written.value)
    adopt(written.value.session_id, written.version)
    st.session_state[MOVE_POPOVER] = False


def welcome_line(view: ChatView) -> None:
    """On the new-chat screen, with a project chosen: the chat starts in it (and gets its instructions)."""
    if view.project_id is not None:
        name = view.project_name(view.project_id) or "the chosen project"
        st.caption(f":material/folder: This chat starts in the project {plain_label(name)} and gets its instructions.")
