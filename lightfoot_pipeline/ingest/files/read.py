"""One entry point for every file type: detect the type, then read with that type's reader."""

from __future__ import annotations

from lightfoot_pipeline.ingest.files.blocks import ParsedFile, ReadLimits
from lightfoot_pipeline.ingest.files.detect import DOCX, HTML, MARKDOWN, PDF, detect
from lightfoot_pipeline.ingest.files.markdown import read_markdown
from lightfoot_pipeline.ingest.files.pdf import read_pdf
from lightfoot_pipeline.ingest.files.text import read_text
from lightfoot_pipeline.ingest.files.web import read_html
from lightfoot_pipeline.ingest.files.word import read_docx

_READERS = {PDF: read_pdf, DOCX: read_docx, HTML: read_html, MARKDOWN: read_markdown}


def read_file(data: bytes, name: str, limits: ReadLimits | None = None) -> ParsedFile:
    """A file's title and blocks; FileReadError saying why when it cannot be read as a document or
    passes one of ``limits`` (then as soon as it does, not after the whole parse)."""
    return _READERS.get(detect(data, name), read_text)(data, limits or ReadLimits())
