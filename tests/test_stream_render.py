"""The block renderer: Markdown split into blocks that render alone, streamed with bounded work per chunk."""

import random

import pytest

from lib.model.models import demo_answer
from lib.web.markdown_blocks import CODE, MARKDOWN, PLAIN, Block, split
from lib.web.render import WORD_JOINER, plain_label, safe_markdown
from lib.web.stream_render import BlockRenderer, PacedRenderer, render_markdown


class Recorder:
    """Stands in for a Streamlit container: records what each element finally shows and every byte sent."""

    def __init__(self, log=None):
        self.log = log if log is not None else {"sent": 0, "draws": 0}
        self.elements: list = []

    def empty(self):
        slot = Slot(self.log)
        self.elements.append(slot)
        return slot

    def container(self):
        box = Recorder(self.log)
        self.elements.append(box)
        return box

    def _add(self, kind, text, **extra):
        self.log["sent"] += len(text)
        self.log["draws"] += 1
        self.elements.append((kind, text, extra.get("language")))

    def markdown(self, text):
        self._add("markdown", text)

    def code(self, text, language=None, wrap_lines=False):
        self._add("code", text, language=language)

    def caption(self, text):
        self._add("caption", text)

    def shown(self):
        out = []
        for element in self.elements:
            if isinstance(element, (Slot, Recorder)):
                out.extend(element.shown())
            else:
                out.append(element)
        return out


class Slot(Recorder):
    """st.empty(): each call replaces what it showed."""

    def _add(self, kind, text, **extra):
        self.elements = []
        super()._add(kind, text, **extra)

    def container(self):
        self.elements = []
        return super().container()

    def empty(self):
        self.elements = []
        self.log["yields"] = self.log.get("yields", 0) + 1


LONG_ANSWER = "\n\n".join(
    [
        "# A long answer",
        "Intro paragraph with *emphasis* and `code`.",
        "```python\ndef f(x):\n\n    return x  # a blank line inside the fence\n```",
        "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |",
        "1. first\n\n   continued under the first item\n\n2. second\n   ```bash\n   ls -l\n\n   echo hi\n   ```\n3. third",
        "> quoted\n> still quoted",
        "- a\n- b\n\n- c after a blank",
        "~~~\ntilde fence\n~~~",
        "Last paragraph.",
    ]
)


class TestSplit:
    def test_blocks_end_at_blank_lines_fences_and_list_ends_but_not_inside_fences_or_items(self):
        blocks = split(LONG_ANSWER)
        assert [b.kind for b in blocks] == [
            MARKDOWN,
            MARKDOWN,
            CODE,
            MARKDOWN,
            MARKDOWN,
            MARKDOWN,
            MARKDOWN,
            CODE,
            MARKDOWN,
        ]
        assert blocks[2] == Block(CODE, "def f(x):\n\n    return x  # a blank line inside the fence", "python")
        assert blocks[4].text.startswith("1. first") and blocks[4].text.endswith("3. third")  # one list
        assert blocks[6].text == "- a\n- b\n\n- c after a blank"

    def test_a_fence_interrupting_a_paragraph_starts_a_code_block(self):
        assert [b.kind for b in split("Look:\n```\nx\n```\nafter")] == [MARKDOWN, CODE, MARKDOWN]

    def test_an_open_fence_renders_as_code(self):
        assert split("text\n\n```js\nlet a = 1;\nlet b") == [
            Block(MARKDOWN, "text"),
            Block(CODE, "let a = 1;\nlet b", "js"),
        ]

    def test_inline_triple_backticks_are_not_a_fence(self):
        assert [b.kind for b in split("```not a fence``` here\n\nnext")] == [MARKDOWN, MARKDOWN]

    @pytest.mark.parametrize("seed", range(20))
    def test_any_chunking_of_a_stream_ends_with_the_blocks_of_the_whole_text(self, seed):
        rng = random.Random(seed)
        text = LONG_ANSWER + "\n\n" + demo_answer("How do I write python code for a DynamoDB table?")
        cuts = sorted(rng.sample(range(1, len(text)), 60))
        streamed, whole = Recorder(), Recorder()
        renderer = BlockRenderer(streamed)
        for cut in cuts:
            renderer.update(text[:cut])
        renderer.update(text, done=True)
        render_markdown(whole, text)
        assert streamed.shown() == whole.shown()
        assert len(whole.shown()) == len(split(text))


