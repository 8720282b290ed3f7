"""A question shows as typed: its line breaks kept, a pasted traceback, log or code shown as a code block with its
whitespace, on the page, after a reload and in the Markdown export; nothing in it fetched."""

import pytest

from lib.export import typed_markdown
from lib.storage.records import Session
from lib.web.markdown_blocks import CODE, MARKDOWN, split
from lib.web.render import WORD_JOINER
from tests.pastes import LOG, TRACEBACK


def blocks(text):
    return split(typed_markdown(text))


class TestTypedMarkdown:
    def test_a_pasted_traceback_is_one_code_block_exactly_as_typed(self):
        assert blocks(TRACEBACK) == [type(blocks(TRACEBACK)[0])(CODE, TRACEBACK, None)]

    def test_a_40_line_log_is_one_code_block_exactly_as_typed(self):
        (block,) = blocks(LOG)
        assert block.kind == CODE and block.text == LOG

    def test_prose_before_and_after_a_traceback_stays_prose_around_the_code(self):
        text = f"Why does this fail?\n{TRACEBACK}\nIt worked yesterday."
        assert [(b.kind, b.text) for b in blocks(text)] == [
            (MARKDOWN, "Why does this fail?"),
            (CODE, TRACEBACK),
            (MARKDOWN, "It worked yesterday."),
        ]

    def test_pasted_code_keeps_its_indentation(self):
        code = "Fix this:\n\ndef add(a, b):\n    if a:\n        return a - b\n    return b"
        assert [(b.kind, b.text) for b in blocks(code)] == [(MARKDOWN, "Fix this:"), (CODE, code.split("\n\n")[1])]

    def test_prose_keeps_its_line_breaks(self):
        text = "Dear team,\nthe release moves to Friday.\nThanks, Ana"
        (block,) = blocks(text)
        assert block.kind == MARKDOWN and block.text.split("  \n") == text.split("\n")

    def test_lists_tables_and_fences_stay_markdown(self):
        text = "Compare:\n\n- one\n- two\n  - nested\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```sql\nSELECT 1;\n```"
        kinds = [b.kind for b in blocks(text)]
        assert kinds == [MARKDOWN, MARKDOWN, MARKDOWN, CODE]
        assert blocks(text)[3].language == "sql"

    def test_a_one_line_question_is_unchanged(self):
        assert typed_markdown("Explain this Python error: KeyError: 'user_id'") == (
            "Explain this Python error: KeyError: 'user_id'"
        )

    def test_backticks_in_a_pasted_block_cannot_close_its_fence(self):
        text = 'x = 1\n    fence = "```"\n    y = 2\nprint(x)'  # an indented ``` closes no fence
        (block,) = blocks(text)
        assert block.kind == CODE and block.text == text

    @pytest.mark.parametrize("text", ["look\n![x](http://127.0.0.1:9/p.png)\nthere", "![x](http://127.0.0.1:9/p.png)"])
    def test_an_image_in_a_question_is_never_fetched(self, text):
        from lib.web.stream_render import render_markdown
        from tests.test_stream_render import Recorder

        shown = Recorder()
        render_markdown(shown, typed_markdown(text))
        drawn = " ".join(text for _, text, _ in shown.shown())
        assert "![" not in drawn and WORD_JOINER in drawn


class TestExport:
    def session(self, n):
        return Session("s", "u", "Why KeyError", "2026-11-06T08:00:00.000Z", "2026-11-06T09:30:00.000Z", n)

    def turn(self, question, **fields):
        from lib.storage.records import Message

        return Message("m", "s", "2026-11-06T08:00:00.000Z", question, "default-v1", **fields)

    def test_a_pasted_traceback_is_a_code_block_in_the_markdown_export(self):
        from lib.export import to_markdown

        text = to_markdown(self.session(1), [self.turn(f"Why?\n{TRACEBACK}", status="done", output_body="Because.")])
        assert f"Why?\n\n```\n{TRACEBACK}\n```" in text

    def test_the_export_has_readable_times_one_turn_and_calls_a_stop_a_stop(self):
        from lib.export import to_markdown

        stopped = self.turn(
            "Tell me", status="failed", output_body="Half", error="Stopped before the answer was complete."
        )
        text = to_markdown(self.session(1), [stopped])
        assert "Started Nov 6, 2026, 08:00 UTC · 1 turn\n" in text
        assert "## Turn 1 · Nov 6, 2026, 08:00 UTC" in text
        assert "failed" not in text and "_(Stopped before the answer was complete.)_" in text
        assert "T08:00:00.000Z" not in text

    def test_the_markdown_export_fetches_nothing_either_and_keeps_code_as_written(self):
        from lib.export import to_markdown

        question = "look ![x](http://127.0.0.1:9/q.png)\n\n```\nprint('![not an image]')\n```"
        answer = "See ![y](http://127.0.0.1:9/a.png) and\n\n```md\n![kept](as-written.png)\n```"
        text = to_markdown(self.session(1), [self.turn(question, status="done", output_body=answer)])
        outside = text.replace("print('![not an image]')", "").replace("![kept](as-written.png)", "")
        assert "![" not in outside and "print('![not an image]')" in text and "![kept](as-written.png)" in text
