"""Shared fixtures: small corpora, stores on temporary paths, the fast test embedder."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def store(tmp_path):
    from lightfoot_pipeline.store.store import Store

    return Store(str(tmp_path / "store"))


@pytest.fixture(scope="session")
def hashing_embedder():
    from lightfoot_pipeline.models.embedder import HashingEmbedder

    return HashingEmbedder(dim=32)


@pytest.fixture(scope="session")
def sample_dir():
    from lightfoot_pipeline.ingest.dataset import bundled_sample_dir

    return bundled_sample_dir()


@pytest.fixture(scope="session")
def sample_documents(sample_dir):
    from lightfoot_pipeline.ingest.dataset import load_corpus

    return load_corpus(sample_dir)


@pytest.fixture(scope="session")
def sample_records(sample_dir):
    from lightfoot_pipeline.ingest.dataset import load_recorded_extractions

    return load_recorded_extractions(sample_dir)


@pytest.fixture(scope="session")
def minilm():
    from lightfoot_pipeline.models.embedder import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()
