"""Fixtures for tests of the engine's modules: a tiny cross-encoder (the chat-completions server
is in tests/conftest.py)."""

from __future__ import annotations

import pytest

# -- a tiny cross-encoder ----------------------------------------------------------------------

TINY_WORDS = ["who", "founded", "the", "company", "that", "makes", "zephyr", "phone", "orbital", "corp", "was", "by", "mira", "kalden", "in", "tallinn", "nimbus", "cirrus", "devices", "riga", "capital", "of", "estonia", "latvia", "handset", "made", "sold", "from"]


def build_tiny_cross_encoder(directory, num_labels: int = 1, seed: int = 0):
    """A one-layer BERT sequence classifier with a word vocabulary, saved like a hub model."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]) + "\n")
    tokenizer = BertTokenizer(vocab_file=str(vocab), do_lower_case=True)
    config = BertConfig(vocab_size=len(TINY_WORDS) + 5, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=num_labels)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model, tokenizer


@pytest.fixture
def tiny_cross_encoder():
    """``make(directory, num_labels=1, seed=0) -> (model, tokenizer)``: a tiny reranker on disk."""
    return build_tiny_cross_encoder

