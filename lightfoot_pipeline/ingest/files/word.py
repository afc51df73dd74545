"""Word (.docx) files through python-docx: paragraphs and tables in order, under their headings.

Before anything is parsed, the archive's directory says how large its XML parts inflate to, and a
file whose parts pass the limit is refused unread. Paragraph styles are resolved once per style
(python-docx resolves a paragraph's style by searching every style of the document, a measured
2 ms per paragraph: a file of short paragraphs took minutes), and a body of more paragraphs than
the limits allow is refused before it is read.
"""

from __future__ import annotations

import io
import re
import zipfile

import docx
from docx.enum.style import WD_STYLE_TYPE
from docx.oxml.ns import qn
from docx.table import Table

from lightfoot_pipeline.ingest.files.blocks import Block, FileReadError, ParsedFile, ReadLimits, parsed
from lightfoot_pipeline.ingest.files.detect import DOCX

_HEADING_STYLE = re.compile(r"heading (\d)", re.IGNORECASE)
_PARAGRAPH, _TABLE = qn("w:p"), qn("w:tbl")


def read_docx(data: bytes, limits: ReadLimits) -> ParsedFile:
    """Paragraphs under the path of the headings (styles ``Heading 1``-``9``) above them; table
    rows as ``cell | cell``. The title is the document's title property, else its ``Title`` paragraph."""
    try:
        _check_inflated_size(data, limits)
        document = docx.Document(io.BytesIO(data))
        body = document.element.body
        if limits.max_words is not None and len(body) > limits.max_words:
            raise FileReadError(f"{len(body):,} paragraphs and tables: {limits.too_long}")
        names = {style.style_id: style.name for style in document.styles}
        default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
        default_name = default.name if default is not None else ""
        title = document.core_properties.title or ""
        path: list[str] = []
        blocks: list[Block] = []
        for element in body.iterchildren(_PARAGRAPH, _TABLE):
            if element.tag == _TABLE:
                rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in Table(element, document).rows]
                blocks.append(Block(limits.take("\n".join(rows)), section=tuple(path)))
                continue
            text = limits.take(element.text.strip())
            style = names.get(element.style, default_name) if element.style is not None else default_name
            if style == "Title":
                title = title or text
                continue
            level = _HEADING_STYLE.fullmatch(style or "")
            if level and text:
                depth = int(level.group(1))
                path = [*path[: depth - 1], text]
                continue
            blocks.append(Block(text, section=tuple(path)))
    except FileReadError:
        raise
    except Exception as err:  # a damaged archive or XML fails in many ways; each is this file's failure
        raise FileReadError(f"corrupt Word document ({type(err).__name__}: {err})") from None
    return parsed(DOCX, title, blocks)


def _check_inflated_size(data: bytes, limits: ReadLimits) -> None:
    """Refuse an archive whose XML parts inflate past the limit, from its directory alone."""
    if limits.max_inflated_bytes is None:
        return
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        inflated = sum(info.file_size for info in archive.infolist() if info.filename.endswith((".xml", ".rels")))
    if inflated > limits.max_inflated_bytes:
        raise FileReadError(f"its XML inflates to {inflated:,} bytes, over the limit of "
                            f"{limits.max_inflated_bytes:,} per file")
