"""The only module that talks to a model API: one small interface, three providers.

A provider's `stream(prompt)` returns a Reply: iterate it for text chunks; when the
iteration ends, `reply.usage` holds the token counts. Every failure surfaces as
ModelError with a sentence a user understands; whatever text arrived before the
failure stays in `reply.text`.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from lib.errors import ModelError
from lib.storage import keys


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    estimated: bool = False  # not the provider's final count: an answer that ended early (see Reply.usage_so_far)


@dataclass(frozen=True)
class Prompt:
    """What the model sees: a system prompt and alternating user/assistant turns ending with the question.

    `cache_prefix` is the start of `system` that stays the same from one question to the next (instructions,
    memories, summary): providers that cache prompts mark it, so a reply within minutes pays cache reads.
    """

    system: str
    messages: list[dict[str, str]]
    cache_prefix: str = ""
    # Files attached to the question (lib/context/attachments.py), sent before its text: each a dict with `name`,
    # `kind` (text | pdf | image), `media_type` and `text` (the part that fits the budget) or `data` (base64).
    attachments: tuple[dict[str, Any], ...] = ()

    def api_messages(self, *, documents: bool = True) -> list[dict[str, Any]]:
        """The messages as the Messages API takes them: the question's attachments as content blocks before its
        text (a text or PDF's text as a `document` block titled with the file name, or with `documents=False` a
        text block that starts with the name; an image as a base64 `image` block)."""
        if not self.attachments:
            return self.messages
        blocks: list[dict[str, Any]] = []
        for part in self.attachments:
            if part["kind"] == "image":
                source = {"type": "base64", "media_type": part["media_type"], "data": part["data"]}
                blocks.append({"type": "image", "source": source})
            elif documents:
                source = {"type": "text", "media_type": "text/plain", "data": part["text"]}
                blocks.append({"type": "document", "source": source, "title": part["name"]})
            else:
                blocks.append({"type": "text", "text": f"Attached file “{part['name']}”:\n\n{part['text']}"})
        last = self.messages[-1]
        return [
            *self.messages[:-1],
            {"role": last["role"], "content": [*blocks, {"type": "text", "text": last["content"]}]},
        ]

    def system_blocks(self) -> str | list[dict[str, Any]]:
        """The Anthropic `system` parameter: the stable prefix as a cached block, the rest (recalled turns) after."""
        if not self.cache_prefix or not self.system.startswith(self.cache_prefix):
            return self.system
        blocks: list[dict[str, Any]] = [
            {"type": "text", "text": self.cache_prefix, "cache_control": {"type": "ephemeral"}}
        ]
        rest = self.system[len(self.cache_prefix) :]
        if rest.strip():
            blocks.append({"type": "text", "text": rest})
        return blocks


@dataclass
class Reply:
    """One streamed answer. Iterate once; then read text, usage and times."""

    model: str
    _source: Iterator[Any] = field(repr=False)
    usage: Usage = field(default_factory=Usage)
    started_at: str | None = None
    first_token_at: str | None = None
    ended_at: str | None = None
    complete: bool = False
    _parts: list[str] = field(default_factory=list, repr=False)
    _joined: tuple[int, str] = field(default=(0, ""), repr=False)
    _abort: Callable[[], None] | None = field(default=None, repr=False)
    reported: Usage | None = None  # what the provider had reported when the stream ended early (input at start)

    @property
    def text(self) -> str:
        """What arrived so far. Joined when read, not per chunk: a join per chunk grows with the answer
        (quadratic over a long one), and it is read only a few times per answer."""
        if self._joined[0] != len(self._parts):
            self._joined = (len(self._parts), "".join(self._parts))
        return self._joined[1]

    def __iter__(self) -> Iterator[str]:
        self.started_at = keys.now()
        parts = self._parts
        try:
            for piece in self._source:
                if isinstance(piece, Usage):  # providers send their usage last
                    self.usage = piece
                    continue
                if self.first_token_at is None:
                    self.first_token_at = keys.now()
                parts.append(piece)
                yield piece
            self.complete = True
        except ModelError:
            raise
        except Exception as exc:
            if not from_the_model(exc):
                raise  # a bug in our own code: the worker saves the turn as failed because of the app, not the model
            raise ModelError(describe_failure(exc, started=bool(parts))) from exc
        finally:
            self.ended_at = keys.now()

    def usage_so_far(self, sent_tokens: int) -> Usage:
        """What an answer that ended early (Stop, a dropped connection, an error) is billed for: the input the
        provider reported at the start (or `sent_tokens`, our estimate of the prompt, if it reported nothing),
        and the output that arrived (counted from the text). Marked estimated; a complete answer's usage is the
        provider's own count."""
        if self.complete:
            return self.usage
        if self.reported is None and not self.text:
            return Usage()  # refused before it started (a 429 past its retries, no connection): nothing billed
        reported = self.reported or Usage()
        return Usage(
            input_tokens=reported.input_tokens or sent_tokens,
            output_tokens=max(reported.output_tokens, estimate_tokens(self.text) if self.text else 0),
            cache_read_tokens=reported.cache_read_tokens,
            cache_write_tokens=reported.cache_write_tokens,
            estimated=True,
        )

    def abort(self) -> None:
        """From any thread: cut the model's connection now (Stop while the model sends nothing); the iterating
        thread's read fails at once. A no-op for a provider without a connection (the demo model)."""
        if self._abort is not None:
            self._abort()

    def close(self) -> None:
        """Close the model's stream (the anthropic SDK's HTTP response) so no more output is sent or paid for.

        Call it from the thread that iterated, after the iteration stopped: a generator cannot be closed
        while another thread is inside it."""
        close = getattr(self._source, "close", None)
        if close is not None:
            close()


