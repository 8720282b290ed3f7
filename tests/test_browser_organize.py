"""Organize and share in Chromium, with two signed-in users, each through an SSO proxy of the test's (the header
identity, as tests/test_identity_browser.py serves it): Alice pins a chat (it stays on top after a newer one), makes
a project with instructions and starts a chat in it (the instructions are in "What the model saw"), starts a
temporary chat (the page says it is not kept; it is not in her chats), and shares the project chat. Bob opens the
link (read-only: none of Alice's instructions or what her model saw) and continues in his own chat; Alice revokes
the link; Bob's reload says so and shows nothing. Screenshots at 1366x900 and 390x844 (test-artifacts/). And a
project named with a Markdown image makes the browser fetch nothing where its name is shown (the list, the
header's line, the "All chats" label, Move to project)."""

from __future__ import annotations

import re

import pytest

from tests.header_proxy import HeaderProxy
from tests.test_browser import ARTIFACTS, CHROMIUM, HANG_MS, browser, idle, serve_app  # noqa: F401 (fixture)
from tests.test_browser_chat import hits  # noqa: F401 (the fixture: a local server counting what the browser fetches)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

ALICE, BOB = "alice@example.com", "bob@example.com"
SECRET = "proxy-secret"
INSTRUCTIONS = "Always end with the word PINEAPPLE-RULE."


@pytest.fixture
def proxies(tmp_path):
    with serve_app(tmp_path, CHAT_IDENTITY="header", CHAT_PROXY_SECRET=SECRET, CHAT_DEMO_DELAY="0") as url:
        port = int(url.rsplit(":", 1)[1])
        alice, bob = HeaderProxy.signing_in(port, ALICE, SECRET), HeaderProxy.signing_in(port, BOB, SECRET)
        yield alice, bob
        alice.close()
        bob.close()


def opened(browser, proxy, width=1366, height=900):  # noqa: F811
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.base = f"http://127.0.0.1:{proxy.port}"
    return page


def shot(page, name, full_page=False):
    idle(page)
    page.wait_for_timeout(300)  # the last rerun's layout settles
    page.screenshot(path=str(ARTIFACTS / f"organize-{name}.png"), full_page=full_page)


def sidebar(page):
    return page.locator("[data-testid='stSidebar']")


def ask(page, question):
    box = page.locator("[data-testid='stChatInput'] textarea")
    box.wait_for(timeout=HANG_MS)
    box.fill(question)
    box.press("Enter")
    page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
    idle(page)


def title(page):
    """The open chat's title, without a question mark (the demo's titler drops it; the first draw may not yet)."""
    return page.locator("[data-testid='stHeading'] h3").first.inner_text().strip().rstrip("?")


def rows(page):
    """The sidebar's chat rows, top to bottom (their labels)."""
    found = page.evaluate(
        "[...document.querySelectorAll(\"[data-testid=stSidebar] [class*='st-key-open-'] button\")]"
        ".map(b => [b.closest(\"[class*='st-key-open-']\").className.match(/st-key-open-\\w+/)[0], b.innerText])"
    )
    seen, labels = set(), []
    for key, text in found:
        if key not in seen:
            seen.add(key)
            labels.append(text.strip())
    return labels


def main_text(page):
    """The page's text outside the sidebar."""
    return page.evaluate(
        "(document.querySelector('[data-testid=stMain]') || document.querySelector('[data-testid=stAppViewMain]')"
        " || document.querySelector('[data-testid=stMainBlockContainer]')).innerText"
    )


def new_chat(page):
    sidebar(page).get_by_role("button", name="New chat").click()
    page.get_by_text("What can I help with?").wait_for(timeout=HANG_MS)
    idle(page)


