"""The context loader alone: newest answered turns within the token budget, nothing silently dropped."""

from lib.model.models import estimate_tokens
from lib.storage.records import DONE, FAILED, PENDING, Message
from lib.turn.context import build_context


def turn(i, status=DONE, answer=None, size=40):
    return Message(
        message_id=f"{i:026d}",
        session_id="s",
        create_time="2026-11-06T08:30:45.123Z",
        input_body=f"q{i} " + "x" * size,
        system_prompt_id="default-v1",
        status=status,
        output_body=answer if answer is not None else f"a{i} " + "y" * size,
    )


class TestBuildContext:
    def test_everything_fits_in_order_ending_with_the_question(self):
        context = build_context("sys", [turn(1), turn(2)], "now?", budget_tokens=10_000)
        assert [m["role"] for m in context.prompt.messages] == ["user", "assistant", "user", "assistant", "user"]
        assert (
            context.prompt.messages[0]["content"].startswith("q1") and context.prompt.messages[-1]["content"] == "now?"
        )
        assert context.turns_included == 2 and context.prompt.system == "sys"

    def test_the_newest_turns_that_fit_the_budget_are_kept(self):
        history = [turn(i, size=400) for i in range(10)]
        one = estimate_tokens(history[0].input_body) + estimate_tokens(history[0].output_body)
        budget = estimate_tokens("sys") + estimate_tokens("q") + 3 * one
        context = build_context("sys", history, "q", budget_tokens=budget)
        assert context.turns_included == 3
        assert context.prompt.messages[0]["content"].startswith("q7")

    def test_failed_and_pending_turns_are_not_sent_as_answered(self):
        history = [turn(1), turn(2, status=FAILED, answer="partial"), turn(3, status=PENDING, answer="")]
        context = build_context("sys", history, "q", budget_tokens=10_000)
        assert context.turns_included == 1
        assert "partial" not in str(context.prompt.messages)

    def test_a_question_larger_than_the_budget_is_still_sent_alone(self):
        context = build_context("sys", [turn(1)], "z" * 10_000, budget_tokens=100)
        assert context.turns_included == 0 and context.prompt.messages == [{"role": "user", "content": "z" * 10_000}]


class TestRelevanceHelpers:
    def test_the_stemmer_meets_a_word_in_its_forms_and_numbers_are_terms(self):
        from lib import tokens

        assert len({tuple(tokens.terms(w)) for w in ("move", "moved", "moving", "moves")}) == 1
        assert tokens.terms("deploys deployed") == tokens.terms("deploy deploy")
        assert tokens.terms("parties") == tokens.terms("party")
        assert tokens.terms("I moved 4 years ago") == ["mov", "4", "year", "ago"]

    def test_a_question_names_months_and_years(self):
        from lib.context.relevance import dates_named, in_dates

        assert dates_named("What setback did Melanie face in October 2023?") == {"2023-10"}
        assert dates_named("What happened in 2022?") == {"2022"}
        assert dates_named("what did we decide?") == set()
        assert in_dates("2023-10-13T10:31:00.000Z", {"2023-10"})
        assert in_dates("2023-11-02T10:31:00.000Z", {"2023-10"})  # told shortly after
        assert not in_dates("2024-01-02T10:31:00.000Z", {"2023-10"})

    def test_an_excerpt_keeps_the_opening_and_the_sentences_with_the_weightiest_words(self):
        from lib import tokens
        from lib.context.relevance import excerpt

        text = (
            "Melanie: Thanks for the tip. Doing research makes sense. I'll do that. BTW, recently I had a setback. "
            "Last month I got hurt and had to take a break from pottery. Anyway, how are you?"
        )
        cut, was_cut = excerpt(text, {"setback": 3.0, "melani": 0.1}, 40)
        assert was_cut and tokens.count(cut) <= 40
        assert cut.startswith("Melanie: Thanks for the tip.")
        assert "I had a setback. Last month I got hurt" in cut and "Anyway" not in cut
        assert excerpt("short", {"x": 1.0}, 10) == ("short", False)

    def test_a_recalled_turns_time_is_written_for_a_reader(self):
        from lib.context.loader import when

        assert when("2023-05-08T13:56:00.000Z") == "Mon 8 May 2023 13:56"
        assert when("not a time") == "not a time"
