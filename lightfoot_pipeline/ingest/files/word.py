"""Word (.docx) files through python-docx: paragraphs and tables in order, under their headings."""

from __future__ import annotations

import io
import re

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from lightfoot_pipeline.ingest.files.blocks import Block, FileReadError, ParsedFile, parsed
from lightfoot_pipeline.ingest.files.detect import DOCX

_HEADING_STYLE = re.compile(r"heading (\d)", re.IGNORECASE)


def read_docx(data: bytes) -> ParsedFile:
    """Paragraphs under the path of the headings (styles ``Heading 1``-``9``) above them; table
    rows as ``cell | cell``. The title is the document's title property, else its ``Title`` paragraph."""
    try:
        document = docx.Document(io.BytesIO(data))
        title = document.core_properties.title or ""
        path: list[str] = []
        blocks: list[Block] = []
        for item in document.iter_inner_content():
            if isinstance(item, Table):
                rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in item.rows]
                blocks.append(Block("\n".join(rows), section=tuple(path)))
                continue
            assert isinstance(item, Paragraph)
            text = item.text.strip()
            style = item.style.name if item.style is not None else ""
            if style == "Title":
                title = title or text
                continue
            level = _HEADING_STYLE.fullmatch(style or "")
            if level and text:
                depth = int(level.group(1))
                path = [*path[: depth - 1], text]
                continue
            blocks.append(Block(text, section=tuple(path)))
    except Exception as err:  # a damaged archive or XML fails in many ways; each is this file's failure
        raise FileReadError(f"corrupt Word document ({type(err).__name__}: {err})") from None
    return parsed(DOCX, title, blocks)
