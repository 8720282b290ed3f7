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
from tests.test_browser import ARTIFACTS, CHROMIUM, HANG_MS, browser, idle, send, serve_app  # noqa: F401 (fixture)
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
    send(box)
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


# --- Pins, moving a chat between projects, the project list's order (the audit's stories) ---------------------------


def ask_more(page, question):
    """A follow-up in the open chat: waits for its own answer's token line, not an earlier turn's."""
    before = page.get_by_text("out tokens").count()
    box = page.locator("[data-testid='stChatInput'] textarea")
    box.fill(question)
    send(box)
    page.get_by_text("out tokens").nth(before).wait_for(timeout=HANG_MS)
    idle(page)


def open_chat(page, label):
    """Open a chat from its sidebar row; waits for its title in the header."""
    sidebar(page).locator("[class*='st-key-open-'] button:visible").filter(has_text=label).first.click()
    page.locator("[data-testid='stHeading'] h3").filter(has_text=label).first.wait_for(timeout=HANG_MS)
    idle(page)


def rows_become(page, expected):
    """The sidebar's rows, once their titles start with `expected` in order (a rerun after the save redraws them),
    else the last seen: the caller asserts. Bounded by HANG_MS."""
    deadline = page.evaluate("Date.now()") + HANG_MS
    seen = rows(page)
    while not _starts(seen, expected) and page.evaluate("Date.now()") < deadline:
        page.wait_for_timeout(200)
        idle(page)
        seen = rows(page)
    return seen


def _starts(seen, expected):
    return len(seen) == len(expected) and all(row.startswith(title) for row, title in zip(seen, expected))


def sidebar_captions(page):
    return sidebar(page).locator("[data-testid='stCaptionContainer']").all_inner_texts()


def choose(page, option):
    """Pick what the sidebar shows: "All chats" or a project."""
    sidebar(page).locator("[data-testid='stSelectbox']").click()
    page.get_by_role("option", name=option, exact=True).click()
    idle(page)


def project_options(page):
    """The sidebar's project list, top to bottom, as its dropdown shows it (closed again after)."""
    sidebar(page).locator("[data-testid='stSelectbox']").click()
    page.get_by_role("option").first.wait_for(timeout=HANG_MS)
    names = [t.strip() for t in page.get_by_role("option").all_inner_texts()]
    page.keyboard.press("Escape")
    idle(page)
    return names


def new_project(page, name):
    sidebar(page).get_by_role("button", name="New project").click()
    page.get_by_role("textbox", name="Name").fill(name)
    page.get_by_role("button", name="Create project").click()
    sidebar(page).get_by_text("No chats in this project yet").wait_for(timeout=HANG_MS)
    idle(page)


def test_two_pinned_chats_stay_on_top_in_the_order_pinned_and_an_unpinned_one_goes_back_by_time(proxies, browser):  # noqa: F811
    alice_proxy, _ = proxies
    alice = opened(browser, alice_proxy)
    alice.goto(alice.base)
    sidebar(alice).get_by_text(ALICE).wait_for(timeout=HANG_MS)
    titles = {}
    for name, question in (
        ("gsi", "What is a GSI?"),
        ("lsi", "What is an LSI?"),
        ("pk", "What is a partition key?"),
        ("sk", "What is a sort key?"),
    ):
        if titles:
            new_chat(alice)
        ask(alice, question)
        titles[name] = title(alice)
        if name in ("pk", "sk"):  # pinned in this order: the partition key's chat first
            alice.get_by_role("button", name="Pin", exact=True).click()
            alice.get_by_role("button", name="Unpin", exact=True).wait_for(timeout=HANG_MS)
            idle(alice)
    pk, sk, lsi, gsi = titles["pk"], titles["sk"], titles["lsi"], titles["gsi"]
    seen = rows_become(alice, [pk, sk, lsi, gsi])
    assert _starts(seen, [pk, sk, lsi, gsi]), seen  # the pins first, in the order pinned, then by time
    captions = sidebar_captions(alice)
    assert "Pinned" in captions and captions.index("Pinned") < captions.index("Today"), captions

    # A newer message in the oldest unpinned chat: it goes above the other unpinned one, never above a pin
    open_chat(alice, gsi)
    ask_more(alice, "And what does it cost?")
    seen = rows_become(alice, [pk, sk, gsi, lsi])
    assert _starts(seen, [pk, sk, gsi, lsi]), seen
    shot(alice, "pins-1366")

    # Unpin the first pinned chat: it goes back among the others by its last message time (after the GSI follow-up,
    # before the LSI question: asked between them)
    open_chat(alice, pk)
    alice.get_by_role("button", name="Unpin", exact=True).click()
    alice.get_by_role("button", name="Pin", exact=True).wait_for(timeout=HANG_MS)
    idle(alice)
    seen = rows_become(alice, [sk, gsi, pk, lsi])
    assert _starts(seen, [sk, gsi, pk, lsi]), seen
    shot(alice, "unpinned-1366")
    # A reload (a new browser session: the sidebar read again) shows the same order
    alice.reload()
    sidebar(alice).get_by_text(ALICE).wait_for(timeout=HANG_MS)
    idle(alice)
    seen = rows_become(alice, [sk, gsi, pk, lsi])
    assert _starts(seen, [sk, gsi, pk, lsi]), seen
    alice.set_viewport_size({"width": 390, "height": 844})
    alice.locator("[data-testid='stExpandSidebarButton']").click()  # on a phone the sidebar opens over the chat
    sidebar(alice).get_by_text("Pinned", exact=True).wait_for(timeout=HANG_MS)
    shot(alice, "unpinned-390")