class ChatModel(Protocol):
    name: str
    provider: str

    def stream(self, prompt: Prompt) -> Reply: ...

    def title(self, question: str, answer: str) -> tuple[str, Usage]: ...

    def using(self, model_id: str) -> "ChatModel":
        """The same client answering with another model id (lib/model/catalog.py: a chat's pick)."""
        ...


COMPLETE_TIMEOUT_S = 60.0  # a background summary or extraction never waits on the model longer than this

TITLE_INSTRUCTION = (
    "Write a title of 3 to 6 words for a chat that starts with the user's message below. "
    "Reply with the title only: no quotes, no final period."
)


def clean_title(text: str, fallback: str) -> str:
    title = " ".join(text.strip().strip("\"“”'`").split()).rstrip(".")
    return title[:80] if title else fallback


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's errors (the SDK's own HTTP library, and httpx/httpcore where a custom client uses them)."""
    import importlib

    found: list[type[BaseException]] = [OSError]  # a socket cut by Stop (Reply.abort), a reset connection
    for name, classes in (
        ("httpx2", ("HTTPError", "StreamError")),
        ("httpx", ("HTTPError", "StreamError")),
        ("httpcore", ("NetworkError", "ProtocolError", "TimeoutException")),
    ):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        found += [getattr(module, c) for c in classes if isinstance(getattr(module, c, None), type)]
    return tuple(found)


def from_the_model(exc: BaseException) -> bool:
    """An error of the model service or of the connection to it (what describe_failure has a sentence for);
    anything else raised while streaming is a bug of ours and must not be blamed on the connection."""
    import anthropic

    return isinstance(exc, (anthropic.APIError, *_transport_errors()))


def describe_failure(exc: BaseException, *, started: bool) -> str:
    """A sentence for the user about a failed model call; technical detail stays in the logs."""
    import anthropic

    kept = " The part of the answer that arrived is kept." if started else ""
    if isinstance(exc, anthropic.AuthenticationError):
        return "The model service rejected the app's API key. Ask an administrator to check ANTHROPIC_API_KEY."
    if isinstance(exc, anthropic.PermissionDeniedError):
        return "The app's model credentials are not allowed to use this model. Ask an administrator."
    if isinstance(exc, anthropic.RateLimitError):
        return "The model is rate-limited right now. Wait a minute, then press Retry." + kept
    if (
        isinstance(exc, anthropic.APIStatusError)
        and getattr(exc, "status_code", 0) in (529, 503)
        or type(exc).__name__ == "OverloadedError"
        or "overloaded" in str(exc).lower()
    ):
        return "The model is overloaded right now. Press Retry in a moment." + kept
    if isinstance(exc, anthropic.BadRequestError):
        return "The model refused the request (it may be too long for the model). Start a new chat or shorten it."
    if isinstance(exc, anthropic.APITimeoutError):
        return "The model took too long to answer. Press Retry." + kept
    if isinstance(exc, anthropic.APIConnectionError):
        return "The model service could not be reached. Press Retry." + kept
    if isinstance(exc, anthropic.APIStatusError):
        return f"The model service answered with an error ({exc.status_code}). Press Retry." + kept
    # httpx2.RemoteProtocolError and friends: the connection dropped mid-stream, with no retry by the SDK
    return "The connection to the model dropped before the answer was complete. Press Retry." + kept


class AnthropicModel:
    """Claude through the Anthropic API (or, given an AnthropicBedrock client, through Bedrock)."""

    def __init__(self, client: Any, name: str, max_tokens: int, provider: str = "anthropic"):
        self._client = client
        self.name = name
        self.max_tokens = max_tokens
        self.provider = provider

    def using(self, model_id: str) -> AnthropicModel:
        if model_id == self.name:
            return self
        return AnthropicModel(self._client, model_id, self.max_tokens, provider=self.provider)

    def stream(self, prompt: Prompt) -> Reply:
        def source() -> Iterator[Any]:
            # The SDK retries 429/529/connection errors before the first byte; a drop mid-stream is final.
            with self._client.messages.stream(
                model=self.name,
                max_tokens=self.max_tokens,
                system=prompt.system_blocks(),
                # Bedrock is sent attached text as labelled text blocks, the form every Claude deployment takes
                messages=prompt.api_messages(documents=self.provider == "anthropic"),
            ) as stream:
                reply._abort = lambda: _cut(stream)
                try:
                    yield from stream.text_stream
                    yield _usage(stream.get_final_message().usage)
                finally:  # also when the stream is closed early (Stop) or fails: what was reported so far
                    reply.reported = _snapshot_usage(stream)

        reply = Reply(self.name, source())
        return reply

    def title(self, question: str, answer: str) -> tuple[str, Usage]:
        fallback = question
        try:
            response = self._client.messages.create(
                model=self.name,
                max_tokens=24,
                system=TITLE_INSTRUCTION,
                messages=[{"role": "user", "content": question[:4000]}],
            )
        except Exception as exc:
            raise ModelError(describe_failure(exc, started=False)) from exc
        text = "".join(getattr(block, "text", "") for block in response.content)
        return clean_title(text, fallback), _usage(response.usage)

    def complete(
        self, system: str, text: str, *, model: str, max_tokens: int, timeout_s: float = COMPLETE_TIMEOUT_S
    ) -> tuple[str, Usage]:
        """One non-streamed call with a deadline (summaries, memory extraction), on `model` (a cheaper one);
        ModelError on any failure."""
        try:
            response = self._client.messages.create(
                model=model,
                max_tokens=max_tokens,
                system=system,
                messages=[{"role": "user", "content": text}],
                timeout=timeout_s,
            )
        except Exception as exc:
            raise ModelError(describe_failure(exc, started=False)) from exc
        return "".join(getattr(block, "text", "") for block in response.content), _usage(response.usage)


def _cut(stream: Any) -> None:
    """Shut the stream's socket down: unlike close(), this wakes a thread blocked reading it (httpx/httpcore
    expose the socket as the response's network_stream)."""
    import socket

    try:
        network = stream.response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
            return
    except (AttributeError, OSError):
        pass  # already closed, or a transport without a socket: closing is the best left
    stream.close()


