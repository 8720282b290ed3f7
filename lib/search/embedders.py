"""Embedders: text to vectors, offline (wordllama's bundled weights) or on Bedrock (Cohere Embed v4, Titan v2).

Every vector records the `model` that made it (`embed_model` on the item): a search only
compares vectors of the configured model, and `reindex` re-embeds the others. Stored text
is embedded as a document and a question as a query: Cohere's asymmetric `input_type`
(search_document / search_query) separates the right memory from the rest (seed 004);
wordllama and Titan are symmetric and ignore the difference.

The local model averages token vectors (no attention): quick and offline, good at topic
words, weak on paraphrase and on CJK text (its tokenizer splits Chinese into single
characters or bytes), so the keyword path stays beside it (lib/search/hybrid.py).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from lib import logs, tokens
from lib.config import Settings
from lib.errors import EmbedError
from lib.search import minilm

Kind = Literal["document", "query"]
LOCAL_MODEL = "wordllama-l2_supercat-256"
MINILM_MODEL = minilm.MODEL
MAX_TEXT_CHARS = 4000  # what one stored text or query may send to a model (a snippet of a long turn is enough)


@dataclass(frozen=True)
class Embedded:
    vectors: list[list[float]]
    tokens: int  # input tokens (the provider's count where it gives one, else the estimate)


class Embedder(Protocol):
    model: str
    dimensions: int
    free: bool  # no per-token price (local)

    def embed(self, texts: Sequence[str], kind: Kind) -> Embedded: ...

    def ready(self) -> bool:
        """True once an embed call would not wait for the model to load; False starts loading it."""
        ...


class LocalEmbedder:
    """wordllama l2_supercat at 256 dimensions, from the wheel's own files: downloads disabled, no network ever."""

    model = LOCAL_MODEL
    dimensions = 256
    free = True
    _lock = threading.Lock()
    _model: Any = None  # the weights, loaded once per process (every LocalEmbedder shares them)
    _warming = False  # a background load has been started
    _warm_lock = threading.Lock()  # not _lock: that one is held for the whole load

    @classmethod
    def _load(cls) -> Any:
        with cls._lock:
            if cls._model is None:
                root = logging.getLogger()
                handlers, level = list(root.handlers), root.level
                import wordllama  # its inference module calls logging.basicConfig(INFO) on import: undone below
                from wordllama import WordLlama

                root.handlers[:], root.level = handlers, level
                package = Path(wordllama.__file__).parent
                # The weights are found in <package>/weights; the tokenizer only in <cache_dir>/tokenizers, which
                # is where the wheel ships it when cache_dir is the package folder itself.
                cls._model = WordLlama.load("l2_supercat", dim=256, cache_dir=package, disable_download=True)
            return cls._model

    @classmethod
    def ready(cls) -> bool:
        """True once the weights are loaded; the first call that finds them missing starts loading them in the
        background (a few seconds), so a question on a fresh process does not wait for them."""
        if cls._model is not None:
            return True
        with cls._warm_lock:
            if cls._warming:
                return False
            cls._warming = True
        threading.Thread(target=cls._load_logged, name="embedder-load", daemon=True).start()
        return False

    @classmethod
    def _load_logged(cls) -> None:
        """The background load; a failure (a missing package, weights not the published ones) is logged, and recall
        stays keyword-only while each embed call raises the same error where it is asked for."""
        try:
            cls._load()
        except Exception as exc:  # noqa: BLE001 (a thread's exception would otherwise vanish)
            logs.warning("embedder.load_failed", model=cls.model, error_class=type(exc).__name__, error=str(exc))

    def embed(self, texts: Sequence[str], kind: Kind) -> Embedded:
        texts = [t[:MAX_TEXT_CHARS] or " " for t in texts]
        matrix = self._vectors(self._load(), texts)
        return Embedded([[float(x) for x in row] for row in matrix], sum(tokens.count(t) for t in texts))

    @staticmethod
    def _vectors(model: Any, texts: list[str]) -> Any:
        """The model's unit vectors for these texts, row by row."""
        return model.embed(texts, norm=True)


