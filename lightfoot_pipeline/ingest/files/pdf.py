"""PDF files through pypdf: one block per page, with its page number."""

from __future__ import annotations

import io
import logging

from pypdf import PdfReader

from lightfoot_pipeline.ingest.files.blocks import Block, FileReadError, ParsedFile, ReadLimits, parsed
from lightfoot_pipeline.ingest.files.detect import PDF

# pypdf logs every repair it makes to a damaged file; the reader reports only whether it could read it.
logging.getLogger("pypdf").setLevel(logging.ERROR)


def read_pdf(data: bytes, limits: ReadLimits) -> ParsedFile:
    """The text of every page. An encrypted PDF opens only when its user password is empty."""
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _opens_without_password(reader):
            raise FileReadError("encrypted PDF: it needs a password to be read")
        pages = [limits.take(page.extract_text() or "") for page in reader.pages]
        title = (reader.metadata.title if reader.metadata else None) or ""
    except FileReadError:
        raise
    except Exception as err:  # pypdf raises many kinds of error on damaged files; each is this file's failure
        raise FileReadError(f"corrupt PDF ({type(err).__name__}: {err})") from None
    return parsed(PDF, str(title), [Block(text, page=number) for number, text in enumerate(pages, start=1)])


def _opens_without_password(reader: PdfReader) -> bool:
    try:
        return bool(reader.decrypt(""))
    except Exception:  # an encryption pypdf cannot undo without an optional package counts as locked
        return False
