"""Projects on the chat page (AppTest): the sidebar's Projects section, a new chat in a project, the header's
project line and Move to project, Edit project, and "What the model saw"; names shown as text."""

import pytest

from lib.web import project_view, ui
from tests.pages import DEV, button, new_browser, requests_made, send, services, settle, sidebar_titles

IMAGE_NAME = "![x](https://evil.example/track.png) Q3"


def opened(at):
    """The sidebar's Projects section opened (it starts collapsed: a browser session that never opens it reads no
    project list)."""
    at.session_state[project_view.SECTION] = True
    at.run()
    assert not at.exception, at.exception
    return at


def codes_of(at):
    return [c.value for c in at.code]


def choose(at, project_id):
    (picker,) = [s for s in at.sidebar.selectbox if s.key == project_view.FILTER]
    picker.set_value(project_id).run()
    assert not at.exception, at.exception
    return at


@pytest.mark.usefixtures("app_env")
class TestProjectsPage:
    def test_a_new_browser_session_reads_no_project_list_until_the_section_opens(self):
        services().store.projects.create(DEV, "Q3 migration")
        made = requests_made(new_browser)
        assert [r.action for r in made] == ["sidebar"]  # the chat list alone, as before projects
        at = new_browser()
        first = requests_made(lambda: opened(at))
        assert [(r.action, r.operation) for r in first] == [("project", "Query")]
        assert requests_made(lambda: at.run()) == []  # read once per browser session
        assert at.sidebar.selectbox(key=project_view.FILTER).options == ["All chats", "Q3 migration"]

    def test_new_project_is_one_request_and_shows_chosen_with_no_chats(self):
        at = opened(new_browser())
        at.text_input(key="pname-new").set_value("Q3 migration")
        at.text_area(key="ptext-new").set_value("Always list the cut-over steps.")
        made = requests_made(lambda: button(at, "Create project").click().run())
        assert not at.exception
        assert [(r.action, r.operation) for r in made] == [("project", "TransactWriteItems")]
        (listed,) = services().store.projects.list(DEV)
        assert listed.name == "Q3 migration"
        assert at.sidebar.selectbox(key=project_view.FILTER).value == listed.project_id
        assert "No chats in this project yet: New chat starts one in it." in [c.value for c in at.sidebar.caption]

    def test_an_empty_name_is_refused_on_the_page_and_nothing_is_written(self):
        at = opened(new_browser())
        at.text_input(key="pname-new").set_value("   ")
        made = requests_made(lambda: button(at, "Create project").click().run())
        assert not at.exception and made == []
        assert "A project name must be 1 to 80 characters." in [e.value for e in at.error]
        assert services().store.projects.list(DEV) == []

    def test_a_markdown_image_name_is_plain_text_in_the_list_and_the_header(self):
        store = services().store
        made = store.projects.create(DEV, IMAGE_NAME)
        session, _ = store.create_session(DEV, "hi", system_prompt_id="default-v1", project_id=made.project_id)
        at = opened(new_browser(session=session.session_id))
        picker = at.sidebar.selectbox(key=project_view.FILTER)
        assert IMAGE_NAME in picker.options  # a selectbox option is plain text, never Markdown
        (line,) = [c.value for c in at.caption if "Project:" in c.value]
        assert "![" not in line and "\\!\\[x\\]" in line  # escaped: shown as typed, no image is fetched

    def test_a_long_title_is_cut_so_that_its_projects_name_stays_in_the_row(self):
        store = services().store
        made = store.projects.create(DEV, "Payments platform migration 2027")
        title = "How should we plan the cut-over of the ledger service to the new cluster?"
        store.create_session(DEV, title, system_prompt_id="default-v1", project_id=made.project_id)
        at = opened(new_browser())
        (label,) = sidebar_titles(at)
        shown, project = label.split(" · :material/folder: ")
        assert len(shown) + len(project) <= ui.ROW_CHARS  # both within what a row shows before its ellipsis
        assert title.startswith(shown.removesuffix("…")) and shown.endswith("…")
        assert "Payments platform migration 2027".startswith(project.removesuffix("…"))
        # the whole title and project are in the row's tooltip
        (row,) = [b for b in at.sidebar.button if b.label.replace("\\", "") == label]
        assert "project Payments platform migration 2027" in row.help

    def test_choosing_a_project_lists_its_chats_with_one_query_and_new_chat_starts_in_it(self):
        store = services().store
        made = store.projects.create(DEV, "Q3 migration", "Always list the cut-over steps.")
        store.create_session(DEV, "in the project", system_prompt_id="default-v1", project_id=made.project_id)
        store.create_session(DEV, "elsewhere", system_prompt_id="default-v1")
        at = opened(new_browser())
        # "All chats" labels a project's chat with its project's name (from the one list read: no request per row)
        assert sidebar_titles(at) == ["elsewhere", "in the project · :material/folder: Q3 migration"]
        made_requests = requests_made(lambda: choose(at, made.project_id))
        assert [(r.action, r.operation) for r in made_requests] == [("project", "Query")]
        assert sidebar_titles(at) == ["in the project"]
        assert requests_made(lambda: at.run()) == []  # a rerun reads nothing
        at = send(at, "What comes first?")
        session = store.list_sessions(DEV).items[0]
        assert store.get_session(DEV, session.session_id).project_id == made.project_id
        title = store.get_session(DEV, session.session_id).title  # the model-written one
        assert sidebar_titles(at) == [title, "in the project"]  # the project's list, kept current by the send
        assert [c.title for c in store.projects.chats(DEV, made.project_id).items] == [title, "in the project"]
        assert [c.value for c in at.caption if "Project:" in c.value] == [":material/folder: Project: Q3 migration"]
        (message,) = store.open_session(DEV, session.session_id).messages
        assert [p for p in message.context if p["kind"] == "project"] == [
            {
                "kind": "project",
                "tokens": next(p["tokens"] for p in message.context if p["kind"] == "project"),
                "id": made.project_id,
            }
        ]
        at.session_state[f"saw-{message.message_id}"] = True
        at.run()
        what = dict(zip(at.dataframe[0].value["Part"], at.dataframe[0].value["What"]))
        assert what["Project instructions"].startswith("The instructions of this chat's project")
        # the text the model was given, as text, under the table (this session's cache: no request)
        assert any("Project instructions sent with this question" in c.value for c in at.caption)
        assert any("Always list the cut-over steps." in c for c in codes_of(at))
        # edited since: still shown, and it says the model saw an earlier version
        edited = store.projects.edit(DEV, store.projects.get(DEV, made.project_id), "Q3 migration", "Now much longer.")
        from lib.context.cache import STATE_KEY

        at.session_state[STATE_KEY].learn_project(DEV, edited)  # as this session's own Save does
        at.run()
        assert any("edited since this question" in c.value for c in at.caption)
        assert any("Now much longer." in c for c in codes_of(at))

    def test_move_to_project_is_one_request_and_the_header_says_where_it_is(self):
        store = services().store
        one, two = store.projects.create(DEV, "one"), store.projects.create(DEV, "two")
        session, _ = store.create_session(DEV, "hi", system_prompt_id="default-v1", project_id=one.project_id)
        at = new_browser(session=session.session_id)  # a chat in a project: the list is read for its name
        at.session_state[project_view.MOVE_POPOVER] = True  # Move to project opened
        at.run()
        at.selectbox(key="move-target").set_value(two.project_id)
        made = requests_made(lambda: button(at, "Move").click().run())
        assert not at.exception
        assert [(r.action, r.operation) for r in made] == [("project", "TransactWriteItems")]
        assert [c.value for c in at.caption if "Project:" in c.value] == [":material/folder: Project: two"]
        assert store.get_session(DEV, session.session_id).project_id == two.project_id
        assert [c.session_id for c in store.projects.chats(DEV, two.project_id).items] == [session.session_id]
        assert store.projects.chats(DEV, one.project_id).items == []
        assert not at.session_state[project_view.MOVE_POPOVER]  # a saved move closes the popover
        at.session_state[project_view.MOVE_POPOVER] = True
        at.run()
        at.selectbox(key="move-target").set_value(project_view.NONE)  # "No project"
        button(at, "Move").click().run()
        assert not at.exception and [c.value for c in at.caption if "Project:" in c.value] == []

    def test_edit_project_reads_it_once_and_saves_with_one_update(self):
        store = services().store
        made = store.projects.create(DEV, "Q3 migration", "old instructions")
        at = choose(opened(new_browser()), made.project_id)
        at.session_state[project_view.EDIT_POPOVER] = True  # Edit project opened
        first = requests_made(lambda: at.run())
        assert [r.operation for r in first] == ["GetItem"]  # the project, once per browser session
        assert requests_made(lambda: at.run()) == []
        assert at.text_area(key=f"ptext-{made.project_id}").value == "old instructions"
        at.text_area(key=f"ptext-{made.project_id}").set_value("new instructions")
        saved = requests_made(lambda: button(at, "Save").click().run())
        assert not at.exception
        assert [(r.action, r.operation) for r in saved] == [("project", "UpdateItem")]
        assert store.projects.get(DEV, made.project_id).instructions == "new instructions"

    def test_a_temporary_chat_in_a_chosen_project_is_refused_and_the_question_kept(self):
        store = services().store
        made = store.projects.create(DEV, "Q3 migration")
        at = choose(opened(new_browser()), made.project_id)
        at.toggle(key="temporary-chat").set_value(True).run()
        at.chat_input[0].set_value("keep this").run()
        settle(at)
        assert "A temporary chat is not kept, so it cannot be started in a project." in [e.value for e in at.error]
        assert at.text_area[0].value == "keep this" and store.list_sessions(DEV).items == []


