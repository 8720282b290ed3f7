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
NOTICE = "project_notice"
ADDRESS = "project-address"  # the project id this session last put in the address bar (`?project=`)
PARAM = "project"
ALL_CHATS = "All chats"
NONE = ""  # the selectboxes' "All chats" / "No project" option (a string: None is no selection to a widget)


def _shown_error() -> None:
    if st.session_state.get(ERROR):
        st.error(st.session_state.pop(ERROR), icon=":material/error:")


def sidebar_section(svc, me, view: ChatView) -> None:
    """The Projects section: a selectbox of All chats and the projects by last activity, New project, and (with
    one chosen) Edit project."""
    store, user_id = svc.store, me.user_id
    _follow_address(svc, view)
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


def _follow_address(svc, view: ChatView) -> None:
    """The chosen project is in the address (`?project=<id>`, like `?session=`), so a reload or a copied link shows
    the same project: a project named there that this session did not put there is chosen (1 Query of its chats,
    and the list's 1 Query when the section draws); otherwise the address follows what is chosen (no request)."""
    wanted = st.query_params.get(PARAM)
    if wanted and wanted != st.session_state.get(ADDRESS) and wanted != view.project_id:
        st.session_state[ADDRESS] = wanted
        try:
            view.ensure_projects(svc.store)  # the section draws the list anyway (1 Query, once per browser session)
            if view.project_name(wanted) is None:
                svc.store.projects.get(view.user_id, wanted)  # past the listed ones, or none: 1 GetItem says which
            view.choose_project(svc.store, wanted)
        except ChatError as exc:  # a malformed, deleted or foreign id: said once, and dropped from the address
            st.session_state[ERROR] = f"{exc} Showing all chats."
            st.session_state[SECTION] = True
    if view.project_id:
        st.query_params[PARAM] = view.project_id
    elif PARAM in st.query_params:
        st.query_params.pop(PARAM)
    st.session_state[ADDRESS] = view.project_id


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
        "Chats shown",  # the section's button above already says "Projects": the label is for screen readers
        options,
        format_func=lambda pid: names.get(pid, "(a project)") if pid else ALL_CHATS,
        key=FILTER,
        on_change=chosen,
        label_visibility="collapsed",
    )
    if view.projects_cursor and st.button(
        "More projects", icon=":material/expand_more:", key="more-projects", type="tertiary", width="stretch"
    ):
        try:
            view.load_more_projects(store)  # the next 100, by last activity (1 Query)
        except ChatError as exc:
            st.session_state[ERROR] = str(exc)
        st.rerun()
    # One under the other, full width: side by side, the sidebar's width cut the second label off
    with st.container(gap="small"):
        with st.popover(
            "New project", icon=":material/create_new_folder:", key=NEW_POPOVER, on_change="rerun", width="stretch"
        ):
            _project_form(svc, me, view, None)
        if view.project_id is not None:
            with st.popover(
                "Edit project", icon=":material/edit:", key=EDIT_POPOVER, on_change="rerun", width="stretch"
            ):
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
                    _delete_controls(svc, me, view, project)
    _shown_error()
    notice = st.session_state.pop(NOTICE, None)
    if notice:  # a toast: the section it was done in may be folded away by now
        st.toast(notice, icon=":material/check:")


def _delete_controls(svc, me, view: ChatView, project) -> None:
    """Delete project, behind a confirmation: the project goes, its chats stay (in no project)."""
    st.divider()
    sure = st.checkbox(
        f"Delete the project {plain_label(project.name)}. Its chats are kept, in no project.",
        key=f"pdelete-sure-{project.project_id}",
    )
    st.button(
        "Delete project",
        icon=":material/delete:",
        key=f"pdelete-{project.project_id}",
        disabled=not sure,
        on_click=_delete,
        args=(svc, me, view, project),
    )


def _delete(svc, me, view: ChatView, project) -> None:
    """Runs before the page: the project is gone from the list and the sidebar shows all chats."""
    try:
        moved = svc.chat.delete_project(me.user_id, project.project_id)
    except ChatError as exc:
        st.session_state[ERROR] = str(exc)
        return
    view.project_deleted(project.project_id)
    st.session_state[EDIT_POPOVER] = False
    st.session_state.pop(FILTER, None)
    n = len(moved)
    st.session_state[NOTICE] = f"Project {plain_label(project.name)} deleted. " + (
        ("Its chat is kept, in no project." if n == 1 else f"Its {n} chats are kept, in no project.")
        if n
        else "It had no chats."
    )


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


def row_tag(svc, view: ChatView, row) -> str | None:
    """The project label of a row of "All chats": the name of the project the row's copy of project_id names, from
    the project list (read once per browser session, when the first labelled row is drawn: no request per row).
    As written (the caller escapes it); None for a chat in no project, or when the list cannot be read."""
    if view.project_id is not None or getattr(row, "project_id", None) is None:
        return None
    try:
        view.ensure_projects(svc.store)
    except ChatError:
        return None
    return view.project_name(row.project_id)


def welcome_line(view: ChatView) -> None:
    """On the new-chat screen, with a project chosen: the chat starts in it (and gets its instructions)."""
    if view.project_id is not None:
        name = view.project_name(view.project_id) or "the chosen project"
        st.caption(
            f":material/folder: This chat starts in the project **{plain_label(name)}** and gets its instructions."
        )
