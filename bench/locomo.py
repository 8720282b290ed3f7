"""The context engine and search on public long conversations: LoCoMo (Maharana et al., ACL 2024).

    nice python bench/locomo.py [--data ../shared/data/locomo-dev.zip] [--budgets 1000,2000,4000]
                                [--conversations 26,41] [--lib DIR] [--engine-only] [--one-user]
                                [--json FILE]

Each LoCoMo conversation (two people talking over months, 19-32 sessions, 370-690 utterances; questions
annotated with the utterances, `dia_id`s, that answer them) is converted to this app's import format
(`to_chat` below), imported as one long chat with import-chat's own code path (lib/context/importer.py:
summaries, memories and search vectors as a live chat gets them, the demo provider, the local embedder) on a
fresh in-memory embedded table, and every question is asked at the end of it as `python -m lib.admin context`
does, each as the first question of a new browser session (so its reads are the most a question makes).

The converter: within a session the utterances alternate between the two speakers; each exchange (an
utterance and the reply to it) is one turn, the first the question, the reply the answer, and each text starts
with its speaker's name ("Caroline: ..."), since the roles alone would not say who said what (a two-person
conversation has no assistant). A photo shared in an utterance is kept as the dataset gives it, its caption in
brackets. Every turn of a session has the session's date and time (the store orders them a millisecond apart).
The data's own summaries, observations and event lists are not imported: only what the two people said.

Figures, per kind of question (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop; 5 adversarial apart):
- evidence recall: annotated utterances whose turn is in the context (sent word for word, recalled, or as a
  memory extracted from that turn), over all annotated utterances;
- answer coverage: questions whose answer's keyword terms (lib/tokens.py) all appear in the context;
- median tokens of the context;
- for the engine, assembly latency and DynamoDB requests per question (p50/p95), on the embedded server;
- search recall@5 / @10: questions with an evidence turn among the top 5 / 10 of `admin search`.
Baselines: the newest turns that fit (no summary, memories or recall), a keyword window (BM25 over the whole
chat, each hit with its neighbours, reading every turn), the full history. `--lib DIR` runs the same bench
against another checkout's `lib` (the engine before a change: `git archive <commit> | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo-dev.zip"
KINDS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
USER = "locomo@example.com"
PROMPT_ID = "default-v1"
_SESSION = re.compile(r"session_(\d+)")
_DIA = re.compile(r"D(\d+):(\d+)")
EMBED_MODEL = ""  # --embed-model: a local embedder other than the configured default


# --- the data -------------------------------------------------------------------------------------------------


def load_conversations(path: Path) -> list[dict]:
    """The conversations of a LoCoMo file: the dev zip (one JSON per conversation), a folder of them, or
    locomo10.json (a list)."""
    if not path.exists():
        raise SystemExit(
            f"LoCoMo data not found at {path}: pass --data (the zip of /work/shared/data/README.md, "
            "kept out of the repository)"
        )
    found: list[dict] = []
    if path.is_dir():
        texts = [(p.stem, p.read_text(encoding="utf-8")) for p in sorted(path.glob("*.json"))]
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = sorted(n for n in archive.namelist() if n.endswith(".json"))
            texts = [(Path(n).stem, archive.read(n).decode("utf-8")) for n in names]
    else:
        texts = [(path.stem, path.read_text(encoding="utf-8"))]
    for stem, text in texts:
        data = json.loads(text)
        for conv in data if isinstance(data, list) else [data]:
            body = conv.get("conversation", conv)  # locomo10.json nests it; the dev files do not
            found.append({**body, "qa": conv.get("qa", []), "sample_id": str(conv.get("sample_id") or stem)})
    return found


def session_time(text: str) -> dt.datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023", as UTC (the data gives no zone)."""
    return dt.datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)


def utterance_text(utterance: dict) -> str:
    text = f"{utterance['speaker']}: {utterance.get('text', '').strip()}"
    caption = utterance.get("blip_caption")
    return f"{text} [shares {caption}]" if caption else text