@pytest.mark.usefixtures("app_env")
class TestTheService:
    def test_a_question_in_a_project_moves_it_up_the_list_at_most_once_a_minute(self):
        import datetime as dt

        from lib.context.cache import ContextCache
        from lib.storage import keys
        from lib.turn.worker import wait_all_idle

        svc = services()
        long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
        with keys.clock(lambda: long_ago):
            made = svc.store.projects.create(DEV, "Q3 migration", "Always list the cut-over steps.")
            svc.store.projects.create(DEV, "newer")
        cache = ContextCache()
        records = requests_made(
            lambda: svc.chat.ask(DEV, None, "first", history=[], summary=None, cache=cache, project_id=made.project_id)
        )
        assert wait_all_idle(300)
        project = [(r.operation, r.action) for r in records if r.action == "project"]
        assert project == [("GetItem", "project"), ("TransactWriteItems", "project")]  # read once, moved once
        assert [p.name for p in svc.store.projects.list(DEV)] == ["Q3 migration", "newer"]
        session = svc.store.list_sessions(DEV).items[0]
        chat = svc.store.get_session(DEV, session.session_id)
        again = requests_made(lambda: svc.chat.ask(DEV, chat, "second", history=[], summary=None, cache=cache))
        assert wait_all_idle(300)
        assert [r for r in again if r.action == "project"] == []  # moved less than a minute ago: no request
        (message,) = [m for m in svc.store.open_session(DEV, chat.session_id).messages if m.input_body == "second"]
        assert "project" in [p["kind"] for p in message.context]  # the cached project still reaches the prompt


