"""The Search page through AppTest: results with title, date, highlighted snippet and a deep link; only the
signed-in user's chats, whatever the URL says; hostile text shown, never rendered."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lib.config import Settings
from lib.search.indexer import index_turn_after_save, make_indexer
from lib.web import ui
from lib.web.render import plain_label
from tests.pages import HANG_S

APP = str(Path(__file__).resolve().parents[1] / "app.py")
DEV = "dev@localhost"


@pytest.fixture
def svc(app_env):
    return ui._services(Settings.load())


def chat(svc, user: str, question: str, answer: str):
    session, message = svc.store.create_session(user, question, system_prompt_id="p")
    done = svc.store.finish_message(
        user,
        message,
        output_body=answer,
        input_token=1,
        output_token=1,
        response_start_time=message.create_time,
        response_end_time=message.create_time,
    )
    assert index_turn_after_save(make_indexer(svc), user, session.title, done)
    return session, done


def search_page(query: str | None = None, **params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=HANG_S)
    at.run()
    at.switch_page("pages/search.py")
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    assert not at.exception, at.exception
    if query is not None:
        at.text_input[0].set_value(query).run()
        assert not at.exception, at.exception
    return at


def links(at) -> list[str]:
    """Each result's link to its turn, "label -> ?query" (a st.page_link to the chat page, opened in this tab)."""
    return [f"{e.proto.label} -> ?{e.proto.query_string}" for e in at.get("page_link") if e.proto.query_string]


def test_a_result_has_its_title_date_highlighted_snippet_and_a_link_to_the_turn(svc):
    session, message = chat(svc, DEV, "How do we rotate the database password?", "Use the secrets manager rotation.")
    at = search_page("rotate password")
    (link,) = links(at)
    assert link == f"**{plain_label(session.title)}** -> ?session={session.session_id}&turn={message.message_id}"
    assert "**rotate**" in " ".join(m.value for m in at.markdown) and "**password**" in " ".join(
        m.value for m in at.markdown
    )
    moment = message.create_time
    assert any(c.value.endswith(moment[:4]) for c in at.caption)


def test_a_snippet_shows_the_answers_words_not_its_markdown(svc):
    answer = (
        "**General**, in three steps:\n\n| step | what to do |\n|---|---|\n| 1 | ask |\n\n_This is turn 3_ of "
        "`our` chat, see [the docs](http://example.com/d). " + "More words follow here. " * 30
    )
    chat(svc, DEV, "How should we deploy the invoicing service?", answer)
    at = search_page("deploy invoicing")
    (snippet,) = [m.value.replace("\\", "") for m in at.markdown if "General" in m.value]  # unescaped
    assert snippet.startswith(
        "How should we **deploy** the **invoicing** service? — General, in three steps: step "
        "what to do 1 ask This is turn 3 of our chat, see the docs. More words"
    )
    assert snippet.endswith(" …") and snippet.split()[-2] in {"More", "words", "follow", "here."}  # cut at a word
    assert not any(
        mark in snippet.replace("**deploy**", "").replace("**invoicing**", "")
        for mark in ("**", "|", "---", "`", "http")
    )


def test_a_result_shows_the_chats_current_title_for_one_more_read(svc):
    from tests.pages import requests_made

    session, message = chat(svc, DEV, "How do we rotate the database password?", "Use the secrets manager rotation.")
    svc.store.rename_session(DEV, session, "Secrets runbook")  # after the turn was indexed with the old title
    at = search_page()
    records = requests_made(lambda: at.text_input[0].set_value("rotate password").run())
    assert not at.exception
    assert links(at) == [f"**Secrets runbook** -> ?session={session.session_id}&turn={message.message_id}"]
    assert sorted((r.operation, r.action) for r in records if r.action == "search") == [
        ("BatchGetItem", "search"),
        ("SearchVectors", "search"),
    ]


@pytest.mark.parametrize(
    "stored, shown",
    [
        (
            "Use `__init__.py` and `*args`, or ```python x = 1 # note a | b``` then",
            "Use __init__.py and *args, or python x = 1 # note a | b then",
        ),  # code as written
        (
            "snake_case, 2*3*4, 2 * 3 and x**2 stay; **bold** and _it_ go; ## Steps here",
            "snake_case, 2*3*4, 2 * 3 and x**2 stay; bold and it go; Steps here",
        ),
    ],
)
def test_a_snippet_keeps_code_and_words_as_written(stored, shown):
    from lib.search.indexer import readable_snippet

    assert readable_snippet(stored) == shown