def to_chat(conv: dict, title: str) -> tuple[dict, dict[str, int]]:
    """The conversation in this app's import format, and dia_id -> index of the turn holding it."""
    sessions = sorted(
        (int(m.group(1)), conv[k]) for k in conv if (m := _SESSION.fullmatch(k)) and isinstance(conv[k], list)
    )
    turns: list[dict] = []
    where: dict[str, int] = {}
    for number, utterances in sessions:
        if not utterances:
            continue
        at = session_time(conv[f"session_{number}_date_time"]).isoformat()
        for start in range(0, len(utterances), 2):
            pair = utterances[start : start + 2]
            question = utterance_text(pair[0])
            # A session's odd last utterance has no reply: it is the answer of a turn of its own, marked.
            answer = utterance_text(pair[1]) if len(pair) > 1 else "(no reply in this session)"
            for u in pair:
                where[u["dia_id"]] = len(turns)
            turns.append({"question": question, "answer": answer, "time": at})
    return {"title": title, "turns": turns}, where


def evidence_turns(question: dict, where: dict[str, int]) -> list[int]:
    """The turns holding a question's evidence (each once); dia_ids the conversation lacks are left out."""
    found: list[int] = []
    for ref in question.get("evidence", []):
        for session, line in _DIA.findall(str(ref)):
            turn = where.get(f"D{session}:{line}")
            if turn is not None and turn not in found:
                found.append(turn)
    return found


# --- scoring --------------------------------------------------------------------------------------------------


def text_of(context) -> str:
    return context.prompt.system + "\n" + "\n".join(m["content"] for m in context.prompt.messages)


_ANSWER_STOPWORDS = frozenset(
    "a an and the of in on at to for by with from or is was were be been her his their its it they she he i you "
    "that this these those as but not no yes".split()
)


def answer_terms(text: str) -> set[str]:
    """The bench's own terms (independent of lib/tokens.py, which the engine tunes): lower-case words and numbers
    without a few stopwords, a plural's s dropped."""
    words = re.findall(r"[a-z0-9]+", str(text).lower())
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words if w not in _ANSWER_STOPWORDS}


def covered(answer: str, text_terms: set[str]) -> bool:
    wanted = answer_terms(answer)
    return bool(wanted) and wanted <= text_terms


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))] if ordered else 0.0


class Tally:
    """Evidence found / wanted, answers covered, tokens, per kind of question."""

    def __init__(self) -> None:
        self.rows: dict[str, list] = {}

    def add(self, kind: str, found: int, wanted: int, covered_: bool, spent: int) -> None:
        for key in (kind, "all 1-4" if kind != KINDS[5] else None):
            if key is not None:
                row = self.rows.setdefault(key, [0, 0, 0, 0, []])
                row[0] += found
                row[1] += wanted
                row[2] += int(covered_)
                row[3] += 1
                row[4].append(spent)

    def figures(self, kind: str) -> tuple[float, float, float, int]:
        found, wanted, cov, n, spent = self.rows.get(kind, [0, 0, 0, 0, [0]])
        return (100 * found / wanted if wanted else 0.0, 100 * cov / n if n else 0.0, statistics.median(spent), n)


# --- one conversation -----------------------------------------------------------------------------------------