def test_a_chat_moved_to_another_project_and_a_question_moving_its_project_to_the_top(proxies, browser):  # noqa: F811
    alice_proxy, _ = proxies
    alice = opened(browser, alice_proxy)
    alice.goto(alice.base)
    sidebar(alice).get_by_text(ALICE).wait_for(timeout=HANG_MS)
    sidebar(alice).get_by_role("button", name="Projects").click()
    new_project(alice, "Older project")
    older_made = alice.evaluate("Date.now()")  # the project's activity time is before this
    chats = []
    for question in ("Plan the cut-over", "List the risks"):
        new_chat(alice)
        alice.get_by_text("This chat starts in the project Older project").wait_for(timeout=HANG_MS)
        ask(alice, question)
        chats.append(title(alice))
    moving, staying = chats
    new_project(alice, "Newer project")
    assert project_options(alice) == ["All chats", "Newer project", "Older project"]

    # (b) Move a chat from the older project to the newer one
    choose(alice, "Older project")
    seen = rows_become(alice, [staying, moving])
    assert _starts(seen, [staying, moving]), seen
    open_chat(alice, moving)
    alice.get_by_text("Project: Older project").wait_for(timeout=HANG_MS)
    alice.get_by_role("button", name="Move to project").click()
    alice.locator("[data-testid='stPopoverBody'] [data-testid='stSelectbox']").click()
    alice.get_by_role("option", name="Newer project", exact=True).click()
    alice.get_by_role("button", name="Move", exact=True).click()
    alice.get_by_text("Project: Newer project").wait_for(timeout=HANG_MS)
    idle(alice)
    seen = rows_become(alice, [staying])  # still showing the older project: the moved chat has left its list
    assert _starts(seen, [staying]), seen
    shot(alice, "moved-1366")
    choose(alice, "Newer project")
    seen = rows_become(alice, [moving])
    assert _starts(seen, [moving]), seen
    choose(alice, "Older project")
    seen = rows_become(alice, [staying])
    assert _starts(seen, [staying]), seen

    # (c) A question in the older project moves it to the top of the list. Its row moves only when its activity is
    # a minute or more behind (lib/storage/projects.py ACTIVITY_STEP_S): wait until a minute has passed since it
    # was made (a wait for the design's step, not a bound on a hang).
    waited = older_made + 61_000 - alice.evaluate("Date.now()")
    if waited > 0:
        alice.wait_for_timeout(waited)
    open_chat(alice, staying)
    ask_more(alice, "Which risk is the largest?")
    assert project_options(alice) == ["All chats", "Older project", "Newer project"]  # in this browser session
    sidebar(alice).locator("[data-testid='stSelectbox']").click()
    alice.get_by_role("option").first.wait_for(timeout=HANG_MS)
    shot(alice, "project-list-moved-1366")  # the list open: the older project on top
    alice.keyboard.press("Escape")
    alice.reload()
    alice.locator("[data-testid='stChatInput'] textarea").wait_for(timeout=HANG_MS)
    idle(alice)
    assert project_options(alice) == ["All chats", "Older project", "Newer project"]  # read again: the same
    alice.set_viewport_size({"width": 390, "height": 844})
    alice.locator("[data-testid='stExpandSidebarButton']").click()  # on a phone the sidebar opens over the chat
    sidebar(alice).get_by_role("button", name="Edit project").wait_for(timeout=HANG_MS)
    shot(alice, "project-chat-390")
