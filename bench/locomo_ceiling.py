"""What the ranking signals allow on LoCoMo, with every turn of the chat ranked (no request budget, no DynamoDB).

    nice python bench/locomo_ceiling.py [--data ../shared/data/locomo-dev.zip] [--room 1700]

The engine sees the index's 100 nearest turns and the turns its browser session holds; this bench instead ranks
every turn of each conversation (converted as bench/locomo.py converts it) by each signal alone and by their
reciprocal rank fusion (k = 10, as recall fuses them), then fills `--room` tokens with whole turns in that order,
best first. What it prints per signal and kind of question (1-4):
- "in room": evidence utterances whose turn fits the room: the recall a ranking of the whole chat would give,
  before excerpts, dates and neighbours (which the engine adds);
- "among 100": evidence utterances whose turn is among the 100 best: what one SearchVectors can hand the engine.
Signals: each local embedder's cosine (`wordllama-l2_supercat-256`, `all-MiniLM-L6-v2`) and BM25 over the turn's
keyword terms (lib/tokens.py), with the IDF of the whole chat.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import print_table  # noqa: E402
from bench.locomo import DEFAULT_DATA, KINDS, evidence_turns, load_conversations, to_chat  # noqa: E402

RRF_K = 10
TURN_OVERHEAD = 12  # tokens of a recalled turn's date and role labels, as the engine counts them


def orders(scores) -> list[list[int]]:
    import numpy as np

    return [list(row) for row in np.argsort(-np.asarray(scores), axis=1, kind="stable")]


def fused(*rankings: list[list[int]]) -> list[list[int]]:
    out = []
    for rows in zip(*rankings):
        score: dict[int, float] = defaultdict(float)
        for row in rows:
            for rank, turn in enumerate(row, 1):
                score[turn] += 1 / (RRF_K + rank)
        out.append(sorted(score, key=lambda t: (-score[t], t)))
    return out


def main() -> None:
    import numpy as np

    from lib import tokens
    from lib.context.relevance import bm25
    from lib.search.embedders import LocalEmbedder, MiniLMEmbedder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--room", type=int, default=1700, help="tokens of whole turns (2,000 less the prompt's rest)")
    args = parser.parse_args()
    embedders = {"wordllama": LocalEmbedder(), "MiniLM": MiniLMEmbedder()}
    tally: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    for embedder in embedders.values():
        type(embedder)._load()
    spent = {name: [0.0, 0.0] for name in embedders}  # CPU seconds embedding turns, questions
    counted = [0, 0]
    for conv in load_conversations(args.data):
        title = f"{conv['speaker_a']} and {conv['speaker_b']}"
        chat, where = to_chat(conv, title)
        turns = chat["turns"]
        texts = [f"{title}\n{t['question']}\n{t['answer'][:1500]}" for t in turns]  # as the indexer embeds a turn
        cost = [tokens.count(t["question"]) + tokens.count(t["answer"]) + TURN_OVERHEAD for t in turns]
        asked = [q for q in conv["qa"] if q.get("category") in (1, 2, 3, 4) and evidence_turns(q, where)]
        questions = [q["question"] for q in asked]
        ranked: dict[str, list[list[int]]] = {}
        for name, embedder in embedders.items():
            started = time.process_time()
            docs = np.asarray(embedder.embed(texts, "document").vectors)
            spent[name][0] += time.process_time() - started
            started = time.process_time()
            query = np.asarray(embedder.embed(questions, "query").vectors)
            spent[name][1] += time.process_time() - started
            counted[0] += len(texts)
            counted[1] += len(questions)
            ranked[name] = orders(query @ docs.T)
        terms = [Counter(tokens.terms(t)) for t in texts]
        ranked["BM25"] = orders([bm25(set(tokens.terms(q)), terms) for q in questions])
        for name in embedders:
            ranked[f"{name} + BM25"] = fused(ranked[name], ranked["BM25"])
        for signal, rows in ranked.items():
            for question, order in zip(asked, rows):
                wanted = evidence_turns(question, where)
                room, fits = args.room, set()
                for turn in order:
                    if cost[turn] > room:
                        break
                    room -= cost[turn]
                    fits.add(turn)
                top = set(order[:100])
                for kind in (KINDS[question["category"]], "all 1-4"):
                    t = tally[signal][kind]
                    t[0] += len(wanted)
                    t[1] += sum(w in fits for w in wanted)
                    t[2] += sum(w in top for w in wanted)
        print(f"{conv['sample_id']}: {len(turns)} turns, {len(asked)} questions", file=sys.stderr, flush=True)
    kinds = ["all 1-4", "single-hop", "temporal", "multi-hop", "open-domain"]
    rows = []
    for signal, by_kind in tally.items():
        cells = [
            f"{100 * by_kind[k][1] / by_kind[k][0]:.1f} / {100 * by_kind[k][2] / by_kind[k][0]:.1f}" for k in kinds
        ]
        rows.append([signal, *cells])
    print(f"\nEvidence in a room of {args.room:,} tokens / among the 100 best, % (every turn of the chat ranked)\n")
    print_table(["signal", *kinds], rows)
    turns_n, questions_n = counted[0] // len(embedders), counted[1] // len(embedders)
    print(f"\nCPU time to embed (all threads), ms each: {turns_n:,} turns / {questions_n:,} questions\n")
    print_table(
        ["embedder", "ms a turn", "ms a question"],
        [[n, f"{1000 * s[0] / turns_n:.2f}", f"{1000 * s[1] / questions_n:.2f}"] for n, s in spent.items()],
    )


if __name__ == "__main__":
    main()