class TestBoundedMarkdown:
    def test_deep_nesting_is_shown_as_plain_text_and_says_so(self):
        (block,) = split(">" * 5000 + " deep")
        assert block.kind == PLAIN and "nests more than" in block.reason
        assert split("- " * 40 + "x")[0].kind == PLAIN
        assert split(" " * 200 + "- x")[0].kind == PLAIN
        shown = Recorder()
        render_markdown(shown, ">" * 5000)
        assert [kind for kind, _, _ in shown.shown()] == ["code", "caption"]
        assert "Shown as plain text" in shown.shown()[1][1]

    def test_runs_of_emphasis_marks_and_huge_blocks_are_plain(self):
        assert split("*_" * 20_000)[0].kind == PLAIN
        assert split("word " * 7_000)[0].kind == PLAIN
        ordinary = "Use `snake_case` and **bold** text. " * 20
        assert split(ordinary)[0].kind == MARKDOWN
        assert split("> a\n>> b\n- c\n  - d")[0].kind == MARKDOWN

    def test_limits_apply_per_block(self):
        text = "fine paragraph\n\n" + ">" * 100 + "\n\nfine again"
        assert [b.kind for b in split(text)] == [MARKDOWN, PLAIN, MARKDOWN]


class TestNoImages:
    @pytest.mark.parametrize(
        "payload",
        [
            "![x](http://h/a)",
            "![a [b]](http://h/b)",
            "![x][r]\n\n[r]: http://h/c",
            "`![x](http://h/d)`",
            "![x](<http://h/e>)",
            "\\![x](http://h/f)",
            "![![x](http://h/g)](http://h/h)",
        ],
    )
    def test_no_image_syntax_reaches_the_renderer(self, payload):
        sent = safe_markdown(payload)
        assert "![" not in sent and sent.replace(WORD_JOINER, "") == payload

    def test_titles_are_escaped_completely(self):
        assert plain_label("![t](http://h/)") == "\\!\\[t\\]\\(http\\://h/\\)"