def test_two_users_pin_project_temporary_share_continue_and_revoke(proxies, browser):  # noqa: F811
    alice_proxy, bob_proxy = proxies
    alice = opened(browser, alice_proxy)
    alice.goto(alice.base)
    sidebar(alice).get_by_text(ALICE).wait_for(timeout=HANG_MS)

    # Pin: the pinned chat stays on top after a newer chat
    ask(alice, "What is a partition key?")
    pinned = title(alice)
    alice.get_by_role("button", name="Pin").click()
    alice.get_by_role("button", name="Unpin").wait_for(timeout=HANG_MS)
    new_chat(alice)
    ask(alice, "What is a sort key?")
    newer = title(alice)
    assert rows(alice)[0].startswith(pinned) and rows(alice)[1].startswith(newer), rows(alice)

    # A project with instructions; a chat started in it gets them, shown in "What the model saw"
    sidebar(alice).get_by_role("button", name="Projects").click()
    sidebar(alice).get_by_role("button", name="New project").click()
    alice.get_by_role("textbox", name="Name").fill("Q3 migration")
    alice.get_by_role("textbox", name="Instructions for every chat in this project").fill(INSTRUCTIONS)
    shot(alice, "new-project-1366")
    create = alice.get_by_role("button", name="Create project")
    box = create.bounding_box()
    assert box and box["y"] + box["height"] <= 900, box  # the button is on screen, not cut off
    create.click()
    sidebar(alice).get_by_text("No chats in this project yet").wait_for(timeout=HANG_MS)
    assert "project=" in alice.url  # a reload shows the same project
    new_chat(alice)
    alice.get_by_text("This chat starts in the project Q3 migration").wait_for(timeout=HANG_MS)
    ask(alice, "Plan the cut-over")
    in_project = title(alice)
    alice.get_by_text("Project: Q3 migration").wait_for(timeout=HANG_MS)
    alice.get_by_text("What the model saw").last.click()
    alice.get_by_text(INSTRUCTIONS).first.wait_for(timeout=HANG_MS)
    shot(alice, "project-chat-1366", full_page=True)
    alice.reload()
    alice.locator("[data-testid='stChatInput'] textarea").wait_for(timeout=HANG_MS)
    sidebar(alice).get_by_role("button", name="Edit project").wait_for(timeout=HANG_MS)  # a project is chosen
    idle(alice)
    assert [r for r in rows(alice) if r.startswith(in_project)] and not [r for r in rows(alice) if r.startswith(pinned)]

    # All chats again: the project chat's row carries the project's name
    sidebar(alice).locator("[data-testid='stSelectbox']").click()
    alice.get_by_role("option", name="All chats").click()
    sidebar(alice).get_by_text("What is a sort key").first.wait_for(timeout=HANG_MS)  # all chats are listed again
    idle(alice)
    labelled = [r for r in rows(alice) if r.startswith(in_project)]
    assert labelled and "Q3 migration" in labelled[0], rows(alice)
    assert "project=" not in alice.url

    # A temporary chat: the page says it is not kept, and it is not in the sidebar
    new_chat(alice)
    alice.get_by_text("Temporary chat").first.click()
    alice.get_by_text("This chat will not be in your chat list").wait_for(timeout=HANG_MS)
    ask(alice, "Just between us: what is a GSI?")
    alice.get_by_text("Not in your chat list, search or memories").wait_for(timeout=HANG_MS)
    temporary = title(alice)
    assert not [r for r in rows(alice) if r.startswith(temporary)], rows(alice)
    shot(alice, "temporary-1366")

    # Share the project chat: after the link exists, the popover offers Update and Revoke, not a second link
    sidebar(alice).locator("[class*='st-key-open-'] button:visible").filter(has_text=in_project).first.click()
    alice.get_by_text("Project: Q3 migration").wait_for(timeout=HANG_MS)
    idle(alice)
    alice.get_by_role("button", name="Share").click()
    alice.get_by_role("button", name="Create link").click()
    code = alice.locator("[data-testid='stCode']").filter(has_text="/shared?t=")
    code.first.wait_for(timeout=HANG_MS)
    link = code.first.inner_text().strip()
    assert link.startswith(alice.base + "/shared?t=")
    assert alice.get_by_role("button", name="Create link").count() == 0
    assert alice.get_by_role("button", name="Revoke").count() == 1
    shot(alice, "share-popover-1366")

    # Bob, through his own sign-in, opens the link: read-only, none of Alice's instructions or model context
    bob_link = link.replace(alice.base, f"http://127.0.0.1:{bob_proxy.port}")
    for width, height in ((1366, 900), (390, 844)):
        bob = opened(browser, bob_proxy, width, height)
        bob.goto(bob_link)
        bob.get_by_text("read-only").first.wait_for(timeout=HANG_MS)
        idle(bob)
        assert "Shared by alice@example.com" in bob.inner_text("body")
        assert INSTRUCTIONS not in bob.inner_text("body") and bob.get_by_text("What the model saw").count() == 0
        assert bob.locator("[data-testid='stChatInput']").count() == 0
        shot(bob, f"shared-view-{width}", full_page=True)
    # The menu does not mark "Shared links" as the page Bob is on (he is reading a colleague's chat)
    active = bob.evaluate(
        "[...document.querySelectorAll('[data-testid=stSidebar] a[aria-current=page]')].map(a => a.innerText)"
    )
    assert not [a for a in active if "Shared links" in a], active
    if width == 390:
        bob.set_viewport_size({"width": 1366, "height": 900})
    bob.get_by_role("button", name="Continue in my own chat").click()
    bob.locator("[data-testid='stChatInput'] textarea").wait_for(timeout=HANG_MS)
    bob.get_by_text("Copied from a shared link").first.wait_for(timeout=HANG_MS)
    idle(bob)
    assert title(bob) == f"{in_project} (copy)"
    assert rows(bob)[0].startswith(f"{in_project} (copy)")  # a new chat: on top
    assert not re.search(r"\d+\.\d s", main_text(bob))  # no timing figures
    shot(bob, "copy-1366")
    bob.set_viewport_size({"width": 390, "height": 844})
    shot(bob, "copy-390")

    # Alice revokes (it asks first); Bob's reload says so and shows nothing of the chat
    alice.goto(f"{alice.base}/shared")
    alice.get_by_role("button", name="Revoke").click()
    alice.get_by_text("Revoke this link?").wait_for(timeout=HANG_MS)
    shot(alice, "revoke-confirm-1366")
    alice.get_by_role("button", name="Yes, revoke").click()
    alice.get_by_text("Link revoked").wait_for(timeout=HANG_MS)
    alice.get_by_role("button", name="Remove from this list").wait_for(timeout=HANG_MS)
    shot(alice, "links-revoked-1366")
    bob.goto(bob_link)
    bob.get_by_text("This link does not exist or was revoked.").wait_for(timeout=HANG_MS)
    idle(bob)
    assert "Plan the cut-over" not in main_text(bob)
    shot(bob, "revoked-390")

    # Alice on a phone: her project chat, its header
    phone = opened(browser, alice_proxy, 390, 844)
    phone.goto(alice.base)
    phone.locator("[data-testid='stChatInput'] textarea").wait_for(timeout=HANG_MS)
    shot(phone, "home-390")


