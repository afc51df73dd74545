"""Chunking a file's text into passages: by section, within a token budget, with overlap.

A file's blocks (:mod:`lightfoot_pipeline.ingest.files`) are joined into the document's text, one
blank line apart. Consecutive blocks with the same page and heading path form a section, and no
passage crosses a section's end, so an edit in one section changes only that section's passages.
Within a section, paragraphs are packed in order up to ``tokens`` tokens (a token is a word or a
punctuation mark); a paragraph over the budget is cut at sentence ends, a sentence over it at
token boundaries. Each passage after the first of its section starts with the last whole
sentences or paragraphs of the one before, up to ``overlap`` tokens, so a statement that spans a
cut is whole in one passage.

A passage is an exact slice of the document's text, and its id comes from content alone: the
document id, the page and heading path, the text, and its count among identical passages of
the same section before it. Passages that an edit elsewhere leaves as they were keep their ids
(and their extractions), wherever they now stand.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from lightfoot_pipeline.ingest.files.blocks import Block
from lightfoot_pipeline.settings import ChunkSettings

_TOKEN = re.compile(r"\w+|[^\w\s]")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
SECTION_SEPARATOR = " › "


@dataclass(frozen=True)
class Chunk:
    """A passage cut from a file, with where it stands in it."""

    chunk_id: str
    text: str
    page: int | None
    section: tuple[str, ...]
    char_start: int  # offsets into the document's text (its blocks joined by blank lines)
    char_end: int


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def document_text(blocks: tuple[Block, ...] | list[Block]) -> str:
    return "\n\n".join(b.text for b in blocks)


def chunk_blocks(doc_id: str, blocks: tuple[Block, ...] | list[Block], settings: ChunkSettings,
                 limit: int | None = None) -> list[Chunk]:
    """The passages of a file's blocks, in reading order; with ``limit``, cutting stops once there
    are more than ``limit`` of them (so a file over the limit costs no more than the limit)."""
    text = document_text(blocks)
    chunks: list[Chunk] = []
    seen: dict[tuple, int] = {}
    offset = 0
    section_start = 0
    for i, block in enumerate(blocks):
        end = offset + len(block.text)
        last_of_section = i + 1 == len(blocks) or (blocks[i + 1].page, blocks[i + 1].section) != (block.page, block.section)
        if last_of_section:
            for start, stop in _pack(text, _units(text, section_start, end, settings.tokens), settings):
                piece = text[start:stop]
                key = (block.page, block.section, piece)
                n = seen.get(key, 0)
                seen[key] = n + 1
                chunks.append(Chunk(_chunk_id(doc_id, block.page, block.section, piece, n), piece, block.page,
                                    block.section, start, stop))
                if limit is not None and len(chunks) > limit:
                    return chunks
            section_start = end + 2
        offset = end + 2
    return chunks


def _chunk_id(doc_id: str, page: int | None, section: tuple[str, ...], text: str, n: int) -> str:
    where = f"{page if page is not None else ''}\x00{chr(31).join(section)}"
    digest = hashlib.sha256(f"{doc_id}\x00{where}\x00{text}\x00{n}".encode()).hexdigest()
    return f"chunk-{digest[:24]}"


def _units(text: str, start: int, end: int, budget: int) -> list[tuple[int, int, int]]:
    """(start, end, tokens) of the paragraphs of text[start:end], cut further where over budget."""
    units: list[tuple[int, int, int]] = []
    for paragraph in _spans(text, start, end, _PARAGRAPH_BREAK):
        tokens = count_tokens(text[paragraph[0]:paragraph[1]])
        if tokens <= budget:
            units.append((*paragraph, tokens))
            continue
        for sentence in _spans(text, *paragraph, _SENTENCE_END):
            found = list(_TOKEN.finditer(text, sentence[0], sentence[1]))
            for i in range(0, len(found), budget):
                window = found[i:i + budget]
                units.append((window[0].start(), window[-1].end(), len(window)))
    return units


def _spans(text: str, start: int, end: int, separator: re.Pattern) -> list[tuple[int, int]]:
    """The non-blank pieces of text[start:end] between separators, trimmed, as offsets."""
    spans = []
    position = start
    for match in [*separator.finditer(text, start, end), None]:
        stop = match.start() if match else end
        piece = text[position:stop]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            spans.append((position + lead, position + len(piece.rstrip())))
        if match:
            position = match.end()
    return spans


def _pack(text: str, units: list[tuple[int, int, int]], settings: ChunkSettings) -> list[tuple[int, int]]:
    """Greedy packing of units into passages of at most the budget, with the overlap."""
    pieces: list[tuple[int, int]] = []
    i = 0
    while i < len(units):
        j, total = i + 1, units[i][2]
        while j < len(units) and total + units[j][2] <= settings.tokens:
            total += units[j][2]
            j += 1
        pieces.append((units[i][0], units[j - 1][1]))
        if j == len(units):
            break
        k, carried = j, 0
        while k - 1 > i and carried + units[k - 1][2] <= settings.overlap:
            carried += units[k - 1][2]
            k -= 1
        i = k
    return pieces
