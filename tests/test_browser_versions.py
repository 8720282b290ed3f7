"""Steering a conversation in Chromium: Regenerate with versions, Edit the newest question, an older one in a
branch, and the keyboard."""

import pytest

from tests.test_browser import (  # noqa: F401 (fixtures)
    ARTIFACTS,
    CHROMIUM,
    HANG_MS,
    app_url,
    ask,
    browser,
    idle,
    page,
    send,
)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

MESSAGES = "[data-testid='stChatMessage']"


def saved(page, n=1):
    """The n-th answer saved and the page's run over (a save can rerun the page: a click meanwhile lands on an
    element being replaced, as a person's second click would not)."""
    page.get_by_text("out tokens").nth(n - 1).wait_for(timeout=HANG_MS)
    idle(page)


@pytest.mark.parametrize("app_url", [0.01], indirect=True)
def test_regenerate_then_switch_back_to_the_first_answer(app_url, page):
    ask(page, app_url, "Name three DynamoDB limits")
    saved(page)
    first = page.locator(MESSAGES).nth(1).inner_text()
    page.get_by_role("button", name="Regenerate").click()
    page.get_by_text("2 / 2").wait_for(timeout=HANG_MS)
    saved(page)
    second = page.locator(MESSAGES).nth(1).inner_text()
    assert second.split("You asked")[0] != first.split("You asked")[0]  # the demo opens a new answer differently
    page.screenshot(path=str(ARTIFACTS / "chat-versions.png"))
    page.locator("div[class*='st-key-ver-prev-'] button:visible").click()
    page.get_by_text("1 / 2").wait_for(timeout=HANG_MS)
    assert page.locator(MESSAGES).nth(1).inner_text().split("You asked")[0] == first.split("You asked")[0]
    page.reload()  # the choice is stored: another session sees the same version
    page.get_by_text("1 / 2").wait_for(timeout=HANG_MS)


@pytest.mark.parametrize("app_url", [0.01], indirect=True)
def test_edit_the_newest_question_and_send_it_again(app_url, page):
    ask(page, app_url, "What is a partition key")
    saved(page)
    page.get_by_role("button", name="Edit").click()
    box = page.get_by_label("Edit your question")
    box.fill("What is a sort key?")
    page.get_by_role("button", name="Send edited question").click()
    page.locator(MESSAGES).filter(has_text="What is a sort key?").first.wait_for(timeout=HANG_MS)
    saved(page)
    page.get_by_text("2 / 2").wait_for(timeout=HANG_MS)
    assert page.locator(MESSAGES).count() == 2  # the same turn, not a second one
    page.screenshot(path=str(ARTIFACTS / "chat-edited.png"))


@pytest.mark.parametrize("app_url", [0.01], indirect=True)
def test_edit_an_older_question_in_a_branch_and_go_back_to_the_original(app_url, page):
    ask(page, app_url, "What is a partition key")
    saved(page)
    for n, question in enumerate(["And a sort key?", "Give an example"], start=2):
        box = page.locator("[data-testid='stChatInput'] textarea")
        box.fill(question)
        send(box)
        saved(page, n)
    original = page.url
    edit = page.get_by_role("button", name="Edit").nth(1)  # under the second question
    # In mid-screen, as a person has what they click: its popover opens below it and would pass the bottom of the
    # window if the button sat at its edge (where a click scrolls it to), out of a click's reach until scrolled.
    edit.evaluate("button => button.scrollIntoView({block: 'center'})")
    edit.click()
    page.get_by_label("Edit your question").fill("And a local secondary index?")
    page.get_by_role("button", name="Send in a new branch").click()
    page.get_by_text("A branch: the turns before an edited question were copied").wait_for(timeout=HANG_MS)
    page.locator(MESSAGES).filter(has_text="And a local secondary index?").first.wait_for(timeout=HANG_MS)
    page.locator("[data-testid='stSidebar']").get_by_role("button", name="What is a partition key (branch)").wait_for(
        timeout=HANG_MS
    )
    page.get_by_text("Copied from the original chat when this branch was made").wait_for(timeout=HANG_MS)
    page.wait_for_function(f'document.querySelectorAll("{MESSAGES}").length === 4', timeout=HANG_MS)
    saved(page)  # the edited question's answer (the copied turn shows no token figures)
    idle(page)
    page.screenshot(path=str(ARTIFACTS / "chat-branch.png"))
    assert page.url != original and page.locator(MESSAGES).count() == 4  # the first turn copied, then the edit
    assert page.get_by_text("Copied from the original chat when this branch was made").count() == 1
    assert page.locator(MESSAGES).filter(has_text="Give an example").count() == 0
    page.get_by_role("button", name="Open the original chat").click()
    page.locator(MESSAGES).filter(has_text="Give an example").first.wait_for(timeout=HANG_MS)
    page.locator("div[class*='st-key-linked-']").first.wait_for(timeout=HANG_MS)  # at the question edited
    idle(page)
    assert page.locator(MESSAGES).count() == 6
    page.screenshot(path=str(ARTIFACTS / "chat-branch-original.png"))


@pytest.mark.parametrize("app_url", [0.1], indirect=True)
def test_escape_stops_an_answer_and_the_shortcuts_open_a_new_chat_and_search(app_url, page):
    ask(page, app_url, "Tell me about DynamoDB keys")
    page.get_by_text("You asked").first.wait_for(timeout=HANG_MS)
    page.keyboard.press("Escape")
    page.get_by_text("Stopped before the answer was complete.").wait_for(timeout=HANG_MS)
    page.keyboard.press("Control+Shift+O")
    page.get_by_text("What can I help with?").wait_for(timeout=HANG_MS)
    page.keyboard.press("Control+K")
    page.get_by_role("heading", name="Search your chats").wait_for(timeout=HANG_MS)
    assert "search" in page.url
