"""Evidence recall of the context engine on a long conversation of our own (the engine's main figure).

    python bench/context_recall.py

Builds bench/context_corpus.py's corpus (310 turns over six weeks in two chats, 103 questions annotated
with the turns holding their answers), imports it with import-chat's code path on an in-memory embedded
table (the demo provider: extractive summaries, rule-based memories), then asks every question at the
end of the main chat, as `python -m lib.admin context` does, for budgets of 1,000 / 2,000 / 4,000 tokens.
Beside it: today's newest-window loader (the newest loaded turns that fit), a sliding window over the
whole chat, and the full history.

- evidence recall: share of annotated turns present in the context (sent verbatim, recalled, or as a
  memory extracted from that turn); answer coverage: share of questions whose answer string appears
  anywhere in the context (memories and the summary count); tokens by lib/tokens.py.
- latency: assembly time per question (median; the first question of a browser session also pays its
  reads: the memory Query and the older turns, shown separately).
Then the input-token cost per turn at turn 100 of the main chat, replayed turn by turn as live turns.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import fresh_store, print_table  # noqa: E402
from context_corpus import build  # noqa: E402

from lib import tokens  # noqa: E402
from lib.config import Settings  # noqa: E402
from lib.context.cache import ContextCache  # noqa: E402
from lib.context.engine import ContextEngine  # noqa: E402
from lib.context.importer import import_chats, load_file  # noqa: E402
from lib.model.models import DemoModel  # noqa: E402
from lib.model.prompts import system_prompt  # noqa: E402
from lib.turn.context import build_context  # noqa: E402
from lib.usage.pricing import CACHE_READ_FACTOR, CACHE_WRITE_FACTOR, MODEL_PRICES  # noqa: E402

USER = "bench@example.com"
BUDGETS = (1000, 2000, 4000)
PROMPT_ID = "default-v1"
CACHE_FLOOR = 1024  # Anthropic caches no prefix shorter than this (Sonnet 4.5/4.6; 4,096 for Haiku 4.5, Opus 4.5+)


def settings() -> Settings:
    return Settings.load(env={"CHAT_MODEL_PROVIDER": "demo"}, secrets={}, for_operator=True)


def text_of(context) -> str:
    return context.prompt.system + "\n" + "\n".join(m["content"] for m in context.prompt.messages)


def score(corpus, ids, contexts, memory_sources):
    """(evidence recall %, answer coverage %, median tokens) over all questions."""
    present = total = covered = 0
    for question, context in zip(corpus.questions, contexts):
        sent = {s.id for s in context.sources if s.kind in ("turn", "recalled")}
        sent |= {memory_sources.get(s.id) for s in context.sources if s.kind == "memory"}
        wanted = [ids[i] for i in question.evidence]
        present += sum(w in sent for w in wanted)
        total += len(wanted)
        covered += question.answer.lower() in text_of(context).lower()
    return 100 * present / total, 100 * covered / len(contexts), statistics.median(c.tokens for c in contexts)


class _NoRecall:
    def recall(self, user_id, session_id, question, k, *, exclude=frozenset(), room=None, cap=None):
        return []


def indexed_engine(client, store, meter, s) -> ContextEngine:
    """The engine as the app builds it by default: the local embedder, vectors in the same table."""
    from lib.search.embedders import LocalEmbedder
    from lib.search.indexer import Indexer
    from lib.storage.gateway import Gateway

    LocalEmbedder._load()
    indexer = Indexer(Gateway(client, store._table, meter), LocalEmbedder())
    return ContextEngine(client, store._table, meter, DemoModel(delay_s=0), s, indexer=indexer)


def main() -> None:
    corpus = build()
    store, meter, client = fresh_store()
    s = settings()
    engine = indexed_engine(client, store, meter, s)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "corpus.json")
        Path(path).write_text(json.dumps(corpus.chats, ensure_ascii=False), encoding="utf-8")
        started = time.perf_counter()
        _, chats = load_file(path)
        result = import_chats(store, engine, USER, chats, indexer=engine.indexer)
        import_s = time.perf_counter() - started
    main_id = result.session_ids[0]
    ids = [m.message_id for sid in result.session_ids for m in store.all_messages(USER, sid)]
    memories, _ = engine.memories.load(USER)
    memory_sources = {m.memory_id: m.source_message_id for m in memories}
    every_turn = store.all_messages(USER, main_id)
    print(
        f"corpus: {len(ids)} turns in {len(result.session_ids)} chats, {len(corpus.questions)} questions; "
        f"imported in {import_s:.1f} s with {result.summaries} summaries and {result.memories} memories; "
        f"full main chat {sum(tokens.count(m.input_body) + tokens.count(m.output_body) for m in every_turn):,} "
        "tokens\n"
    )

    view = store.open_session(USER, main_id)
    system = system_prompt(PROMPT_ID)
    rows = []
    for budget in BUDGETS:
        today = [build_context(system, view.messages, q.text, budget_tokens=budget) for q in corpus.questions]
        window = [build_context(system, every_turn, q.text, budget_tokens=budget) for q in corpus.questions]
        cache, contexts, times = ContextCache(), [], []
        for question in corpus.questions:
            t0 = time.perf_counter()
            contexts.append(
                engine.context(
                    cache,
                    USER,
                    view.session,
                    question.text,
                    view.messages,
                    summary=view.summary,
                    system_prompt_id=PROMPT_ID,
                    budget=budget,
                    earlier_turns=view.session.message_count,
                )
            )
            times.append((time.perf_counter() - t0) * 1000)
        for name, found, ms in (
            ("today: newest loaded turns", today, None),
            ("sliding window, whole chat", window, None),
            ("context engine", contexts, times),
        ):
            recall, coverage, median = score(corpus, ids, found, memory_sources)
            rows.append(
                [
                    f"{budget:,}",
                    name,
                    f"{recall:.0f}%",
                    f"{coverage:.0f}%",
                    f"{median:,.0f}",
                    f"{statistics.median(ms[1:]):.1f} ms (first {ms[0]:.0f} ms)" if ms else "-",
                ]
            )
    for name, ablation in (
        ("engine without memories", {"memories": False}),
        ("engine without recall", {"recall": False}),
    ):
        cache, contexts = ContextCache(), []
        if not ablation.get("memories", True):
            from lib.context.cache import MemoryState

            cache.memory[USER] = MemoryState([], False)
        no_recall = None if ablation.get("recall", True) else _NoRecall()
        for question in corpus.questions:
            contexts.append(
                engine.context(
                    cache,
                    USER,
                    view.session,
                    question.text,
                    view.messages,
                    summary=view.summary,
                    system_prompt_id=PROMPT_ID,
                    budget=2000,
                    earlier_turns=view.session.message_count,
                    recall=no_recall,
                )
            )
        recall, coverage, median = score(corpus, ids, contexts, memory_sources)
        rows.append(["2,000", name, f"{recall:.0f}%", f"{coverage:.0f}%", f"{median:,.0f}", "-"])
    full = [build_context(system, every_turn, q.text, budget_tokens=10**9) for q in corpus.questions]
    recall, coverage, median = score(corpus, ids, full, memory_sources)
    rows.append(["none", "full history", f"{recall:.0f}%", f"{coverage:.0f}%", f"{median:,.0f}", "-"])
    print_table(["budget", "context", "evidence recall", "answer coverage", "median tokens", "assembly"], rows)

    by_kind: dict[str, list] = {}
    cache = ContextCache()
    for question in corpus.questions:
        context = engine.context(
            cache,
            USER,
            view.session,
            question.text,
            view.messages,
            summary=view.summary,
            system_prompt_id=PROMPT_ID,
            budget=2000,
            earlier_turns=view.session.message_count,
        )
        by_kind.setdefault(question.kind, []).append((question, context))
    print("\nEngine at 2,000 tokens, by kind of question:\n")
    kind_rows = []
    for kind, pairs in sorted(by_kind.items()):
        sub = type(corpus)(corpus.chats, [q for q, _ in pairs])
        recall, coverage, _ = score(sub, ids, [c for _, c in pairs], memory_sources)
        kind_rows.append([kind, len(pairs), f"{recall:.0f}%", f"{coverage:.0f}%"])
    print_table(["question kind", "questions", "evidence recall", "answer coverage"], kind_rows)
    cost_at_turn_100(corpus)


def cost_at_turn_100(corpus) -> None:
    """Replay the main chat's first 100 turns as live turns; price the input of turns 91-100."""
    store, meter, client = fresh_store()
    s = settings()
    engine = ContextEngine(client, store._table, meter, DemoModel(delay_s=0), s)
    price = MODEL_PRICES["claude-sonnet-4-6"][0] / 1e6
    turns = corpus.chats[0]["turns"][:100]
    cache, session, history, summary = ContextCache(), None, [], None
    rows, previous_prefix = [], {}
    for n, turn in enumerate(turns, start=1):
        from lib.context.importer import _time  # the importer's own time parsing
        from lib.storage import keys

        with keys.clock(lambda t=_time(turn["time"], "bench"): t):  # noqa: B008 (binds this turn's time)
            if session is None:
                session, pending = store.create_session(USER, turn["question"], system_prompt_id=PROMPT_ID)
            else:
                session, pending = store.send_message(USER, session, turn["question"], system_prompt_id=PROMPT_ID)
        contexts = {
            "today (newest turns within 24,000)": build_context(
                system_prompt(PROMPT_ID), history, turn["question"], budget_tokens=24000
            ),
            "engine, 2,000": engine.context(
                cache,
                USER,
                session,
                turn["question"],
                history,
                summary=summary,
                system_prompt_id=PROMPT_ID,
                budget=2000,
            ),
            "engine, 24,000": engine.context(
                cache,
                USER,
                session,
                turn["question"],
                history,
                summary=summary,
                system_prompt_id=PROMPT_ID,
                budget=24000,
            ),
        }
        if n > 90:
            for name, context in contexts.items():
                prefix = tokens.count(context.prompt.cache_prefix) if context.prompt.cache_prefix else 0
                rest = context.tokens - prefix
                same = previous_prefix.get(name) == context.prompt.cache_prefix and prefix
                cached = rest * price + prefix * price * (CACHE_READ_FACTOR if same else CACHE_WRITE_FACTOR)
                rows.append((n, name, context.tokens, prefix, context.tokens * price, cached if prefix else None))
        for name, context in contexts.items():
            previous_prefix[name] = context.prompt.cache_prefix
        saved = store.finish_message(
            USER,
            pending,
            output_body=turn["answer"],
            input_token=1,
            output_token=1,
            response_start_time=pending.create_time,
            response_end_time=pending.create_time,
        )
        history = (history + [saved])[-20:] if False else history + [saved]
        summary = engine.summarize_after_save(USER, session, history[-20:], summary).summary
        engine.extract_memories_after_save(cache, USER, saved)
    print(
        "\nInput cost per turn, turns 91-100 of the main chat replayed as live turns (claude-sonnet-4-6 list "
        "price $3/M input; cache reads 0.1x, writes 1.25x when the prefix changed since the previous turn):\n"
    )
    table = []
    for name in ("today (newest turns within 24,000)", "engine, 2,000", "engine, 24,000"):
        mine = [r for r in rows if r[1] == name]
        at100 = [r for r in mine if r[0] == 100][0]
        plain = sum(r[4] for r in mine) / len(mine)
        cached = [r[5] if r[5] is not None else r[4] for r in mine]
        floor = [r[5] if r[5] is not None and r[3] >= CACHE_FLOOR else r[4] for r in mine]
        table.append(
            [
                name,
                f"{at100[2]:,}",
                f"{at100[3]:,}",
                f"${plain * 1000:.2f}",
                f"${sum(floor) / len(floor) * 1000:.2f}",
                f"${sum(cached) / len(cached) * 1000:.2f}",
            ]
        )
    print_table(
        [
            "context",
            "input tokens at turn 100",
            "stable prefix",
            "$ per 1,000 turns, no caching",
            f"with caching (prefix >= {CACHE_FLOOR:,})",
            "with caching, if any prefix were cached",
        ],
        table,
    )


if __name__ == "__main__":
    main()
