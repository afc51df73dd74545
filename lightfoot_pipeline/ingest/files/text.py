"""Plain-text files: UTF-8 (or UTF-16 with a byte-order mark), one block; no title of their own."""

from __future__ import annotations

from lightfoot_pipeline.ingest.files.blocks import Block, ParsedFile, ReadLimits, parsed
from lightfoot_pipeline.ingest.files.detect import TEXT, decode_text


def read_text(data: bytes, limits: ReadLimits) -> ParsedFile:
    return parsed(TEXT, "", [Block(limits.take(decode_text(data)))])
