"""A long multi-session conversation corpus with annotated questions, for bench/context_recall.py.

One user, three chats over six weeks (310 turns). Forty-odd facts are planted early, some restated
later, some contradicted later (the question's evidence is then the newest statement only); a few facts
live only in an assistant's answer, and a few in another chat (only memories can carry those). Filler
turns talk about the same technologies with the same words (staging, port, deploy, database...), so
keyword recall has distractors. Questions paraphrase the planted sentences; each is annotated with
the turn(s) holding its answer and the answer string. Deterministic (random.Random(seed)).
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field

# (key, planted sentence with {v}, first value, later value or None, questions, restated later?)
FACTS = [
    (
        "db_port",
        "Our staging Postgres database listens on port {v}.",
        "5433",
        "6543",
        [
            "Which port does the staging Postgres database listen on?",
            "What's the DB port for staging again?",
            "Staging database port?",
        ],
        False,
    ),
    (
        "deploy",
        "Our deploy window is {v}.",
        "Thursday 14:00 UTC",
        "Friday 10:00 UTC",
        [
            "When is our deploy window?",
            "What time are we allowed to deploy to production?",
            "Which day and hour is the production deploy window?",
        ],
        False,
    ),
    (
        "manager",
        "My manager is {v}.",
        "Dana Whitfield",
        None,
        ["Who is my manager?", "Who do I report to, my manager?", "Who's my boss?"],
        True,
    ),
    ("team", "My team is called {v}.", "Orbit Payments", None, ["What is my team called?", "Name of my team?"], False),
    (
        "lang",
        "I prefer {v} for backend services.",
        "Go",
        "Rust",
        ["Which language do I prefer for backend services?", "What should backend code default to for me?"],
        False,
    ),
    (
        "budget",
        "Our Q3 cloud budget is {v}.",
        "$42,000",
        None,
        ["What is our Q3 cloud budget?", "How much cloud spend do we have for Q3?", "How big is the Q3 cloud budget?"],
        True,
    ),
    (
        "oncall",
        "We use {v} for on-call paging.",
        "PagerDuty",
        "Opsgenie",
        ["Which tool do we use for on-call paging?", "What pages the on-call engineer?"],
        False,
    ),
    (
        "approvals",
        "We decided every pull request needs {v} approvals.",
        "two",
        None,
        ["How many approvals does a pull request need?", "PR approval rule?"],
        False,
    ),
    ("tz", "My time zone is {v}.", "Europe/Lisbon", None, ["What is my time zone?", "Which zone am I in?"], False),
    (
        "codename",
        "The project codename is {v}.",
        "Bluefin",
        None,
        ["What is the project codename?", "What do we call the project internally?"],
        True,
    ),
    (
        "launch",
        "The launch date is {v}.",
        "October 14",
        "October 28",
        ["What is the launch date?", "When do we launch?", "Has the launch date moved? What is it now?"],
        False,
    ),
    (
        "customer",
        "Our biggest customer is {v}.",
        "Hallmark Logistics",
        None,
        ["Who is our biggest customer?", "Which customer brings the most revenue?"],
        False,
    ),
    (
        "kafka",
        "We keep Kafka topics for {v}.",
        "14 days",
        None,
        [
            "How long do we keep Kafka topics?",
            "Kafka retention period?",
            "How many days of Kafka topic retention do we have?",
        ],
        True,
    ),
    (
        "ttl",
        "The session cache TTL is {v}.",
        "15 minutes",
        "30 minutes",
        ["What is the session cache TTL?", "How long do cached sessions live?"],
        False,
    ),
    (
        "ratelimit",
        "Our public API rate limit is {v}.",
        "600 requests per minute",
        None,
        ["What is our public API rate limit?", "How many requests per minute can API clients make?"],
        False,
    ),
    (
        "region",
        "Our primary cluster runs in {v}.",
        "eu-west-1",
        None,
        [
            "Which region does our primary cluster run in?",
            "Where is the main cluster hosted?",
            "Which AWS region hosts our cluster?",
        ],
        True,
    ),
    (
        "coverage",
        "We agreed on a test coverage target of {v}.",
        "85%",
        None,
        ["What test coverage target did we agree on?", "Coverage goal for tests?"],
        False,
    ),
    (
        "standup",
        "Our daily standup is at {v}.",
        "09:30",
        "10:15",
        ["What time is our daily standup?", "When do we meet for standup?", "Standup time?"],
        False,
    ),
    ("dog", "My dog's name is {v}.", "Pixel", None, ["What is my dog's name?", "What's my dog called?"], False),
    ("editor", "I use {v} as my editor.", "Neovim", None, ["Which editor do I use?", "My code editor?"], False),
    (
        "docs",
        "We write design docs in {v}.",
        "Notion",
        "Confluence",
        ["Where do we write design docs?", "Which tool holds our design documents?"],
        False,
    ),
    (
        "ci",
        "Our CI runs on {v}.",
        "GitHub Actions",
        None,
        ["What does our CI run on?", "Which CI system do we use?"],
        True,
    ),
    (
        "incident",
        "The incident Slack channel is {v}.",
        "#inc-bridge",
        None,
        ["What is the incident Slack channel?", "Where do we coordinate incidents in Slack?"],
        False,
    ),
    (
        "backup",
        "Database backups run every {v}.",
        "6 hours",
        None,
        ["How often do database backups run?", "Backup frequency for the database?"],
        False,
    ),
    (
        "room",
        "The architecture review meets in room {v}.",
        "Atlas 4B",
        None,
        ["Which room does the architecture review meet in?", "Where is the architecture review held?"],
        False,
    ),
    (
        "search",
        "Our search vendor is {v}.",
        "Elastic Cloud",
        "OpenSearch Serverless",
        ["Who is our search vendor?", "What do we use for search?", "Which search provider are we on now?"],
        False,
    ),
    (
        "train",
        "Our release train ships every {v}.",
        "two weeks",
        None,
        ["How often does our release train ship?", "What's the release cadence?"],
        False,
    ),
    (
        "sla",
        "Our uptime SLA is {v}.",
        "99.95%",
        None,
        ["What is our uptime SLA?", "Which availability do we promise?", "What uptime do we commit to?"],
        False,
    ),
    (
        "flags",
        "We manage feature flags with {v}.",
        "LaunchDarkly",
        None,
        ["What do we manage feature flags with?", "Feature flag tool?"],
        False,
    ),
    (
        "hiring",
        "We are hiring {v} engineers this quarter.",
        "three",
        None,
        ["How many engineers are we hiring this quarter?", "Headcount we're hiring for this quarter?"],
        False,
    ),
    (
        "laptop",
        "My laptop is a {v}.",
        "ThinkPad X1",
        None,
        ["What laptop do I have?", "Which laptop model is mine?"],
        False,
    ),
    (
        "allergy",
        "I'm allergic to {v}.",
        "peanuts",
        None,
        ["What am I allergic to?", "Any food allergy I mentioned?"],
        False,
    ),
    (
        "offsite",
        "The team offsite is in {v}.",
        "Porto",
        "Valencia",
        ["Where is the team offsite?", "Which city is the offsite in?", "Where are we going for the offsite?"],
        False,
    ),
    (
        "webhook",
        "The webhook payload limit is {v}.",
        "256 KB",
        None,
        ["What is the webhook payload limit?", "Max size of a webhook payload?"],
        False,
    ),
    (
        "logs",
        "We keep application logs for {v}.",
        "90 days",
        None,
        [
            "How long do we keep application logs?",
            "Application log retention?",
            "How many days of application logs do we keep?",
        ],
        False,
    ),
    (
        "rotation",
        "Service credentials rotate every {v}.",
        "60 days",
        None,
        ["How often do service credentials rotate?", "Credential rotation interval?"],
        False,
    ),
    (
        "format",
        "My preferred answer format is {v}.",
        "short bullet lists",
        None,
        ["What answer format do I prefer?", "How do I like answers formatted?"],
        False,
    ),
    ("weekly", "我们团队的周会在{v}。", "周二下午三点", None, ["我们团队的周会是什么时候？", "周会几点开？"], False),
    ("retention_zh", "我们的数据库备份保存{v}。", "三十天", None, ["数据库备份保存多久？", "备份会保留几天？"], False),
    ("office", "我的办公室在{v}。", "上海浦东", None, ["我的办公室在哪里？", "我在哪个城市办公？"], False),
]
# Facts only the assistant's answer states (memories never hold them: only recall can find them).
ANSWER_FACTS = [
    (
        "shards",
        "How many shards should the orders table use?",
        "Use {v} shards for the orders table.",
        "12",
        ["How many shards did we settle on for the orders table?", "Shard count for orders?"],
    ),
    (
        "pool",
        "What connection pool size fits our API pods?",
        "Set the connection pool size to {v} per pod.",
        "24",
        ["What connection pool size per pod did you recommend?", "Pool size for API pods?"],
    ),
    (
        "timeout",
        "What read timeout should the payments client use?",
        "Give the payments client a {v} read timeout.",
        "4 seconds",
        ["What read timeout should the payments client use?", "Payments client timeout?"],
    ),
    (
        "partitions",
        "How many Kafka partitions for the events topic?",
        "Create the events topic with {v} partitions.",
        "48",
        ["How many partitions does the events topic have?", "Partition count for events?"],
    ),
]
# Facts of another chat: the main chat's context can only hold them through memories.
SIDE_FACTS = [
    ("car", "My car is a {v}.", "blue Volvo V60", ["What car do I drive?"]),
    ("daughter", "My daughter is called {v}.", "Inês", ["What is my daughter's name?"]),
    ("gym", "I always go to the gym on {v}.", "Mondays and Thursdays", ["Which days do I go to the gym?"]),
]

# Paraphrases that share few or no words with the planted sentence: keyword recall's weak spot (semantic
# recall is for these); memories may still carry them.
HARD = [
    ("db_port", "Which number do I connect to for the pre-prod Postgres?"),
    ("manager", "Who signs off my vacation requests?"),
    ("budget", "What's our spending cap on AWS this quarter?"),
    ("ttl", "How long before an idle login falls out of the cache?"),
    ("oncall", "Which alerting service wakes people up at night?"),
    ("approvals", "How many reviewers must sign off on code changes?"),
    ("dog", "What's my pet called?"),
    ("offsite", "Which city should I book flights to for the team retreat?"),
    ("ratelimit", "What's the cap on calls per minute for third parties?"),
    ("editor", "What do I type code in?"),
    ("launch", "When does the product go live?"),
    ("codename", "What's the internal name of what we're building?"),
]

TECH = ["Postgres", "Kafka", "Redis", "Kubernetes", "Terraform", "React", "asyncio", "DynamoDB", "gRPC", "nginx"]
CONCEPT = [
    "backpressure",
    "retries",
    "connection pooling",
    "schema migrations",
    "caching",
    "rate limiting",
    "idempotency",
    "observability",
    "the deploy pipeline",
    "integration tests",
    "the staging environment",
    "port forwarding",
    "backups",
    "team onboarding",
    "the budget review",
]
FILLER_Q = [
    "Can you explain how {t} handles {c}?",
    "What are common mistakes with {c} in {t}?",
    "Give me a checklist for {c} when using {t}.",
    "How would you test {c} for our {t} setup?",
    "Compare two approaches to {c} with {t}.",
    "Draft a short note to the team about {c} and {t}.",
]
SENTENCES = [
    "Start by measuring {c} under realistic load before changing anything in {t}.",
    "In {t}, {c} usually fails at the edges: timeouts, partial writes and restarts.",
    "Keep the configuration for {c} in one place so staging and production do not drift.",
    "A small script that exercises {c} against {t} catches most regressions early.",
    "Document the decision and the numbers behind it; the team will ask again in a month.",
    "Watch the port, connection and error metrics of {t} while you roll out {c}.",
    "Roll out {c} behind a flag, deploy to staging first, then to a tenth of production.",
    "The database side of {c} matters as much as the application side.",
    "If the budget is tight, start with the cheapest change to {c} and measure again.",
    "Write down who owns {c} for {t}; unclear ownership is the usual root cause.",
]


@dataclass
class Question:
    text: str
    answer: str
    evidence: list[int]  # indexes of turns (in the corpus's global order)
    kind: str  # planted, restated, contradicted, answer, other-chat


@dataclass
class Corpus:
    chats: list[dict]  # import-chat's own format
    questions: list[Question]
    order: list[tuple[int, int]] = field(default_factory=list)  # global turn index -> (chat, turn)


def _filler(rng: random.Random) -> tuple[str, str]:
    t, c = rng.choice(TECH), rng.choice(CONCEPT)
    question = rng.choice(FILLER_Q).format(t=t, c=c)
    answer = " ".join(rng.choice(SENTENCES).format(t=t, c=c) for _ in range(rng.randint(4, 12)))
    return question, answer


def build(seed: int = 12, main_turns: int = 250, side_turns: int = 60) -> Corpus:
    rng = random.Random(seed)
    slots: list[tuple[str, str, list]] = [None] * main_turns  # (question, answer, tags)
    plant_at = rng.sample(range(3, int(main_turns * 0.35)), len(FACTS) + len(ANSWER_FACTS))
    questions: list[Question] = []
    taken = set(plant_at)
    found: dict[str, tuple[str, list[int]]] = {}

    def later_slot(low: float, high: float) -> int:
        while True:
            at = rng.randrange(int(main_turns * low), int(main_turns * high))
            if at not in taken:
                taken.add(at)
                return at

    for (key, sentence, first, second, qs, restated), at in zip(FACTS, plant_at):
        statement = sentence.format(v=first)
        slots[at] = (
            f"{statement} {rng.choice(['Keep that in mind.', 'Just so you know.', 'FYI.'])}"
            if rng.random() < 0.5
            else statement,
            f"Noted: {statement.replace('My ', 'your ').replace('Our ', 'your ').replace('我', '你')} "
            + " ".join(rng.choice(SENTENCES).format(t=rng.choice(TECH), c=rng.choice(CONCEPT)) for _ in range(2)),
            [],
        )
        evidence, answer, kind = [at], first, "planted"
        if second:
            change = later_slot(0.5, 0.95)
            statement2 = sentence.format(v=second)
            slots[change] = (f"Update: {statement2} It changed this week.", f"Got it, updated: {statement2}", [])
            evidence, answer, kind = [change], second, "contradicted"
        elif restated:
            again = later_slot(0.6, 0.95)
            slots[again] = (f"Reminder for the new doc: {statement}", f"Thanks, {statement} is in the doc now.", [])
            evidence, kind = [at, again], "restated"
        questions += [Question(q, answer, evidence, kind) for q in qs]
        found[key] = (answer, evidence)
    for (_key, ask, said, value, qs), at in zip(ANSWER_FACTS, plant_at[len(FACTS) :]):
        slots[at] = (
            ask,
            said.format(v=value)
            + " "
            + " ".join(rng.choice(SENTENCES).format(t="Postgres", c="connection pooling") for _ in range(3)),
            [],
        )
        questions += [Question(q, value, [at], "answer") for q in qs]
    questions += [Question(q, found[key][0], found[key][1], "paraphrase, few shared words") for key, q in HARD]
    for i, slot in enumerate(slots):
        if slot is None:
            q, a = _filler(rng)
            slots[i] = (q, a, [])

    side = [None] * side_turns
    side_at = rng.sample(range(2, side_turns - 5), len(SIDE_FACTS))
    for (_key, sentence, value, qs), at in zip(SIDE_FACTS, side_at):
        side[at] = (sentence.format(v=value), "Noted, " + sentence.format(v=value).lower())
        questions += [Question(q, value, [main_turns + at], "other-chat") for q in qs]
    for i, slot in enumerate(side):
        if slot is None:
            side[i] = _filler(rng)

    start = dt.datetime(2026, 9, 1, 8, 0, tzinfo=dt.timezone.utc)

    def timed(pairs, offset_days: float, span_days: float):
        step = span_days * 86400 / len(pairs)
        moment, out = start + dt.timedelta(days=offset_days), []
        for q, a, *_ in pairs:
            moment += dt.timedelta(seconds=rng.uniform(0.3, 1.7) * step)
            out.append({"question": q, "answer": a, "time": moment.isoformat().replace("+00:00", "Z")})
        return out

    chats = [
        {"title": "Platform team notes", "turns": timed(slots, 0, 40)},
        {"title": "Personal admin", "turns": timed(side, 3, 30)},
    ]
    return Corpus(chats, questions)