class Place:
    """One embedded table with its engine and indexer: a conversation's own, or (`--one-user`) every one's."""

    def __init__(self) -> None:
        from bench.common import fresh_store
        from lib.config import Settings
        from lib.context.engine import ContextEngine
        from lib.model.models import DemoModel
        from lib.search.embedders import make_embedder
        from lib.search.indexer import Indexer
        from lib.storage.gateway import Gateway

        env = {"CHAT_MODEL_PROVIDER": "demo", **({"CHAT_EMBED_MODEL": EMBED_MODEL} if EMBED_MODEL else {})}
        settings = Settings.load(env=env, secrets={}, for_operator=True)
        self.store, meter, self.client = fresh_store(vector_dimensions=settings.embed_dimensions)
        embedder = make_embedder(settings)
        type(embedder)._load()
        self.indexer = Indexer(Gateway(self.client, self.store._table, meter), embedder)
        self.engine = ContextEngine(
            self.client, self.store._table, meter, DemoModel(delay_s=0), settings, indexer=self.indexer
        )

    def add(self, conv: dict) -> tuple[str, dict[str, int]]:
        """Import one conversation as a chat of USER: (its session id, dia_id -> turn index)."""
        from lib import tokens
        from lib.context.importer import import_chats, load_file

        name = conv.get("sample_id") or f"{conv['speaker_a']} and {conv['speaker_b']}"
        chat, where = to_chat(conv, f"{conv['speaker_a']} and {conv['speaker_b']}")
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "chat.json"
            path.write_text(json.dumps(chat, ensure_ascii=False), encoding="utf-8")
            started = time.perf_counter()
            _, chats = load_file(str(path))
            result = import_chats(self.store, self.engine, USER, chats, indexer=self.engine.indexer)
            imported_s = time.perf_counter() - started
        (session_id,) = result.session_ids
        every = self.store.all_messages(USER, session_id)
        full_tokens = sum(tokens.count(m.input_body) + tokens.count(m.output_body) for m in every)
        print(
            f"{name}: {len(every)} turns, {len(conv['qa'])} questions, {full_tokens:,} tokens; imported in "
            f"{imported_s:.1f} s ({result.summaries} summaries, {result.memories} memories)",
            file=sys.stderr,
            flush=True,
        )
        return session_id, where


def run_conversation(
    conv: dict,
    budgets: list[int],
    tallies: dict,
    timing: dict,
    search: dict,
    engine_only: bool,
    place: Place | None = None,
    imported: tuple[str, dict[str, int]] | None = None,
):
    from lib.context.cache import ContextCache, MemoryState
    from lib.model.prompts import system_prompt
    from lib.search.hybrid import search_chats
    from lib.turn.context import build_context

    if place is None:
        place = Place()
    store, client, indexer, engine = place.store, place.client, place.indexer, place.engine
    session_id, where = imported if imported is not None else place.add(conv)
    every = store.all_messages(USER, session_id)
    ids = [m.message_id for m in every]
    memories, _ = engine.memories.load(USER)
    memory_turn = {m.memory_id: m.source_message_id for m in memories}
    view = store.open_session(USER, session_id)
    system = system_prompt(PROMPT_ID)
    calls: list[str] = []
    client.meta.events.register("before-parameter-build.dynamodb", lambda model, **_: calls.append(model.name))
    shared = ContextCache()  # one browser session asking every question in turn, as `admin context` runs a file
    whole = ContextCache()
    whole.pool(USER, session_id).add(every)
    keyword_pool = whole.pool(USER, session_id)

    def score(label: str, question: dict, context) -> None:
        kind = KINDS.get(question.get("category"), "other")
        wanted = [ids[t] for t in evidence_turns(question, where)]
        sent = {s.id for s in context.sources if s.kind in ("turn", "recalled")}
        sent |= {memory_turn.get(s.id) for s in context.sources if s.kind == "memory"}
        terms = answer_terms(text_of(context))
        answer = question.get("answer", question.get("adversarial_answer", ""))
        tallies.setdefault(label, Tally()).add(
            kind, sum(w in sent for w in wanted), len(wanted), covered(answer, terms), context.tokens
        )

    for question in conv["qa"]:
        text = question["question"]
        for budget in budgets:
            cache = ContextCache()  # a new browser session: its first question pays the reads
            calls.clear()
            started = time.perf_counter()
            context = engine.context(
                cache,
                USER,
                view.session,
                text,
                view.messages,
                summary=view.summary,
                system_prompt_id=PROMPT_ID,
                budget=budget,
                earlier_turns=view.session.message_count,
            )
            elapsed = (time.perf_counter() - started) * 1000
            timing.setdefault(budget, []).append((elapsed, len(calls), tuple(calls)))
            score(f"engine {budget}", question, context)
            if engine_only:
                continue
            score(f"newest turns {budget}", question, build_context(system, every, text, budget_tokens=budget))
            score(f"keyword window {budget}", question, keyword_window(system, every, text, budget, keyword_pool))
        ask = dict(system_prompt_id=PROMPT_ID, budget=2000, earlier_turns=view.session.message_count)
        score(
            "one session 2000",
            question,
            engine.context(shared, USER, view.session, text, view.messages, summary=view.summary, **ask),
        )
        if engine_only:
            continue
        bare = ContextCache()
        bare.memory[USER] = MemoryState([], False)
        score(
            "no memories 2000",
            question,
            engine.context(bare, USER, view.session, text, view.messages, summary=view.summary, **ask),
        )
        score(
            "no summary 2000",
            question,
            engine.context(ContextCache(), USER, view.session, text, view.messages, summary=None, **ask),
        )
        score("full history", question, build_context(system, every, text, budget_tokens=10**9))
        outcome = search_chats(indexer.vectors, indexer.embedder, USER, text, top=10)
        found = [r.message_id for r in outcome.results]
        wanted = {ids[t] for t in evidence_turns(question, where)}
        kind = KINDS.get(question.get("category"), "other")
        for key in (kind, "all 1-4" if question.get("category") != 5 else None):
            if key is not None and wanted:
                row = search.setdefault(key, [0, 0, 0])
                row[0] += bool(wanted & set(found[:5]))
                row[1] += bool(wanted & set(found[:10]))
                row[2] += 1


