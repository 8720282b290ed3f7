"""For platform owners, in Chromium: an admin sets a user's daily spend limit on the page; the user, on a priced
model (the real anthropic client against the local fake server), sees their usage and the 80% warning, and is
refused over the limit with the question kept and a sentence naming the limit, what is left and when it resets;
the user is refused the admin pages; the admin's audit trail lists the change and downloads as CSV. And, from a
shell, the purge report counts per record kind and `check --user` proves nothing is left."""

import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest
from playwright.sync_api import expect

from tests.fake_anthropic import Behaviour, FakeAnthropic
from tests.test_browser import (
    ARTIFACTS,
    CHROMIUM,
    HANG_MS,
    HANG_S,
    ROOT,
    browser,  # noqa: F401 (the fixture)
    idle,
    prepared,
    send,
    serve_app,
)

ADMIN, USER = "admin@example.com", "kim@example.com"
SECRET = "proxy-secret"
PRICE = 1000  # USD per million tokens, in and out: a token costs $0.001, so one answer's cost is plain to read
LIMIT = "0.50"
# The first answer: 25 input + 380 output tokens = $0.405, with its title's call over 80% of the $0.50 limit. The
# next question's reserve (its prompt and CHAT_MAX_TOKENS=100 output tokens, over $0.10) cannot fit in what is left.
FIRST = Behaviour("text", chunks=["Keys ", "are chosen ", "by access pattern."], output_tokens=380, streamed_only=True)
QUESTION = "How should we pick sort keys for the audit table?"
REFUSED = "What about a second table for archived records?"

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")


@pytest.fixture
def fake_model():
    fake = FakeAnthropic()
    yield fake
    fake.close()


@pytest.fixture
def app(tmp_path, fake_model):
    """The app behind an SSO proxy's header identity, limits on (none set yet), a priced Claude model."""
    limits = tmp_path / "limits.json"
    limits.write_text("{}")  # limits on, none set: the admin sets them on the page
    with serve_app(
        tmp_path,
        CHAT_IDENTITY="header",
        CHAT_PROXY_SECRET=SECRET,
        CHAT_ADMINS=ADMIN,
        CHAT_SPEND_LIMITS=str(limits),
        ANTHROPIC_API_KEY="sk-test",
        CHAT_ANTHROPIC_BASE_URL=fake_model.url,
        CHAT_MODEL_MAX_RETRIES="0",
        CHAT_MODEL_PRICES=json.dumps({"claude-sonnet-4-6": [PRICE, PRICE]}),
        CHAT_MAX_TOKENS="100",
        CHAT_DEMO_DELAY="0",
    ) as url:
        yield url


def signed_in(browser, user, width=1366, height=900):
    """A browser whose every request carries what the SSO proxy sets: the user and the proxy's secret."""
    context = browser.new_context(
        extra_http_headers={"X-Forwarded-Email": user, "X-Proxy-Secret": SECRET},
        viewport={"width": width, "height": height},
        accept_downloads=True,
    )
    return context.new_page()


def shot(page, name, full_page=True):
    idle(page)
    page.screenshot(path=str(ARTIFACTS / f"owners-{name}.png"), full_page=full_page)


def cell(page, text):
    """A table cell holding `text`, once drawn (Streamlit's grid keeps an accessible table of its cells)."""
    found = page.locator("[data-testid='stDataFrame'] td").filter(has_text=re.compile(f"^{re.escape(text)}$")).first
    found.wait_for(state="attached", timeout=HANG_MS)  # the accessible table is hidden under the canvas
    return found.text_content()