class MiniLMEmbedder(LocalEmbedder):
    """all-MiniLM-L6-v2 (lib/search/minilm.py): a small transformer, its weights checked against the published
    checksums; better at paraphrase than wordllama, about a thousand times slower (still milliseconds a question)."""

    model = MINILM_MODEL
    dimensions = minilm.DIMENSIONS
    _lock = threading.Lock()
    _model: Any = None
    _warming = False
    _warm_lock = threading.Lock()

    @classmethod
    def _load(cls) -> Any:
        with cls._lock:
            if cls._model is None:
                cls._model = minilm.MiniLM()
            return cls._model

    @staticmethod
    def _vectors(model: Any, texts: list[str]) -> Any:
        return model.encode(texts)


class BedrockEmbedder:
    """Cohere Embed v4 (input_type, output_dimension, batches of 96) or Titan Text Embeddings V2 (one text a call)."""

    free = False

    def __init__(self, client: Any, model: str, dimensions: int):
        self.client = client
        self.model = model
        self.dimensions = dimensions
        self.titan = "titan" in model

    def ready(self) -> bool:
        return True  # nothing to load: each call goes to Bedrock

    def _invoke(self, body: dict) -> tuple[dict, int | None]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self.client.invoke_model(
                modelId=self.model, body=json.dumps(body), contentType="application/json", accept="application/json"
            )
            payload = json.loads(response["body"].read())
        except (ClientError, BotoCoreError, ValueError) as exc:
            raise EmbedError(
                f"The embedding model {self.model} failed ({type(exc).__name__}); nothing was "
                "indexed. Try again, or check CHAT_EMBED_MODEL and Bedrock access."
            ) from exc
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        count = headers.get("x-amzn-bedrock-input-token-count")
        return payload, int(count) if count else None

    def embed(self, texts: Sequence[str], kind: Kind) -> Embedded:
        texts = [t[:MAX_TEXT_CHARS] or " " for t in texts]
        vectors: list[list[float]] = []
        used = 0
        if self.titan:
            for text in texts:
                payload, count = self._invoke({"inputText": text, "dimensions": self.dimensions, "normalize": True})
                vectors.append([float(x) for x in payload["embedding"]])
                used += count if count is not None else int(payload.get("inputTextTokenCount", tokens.count(text)))
        else:
            for start in range(0, len(texts), 96):  # Cohere's most texts per request
                batch = texts[start : start + 96]
                payload, count = self._invoke(
                    {
                        "texts": batch,
                        "input_type": "search_document" if kind == "document" else "search_query",
                        "output_dimension": self.dimensions,
                        "embedding_types": ["float"],
                        "truncate": "RIGHT",
                    }
                )
                found = payload["embeddings"]
                found = found["float"] if isinstance(found, dict) else found
                vectors += [[float(x) for x in row] for row in found]
                used += count if count is not None else sum(tokens.count(t) for t in batch)
        if any(len(v) != self.dimensions for v in vectors) or len(vectors) != len(texts):
            raise EmbedError(
                f"The embedding model {self.model} answered vectors of another size than "
                f"CHAT_EMBED_DIMENSIONS={self.dimensions}."
            )
        return Embedded(vectors, used)


def make_embedder(settings: Settings) -> Embedder | None:
    """The configured embedder; None when CHAT_EMBED_PROVIDER=off (keyword search only)."""
    if settings.embed_provider == "off":
        return None
    if settings.embed_provider == "local":
        return MiniLMEmbedder() if settings.embed_model == MINILM_MODEL else LocalEmbedder()
    from lib import aws

    client = aws.client(
        "bedrock-runtime",
        region=settings.embed_region,
        endpoint_url=settings.embed_base_url,
        config=aws.deadlines(connect_s=settings.embed_timeout_s, read_s=settings.embed_timeout_s, attempts=2),
    )
    return BedrockEmbedder(client, settings.embed_model, settings.embed_dimensions)
