"""Chunking: within sections, within the budget, with overlap, ids from content."""

from __future__ import annotations

import itertools

import pytest

from lightfoot_pipeline.ingest.chunking import chunk_blocks, count_tokens, document_text
from lightfoot_pipeline.ingest.files import Block
from lightfoot_pipeline.settings import ChunkSettings, SettingsError


def sentences(prefix: str, n: int) -> str:
    return " ".join(f"{prefix} sentence {i} says something plain." for i in range(n))


BLOCKS = [
    Block(sentences("Alpha", 30), section=("A",)),
    Block(sentences("Beta", 3), section=("B",)),
    Block(sentences("Gamma", 30), section=("C",)),
]


def test_passages_stay_in_their_section_and_within_budget():
    settings = ChunkSettings(tokens=60, overlap=14)
    chunks = chunk_blocks("doc", BLOCKS, settings)
    text = document_text(BLOCKS)
    assert {c.section for c in chunks} == {("A",), ("B",), ("C",)}
    for c in chunks:
        assert text[c.char_start:c.char_end] == c.text
        assert count_tokens(c.text) <= 60
        assert c.text.split()[0] in {"Alpha", "Beta", "Gamma"} and len({w for w in c.text.split()} &
                                                                       {"Alpha", "Beta", "Gamma"}) == 1
    alpha = [c for c in chunks if c.section == ("A",)]
    assert len(alpha) > 3
    for before, after in itertools.pairwise(alpha):  # overlap: the next one starts inside the one before
        assert before.char_start < after.char_start < before.char_end
        assert count_tokens(text[after.char_start:before.char_end]) <= 14


def test_an_edit_in_one_section_changes_only_its_passages():
    settings = ChunkSettings(tokens=60, overlap=14)
    before = chunk_blocks("doc", BLOCKS, settings)
    edited = [BLOCKS[0], Block(BLOCKS[1].text.replace("Beta sentence 1", "Beta sentence one"), section=("B",)),
              BLOCKS[2]]
    after = chunk_blocks("doc", edited, settings)
    changed = {c.chunk_id for c in after} - {c.chunk_id for c in before}
    assert changed and all(c.section == ("B",) for c in after if c.chunk_id in changed)
    assert [c.chunk_id for c in after if c.section != ("B",)] == [c.chunk_id for c in before if c.section != ("B",)]
    assert chunk_blocks("doc", BLOCKS, settings) == before  # deterministic
    assert {c.chunk_id for c in chunk_blocks("other", BLOCKS, settings)}.isdisjoint({c.chunk_id for c in before})


def test_an_inserted_section_shifts_no_id():
    settings = ChunkSettings(tokens=60, overlap=0)
    before = chunk_blocks("doc", BLOCKS, settings)
    after = chunk_blocks("doc", [Block("A new first section.", section=("New",)), *BLOCKS], settings)
    assert {c.chunk_id for c in before} < {c.chunk_id for c in after}


def test_identical_passages_in_one_section_get_distinct_ids():
    chunks = chunk_blocks("doc", [Block("Same words.\n\nSame words.", page=1)], ChunkSettings(tokens=3, overlap=0))
    assert [c.text for c in chunks] == ["Same words.", "Same words."]
    assert chunks[0].chunk_id != chunks[1].chunk_id


def test_a_sentence_over_the_budget_is_cut_at_tokens():
    chunks = chunk_blocks("doc", [Block(" ".join(f"w{i}" for i in range(25)))], ChunkSettings(tokens=10, overlap=0))
    assert [count_tokens(c.text) for c in chunks] == [10, 10, 5]


@pytest.mark.parametrize("kwargs", [{"tokens": 0}, {"tokens": 10, "overlap": 10}, {"overlap": -1},
                                    {"max_passages": 0}, {"max_file_bytes": True}])
def test_settings_out_of_range_are_refused(kwargs):
    with pytest.raises(SettingsError):
        ChunkSettings(**kwargs)