def test_a_project_named_with_a_markdown_image_fetches_nothing_in_any_place_it_is_shown(proxies, browser, hits):  # noqa: F811
    alice_proxy, _ = proxies
    alice = opened(browser, alice_proxy)
    alice.goto(alice.base)
    sidebar(alice).get_by_role("button", name="Projects").click()
    sidebar(alice).get_by_role("button", name="New project").click()
    name = f"![x]({hits.url}/name) Q3"
    alice.get_by_role("textbox", name="Name").fill(name)
    alice.get_by_role("button", name="Create project").click()
    sidebar(alice).get_by_text("No chats in this project yet").wait_for(timeout=HANG_MS)
    new_chat(alice)
    ask(alice, "In the project")
    alice.get_by_text(f"Project: {name}").wait_for(timeout=HANG_MS)  # the header's line, as typed
    sidebar(alice).locator("[data-testid='stSelectbox']").click()
    alice.get_by_role("option", name="All chats").click()
    # the row's label in All chats, as typed (its start: a long name is cut so that the title keeps room)
    sidebar(alice).get_by_text(name[:12], exact=False).first.wait_for(timeout=HANG_MS)
    alice.get_by_role("button", name="Move to project").click()
    idle(alice)
    alice.wait_for_timeout(1000)  # time for any image request to arrive
    assert hits.paths == []
    alice.evaluate(f"fetch('{hits.url}/control').then(r => r.text())")  # the counter sees a real fetch
    alice.wait_for_timeout(500)
    assert hits.paths == ["/control"]
