"""Passages: the chunks of a document that each get one extraction call.

A document shorter than ``max_chars`` is one passage (a MuSiQue paragraph is one document and one
chunk). A longer one is split at blank lines, and paragraphs are packed greedily, in order, up to
``max_chars``; a single paragraph longer than that is split at sentence ends, then hard.

Chunk ids come from content: ``chunk-`` and a hash of the document id, the chunk's ordinal and its
text. The same document always yields the same chunk ids, whatever else is in the store.

A document read from a file comes cut already (:mod:`lightfoot_pipeline.ingest.chunking`): its
passages keep their chunk ids and where they stand in the file (page, heading path, offsets), and
their title line is the document's title and the heading path.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from lightfoot_pipeline.ingest.chunking import SECTION_SEPARATOR
from lightfoot_pipeline.ingest.dataset import Document

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Passage:
    chunk_id: str
    doc_id: str
    ordinal: int
    title: str
    text: str
    page: int | None = None  # where a file's passage stands: see chunking.Chunk
    section: tuple[str, ...] = ()
    char_start: int | None = None
    char_end: int | None = None

    @property
    def has_location(self) -> bool:
        return self.char_start is not None

    @property
    def retrieval_text(self) -> str:
        """What is embedded and shown for the passage: its title line, then its text."""
        return f"{self.title}\n{self.text}" if self.title else self.text


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_id_for(doc_id: str, ordinal: int, text: str) -> str:
    digest = hashlib.sha256(f"{doc_id}\x00{ordinal}\x00{text}".encode()).hexdigest()
    return f"chunk-{digest[:24]}"


def split_passages(document: Document, max_chars: int) -> list[Passage]:
    if document.chunks:
        return [
            Passage(c.chunk_id, document.doc_id, i, section_title(document.title, c.section), c.text, c.page,
                    c.section, c.char_start, c.char_end)
            for i, c in enumerate(document.chunks)
        ]
    pieces = _pack(document.text.strip(), max_chars)
    return [
        Passage(chunk_id_for(document.doc_id, i, piece), document.doc_id, i, document.title, piece)
        for i, piece in enumerate(pieces)
    ]


def section_title(title: str, section: tuple[str, ...]) -> str:
    """A file passage's title line: the document's title, then its heading path (without a first
    heading that repeats the title)."""
    path = section[1:] if section and title and section[0] == title else section
    return SECTION_SEPARATOR.join((title, *path)) if title else SECTION_SEPARATOR.join(path)


def location_label(doc_id: str, page: int | None, section: str | None) -> str:
    """Where a passage comes from, for a citation: ``guide.pdf, page 2``, ``notes.md, Setup › Linux``."""
    parts = [doc_id]
    if page is not None:
        parts.append(f"page {page}")
    if section:
        parts.append(section)
    return ", ".join(parts)


def _pack(text: str, max_chars: int) -> list[str]:
    if len(text) <= max_chars:
        return [text]
    units: list[str] = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        if len(paragraph) <= max_chars:
            units.append(paragraph)
            continue
        for sentence in _SENTENCE_END.split(paragraph):
            while len(sentence) > max_chars:
                units.append(sentence[:max_chars])
                sentence = sentence[max_chars:]
            if sentence:
                units.append(sentence)
    chunks: list[str] = []
    current = ""
    for unit in units:
        joined = f"{current}\n\n{unit}" if current else unit
        if len(joined) <= max_chars:
            current = joined
        else:
            chunks.append(current)
            current = unit
    if current:
        chunks.append(current)
    return chunks