def keyword_window(system: str, every: list, question: str, budget: int, pool):
    """The naive baseline: BM25 over every turn of the chat (all read), each hit with the turns before and after
    it, best first until the budget, sent in chat order as messages."""
    from lib import tokens
    from lib.context.loader import Context, Source
    from lib.context.recall import KeywordRecall
    from lib.model.models import Prompt

    class _One:
        def pool(self, user_id, session_id):
            return pool

    hits = KeywordRecall(_One()).recall(USER, "", question, 50)
    position = {m.message_id: i for i, m in enumerate(every)}
    spent = tokens.count(system) + tokens.count(question)
    chosen: set[int] = set()
    for hit in hits:
        at = position[hit.message.message_id]
        for i in (at, at - 1, at + 1):
            if 0 <= i < len(every) and i not in chosen:
                turn = every[i]
                cost = tokens.count(turn.input_body) + tokens.count(turn.output_body)
                if spent + cost <= budget:
                    chosen.add(i)
                    spent += cost
    messages, sources = [], [Source("system", tokens.count(system))]
    for i in sorted(chosen):
        turn = every[i]
        messages += [{"role": "user", "content": turn.input_body}, {"role": "assistant", "content": turn.output_body}]
        sources.append(Source("turn", tokens.count(turn.input_body) + tokens.count(turn.output_body), turn.message_id))
    messages.append({"role": "user", "content": question})
    sources.append(Source("question", tokens.count(question)))
    return Context(Prompt(system, messages), len(chosen), tuple(sources), spent, budget)


# --- report ---------------------------------------------------------------------------------------------------


