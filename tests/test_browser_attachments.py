"""Files attached to a question, in Chromium: attach a text file and a PDF in the composer, ask, see their chips
and the demo model's answer about them; in a new browser session the chips are there and the file downloads from
this app's server with its name and bytes; a draft typed in one chat is not carried into New chat. Screenshots at
1366x900 and 390x844 in test-artifacts/."""

import pytest

from tests.test_attachments import make_pdf
from tests.test_browser import (
    ARTIFACTS,
    CHROMIUM,
    HANG_MS,
    attach,
    browser,  # noqa: F401 (the fixture)
    idle,
    send,
    serve_app,
)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

MESSAGES = "[data-testid='stChatMessage']"
NOTES = b"Launch checklist\n- freeze the schema on Monday\n- ship on Friday\n"
PDF = make_pdf(("The cut-over is planned for Friday 13 March.",))


def new_page(browser, width=1366, height=900):
    return browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True).new_page()


def chips(page):
    return page.locator(MESSAGES).first.locator("[data-testid='stExpander'] summary")


def test_attach_a_text_file_and_a_pdf_ask_reopen_elsewhere_and_download(tmp_path, browser):
    with serve_app(tmp_path, CHAT_DEMO_DELAY="0") as url:
        page = new_page(browser)
        page.goto(url)
        box = page.locator("[data-testid='stChatInput'] textarea")
        box.wait_for(timeout=HANG_MS)
        attach(
            page,
            [
                {"name": "notes.txt", "mimeType": "text/plain", "buffer": NOTES},
                {"name": "spec.pdf", "mimeType": "application/pdf", "buffer": PDF},
            ],
        )
        page.get_by_text("spec.pdf").first.wait_for(timeout=HANG_MS)  # the composer lists what is attached
        box.fill("When is the cut-over, and what comes before it?")
        send(box)
        page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
        answer = page.locator(MESSAGES).nth(1).inner_text()
        assert "I was given 2 attached file(s): “notes.txt” (text" in answer and "“spec.pdf” (pdf" in answer
        labels = [chips(page).nth(i).inner_text() for i in range(chips(page).count())]
        assert any(label.endswith("notes.txt · 64 bytes · text, 3 lines") for label in labels), labels
        assert any("spec.pdf" in label and "PDF, 1 page" in label for label in labels), labels
        idle(page)
        page.screenshot(path=str(ARTIFACTS / "attachments-asked.png"))

        again = new_page(browser)  # another browser session: nothing kept from the first
        again.goto(page.url)
        chips(again).first.wait_for(timeout=HANG_MS)
        chips(again).filter(has_text="notes.txt").click()
        again.get_by_role("button", name="Get file").first.click()
        download_button = again.get_by_role("button", name="Download notes.txt")
        download_button.wait_for(timeout=HANG_MS)
        with again.expect_download(timeout=HANG_MS) as caught:
            download_button.click()
        download = caught.value
        assert download.suggested_filename == "notes.txt"
        assert open(download.path(), "rb").read() == NOTES
        chips(again).filter(has_text="spec.pdf").click()
        again.get_by_text("The cut-over is planned for Friday 13 March.").first.wait_for(timeout=HANG_MS)
        idle(again)
        again.screenshot(path=str(ARTIFACTS / "attachments-reopened.png"))

        phone = new_page(browser, 390, 844)
        phone.goto(page.url)
        chips(phone).first.wait_for(timeout=HANG_MS)
        chips(phone).filter(has_text="spec.pdf").click()
        phone.get_by_text("The cut-over is planned for Friday 13 March.").first.wait_for(timeout=HANG_MS)
        idle(phone)
        opened = phone.get_by_role("button", name="Get file").first.element_handle(timeout=HANG_MS)
        opened.wait_for_element_state("stable", timeout=HANG_MS)  # the expander's opening has finished
        phone.screenshot(path=str(ARTIFACTS / "attachments-phone.png"))

        # A draft typed here and not sent stays behind when the user starts a new chat.
        draft = again.locator("[data-testid='stChatInput'] textarea")
        draft.fill("a half-written follow-up")
        again.get_by_role("button", name="New chat").first.click()
        again.get_by_text("What can I help with?").wait_for(timeout=HANG_MS)
        idle(again)
        assert again.locator("[data-testid='stChatInput'] textarea").input_value() == ""