def _snapshot_usage(stream: Any) -> Usage | None:
    """The usage of the message as streamed so far (message_start carries the input tokens), if any arrived."""
    try:
        return _usage(stream.current_message_snapshot.usage)
    except Exception:  # noqa: BLE001 (no message_start yet: the SDK has no snapshot to give)
        return None


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=getattr(usage, "input_tokens", 0) or 0,
        output_tokens=getattr(usage, "output_tokens", 0) or 0,
        cache_read_tokens=getattr(usage, "cache_read_input_tokens", 0) or 0,
        cache_write_tokens=getattr(usage, "cache_creation_input_tokens", 0) or 0,
    )


def estimate_tokens(text: str) -> int:
    """About four characters per token: good enough for budgets and the demo's counts."""
    return max(1, (len(text) + 3) // 4)


class DemoModel:
    """Offline and deterministic: streams a Markdown answer built from the question, with realistic pacing."""

    provider = "demo"

    def __init__(self, delay_s: float = 0.02, sleep: Callable[[float], None] = time.sleep):
        self.name = "demo"
        self._delay = delay_s
        self._sleep = sleep
        self._asked: dict[tuple[str, int], int] = {}  # how often this process was asked a question at a turn

    def stream(self, prompt: Prompt) -> Reply:
        question = prompt.messages[-1]["content"]
        turns = len(prompt.messages) // 2 + 1
        # The same question at the same turn again (Regenerate) opens differently, as a real model's would.
        attempt = self._asked.get((question, turns), 0)
        if len(self._asked) > 1_000:
            self._asked.clear()
        self._asked[(question, turns)] = attempt + 1
        answer = demo_answer(question, turns=turns, attempt=attempt)
        if prompt.attachments:  # what the demo can truly say about them: what it was given
            seen = "; ".join(
                f"“{p['name']}” ({p['kind']}"
                + (f", {len(p['text']):,} characters of text" if p.get("text") is not None else ", an image")
                + ")"
                for p in prompt.attachments
            )
            answer = f"(Demo model) I was given {len(prompt.attachments)} attached file(s): {seen}.\n\n{answer}"
        input_tokens = estimate_tokens(prompt.system) + sum(estimate_tokens(m["content"]) for m in prompt.messages)
        input_tokens += sum(estimate_tokens(p.get("text") or "") for p in prompt.attachments)

        def source() -> Iterator[Any]:
            for chunk in re.findall(r"\S+\s*|\s+", answer):
                if self._delay:
                    self._sleep(self._delay)
                yield chunk
            yield Usage(input_tokens=input_tokens, output_tokens=estimate_tokens(answer))

        return Reply(self.name, source())

    def using(self, model_id: str) -> DemoModel:
        return self  # the demo answers every question itself (its catalog lists only itself)

    def title(self, question: str, answer: str) -> tuple[str, Usage]:
        title = demo_title(question)
        return title, Usage(input_tokens=estimate_tokens(question), output_tokens=estimate_tokens(title))


_TRAILING = {
    "a",
    "an",
    "the",
    "for",
    "of",
    "to",
    "and",
    "or",
    "in",
    "on",
    "with",
    "my",
    "our",
    "this",
    "that",
    "your",
    "about",
    "by",
    "from",
    "at",
    "as",
    "is",
    "def",
}


def demo_title(question: str, limit: int = 60) -> str:
    """The question's first line as a title, never cut mid-phrase: a short question whole, a long one at its
    first clause (':', ',', ';', ' - ') or on a word, without a dangling 'the', 'for'..."""
    line = " ".join(question.strip().split("\n", 1)[0].split()).rstrip("?.!:; ")
    if not line:
        return "New chat"
    if len(line) > limit:
        clause = re.split(r"[:;,(]| - | — ", line, maxsplit=1)[0].strip()
        if 3 <= len(clause.split()) and len(clause) <= limit:
            words = clause.split()
        else:  # whole words that fit, ended before the last phrase that would be cut ('... for the new')
            words = line[: limit + 1].rsplit(" ", 1)[0].split()
            starts = [i for i in range(3, len(words)) if words[i].lower() in _TRAILING]
            words = words[: starts[-1]] if starts else words
        while len(words) > 2 and words[-1].lower().strip("'’") in _TRAILING:
            words.pop()
        line = " ".join(words)
    return line[0].upper() + line[1:]


_TOPICS = [
    (
        ("dynamodb", "table", "database", "key", "index"),
        "Data modelling",
        "- Start from the queries, then choose the keys.\n- Keep items small; one item per turn is a good default.\n"
        "- Prefer one conditional transaction over read-modify-write.",
        '```python\nclient.query(\n    TableName="chat",\n    KeyConditionExpression="pk = :pk",\n'
        '    ExpressionAttributeValues={":pk": {"S": "USER#u-123"}},\n    ScanIndexForward=False,\n    Limit=20,\n)\n```',
    ),
    (
        ("python", "code", "function", "bug", "error", "script"),
        "Code",
        "- Reproduce the problem with the smallest input.\n- Write the failing test first.\n- Fix, then keep the test.",
        '```python\ndef test_the_bug_stays_fixed():\n    assert parse("") == []\n```',
    ),
    (
        ("email", "write", "draft", "report", "summary", "summarize"),
        "Writing",
        "- Lead with the decision or the ask.\n- One idea per paragraph.\n- End with the next step and a date.",
        "> **Subject:** Decision needed by Friday\n>\n> Hi team, ...",
    ),
]


def demo_answer(question: str, turns: int = 1, attempt: int = 0) -> str:
    """A deterministic, useful-looking answer that says plainly it comes from the demo model."""
    lowered = question.lower()
    topic, bullets, example = (
        "General",
        (
            "- Say what you want to achieve.\n- Give the constraints you know.\n"
            "- Ask for the format you need (list, table, code)."
        ),
        "| step | what to do |\n|---|---|\n| 1 | ask |\n| 2 | refine |\n| 3 | decide |",
    )
    for words, name, topic_bullets, topic_example in _TOPICS:
        if any(re.search(rf"\b{w}\b", lowered) for w in words):
            topic, bullets, example = name, topic_bullets, topic_example
            break
    digest = int(hashlib.sha256(question.encode("utf-8")).hexdigest(), 16)
    quoted = " ".join(question.split())
    quoted = quoted if len(quoted) <= 120 else quoted[:117] + "…"
    openers = ["Good question.", "Here is a short plan.", "Let's break this down.", "A few pointers."]
    context = f"This is turn {turns} of our chat." if turns > 1 else "This is the first turn of our chat."
    return (
        f"{openers[(digest + attempt) % len(openers)]} You asked: *{quoted}*\n\n"
        f"**{topic}**, in three steps:\n\n{bullets}\n\nFor example:\n\n{example}\n\n"
        f"_{context} This answer comes from the offline **demo model**: set `ANTHROPIC_API_KEY` "
        f"(or `CHAT_MODEL_PROVIDER=bedrock`) for real answers from Claude._"
    )