class TestStreamingWork:
    def test_a_long_answer_sends_a_bounded_multiple_of_its_size(self):
        text = "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(400))  # about 130 KB
        chunks = [text[i : i + 6] for i in range(0, len(text), 6)]
        ticks = iter(range(10**9))
        shown = Recorder()
        paced = PacedRenderer(shown, clock=lambda: next(ticks) * 0.02)  # 300 characters a second
        for chunk in chunks:
            paced.add(chunk)
        paced.finish()
        assert paced.text == text and len(paced) == len(text)
        assert shown.log["sent"] <= 3 * len(text)
        assert shown.log["draws"] <= len(chunks) * 0.02 / 0.25 + len(split(text))  # coalesced

    def test_every_chunk_is_drawn_when_they_come_slowly_yet_finished_blocks_are_sent_once(self):
        text = "one\n\ntwo\n\nthree"
        ticks = iter(range(1000))
        shown = Recorder()
        paced = PacedRenderer(shown, clock=lambda: next(ticks) * 10.0)
        assert all(paced.add(chunk) for chunk in text)  # each chunk is past the previous redraw's wait
        paced.finish()
        assert [t for _, t, _ in shown.shown()] == ["one", "two", "three"]

    def test_a_tab_joining_mid_answer_is_sent_what_it_missed_once_then_only_what_arrives(self):
        text = "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(400))  # about 130 KB
        half = len(text) // 2
        ticks = iter(range(10**9))
        shown = Recorder()
        paced = PacedRenderer(shown, clock=lambda: next(ticks) * 0.25)  # a read every POLL_S
        paced.add(text[:half])  # what the worker had when this tab opened the chat
        assert 0.95 * half <= shown.log["sent"] <= half  # the missed text once (less the blank lines between blocks)
        for start in range(half, len(text), 80):  # 80 characters per read: 320 a second
            paced.add(text[start : start + 80])
        paced.finish()
        assert shown.log["sent"] <= half + 3 * (len(text) - half)
        whole = Recorder()
        render_markdown(whole, text)
        assert shown.shown() == whole.shown()

    def test_a_read_with_nothing_new_sends_nothing(self):
        ticks = iter(range(10**6))
        shown = Recorder()
        paced = PacedRenderer(shown, clock=lambda: next(ticks) * 10.0)  # every read is past its redraw time
        assert paced.add("one\n\ntwo\n\nthree is still open")
        sent = shown.log["sent"]
        assert not paced.add("") and shown.log["sent"] == sent
        assert paced.add(" and grows")
        open_block = shown.shown()[-1][1]
        assert open_block.endswith("three is still open and grows") and shown.log["sent"] == sent + len(open_block)

    def test_finish_with_the_saved_text_draws_the_rest_as_finished_blocks(self):
        shown = Recorder()
        paced = PacedRenderer(shown, clock=lambda: 0.0)
        paced.add("# Title\n\n```python\nx = 1\n")  # stopped inside a code fence
        paced.finish("# Title\n\n```python\nx = 1\n```\n\nDone.")
        whole = Recorder()
        render_markdown(whole, "# Title\n\n```python\nx = 1\n```\n\nDone.")
        assert shown.shown() == whole.shown()


class TestReplyText:
    def test_the_text_so_far_is_current_mid_stream_and_after_the_consumer_stops(self):
        from lib.model.models import Reply

        reply = Reply("m", iter(["a", "b", "c", "d"]))
        seen = []
        for chunk in reply:
            seen.append(reply.text)
            if chunk == "c":
                break  # the page stopped reading (a click elsewhere): the generator stays suspended
        assert seen == ["a", "ab", "abc"] and reply.text == "abc" and not reply.complete


class TestCutEmphasis:
    """An answer cut short (still streaming, or stopped) inside italics or bold shows no stray '_' or '*'."""

    @pytest.mark.parametrize(
        "cut, shown",
        [
            ("This is _the first turn of our", "This is _the first turn of our_"),
            ("**Bold and *italic", "**Bold and *italic***"),
            ("ends right after the mark _", "ends right after the mark"),
            ("see `code _x` and _open", "see `code _x` and _open_"),
            ("snake_case, 2 * 3 and *done*", "snake_case, 2 * 3 and *done*"),  # nothing open: unchanged
        ],
    )
    def test_open_emphasis_is_closed(self, cut, shown):
        from lib.web.markdown_blocks import close_emphasis

        assert close_emphasis(cut) == shown

    def test_the_open_block_of_a_stream_is_drawn_closed_and_a_cut_saved_answer_too(self):
        streamed = Recorder()
        BlockRenderer(streamed).update("First.\n\nThis is _the first turn of our")
        assert streamed.shown()[-1][1].endswith("\n\nThis is _the first turn of our_")
        saved = Recorder()
        render_markdown(saved, "First.\n\nThis is _the first turn of our", cut=True)
        assert saved.shown()[-1] == ("markdown", "This is _the first turn of our_", None)
        followed = Recorder()
        paced = PacedRenderer(followed, clock=lambda: 0.0)
        paced.add("First.\n\nThis is _the first")
        paced.finish("First.\n\nThis is _the first turn of our", cut=True)  # stopped while followed live
        assert followed.shown() == [("markdown", "First.", None), ("markdown", "This is _the first turn of our_", None)]
        whole = Recorder()
        render_markdown(whole, "Use *nix tools")  # a finished answer is drawn as written
        assert whole.shown() == [("markdown", "Use *nix tools", None)]
