"""Share links through the pages (AppTest on the embedded DynamoDB): the chat header's Share, the shared page a
colleague opens, "Continue in my own chat", the owner's list with Revoke, sharing off, and a viewer not signed in."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lib.storage.shares import NOT_FOUND
from lib.turn.shares import COPY_MODEL
from lib.web import share_view
from tests.pages import APP, DEV, HANG_S, button, new_browser, requests_made, send, services, sidebar_titles

ALICE = "alice@example.com"


def alices_chat(title: str | None = None, question: str = "How do I size a table?", answer: str = "By its items."):
    svc = services()
    session, message = svc.store.create_session(ALICE, question, system_prompt_id="default-v1")
    svc.store.finish_message(
        ALICE,
        message,
        output_body=answer,
        input_token=1,
        output_token=1,
        response_start_time=message.create_time,
        response_end_time=message.create_time,
    )
    if title is not None:
        session = svc.store.rename_session(ALICE, session, title)
    return session


def shared_page(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=HANG_S)
    at.run()
    at.switch_page("pages/shared.py")
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    assert not at.exception, at.exception
    return at


def codes(at) -> list[str]:
    return [c.value for c in at.code]


def share_opened(at) -> AppTest:
    """The open chat's Share popover opened (its content, and the owner's links, are read only while open)."""
    at.session_state[f"{share_view.POPOVER}{at.session_state['chat_view'].open_id}"] = True
    at.run()
    assert not at.exception, at.exception
    return at


def labels(at) -> list[str]:
    return [b.label for b in at.button]


@pytest.mark.usefixtures("app_env")
class TestTheOwner:
    def test_share_in_the_header_makes_a_link_shown_once_with_a_copy_box(self):
        at = send(new_browser(), "What is a partition key?")
        assert not [c for c in codes(at) if "/shared?t=" in c]
        made = requests_made(lambda: share_opened(at))
        assert [r.operation for r in made if r.action == "share"] == ["Query"]  # no live link: no BatchGetItem
        button(at, "Create link").click().run()
        assert not at.exception, at.exception
        (url,) = [c for c in codes(at) if "/shared?t=" in c]
        token = url.split("t=", 1)[1]
        (link,) = services().shares.links(DEV)
        assert link.turns == 1 and services().shares.open("bob@example.com", token).turns[0].question == (
            "What is a partition key?"
        )
        # a link exists: the popover offers it, Update link and Revoke, and no second Create link
        assert "Create link" not in labels(at) and {"Update link", "Revoke"} <= set(labels(at))
        assert requests_made(lambda: at.run()) == []  # the made link was applied to the list: nothing re-read

    def test_a_new_browser_session_sees_the_chats_link_without_its_address(self):
        session_id = _dev_chat()
        services().shares.share(DEV, session_id)
        at = share_opened(new_browser(session=session_id))
        assert "Create link" not in labels(at) and "Revoke" in labels(at)
        assert not [c for c in codes(at) if "/shared?t=" in c]  # the app never had the token to show again
        assert any("Its address was shown once" in c.value for c in at.caption)

    def test_revoke_in_the_popover_asks_first_and_cancel_keeps_the_link(self):
        session_id = _dev_chat()
        _, token = services().shares.share(DEV, session_id)
        at = share_opened(new_browser(session=session_id))
        made = requests_made(lambda: button(at, "Revoke").click().run())
        assert made == [] and any("Revoke this link?" in w.value for w in at.warning)
        button(at, "Cancel").click().run()
        assert services().shares.open("bob@example.com", token).turns  # still live
        button(at, "Revoke").click().run()
        made = requests_made(lambda: button(at, "Yes, revoke").click().run())
        assert [r.operation for r in made if r.action == "share"] == ["TransactWriteItems"]
        assert any("Link revoked" in x.value for x in at.success) and "Create link" in labels(at)
        with pytest.raises(Exception, match="does not exist"):
            services().shares.open("bob@example.com", token)

    def test_the_list_shows_my_links_and_revoke_stops_one(self):
        session = alices_chat()
        shares = services().shares
        mine, token = shares.share(DEV, _dev_chat())
        shares.share(ALICE, session.session_id)  # someone else's: never listed here
        at = shared_page()
        assert [b for b in at.button if b.label == "Revoke"] and len([b for b in at.button if b.label == "Revoke"]) == 1
        button(at, "Revoke").click().run()
        assert services().shares.open("bob@example.com", token).turns  # asked first: nothing revoked yet
        button(at, "Yes, revoke").click().run()
        assert not at.exception, at.exception
        assert any("Link revoked" in s.value for s in at.success)
        assert not [b for b in at.button if b.label == "Revoke"]
        with pytest.raises(Exception, match="does not exist"):
            shares.open("bob@example.com", token)

    def test_a_revoked_links_card_can_be_removed_with_one_delete(self):
        shares = services().shares
        link, _ = shares.share(DEV, _dev_chat())
        shares.revoke(DEV, link)
        at = shared_page()
        made = requests_made(lambda: button(at, "Remove from this list").click().run())
        assert not at.exception, at.exception
        assert [r.operation for r in made if r.action == "share"] == ["DeleteItem"]
        assert shares.links(DEV) == [] and "Remove from this list" not in labels(at)
        assert any("No shared links yet" in i.value for i in at.info)

    def test_a_rerun_of_the_list_makes_no_request_and_reload_reads_it_again(self):
        shares = services().shares
        shares.share(DEV, _dev_chat())
        at = shared_page()
        assert [r.operation for r in requests_made(lambda: at.run())] == []
        made = requests_made(lambda: button(at, "Reload").click().run())
        assert [r.operation for r in made if r.action == "share"] == ["Query", "BatchGetItem"]


def _dev_chat() -> str:
    svc = services()
    session, message = svc.store.create_session(DEV, "my own question", system_prompt_id="default-v1")
    svc.store.finish_message(
        DEV,
        message,
        output_body="my own answer",
        input_token=1,
        output_token=1,
        response_start_time=message.create_time,
        response_end_time=message.create_time,
    )
    return session.session_id


@pytest.mark.usefixtures("app_env")
class TestTheViewer:
    def test_a_colleague_sees_the_chat_read_only_with_its_title_as_text(self):
        session = alices_chat(title="![x](http://evil.example/t.png) plan")
        _, token = services().shares.share(ALICE, session.session_id)
        at = shared_page(t=token)
        (title,) = at.subheader
        assert title.value.startswith("\\!\\[x\\]")  # escaped: shown as the characters, not an image
        assert any(
            "Shared by alice@example.com" in c.value.replace("\\", "") and "read-only" in c.value for c in at.caption
        )
        assert "How do I size a table?" in [m.value for m in at.markdown]
        assert "By its items." in [m.value for m in at.markdown]
        assert not at.chat_input  # read-only: nothing to send
        assert not [b for b in at.button if b.label in ("Retry", "Rename")]

    def test_an_unknown_or_revoked_token_says_the_one_sentence(self):
        session = alices_chat()
        link, token = services().shares.share(ALICE, session.session_id)
        unknown = shared_page(t="made-up")
        services().shares.revoke(ALICE, link)
        revoked = shared_page(t=token)
        assert [w.value for w in unknown.warning] == [w.value for w in revoked.warning] == [NOT_FOUND]
        assert "How do I size a table?" not in [m.value for m in revoked.markdown]

    def test_continue_in_my_own_chat_copies_it_into_my_account(self):
        session = alices_chat()
        _, token = services().shares.share(ALICE, session.session_id)
        at = shared_page(t=token)
        newer = _dev_chat()  # made after Alice's chat: the copy, made now, sorts above it
        button(at, "Continue in my own chat").click().run()
        assert not at.exception, at.exception
        mine, other = services().store.list_sessions(DEV).items
        assert other.session_id == newer and mine.title == "How do I size a table? (copy)"
        (turn,) = services().store.open_session(DEV, mine.session_id).messages
        assert turn.output_body == "By its items." and turn.model == COPY_MODEL
        assert services().store.list_sessions(ALICE).items[0].session_id == session.session_id  # hers untouched
        # the chat page says it is a copy and shows no token or time figures for it
        assert any(c.value == share_view.COPIED_CAPTION for c in at.caption)
        assert not [c.value for c in at.caption if " s · " in c.value or "out tokens" in c.value]
        assert sidebar_titles(at)[0] == "How do I size a table? (copy)"

    def test_a_rerun_makes_no_request_and_counts_no_second_view(self):
        session = alices_chat()
        _, token = services().shares.share(ALICE, session.session_id)
        at = shared_page(t=token)
        assert [r.operation for r in requests_made(lambda: at.run()) if r.action in ("share", "shared")] == []
        assert services().shares.links(ALICE)[0].view_count == 1


@pytest.mark.usefixtures("app_env")
class TestSharingOff:
    def test_no_share_control_and_links_say_sharing_is_off(self, monkeypatch):
        session = alices_chat()
        _, token = services().shares.share(ALICE, session.session_id)
        monkeypatch.setenv("CHAT_SHARING", "off")
        at = send(new_browser(), "What is a sort key?")
        assert not [b for b in at.button if b.label == "Create link"]
        viewer = shared_page(t=token)
        assert any("turned off" in i.value for i in viewer.info)
        assert "How do I size a table?" not in [m.value for m in viewer.markdown]


@pytest.mark.usefixtures("app_env")
def test_a_viewer_who_is_not_signed_in_is_refused_and_sees_nothing(monkeypatch):
    session = alices_chat()
    _, token = services().shares.share(ALICE, session.session_id)
    monkeypatch.setenv("CHAT_IDENTITY", "header")  # behind the SSO proxy, and this request did not come through it
    at = AppTest.from_file(str(APP).replace("app.py", "pages/shared.py"), default_timeout=HANG_S)
    at.query_params["t"] = token
    made = requests_made(lambda: at.run())
    assert not at.exception, at.exception
    assert any("sign-in proxy" in e.value for e in at.error)
    assert "How do I size a table?" not in [m.value for m in at.markdown]
    assert [r for r in made if r.action == "shared"] == []
