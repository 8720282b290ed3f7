"""The chat page over the cold tier (docs/archive.md): an archived chat opens with every turn (restored on open), and
one whose archive is damaged or missing says so and is never shown as an empty chat. AppTest, the embedded
database and its object store in memory."""

from __future__ import annotations

import datetime as dt

from lib.ops.archive import archive_old_chats
from lib.storage import keys
from tests.pages import DEV, new_browser, requests_made, services, shown_text

OLD = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)


def archived_chat(turns: int = 2) -> str:
    store = services().store
    moments = iter(OLD + dt.timedelta(seconds=i) for i in range(100))
    with keys.clock(lambda: next(moments)):
        session = None
        for n in range(turns):
            if session is None:
                session, message = store.create_session(DEV, f"old question {n}", system_prompt_id="default-v1")
            else:
                session, message = store.send_message(DEV, session, f"old question {n}", system_prompt_id="default-v1")
            store.finish_message(
                DEV,
                message,
                output_body=f"old answer {n}",
                input_token=1,
                output_token=1,
                response_start_time=keys.now(),
                response_end_time=keys.now(),
            )
    report = archive_old_chats(store.archive, [DEV], 30, now=OLD + dt.timedelta(days=60))
    assert [o.outcome for _, o in report.outcomes] == ["archived"]
    return session.session_id


class TestOpeningAnArchivedChat:
    def test_it_opens_with_every_turn_and_is_live_again(self, app_env):
        session_id = archived_chat()
        opened = []
        records = requests_made(lambda: opened.append(new_browser(session=session_id)))
        at = opened[0]
        assert not at.exception and not at.error
        expected = ["old question 0", "old answer 0", "old question 1", "old answer 1"]
        assert len(at.chat_message) == len(expected)
        assert all(text in shown_text(m) for m, text in zip(at.chat_message, expected))
        assert [r.operation for r in records if r.kind == "object"] == ["GetObject", "DeleteObject"]
        assert services().store.get_session(DEV, session_id).archive is None

    def test_a_damaged_archive_is_said_on_the_page_and_nothing_is_lost(self, app_env):
        session_id = archived_chat()
        store = services().store
        ref = store.get_session(DEV, session_id).archive
        store.archive.objects.backend.put_bytes(ref.key, b"not the archive", sha256="0" * 64)
        at = new_browser(session=session_id)
        assert not at.exception
        assert any("archived, and its archive in the object store is damaged" in e.value for e in at.error)
        assert not any("old answer" in shown_text(m) for m in at.chat_message)  # no half chat, no empty one
        assert store.get_session(DEV, session_id).archive == ref  # still archived, nothing deleted
        assert store.archive.objects.backend.get_bytes(ref.key) == b"not the archive"

    def test_a_missing_archive_is_said_on_the_page(self, app_env):
        session_id = archived_chat()
        store = services().store
        store.archive.objects.delete_key(store.get_session(DEV, session_id).archive.key)
        at = new_browser(session=session_id)
        assert not at.exception
        assert any("its archive is missing from the object store" in e.value for e in at.error)
