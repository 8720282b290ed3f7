"""The SessionContextLoader alone: within budget for random inputs, whole turns only, sources and notes."""

import random
from dataclasses import replace

import pytest

from lib import tokens
from lib.context.cache import ContextCache
from lib.context.loader import RECALL_HEADER, SessionContextLoader
from lib.context.recall import KeywordRecall
from lib.storage.records import DONE, FAILED, PENDING, Memory, Message, Summary
from lib.turn.turns import STOPPED

WORDS = (
    "deploy window thursday postgres port staging budget tabs spaces kafka retention 部署 窗口 数据库 "
    "alice bob invoice quarterly latency redis cache python rust migration"
).split()


def turn(i, q, a, status=DONE):
    return Message(
        message_id=f"{i:026d}",
        session_id="s",
        create_time=f"2026-11-{1 + i % 28:02d}T08:30:45.123Z",
        input_body=q,
        system_prompt_id="default-v1",
        status=status,
        output_body=a,
    )


def text(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def random_case(seed):
    rng = random.Random(seed)
    history = []
    for i in range(rng.randint(0, 60)):
        status = rng.choice([DONE] * 8 + [FAILED, PENDING])
        history.append(
            turn(
                i,
                text(rng, rng.randint(1, 80)),
                text(rng, rng.randint(0, 900)) if status == DONE or rng.random() < 0.5 else "",
                status,
            )
        )
    memories = [
        Memory(f"m{i}", "u", text(rng, rng.randint(2, 30)), "s", None, f"2026-10-{1 + i:02d}T00:00:00.000Z")
        for i in range(rng.randint(0, 12))
    ]
    summary = (
        Summary(
            "s",
            "\n".join(text(rng, 20) for _ in range(rng.randint(1, 30))),
            3,
            history[-1].message_id if history else "",
            10,
            "extractive",
            "extractive",
            "2026-11-01T00:00:00.000Z",
        )
        if rng.random() < 0.7
        else None
    )
    return rng, history, memories, summary


def loader_for(history):
    cache = ContextCache()
    cache.pool("u", "s").add(history)
    return SessionContextLoader(KeywordRecall(cache), recall_turns=4)


class TestBudget:
    @pytest.mark.parametrize("seed", range(300))
    def test_random_inputs_never_pass_the_budget_and_never_send_a_question_without_its_answer(self, seed):
        rng, history, memories, summary = random_case(seed)
        budget = rng.choice([50, 200, 1000, 2000, 4000, 24000])
        system, question = text(rng, rng.randint(5, 40)), text(rng, rng.randint(1, 300))
        context = loader_for(history).load(
            user_id="u",
            session_id="s",
            system=system,
            question=question,
            history=history,
            budget=budget,
            memories=memories,
            summary=summary,
        )
        sent = tokens.count(context.prompt.system) + sum(tokens.count(m["content"]) for m in context.prompt.messages)
        assert sent == context.tokens
        floor = tokens.count(system) + tokens.count(question)
        assert sent <= max(budget, floor)
        if floor >= budget:  # the question alone, cut to what the budget leaves beside the system prompt
            ((alone,),) = [[m["content"] for m in context.prompt.messages]]
            assert alone == question or (alone.endswith(" …") and question.startswith(alone[:-2].rstrip()))
            assert alone == question or tokens.count(system) + tokens.count(alone) <= max(
                budget, tokens.count(system) + 12
            )
        # Messages alternate user/assistant and each verbatim user turn is followed by its own answer.
        roles = [m["role"] for m in context.prompt.messages]
        assert roles == ["user", "assistant"] * ((len(roles) - 1) // 2) + ["user"]
        by_id = {m.message_id: m for m in history}
        pairs = context.prompt.messages[:-1]
        verbatim = [s for s in context.sources if s.kind == "turn"]
        for source, (q, a) in zip(verbatim, zip(pairs[::2], pairs[1::2])):
            original = by_id[source.id]
            assert original.status == DONE and original.output_body
            assert (q["content"], a["content"]) == (original.input_body, original.output_body)
        for source in context.sources:
            if source.kind in ("turn", "recalled"):
                assert by_id[source.id].status == DONE and by_id[source.id].output_body
        # No turn twice, and every part is a listed source with its tokens.
        ids = [s.id for s in context.sources if s.kind in ("turn", "recalled")]
        assert len(ids) == len(set(ids))
        assert context.sources[0].kind == "system" and context.sources[-1].kind == "question"
        assert all(s.tokens > 0 for s in context.sources)

    def test_a_question_larger_than_the_budget_is_cut_to_it_sent_alone_and_the_cut_is_said(self):
        history = [turn(1, "q", "a")]
        context = SessionContextLoader().load(
            user_id="u", session_id="s", system="sys", question="z" * 10_000, history=history, budget=100
        )
        ((sent,),) = [[m["content"] for m in context.prompt.messages]]
        assert sent.startswith("z" * 300) and sent.endswith(" …") and tokens.count(sent) <= 99
        assert context.tokens <= 100
        assert context.note == (
            f"Your question is about 2,500 tokens, more than the 100 tokens budgeted for what the model sees: the "
            f"model saw its first {tokens.count(sent)} tokens and nothing else; the other {2500 - tokens.count(sent):,} "
            "or so were left out. The model saw the newest 0 of 1 earlier turn; 1 earlier turn was left out "
            "(token budget)."
        )
        first = SessionContextLoader().load(
            user_id="u", session_id="s", system="sys", question="z" * 10_000, history=[], budget=100
        )  # a new chat: nothing else left out, the cut still said
        assert first.note.endswith("or so were left out.")

    def test_a_question_that_fills_the_budget_exactly_is_sent_whole(self):
        question = "z" * 396  # 99 tokens, beside the 1 of "sys": all of the 100
        context = SessionContextLoader().load(
            user_id="u", session_id="s", system="sys", question=question, history=[], budget=100
        )
        assert context.prompt.messages == [{"role": "user", "content": question}]
        assert "it was sent whole, with nothing else" in context.note


class TestOrderAndSources:
    def setup_method(self):
        self.history = [turn(i, f"question {i} about lunch", f"answer {i} " + "filler " * 200) for i in range(30)]
        self.history[3] = turn(3, "Our staging postgres listens on port 5433.", "Noted: staging uses port 5433.")
        self.memories = [Memory("m1", "u", "I prefer tabs over spaces.", "s", None, "2026-10-01T00:00:00.000Z")]
        self.summary = Summary(
            "s",
            "- early: the user set up staging",
            2,
            self.history[20].message_id,
            21,
            "extractive",
            "extractive",
            "2026-11-01T00:00:00.000Z",
        )

    def load(self, budget=2000, question="which port does staging postgres use?"):
        return loader_for(self.history).load(
            user_id="u",
            session_id="s",
            system="You help.",
            question=question,
            history=self.history,
            budget=budget,
            memories=self.memories,
            summary=self.summary,
            earlier_turns=30,
        )

    def test_prompt_order_is_system_memories_summary_recalled_then_newest_turns_and_the_question(self):
        context = self.load()
        system = context.prompt.system
        assert (
            system.index("You help.")
            < system.index("I prefer tabs")
            < system.index("set up staging")
            < system.index(RECALL_HEADER)
            < system.index("port 5433")
        )
        assert context.prompt.cache_prefix and system.startswith(context.prompt.cache_prefix)
        assert RECALL_HEADER not in context.prompt.cache_prefix  # recalled turns change per question: not cached
        assert context.prompt.messages[-2]["content"].startswith("answer 29")
        kinds = [s.kind for s in context.sources]
        assert kinds[:3] == ["system", "memory", "summary"] and kinds[-1] == "question"
        assert [s.id for s in context.sources if s.kind == "recalled"][0] == self.history[3].message_id
        assert context.memory_ids == ("m1",)

    def test_the_note_says_what_was_summarised_and_left_out(self):
        context = self.load()
        verbatim = sum(s.kind == "turn" for s in context.sources)
        recalled = sum(s.kind == "recalled" for s in context.sources)
        sent = {s.id for s in context.sources if s.kind in ("turn", "recalled")}
        left = sum(1 for m in self.history[21:] if m.message_id not in sent)  # neither sent nor summarised
        assert context.note == (
            f"The model saw the newest {verbatim} and {recalled} recalled of 30 earlier turns, "
            f"a summary of the 21 oldest, 1 memory; {left} earlier turns were left out "
            "(token budget)."
        )

    def test_everything_fits_means_no_note(self):
        short = [turn(i, f"q{i}", f"a{i}") for i in range(3)]
        context = SessionContextLoader().load(
            user_id="u", session_id="s", system="s", question="q", history=short, budget=1000
        )
        assert context.note is None and context.turns_included == 3
        assert context.prompt.cache_prefix == ""  # nothing stable beyond the system prompt: nothing marked

    def test_a_long_recalled_turn_is_sent_as_a_marked_excerpt(self):
        self.history[3] = turn(
            3, "Our staging postgres listens on port 5433. " + "context " * 400, "Noted: port 5433. " + "detail " * 2000
        )
        context = self.load(budget=1000)
        (recalled,) = [s for s in context.sources if s.kind == "recalled"][:1]
        assert recalled.id == self.history[3].message_id and recalled.excerpt
        assert context.tokens <= 1000 and "5433" in context.prompt.system

    def test_chinese_questions_recall_by_character_bigrams(self):
        self.history[5] = turn(5, "我们的部署窗口是每周四下午两点。", "好的，部署窗口定在周四下午两点。")
        context = self.load(question="部署窗口是什么时候？")
        assert self.history[5].message_id in [s.id for s in context.sources if s.kind == "recalled"]


class TestMemoryShare:
    def test_memories_over_their_quarter_keep_the_relevant_and_newest_in_date_order(self):
        memories = [
            Memory(
                f"m{i:03d}",
                "u",
                f"Fact number {i} about topic {i} " + "padding " * 20,
                "s",
                None,
                f"2026-10-01T00:00:{i % 60:02d}.{i:03d}Z",
            )
            for i in range(60)
        ]
        memories.append(
            Memory("kafka", "u", "We keep Kafka topics for 14 days.", "s", None, "2026-09-01T00:00:00.000Z")
        )
        context = SessionContextLoader().load(
            user_id="u",
            session_id=None,
            system="s",
            question="kafka retention?",
            history=[],
            budget=1000,
            memories=memories,
        )
        sent = [s for s in context.sources if s.kind == "memory"]
        assert 0 < len(sent) < len(memories) and sent[0].id == "kafka"  # the relevant one, oldest, first in order
        block = context.prompt.system.split("\n\n", 1)[1]
        assert tokens.count(block) <= 250
        times = [s.time for s in sent]
        assert times == sorted(times)


class TestNoteIsTrue:
    """The note under an answer says why a turn was not sent: the budget, or that it has no answer to send."""

    def load(self, history, budget=24_000, earlier=None):
        return SessionContextLoader().load(
            user_id="u",
            session_id="s",
            system="You help.",
            question="and then?",
            history=history,
            budget=budget,
            earlier_turns=earlier,
        )

    def test_a_stopped_turn_in_a_small_chat_is_not_sent_and_the_note_says_why_not_the_budget(self):
        stopped = replace(turn(1, "tell me more", "Half an ans", status=FAILED), error=STOPPED)
        history = [turn(0, "hello", "hi there"), stopped, turn(2, "ok", "fine")]
        context = self.load(history)
        assert context.note == "The model saw 2 of 3 earlier turns; 1 stopped turn is not sent (no whole answer)."
        assert "budget" not in context.note

    def test_failed_and_unfinished_turns_are_named_as_such(self):
        failed = replace(turn(1, "q1", "", status=FAILED), error="The model is overloaded.")
        history = [turn(0, "q0", "a0"), failed, turn(2, "q2", "", status=PENDING), turn(3, "q3", "a3")]
        assert self.load(history).note == (
            "The model saw 2 of 4 earlier turns; 1 failed and 1 unfinished turns are not sent (no whole answer)."
        )

    def test_turns_left_out_for_the_budget_still_say_so_beside_a_stopped_one(self):
        stopped = replace(turn(1, "q", "x", status=FAILED), error=STOPPED)
        history = [turn(0, "old " * 400, "answer " * 400), stopped] + [turn(i, f"q{i}", f"a{i}") for i in range(2, 5)]
        note = self.load(history, budget=600).note
        assert note.endswith(
            "; 1 earlier turn was left out (token budget); 1 stopped turn is not sent (no whole answer)."
        )


class TestBudgetSpentOnRelevance:
    """What fits is decided by relevance: as many relevant older turns as fit, the newest turns only as the thread."""

    def setup_method(self):
        self.history = [
            turn(i, f"question {i} about lunch", f"answer {i} " + "about sandwiches " * 20) for i in range(60)
        ]
        for i in (3, 9, 15, 21, 27, 33):  # six turns about the deploy window, none of them among the newest
            self.history[i] = turn(i, f"The deploy window moved to slot {i}.", f"Noted: deploy window slot {i}.")

    def load(self, question, budget=1000, recall_turns=None):
        cache = ContextCache()
        cache.pool("u", "s").add(self.history)
        return SessionContextLoader(KeywordRecall(cache), recall_turns=recall_turns).load(
            user_id="u", session_id="s", system="You help.", question=question, history=self.history, budget=budget
        )

    def test_every_relevant_older_turn_that_fits_is_recalled_not_a_fixed_few(self):
        context = self.load("when is the deploy window?")
        recalled = [s.id for s in context.sources if s.kind == "recalled"]
        assert {self.history[i].message_id for i in (3, 9, 15, 21, 27, 33)} <= set(recalled)
        assert len([s for s in context.sources if s.kind == "recalled"]) >= 6 and context.tokens <= 1000
        capped = self.load("when is the deploy window?", recall_turns=4)  # a caller may still bound the count
        assert len([s for s in capped.sources if s.kind == "recalled"]) == 4

    def test_the_relevant_turns_come_first_and_the_newest_turns_take_what_is_left(self):
        context = self.load("when is the deploy window?", budget=400)
        recalled = {s.id for s in context.sources if s.kind == "recalled"}
        assert recalled == {self.history[i].message_id for i in (3, 9, 15, 21, 27, 33)}
        turns = [s.id for s in context.sources if s.kind == "turn"]
        assert turns == [m.message_id for m in self.history[-len(turns) :]] and len(turns) >= 1  # the thread
        assert 400 - context.tokens < 100  # what recall left went to the newest turns

    def test_a_follow_up_gets_the_newest_turns_before_recall(self):
        follow = self.load("and why is that?")
        turns = [s for s in follow.sources if s.kind == "turn"]
        assert len(turns) >= 10  # half of what is left, contiguous, ending at the newest turn
        ids = [s.id for s in turns]
        assert ids == [m.message_id for m in self.history[-len(ids) :]]

    def test_a_recalled_turn_carries_its_date_and_weekday(self):
        context = self.load("when is the deploy window?")
        assert "[Wed 4 Nov 2026 08:30] User: The deploy window moved to slot 3." in context.prompt.system

    def test_a_long_recalled_turn_is_cut_to_the_sentences_that_answer_not_to_its_first_words(self):
        filler = "We talked about many other things that day. " * 60
        self.history[3] = turn(3, "Some background first. " + filler + "The deploy window is Thursday 14:00.", "Ok.")
        context = self.load("when is the deploy window?", budget=600)
        (part,) = [s for s in context.sources if s.kind == "recalled" and s.id == self.history[3].message_id]
        assert part.excerpt and part.tokens < 200
        assert "The deploy window is Thursday 14:00." in context.prompt.system
        assert "[Wed 4 Nov 2026 08:30] User: Some background first." in context.prompt.system  # its opening kept


class TestMemoriesEarnTheirTokens:
    def memories(self, n, padding=20):
        return [
            Memory(
                f"m{i:03d}",
                "u",
                f"Fact {i} about topic{i} " + "padding " * padding,
                "s",
                None,
                f"2026-10-{1 + i % 28:02d}T00:00:00.000Z",
            )
            for i in range(n)
        ]

    def load(self, memories, question, budget=2000):
        return SessionContextLoader().load(
            user_id="u", session_id=None, system="s", question=question, history=[], budget=budget, memories=memories
        )

    def test_a_few_short_memories_are_all_sent_as_a_stable_block(self):
        context = self.load(self.memories(3, padding=2), "anything else?")
        assert [s.id for s in context.sources if s.kind == "memory"] == ["m000", "m001", "m002"]

    def test_many_memories_send_only_those_that_share_a_word_with_the_question(self):
        context = self.load(self.memories(30), "what about topic7 and topic12?")
        assert [s.id for s in context.sources if s.kind == "memory"] == ["m007", "m012"]
        assert [s for s in self.load(self.memories(30), "hello there").sources if s.kind == "memory"] == []


class TestEarlierFiles:
    def test_the_note_says_files_attached_to_earlier_questions_were_not_sent_again(self):
        from lib.storage.attachments import Attachment
        from lib.storage.objects import BodyRef

        ref = BodyRef("users/u/files/s/a/original", 10, "0" * 64)
        file = Attachment("01JFILE0000000000000000000", "schedule.pdf", "application/pdf", "pdf", ref, ref)
        history = [replace(turn(1, "what does the schedule say?", "It gives 30 days."), attachments=(file,))]
        context = loader_for(history).load(
            user_id="u", session_id="s", system="sys", question="and for batch 3?", history=history, budget=4000
        )
        assert context.sources[1].kind == "turn"  # the turn was sent, its file was not
        assert context.note == (
            "The 1 file attached to earlier questions was not sent again (a question is sent with its own files only)."
        )
        plain = loader_for([turn(1, "q", "a")]).load(
            user_id="u", session_id="s", system="sys", question="and?", history=[turn(1, "q", "a")], budget=4000
        )
        assert plain.note is None
