"""Context for a turn: the SessionContextLoader (lib/context) when the caller has a ContextEngine, else the
loader over the loaded turns alone; `build_context` is the old newest-window loader, kept as the benchmark's
baseline (bench/context_recall.py).
"""

from __future__ import annotations

from lib import tokens
from lib.context.loader import Context, SessionContextLoader, Source
from lib.context.recall import answered
from lib.model.models import Prompt
from lib.storage.records import Message

__all__ = ["Context", "SessionContextLoader", "build_context", "loaded_only"]


def build_context(system: str, history: list[Message], question: str, *, budget_tokens: int) -> Context:
    """The newest answered turns of `history` that fit the budget (the baseline: no summary, memories, recall)."""
    spent = tokens.count(system) + tokens.count(question)
    chosen: list[Message] = []
    for turn in reversed([m for m in history if answered(m)]):
        cost = tokens.count(turn.input_body) + tokens.count(turn.output_body)
        if spent + cost > budget_tokens:
            break
        chosen.append(turn)
        spent += cost
    chosen.reverse()
    messages: list[dict[str, str]] = []
    for turn in chosen:
        messages += [{"role": "user", "content": turn.input_body}, {"role": "assistant", "content": turn.output_body}]
    messages.append({"role": "user", "content": question})
    sources = (
        Source("system", tokens.count(system)),
        *(Source("turn", tokens.count(t.input_body) + tokens.count(t.output_body), t.message_id) for t in chosen),
        Source("question", tokens.count(question)),
    )
    return Context(Prompt(system, messages), len(chosen), sources, spent, budget_tokens)


def loaded_only(
    system: str, history: list[Message], question: str, *, budget_tokens: int, earlier_turns: int | None = None
) -> Context:
    """The loader with only what the caller loaded (no memories, summary or recall): no request at all."""
    return SessionContextLoader().load(
        user_id="",
        session_id=None,
        system=system,
        question=question,
        history=history,
        budget=budget_tokens,
        earlier_turns=earlier_turns,
    )