@pytest.mark.usefixtures("app_env")
class TestDeleteAndAddress:
    def test_delete_project_asks_first_then_keeps_its_chats_in_all_chats(self):
        store = services().store
        made = store.projects.create(DEV, "Q3 migration", "steps")
        session, _ = store.create_session(DEV, "in it", system_prompt_id="default-v1", project_id=made.project_id)
        at = choose(opened(new_browser()), made.project_id)
        at.session_state[project_view.EDIT_POPOVER] = True
        at.run()
        (delete,) = [b for b in at.button if b.label == "Delete project"]
        assert delete.disabled  # the confirmation box first
        at.checkbox(key=f"pdelete-sure-{made.project_id}").check().run()
        made_requests = requests_made(lambda: button(at, "Delete project").click().run())
        assert not at.exception, at.exception
        assert [r.operation for r in made_requests if r.action == "project"] == [
            "UpdateItem",
            "Query",
            "GetItem",
            "TransactWriteItems",
            "Query",
            "TransactWriteItems",
        ]
        assert any("Q3 migration deleted. Its chat is kept, in no project." in t.value for t in at.toast)
        assert at.sidebar.selectbox(key=project_view.FILTER).options == ["All chats"]
        assert sidebar_titles(at) == ["in it"]  # in All chats, no project label any more
        assert store.get_session(DEV, session.session_id).project_id is None
        assert "project" not in at.query_params

    def test_the_chosen_project_is_in_the_address_and_a_reload_shows_it_again(self):
        store = services().store
        made = store.projects.create(DEV, "Q3 migration")
        store.create_session(DEV, "in it", system_prompt_id="default-v1", project_id=made.project_id)
        store.create_session(DEV, "elsewhere", system_prompt_id="default-v1")
        at = choose(opened(new_browser()), made.project_id)
        assert at.query_params["project"] == made.project_id
        reloaded = new_browser(project=made.project_id)  # a new browser session at the same address
        assert not reloaded.exception, reloaded.exception
        assert reloaded.sidebar.selectbox(key=project_view.FILTER).value == made.project_id
        assert sidebar_titles(reloaded) == ["in it"]
        choose(reloaded, project_view.NONE)  # All chats: the address forgets it
        assert "project" not in reloaded.query_params
        assert sorted(sidebar_titles(reloaded))[0] == "elsewhere"

    @pytest.mark.parametrize("forged", ["nonsense", "01ARZ3NDEKTSV4RRFFQ69G5FAV"])
    def test_a_forged_project_in_the_address_says_so_and_shows_all_chats(self, forged):
        services().store.create_session(DEV, "mine", system_prompt_id="default-v1")
        at = new_browser(project=forged)
        assert not at.exception, at.exception
        assert any("Showing all chats." in e.value for e in at.error)
        assert sidebar_titles(at) == ["mine"] and "project" not in at.query_params

    def test_the_section_shows_one_label_and_more_projects_past_the_first_page(self, monkeypatch):
        from lib.storage import projects

        for n in range(3):
            services().store.projects.create(DEV, f"p{n}")
        monkeypatch.setattr(projects, "PROJECT_LIST_LIMIT", 2)
        at = opened(new_browser())
        picker = at.sidebar.selectbox(key=project_view.FILTER)
        assert "COLLAPSED" in str(picker.label_visibility)  # the section's own button already says "Projects"
        assert picker.options == ["All chats", "p2", "p1"]
        made = requests_made(lambda: button(at, "More projects").click().run())
        assert [r.operation for r in made] == ["Query"]
        assert at.sidebar.selectbox(key=project_view.FILTER).options == ["All chats", "p2", "p1", "p0"]
        assert not [b for b in at.button if b.label == "More projects"]
