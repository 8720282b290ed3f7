"""Whole documents in Chromium: a 1 MB pasted document, then a 5 MB PDF attached to a follow-up, each answered,
reopened in another browser session (the document shown whole on "Show all", the PDF's text in its chip) and
exported as Markdown with the whole document. Screenshots at 1366x900 and on a phone (test-artifacts/)."""

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
TAIL = "Signed for the supplier: END-OF-DOCUMENT-7Q"
# A pasted contract of about 1 MB: numbered clauses, then a last line no preview reaches.
DOCUMENT = (
    "Please review this supply contract and the attached schedule.\n"
    + "".join(
        f"Clause {i}: the supplier delivers batch {i} within {i % 30 + 1} days of the order.\n" for i in range(14_000)
    )
    + TAIL
)
# A 5 MB PDF: a text layer of 120 short pages and, as in a real document, bulk that is not text (images, fonts).
PDF = make_pdf(
    [f"Schedule {i}: the notice period of batch {i} is {30 + i} days." for i in range(120)], padding=5 * 1024 * 1024
)


# A paste, as the browser does one: the whole text set at once and one input event (typing it would be 1 MB of keys).
PASTE = """(box, text) => {
  Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, "value").set.call(box, text);
  box.dispatchEvent(new Event("input", {bubbles: true}));
}"""


def new_page(browser, width=1366, height=900):  # noqa: F811
    return browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True).new_page()


def test_a_1_mb_document_and_a_5_mb_pdf_are_asked_about_reopened_elsewhere_and_exported(tmp_path, browser):  # noqa: F811
    assert 1_000_000 <= len(DOCUMENT.encode()) < 1_200_000 and 5 * 1024 * 1024 < len(PDF) < 6 * 1024 * 1024
    with serve_app(tmp_path, CHAT_DEMO_DELAY="0") as url:
        page = new_page(browser)
        page.goto(url)
        box = page.locator("[data-testid='stChatInput'] textarea")
        box.wait_for(timeout=HANG_MS)
        box.evaluate(PASTE, DOCUMENT)  # the document first, on its own
        send(box)
        page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
        question = page.locator(MESSAGES).first
        question.get_by_role("button", name="Show all (1.0 MB)").wait_for(timeout=HANG_MS)  # its start, not 1 MB
        assert question.get_by_text(TAIL).count() == 0
        idle(page)
        attach(page, [{"name": "schedule.pdf", "mimeType": "application/pdf", "buffer": PDF}])
        page.get_by_text("schedule.pdf").first.wait_for(timeout=HANG_MS)
        box.fill("What notice period does the attached schedule give batch 3?")
        send(box)
        page.get_by_text("out tokens").nth(1).wait_for(timeout=HANG_MS)
        idle(page)
        answer = page.locator(MESSAGES).nth(3).inner_text()
        assert "I was given 1 attached file(s): “schedule.pdf” (pdf" in answer
        page.screenshot(path=str(ARTIFACTS / "documents-asked.png"))

        again = new_page(browser)  # another browser session: everything from the table and the object store
        again.goto(page.url)
        question = again.locator(MESSAGES).first
        question.get_by_role("button", name="Show all (1.0 MB)").click()
        question.get_by_text(TAIL).wait_for(timeout=HANG_MS)  # the whole document, read from the object store
        second = again.locator(MESSAGES).nth(2)
        second.locator("[data-testid='stExpander'] summary").filter(has_text="schedule.pdf").click()
        again.get_by_text("Schedule 0: the notice period of batch 0 is 30 days.").first.wait_for(timeout=HANG_MS)
        idle(again)
        again.screenshot(path=str(ARTIFACTS / "documents-reopened.png"))

        again.get_by_role("button", name="Export").click()
        with again.expect_download(timeout=HANG_MS) as caught:
            again.get_by_role("button", name="Markdown").click()
        exported = open(caught.value.path(), encoding="utf-8").read()
        assert TAIL in exported and "Clause 13999:" in exported  # the whole document, not its 4 KB preview
        assert "schedule.pdf" in exported

        phone = new_page(browser, 390, 844)
        phone.goto(page.url)
        phone.locator(MESSAGES).first.get_by_role("button", name="Show all (1.0 MB)").wait_for(timeout=HANG_MS)
        idle(phone)
        phone.screenshot(path=str(ARTIFACTS / "documents-phone.png"))
