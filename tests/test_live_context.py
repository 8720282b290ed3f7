"""The context engine wired into the chat page: work after the save in the worker, what the model saw,
the note under an answer, the summary divider."""

import pytest

from lib.storage.records import DONE
from tests.pages import DEV, button, new_browser, requests_made, send, services, settle

pytestmark = pytest.mark.usefixtures("app_env")


def open_id(at):
    value = at.query_params["session"]
    return value[0] if isinstance(value, list) else value


def memories():
    from lib.storage.memories import MemoryStore

    db = services().database
    return MemoryStore(db.client, db.table, db.meter).load(DEV)[0]


class TestContextOnThePage:
    def test_what_the_model_saw_is_stored_with_the_turn_and_shown_when_opened(self):
        at = send(new_browser(), "My name is Ada and I prefer Python.")
        assert [e.label for e in at.expander if e.label == "What the model saw"] == ["What the model saw"]
        assert not at.dataframe  # a closed expander draws nothing
        send(at, "What language do I like?")
        (message,) = [
            m
            for m in services().store.open_session(DEV, open_id(at)).messages
            if m.input_body == "What language do I like?"
        ]
        kinds = [part["kind"] for part in message.context]
        assert kinds[0] == "system" and kinds[-1] == "question" and "turns" in kinds
        saw = [e for e in at.expander if e.label == "What the model saw"][-1]
        saw.proto.expanded = True
        at.session_state[f"saw-{message.message_id}"] = True
        at.run()
        table = at.dataframe[0].value
        assert list(table["Part"]) == [
            {
                "system": "Instructions",
                "memory": "Memory",
                "turns": "Recent turns",
                "question": "Your question",
                "summary": "Summary of earlier turns",
                "recalled": "Recalled older turn",
            }[k]
            for k in kinds
        ]
        assert list(table["Tokens"]) == [part["tokens"] for part in message.context]
        what = dict(zip(kinds, table["What"]))
        assert what["turns"] == "The newest turn before this question, word for word"
        assert what["question"] == "What language do I like?"

    def test_memories_are_extracted_by_the_worker_after_the_save(self):
        at = send(new_browser(), "My name is Ada and I prefer Python.")
        assert services().store.open_session(DEV, open_id(at)).messages[0].status == DONE
        kept = memories()
        if not kept:
            pytest.skip("the demo extractor keeps no fact from this question")
        send(at, "Which language should the example use?")
        (message,) = [
            m
            for m in services().store.open_session(DEV, open_id(at)).messages
            if m.input_body.startswith("Which language")
        ]
        assert {part.get("id") for part in message.context if part["kind"] == "memory"} == {m.memory_id for m in kept}

    def test_a_suggestion_clicked_is_sent_but_keeps_no_memory(self):
        at = new_browser()
        (chip,) = [b for b in at.button if b.label.startswith("Draft a short email")]
        settle(chip.click().run())
        (message,) = services().store.open_session(DEV, open_id(at)).messages
        assert message.input_body.startswith("Draft a short email") and message.status == DONE
        assert memories() == []  # what the user clicked is not a fact about them

    def test_a_summary_written_after_the_save_shows_its_divider_with_view_and_regenerate(self, monkeypatch):
        monkeypatch.setenv("CHAT_VERBATIM_TURNS", "1")
        monkeypatch.setenv("CHAT_SUMMARY_EVERY", "2")
        at = send(new_browser(), "first question about keys")
        send(at, "second question about indexes")
        send(at, "third question about streams")
        settle(at)  # the post-save work (the summary) has finished; the next run applies it
        summary = at.session_state["chat_view"].summary
        assert summary is not None and summary.covered_turns == 2
        captions = [c.value for c in at.caption]
        assert any("Earlier turns summarised (2 turns" in c for c in captions)
        records = requests_made(lambda: button(at, "Regenerate summary").click().run())
        # the turns it covers (1 Query), then the conditional write
        assert not at.exception and [r.operation for r in records] == ["Query", "PutItem"]
        assert at.session_state["chat_view"].summary.version == summary.version + 1
        reopened = new_browser(session=open_id(at))
        assert any("Earlier turns summarised (2 turns" in c.value for c in reopened.caption)


class TestSearchIndex:
    def test_the_worker_indexes_the_saved_turn_for_search_after_the_save(self):
        from lib.search.indexer import make_indexer

        at = send(new_browser(), "How do I rotate the cursor secret on every replica?")
        (saved,) = services().store.open_session(DEV, open_id(at)).messages
        indexer = make_indexer(services())
        query = indexer.embed(DEV, ["rotate the cursor secret"], kind="query")[0]
        hits = indexer.vectors.search(DEV, query, 5)
        assert saved.message_id in {hit.item.get("message_id") for hit in hits}, [h.item for h in hits]