def report(budgets: list[int], tallies: dict, timing: dict, search: dict, label: str) -> dict:
    from bench.common import print_table

    kinds = ["all 1-4", "single-hop", "temporal", "multi-hop", "open-domain", "adversarial"]
    rows, out = [], {}
    for budget in [*budgets, "ablations", None]:
        names = (
            [f"newest turns {budget}", f"keyword window {budget}", f"engine {budget}"]
            if isinstance(budget, int)
            else ["one session 2000", "no memories 2000", "no summary 2000"]
            if budget == "ablations"
            else ["full history"]
        )
        shown_names = {
            "one session 2000": f"{label}, one browser session for all questions (as `admin context` runs a file)",
            "no memories 2000": f"{label} without memories",
            "no summary 2000": f"{label} without the summary",
        }
        for name in names:
            if name not in tallies:
                continue
            shown = shown_names.get(name) or (name.rsplit(" ", 1)[0] if isinstance(budget, int) else name)
            if shown == "engine":
                shown = label
            cells = [f"{budget:,}" if isinstance(budget, int) else "2,000" if budget else "none", shown]
            for kind in kinds:
                recall, cov, median, n = tallies[name].figures(kind)
                cells.append(f"{recall:.1f} / {cov:.0f}")
                out[f"{name}|{kind}"] = (recall, cov, median, n)
            cells.append(f"{tallies[name].figures('all 1-4')[2]:,.0f}")
            rows.append(cells)
    n = {k: tallies[next(iter(tallies))].figures(k)[3] for k in kinds}
    print("\nEvidence recall % / answer coverage % per kind of question (questions: " + json.dumps(n) + ")\n")
    print_table(["budget", "context", *kinds, "median tokens (1-4)"], rows)
    print("\nAssembly per question, each the first of a new browser session (embedded server)\n")
    trows = []
    for budget in budgets:
        found = timing.get(budget, [])
        if not found:
            continue
        ms = [f[0] for f in found]
        reqs = [f[1] for f in found]
        kinds_seen: dict[str, int] = {}
        for f in found:
            for call in f[2]:
                kinds_seen[call] = kinds_seen.get(call, 0) + 1
        trows.append(
            [
                f"{budget:,}",
                f"{percentile(ms, 0.5):.1f}",
                f"{percentile(ms, 0.95):.1f}",
                f"{percentile(reqs, 0.5):.0f}",
                f"{percentile(reqs, 0.95):.0f}",
                max(reqs),
                ", ".join(f"{k} {v / len(found):.2f}" for k, v in sorted(kinds_seen.items())),
            ]
        )
        out[f"timing|{budget}"] = (percentile(ms, 0.5), percentile(ms, 0.95), percentile(reqs, 0.95), max(reqs))
    print_table(["budget", "p50 ms", "p95 ms", "requests p50", "p95", "max", "per question"], trows)
    if search:
        print("\n`admin search` recall: questions with an evidence turn among the top 5 / 10\n")
        srows = []
        for kind in kinds:
            if kind in search:
                at5, at10, n_ = search[kind]
                srows.append([kind, n_, f"{100 * at5 / n_:.1f}%", f"{100 * at10 / n_:.1f}%"])
                out[f"search|{kind}"] = (100 * at5 / n_, 100 * at10 / n_)
        print_table(["kind", "questions", "recall@5", "recall@10"], srows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--budgets", default="1000,2000,4000")
    parser.add_argument("--conversations", default="", help="sample ids or file names, comma-separated")
    parser.add_argument("--lib", type=Path, help="a checkout whose lib/ to measure instead of this one's")
    parser.add_argument("--engine-only", action="store_true", help="only the engine's rows (no baselines)")
    parser.add_argument("--label", default="context engine")
    parser.add_argument(
        "--one-user",
        action="store_true",
        help="every conversation a chat of one user (as a person with several long chats), not one user each",
    )
    parser.add_argument("--embed-model", default="", help="the local embedder (CHAT_EMBED_MODEL); unset: the default")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args()
    global EMBED_MODEL
    EMBED_MODEL = args.embed_model
    sys.path.insert(0, str(ROOT))
    if args.lib is not None:
        sys.path.insert(0, str(args.lib.resolve()))
    import logging

    import lib.context.engine  # noqa: F401 (first: `lib` is the one --lib names, whatever bench.common adds)
    from lib import logs

    logs.logger().setLevel(logging.WARNING)  # an import logs every summary and memory it writes

    conversations = load_conversations(args.data)
    if args.conversations:
        wanted = set(args.conversations.split(","))
        conversations = [c for c in conversations if c["sample_id"] in wanted]
    budgets = [int(b) for b in args.budgets.split(",")]
    tallies: dict = {}
    timing: dict = {}
    search: dict = {}
    if args.one_user:  # every chat imported first: each question's search meets the other chats' turns too
        place = Place()
        imported = [place.add(conv) for conv in conversations]
        for conv, chat in zip(conversations, imported):
            run_conversation(conv, budgets, tallies, timing, search, args.engine_only, place, chat)
    else:
        for conv in conversations:
            run_conversation(conv, budgets, tallies, timing, search, args.engine_only)
    out = report(budgets, tallies, timing, search, args.label)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