def test_the_caption_says_what_the_results_hold_of_the_query_words(svc):
    chat(svc, DEV, "How do we rotate the database password?", "Use the secrets manager rotation.")
    chat(svc, DEV, "Kubernetes ingress timeouts", "Raise proxy-read-timeout.")
    captions = lambda at: [c.value for c in at.caption]  # noqa: E731
    # A word of the query is there (and bold), another is not: no result has all of them, and the page says that.
    partial = search_page("rotate kumquat")
    assert "**rotate**" in " ".join(m.value for m in partial.markdown)
    assert "No result has all your words; these have some of them." in captions(partial)
    assert not [c for c in captions(partial) if "No close match" in c]
    # Every word in a result: nothing to excuse.
    assert not [c for c in captions(search_page("rotate password")) if c.startswith("No result")]
    # Nonsense: none of the words, nothing close in meaning: nothing shown, rather than twenty unrelated turns.
    nonsense = search_page("zzqxv kumquat submarine")
    assert links(nonsense) == [] and "Nothing found" in nonsense.info[0].value


def test_only_the_signed_in_users_chats_whatever_the_url_says(svc):
    chat(svc, "bob@example.com", "Bob's salary negotiation notes", "Ask for the budget first.")
    for params in (
        {},
        {"user": "bob@example.com"},
        {"user_id": "bob@example.com", "q": "salary negotiation"},
        {"session": "x", "as": "bob@example.com"},
    ):
        at = search_page("salary negotiation", **params)
        assert links(at) == []
        assert "Bob" not in " ".join(m.value for m in at.markdown)


def test_hostile_text_is_shown_escaped_never_rendered(svc):
    chat(
        svc,
        DEV,
        "Render ![x](http://evil.example/p.png) <script>alert(1)</script> please",
        "[click](javascript:alert(1)) **not bold**",
    )
    at = search_page("render script alert")
    shown = " ".join([m.value for m in at.markdown] + links(at))
    assert "![x](http" not in shown and "](javascript" not in shown and "\\!\\[x\\]" in shown


@pytest.mark.parametrize("query, text", [("a", "at least two"), ("zq", "No chats match yet")])
def test_short_and_unmatched_queries_say_so(svc, query, text):
    at = search_page(query)
    assert text in " ".join(i.value for i in at.info)


def test_q_fills_the_box(svc):
    chat(svc, DEV, "Kubernetes ingress timeouts", "Raise proxy-read-timeout.")
    at = search_page(None, q="ingress timeouts")
    assert at.text_input[0].value == "ingress timeouts" and len(links(at)) == 1


def test_the_cost_page_shows_admins_vector_bytes_with_their_price_unknown(svc, monkeypatch):
    monkeypatch.setenv("CHAT_ADMINS", DEV)  # how the figures are made is said to admins
    chat(svc, DEV, "How do we rotate the database password?", "Use the secrets manager rotation.")
    search_page("rotate password")
    svc.ledger.flush(final=True)  # the page's own process reads the stored ledger
    at = AppTest.from_file(APP, default_timeout=HANG_S)
    at.run()
    at.switch_page("pages/cost.py").run()
    assert not at.exception, at.exception
    (line,) = [c.value for c in at.caption if c.value.startswith("Vector search is billed in bytes")]
    assert "price unknown: set CHAT_PRICE_VECTOR_WRITE_PER_GB" in line and "bytes written to the vector index" in line


def test_the_sidebar_keeps_your_chats_and_new_chat_and_a_row_opens_that_chat(svc):
    session, _ = chat(svc, DEV, "How do we rotate the database password?", "Use the secrets manager rotation.")
    at = search_page()
    rows = [b for b in at.sidebar.button if b.key == f"open-{session.session_id}"]
    assert len(rows) == 1 and [b.label for b in at.sidebar.button][0] == "New chat"
    rows[0].click().run()
    assert not at.exception and at.subheader[0].value == plain_label(session.title)  # the chat page, that chat
