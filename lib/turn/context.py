"""The context loader: which earlier turns go to the model with a question (seed 003's SessionContextLoader).

It reads only the turns the session Query already loaded (no extra DynamoDB read),
keeps the newest ones that fit the token budget, and says how many it left out, so
the page can tell the user instead of truncating silently. Failed and pending
turns are skipped: a question without its answer must not look answered.
"""
from __future__ import annotations

from dataclasses import dataclass

from lib.turn.models import Prompt, estimate_tokens
from lib.storage.records import DONE, Message


@dataclass(frozen=True)
class Context:
    prompt: Prompt
    turns_included: int  # earlier turns sent with the question; the page compares it to the session's count


def build_context(system: str, history: list[Message], question: str, *, budget_tokens: int) -> Context:
    """The prompt for `question` after `history` (the loaded turns, oldest first, as displayed)."""
    answered = [m for m in history if m.status == DONE and m.output_body]
    spent = estimate_tokens(system) + estimate_tokens(question)
    chosen: list[Message] = []
    for turn in reversed(answered):
        cost = estimate_tokens(turn.input_body) + estimate_tokens(turn.output_body)
        if spent + cost > budget_tokens:
            break
        chosen.append(turn)
        spent += cost
    chosen.reverse()
    messages: list[dict[str, str]] = []
    for turn in chosen:
        messages.append({"role": "user", "content": turn.input_body})
        messages.append({"role": "assistant", "content": turn.output_body})
    messages.append({"role": "user", "content": question})
    return Context(Prompt(system, messages), len(chosen))
