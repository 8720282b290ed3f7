"""The chat page with attached files: chips on the question (no request to draw them), the file read from this app's
server on a click (1 GetObject) and offered for download, an image shown from those bytes; and a composer draft that
belongs to its chat. AppTest, the embedded database in memory (its object store in memory too)."""

from __future__ import annotations

import pytest

from lib.turn.attachments import prepare
from tests.pages import DEV, button, new_browser, requests_made, send, services, sidebar_rows
from tests.test_attachments import make_pdf, png


def chat_with(files, question="what do these say?"):
    store = services().store
    uploads = prepare(files, max_bytes=10 * 1024 * 1024, max_count=5)
    return store.create_session(DEV, question, system_prompt_id="default-v1", attachments=uploads)


def expanders(at):
    return [e for e in at.expander if e.proto.label.startswith(("notes", "spec", "photo", "evil"))]


def served_url(data: bytes, mime: str, file_name: str) -> str:
    """Where AppTest's media store serves a download of these bytes with this media type and file name."""
    from streamlit.runtime.memory_media_file_storage import _calculate_file_id, get_extension_for_mimetype

    return f"/mock/media/{_calculate_file_id(data, mime, file_name)}{get_extension_for_mimetype(mime)}"


def file_downloads(at):
    """The download buttons of attached files (the page has others: the chat's export)."""
    return [d for d in at.get("download_button") if d.proto.label.startswith("Download ")]


class TestChips:
    def test_the_question_shows_a_chip_per_file_and_opening_reads_no_object(self, app_env):
        session, _ = chat_with([("notes.md", b"# Launch\nship friday\n"), ("spec.pdf", make_pdf(("Spec v2",)))])
        opened = []
        records = requests_made(lambda: opened.append(new_browser(session=session.session_id)))
        at = opened[0]
        assert not at.exception
        assert [r.operation for r in records if r.kind == "object"] == []
        labels = [e.proto.label.replace("\\", "") for e in expanders(at)]
        assert labels == [
            "notes.md · 21 bytes · text, 2 lines",
            "spec.pdf · " + labels[1].split(" · ")[1] + " · PDF, 1 page",
        ]
        assert [t.value for t in at.text][:2] == ["# Launch\nship friday", "Spec v2"]  # as text, never Markdown

    def test_get_file_reads_it_once_and_offers_the_download_with_the_servers_type_and_name(self, app_env):
        session, message = chat_with([("notes.md", b"ship friday\n")])
        at = new_browser(session=session.session_id)
        records = requests_made(lambda: button(at, "Get file").click().run())
        assert not at.exception
        assert [r.operation for r in records if r.kind == "object"] == ["GetObject"]
        assert [b for b in at.button if b.label == "Get file"] == []  # the download takes the button's place
        (download,) = file_downloads(at)
        assert download.proto.label.replace("\\", "") == "Download notes.md"
        # Served by this app's server under the media type decided from the kind and the sanitized name: Streamlit's
        # media URL is the hash of (bytes, mime, file name), so it names exactly these three.
        assert download.proto.url == served_url(b"ship friday\n", "text/plain", "notes.md")
        assert download.proto.url != served_url(b"ship friday\n", "text/markdown", "notes.md")
        records = requests_made(lambda: at.run())  # kept for the browser session: a rerun reads nothing
        assert [r.operation for r in records if r.kind == "object"] == []

    def test_an_image_is_shown_from_the_bytes_the_server_read(self, app_env):
        session, _ = chat_with([("photo.png", png())])
        at = new_browser(session=session.session_id)
        button(at, "Show image").click().run()
        assert not at.exception
        assert len(at.get("image")) == 1 and len(file_downloads(at)) == 1

    def test_a_lost_file_is_said_on_the_page(self, app_env):
        session, message = chat_with([("notes.md", b"x")])
        services().database.objects.delete_key(message.attachments[0].original.key)
        at = new_browser(session=session.session_id)
        button(at, "Get file").click().run()
        assert not at.exception
        assert any("“notes.md” is missing from the object store" in e.value.replace("\\", "") for e in at.error)
        assert file_downloads(at) == []

    def test_a_name_with_markdown_is_shown_literally(self, app_env):
        session, _ = chat_with([("evil![x](x.png).txt", b"x")])
        at = new_browser(session=session.session_id)
        (chip,) = expanders(at)
        assert "\\!\\[x\\]" in chip.proto.label  # escaped: no image, no link

    def test_a_name_with_markdown_in_a_lost_files_error_is_shown_literally(self, app_env):
        session, message = chat_with([("evil![x](x.png).txt", b"x")])
        services().database.objects.delete_key(message.attachments[0].original.key)
        at = new_browser(session=session.session_id)
        button(at, "Get file").click().run()
        assert not at.exception
        (error,) = [e for e in at.error if "missing from the object store" in e.value]
        assert "![x](x.png)" not in error.value and "“evil\\!\\[x\\]\\(x\\.png\\)\\.txt”" in error.value

    def test_a_name_with_markdown_in_a_refusal_is_shown_literally(self, app_env):
        from lib.errors import AttachmentRefused
        from lib.web.chat_page import UNSENT_REASON

        with pytest.raises(AttachmentRefused) as refused:
            prepare([("![x](logo.png).txt", b"\x00binary")], max_bytes=1024, max_count=5)
        at = new_browser()
        at.session_state["unsent"], at.session_state[UNSENT_REASON] = "my question", str(refused.value)
        at.run()
        assert not at.exception
        (error,) = at.error
        assert "![x](logo.png)" not in error.value and "“\\!\\[x\\]\\(logo\\.png\\)\\.txt” is not a type" in error.value

    def test_a_name_with_markdown_in_the_note_under_the_answer_is_shown_literally(self, app_env):
        from lib.context.cache import ContextCache
        from lib.web.chat_view import ContextNotes
        from tests.pages import wait_all_idle

        sent = services().chat.ask(
            DEV, None, "what is it?", history=[], summary=None, cache=ContextCache(), files=[("![x](x.png).txt", b"x")]
        )
        assert sent.live.wait(300) and wait_all_idle(300)
        session, message = sent.session, sent.message
        notes = ContextNotes()
        notes.add(
            message.message_id, "The model saw 0 of 1 attached files; attached files not sent: “![x](x.png).txt”."
        )
        at = AppTest_with_state(session.session_id, context_notes=notes)
        (caption,) = [c for c in at.caption if "attached files not sent" in c.value]
        assert "![x](x.png)" not in caption.value and "“\\!\\[x\\]\\(x\\.png\\)\\.txt”" in caption.value

    def test_a_name_with_markdown_in_a_refused_regenerate_is_shown_literally(self, app_env):
        from lib.context.cache import ContextCache
        from tests.pages import wait_all_idle

        sent = services().chat.ask(
            DEV, None, "what is it?", history=[], summary=None, cache=ContextCache(), files=[("![x](x.png).md", b"x")]
        )
        assert sent.live.wait(300) and wait_all_idle(300)
        services().database.objects.delete_key(sent.message.attachments[0].original.key)
        at = new_browser(session=sent.session.session_id)
        button(at, "Regenerate").click().run()
        assert not at.exception
        (error,) = [e for e in at.error if "missing from the object store" in e.value]
        assert "![x](x.png)" not in error.value and "“\\!\\[x\\]\\(x\\.png\\)\\.md”" in error.value

    def test_a_name_with_markdown_in_any_domain_error_the_page_shows_is_shown_literally(self):
        """ui.errors_shown is how Retry (and other actions) say a ChatError: a lost file's name stays text there."""
        from streamlit.testing.v1 import AppTest

        def page():
            from lib.errors import BodyUnavailable
            from lib.web import ui

            with ui.errors_shown():
                raise BodyUnavailable("The file “![x](x.png).md” is missing from the object store.")

        at = AppTest.from_function(page).run()
        assert not at.exception
        (error,) = at.error
        assert error.value == "The file “\\!\\[x\\]\\(x\\.png\\)\\.md” is missing from the object store."

    def test_an_image_that_will_not_decode_is_said_and_never_crashes_the_page(self, app_env):
        from lib.web.attachment_view import LOADED

        session, message = chat_with([("photo.png", png())])
        at = AppTest_with_state(session.session_id, **{LOADED: {message.attachments[0].attachment_id: b"junk"}})
        assert not at.exception
        assert any("“photo.png” cannot be shown" in e.value.replace("\\", "") for e in at.error)


