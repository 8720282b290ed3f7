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