def test_limit_set_by_an_admin_warns_then_refuses_the_user_and_the_audit_trail_shows_it(app, browser, fake_model):
    # The admin sets the user's daily limit on the Spend limits page.
    admin = signed_in(browser, ADMIN)
    admin.goto(f"{app}/limits")
    admin.get_by_text("Set a limit").wait_for(timeout=HANG_MS)
    admin.get_by_label("Scope").first.click()
    admin.get_by_role("option", name="A user").click()
    admin.get_by_label("Group name or user id").fill(USER)
    admin.get_by_label("USD per UTC day").fill(LIMIT)
    admin.get_by_role("button", name="Save").click()
    admin.get_by_text(f"Saved: User {USER}.").wait_for(timeout=HANG_MS)
    idle(admin)
    assert cell(admin, f"User {USER}") == f"User {USER}" and cell(admin, "$0.50") == "$0.50"
    shot(admin, "limits-admin")

    # The user asks on the priced model; the answer costs 81% of the limit.
    fake_model.enqueue(FIRST)
    user = signed_in(browser, USER)
    user.goto(app)
    box = user.locator("[data-testid='stChatInput'] textarea")
    box.wait_for(timeout=HANG_MS)
    box.fill(QUESTION)
    send(box)
    user.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
    user.reload()  # the 80% line is drawn from the figures of the last check, which a new run reads
    user.get_by_text("You have used").first.wait_for(timeout=HANG_MS)
    warning = user.get_by_text("You have used").first.inner_text()
    # The answer's 380 output tokens and its title's few (the same priced model) come to over 80% of $0.50.
    found = re.search(
        r"You have used (\d+)% of your own daily limit \((\$[\d.]+) of \$0\.50; \$[\d.]+ left until "
        r"midnight UTC \(in ",
        warning,
    )
    assert found and 80 <= int(found[1]) < 100, warning
    share, spent = f"{found[1]}%", found[2]

    # Their own usage: today, this month, the limit, and the warning.
    user.goto(f"{app}/cost")
    user.get_by_text("Your spend and limits").wait_for(timeout=HANG_MS)
    idle(user)
    metrics = " ".join(user.locator("[data-testid='stMetric']").all_inner_texts())
    assert "Today (UTC)" in metrics and "This month (UTC)" in metrics and spent in metrics, metrics
    assert user.get_by_text("$0.50 a day (yours)", exact=False).count() == 1
    assert user.locator("[data-testid='stAlert']").filter(has_text=f"You have used {share}").count() == 1
    shot(user, "usage-user")

    # Over the limit: refused, the question kept, and a sentence that says which limit, what is left and when.
    user.goto(app)
    box = user.locator("[data-testid='stChatInput'] textarea")
    box.wait_for(timeout=HANG_MS)
    asked = len(fake_model.requests)
    box.fill(REFUSED)
    send(box)
    refusal = user.locator("[data-testid='stAlert']").filter(has_text="Not sent: this could pass")
    refusal.wait_for(timeout=HANG_MS)
    text = refusal.inner_text()
    assert "your own daily limit of $0.50" in text and "is left" in text and "midnight UTC (in " in text, text
    kept = user.get_by_label(
        "Your message was not sent; it is kept here. Copy it, or send it again once the reason above allows:"
    )
    # The box is drawn, then filled: wait for its value rather than read it the moment it appears.
    expect(kept).to_have_value(REFUSED, timeout=HANG_MS)
    assert len(fake_model.requests) == asked  # the model was not called
    shot(user, "refused-user")
    phone = signed_in(browser, USER, 390, 844)
    phone.goto(app)
    phone.get_by_text("You have used").first.wait_for(timeout=HANG_MS)
    shot(phone, "chat-warning-phone", full_page=False)

    # The admin pages refuse the user, and show none of the data.
    for path, message in (("limits", "Only admins can see and change spend limits"), ("audit", "Only admins")):
        user.goto(f"{app}/{path}")
        user.get_by_text(message).first.wait_for(timeout=HANG_MS)
        idle(user)
        assert user.locator("[data-testid='stDataFrame']").count() == 0
        assert (
            USER
            not in " ".join(user.locator("[data-testid='stMain']").all_inner_texts()).replace(
                f"Signed in as {USER}", ""
            )
            or path == "audit"
        )
    shot(user, "audit-refused-user")

    # The admin's view: the user's spend next to the limit, then the audit trail.
    admin.goto(f"{app}/limits")
    admin.get_by_text("Spend by user").wait_for(timeout=HANG_MS)
    idle(admin)
    assert cell(admin, USER) == USER and cell(admin, f"{share} of the daily limit") == f"{share} of the daily limit"
    assert cell(admin, spent) == spent
    shot(admin, "limits-spend-admin")

    admin.goto(f"{app}/audit")
    admin.get_by_text("Download (CSV)").wait_for(timeout=HANG_MS)
    idle(admin)
    with admin.expect_download() as caught:
        admin.get_by_role("button", name="Download (CSV)").click()
    rows = list(csv.DictReader(io.StringIO(caught.value.path().read_text())))
    mine = [(r["Actor"], r["Action"], r["Target"], r["Outcome"]) for r in rows if r["Action"] == "limits.set"]
    assert sorted(mine) == sorted([(ADMIN, "limits.set", f"spend limit: User {USER}", o) for o in ("started", "ok")]), (
        mine
    )
    refused = [(r["Actor"], r["Outcome"], r["Reason"]) for r in rows if r["Action"] in ("limits.view", "audit.view")]
    assert (USER, "refused", "not_admin") in refused and (ADMIN, "ok", "") in refused
    # A question refused by the user's own limit is the user's turn, not an admin action: the log has it
    # (limits.refused), the audit trail does not.
    assert not [r for r in rows if r["Actor"] == USER and r["Outcome"] == "refused" and "view" not in r["Action"]]
    assert not [r for r in rows if REFUSED in json.dumps(r) or QUESTION in json.dumps(r)]  # never chat text
    shot(admin, "audit-admin")
    phone = signed_in(browser, ADMIN, 390, 844)
    phone.goto(f"{app}/audit")
    phone.get_by_text("Download (CSV)").wait_for(timeout=HANG_MS)
    shot(phone, "audit-admin-phone")
    phone.goto(f"{app}/limits")
    phone.get_by_text("Spend by user").wait_for(timeout=HANG_MS)
    shot(phone, "limits-admin-phone")