def AppTest_with_state(session_id, **state):  # noqa: N802 - reads as the AppTest it makes
    """The chat page opened with `state` already in its browser session (as an earlier run left it)."""
    from streamlit.testing.v1 import AppTest

    from tests.pages import APP, HANG_S

    at = AppTest.from_file(APP, default_timeout=HANG_S)
    at.query_params["session"] = session_id
    for name, value in state.items():
        at.session_state[name] = value
    return at.run()


class TestTheComposerDraft:
    def test_opening_another_chat_or_new_chat_gives_a_new_box_so_a_draft_stays_where_it_was_typed(self, app_env):
        """A draft lives in the browser's box; a box of another key is another widget, which starts empty (the
        browser test types a draft and sees it stay behind: tests/test_browser_attachments.py)."""
        first, _ = chat_with([("notes.md", b"x")], question="first chat")
        second, _ = chat_with([("notes.md", b"y")], question="second chat")
        at = new_browser(session=first.session_id)
        keys = [[b.key for b in at.chat_input]]
        row = next(r for r in sidebar_rows(at) if r.key.endswith(second.session_id))
        row.click().run()
        assert not at.exception
        keys.append([b.key for b in at.chat_input])
        button(at, "New chat").click().run()
        keys.append([b.key for b in at.chat_input])
        assert not at.exception
        assert all(len(k) == 1 for k in keys) and len({k[0] for k in keys}) == 3  # one box each time, each new

    def test_a_new_chats_first_question_keeps_its_box(self, app_env):
        at = new_browser()
        before = [b.key for b in at.chat_input]
        send(at, "the first question of a chat")
        assert [b.key for b in at.chat_input] == before  # the same widget: no second, faded box beside it


class TestWhatTheModelSaw:
    def test_each_attached_file_is_a_part_named_by_its_file(self, app_env):
        from lib.context.cache import ContextCache
        from tests.pages import settle

        chat = services().chat
        sent = chat.ask(
            DEV, None, "compare them", history=[], summary=None, cache=ContextCache(),
            files=[("notes.md", b"ship friday"), ("spec.pdf", make_pdf(("Spec v2",)))],
        )  # fmt: skip
        assert sent.live.wait(300)
        at = settle(new_browser(session=sent.session.session_id))
        at.session_state[f"saw-{sent.message.message_id}"] = True
        at.run()
        assert not at.exception
        table = at.dataframe[0].value
        rows = [(p, w) for p, w in zip(table["Part"], table["What"]) if p == "Attached file"]
        assert rows == [("Attached file", "notes.md"), ("Attached file", "spec.pdf")]