PREPARE_USER = """
from lib.config import Settings
from lib.services import build_services
svc = build_services(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}}}, secrets={{}}))
store = svc.store
for title in ("Quarterly review", "Holiday rota"):
    session, m = store.create_session({user!r}, "A question about " + title, system_prompt_id="default-v1", title=title)
    store.finish_message({user!r}, m, output_body="An answer.", input_token=1, output_token=1,
                         response_start_time=m.create_time, response_end_time=m.create_time)
    svc.indexer.index_turns({user!r}, title, store.all_messages({user!r}, session.session_id))
svc.ledger.flush()
"""


def admin_command(folder, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "ANTHROPIC_"))}
    env["CHAT_DATA_DIR"] = str(folder)
    return subprocess.run(
        [sys.executable, "-m", "lib.admin", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S
    )


def test_the_purge_report_from_a_shell_counts_per_record_kind_and_check_proves_nothing_is_left(tmp_path):
    folder = tmp_path / "data"
    prepared(PREPARE_USER.format(folder=str(folder), user=USER))
    before = admin_command(folder, "check", "--user", USER)
    assert before.returncode == 0 and "2 sessions, 2 turns" in before.stdout and "nothing left" not in before.stdout

    planned = admin_command(folder, "purge-user", "--user", USER, "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr[-2000:]
    report = json.loads(planned.stdout)  # one document for a compliance ticket
    expected = {"sidebar rows": 2, "chat metas": 2, "turns": 2, "search vectors": 2, "registry row": 1}
    assert report["items_by_kind"] == expected and report["dry_run"] is True
    assert "no chat text" in report["usage_ledger"] and report["audit_request_id"]
    assert "Quarterly review" not in planned.stdout and "A question about" not in planned.stdout

    purged = admin_command(folder, "purge-user", "--user", USER)
    assert purged.returncode == 0, purged.stderr[-2000:]
    lines = purged.stdout.splitlines()
    for kind, count in expected.items():
        assert [line for line in lines if line.split() == [str(count), *kind.split()]], (kind, purged.stdout)
    assert "nothing left" in purged.stdout and "audit request id:" in purged.stdout
    assert "Quarterly review" not in purged.stdout + purged.stderr

    after = admin_command(folder, "check", "--user", USER)
    assert after.returncode == 0, after.stdout + after.stderr[-2000:]
    assert f"{USER}: nothing left: no item under USER#{USER}, no registry row" in after.stdout
