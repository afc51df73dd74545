"""A file's type from its content: magic bytes first, then the suffix and the text itself.

PDF (``%PDF-`` in the first kilobyte), Word (a ZIP archive holding ``word/document.xml``), HTML
(a document that opens with ``<!doctype html``, ``<html``, ``<head`` or ``<body``, or any text
named ``.html``/``.htm``), Markdown (text named ``.md``/``.markdown``, or unnamed text with ATX
headings) and plain text. Content wins over the name: a PDF named ``.txt`` is read as a PDF, and
bytes that are not text (an image, an archive, NUL bytes, invalid UTF-8) are refused whatever
the suffix.
"""

from __future__ import annotations

import io
import re
import zipfile

from lightfoot_pipeline.ingest.files.blocks import FileReadError

PDF, DOCX, HTML, MARKDOWN, TEXT = "pdf", "docx", "html", "markdown", "text"

# Signatures of common binary formats that are not documents Lightfoot reads.
_BINARY_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\x7fELF", "an executable"),
    (b"MZ", "a Windows executable"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old binary Office file (.doc/.xls); save it as .docx"),
    (b"Rar!", "a RAR archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
)
_HTML_START = re.compile(rb"^\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b",
                         re.IGNORECASE | re.DOTALL)
_ATX_HEADING = re.compile(r"^#{1,6}\s+\S", re.MULTILINE)
# Text with more than this share of control characters (other than tab, newline, carriage
# return and form feed) is binary data that happens to decode.
_MAX_CONTROL_SHARE = 0.01


def detect(data: bytes, name: str) -> str:
    """The media type of a file's bytes (``name`` is its path, for the suffix); FileReadError for
    content that is none of the types read."""
    if not data.strip():
        raise FileReadError("empty file")
    if b"%PDF-" in data[:1024]:
        return PDF
    if data.startswith(b"PK\x03\x04"):
        return _zip_type(data, name)
    for signature, what in _BINARY_SIGNATURES:
        if data.startswith(signature):
            raise FileReadError(f"binary content ({what}), not a document")
    text = decode_text(data)
    suffix = name.rsplit(".", 1)[-1].casefold() if "." in name.rsplit("/", 1)[-1] else ""
    if _HTML_START.match(data[:4096]) or suffix in ("html", "htm", "xhtml"):
        return HTML
    if suffix in ("md", "markdown", "mdown"):
        return MARKDOWN
    if suffix == "" and _ATX_HEADING.search(text):
        return MARKDOWN
    return TEXT


def sniff(head: bytes, name: str) -> str | None:
    """What a file's first bytes say it is when it is text: ``html``, or ``text`` for plain text and
    Markdown; None for a PDF, an archive or binary content (whose size says nothing of its text)."""
    if b"%PDF-" in head[:1024] or head.startswith(b"PK\x03\x04"):
        return None
    if any(head.startswith(signature) for signature, _ in _BINARY_SIGNATURES):
        return None
    if not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as err:
            if err.start < len(head) - 3:  # not a character cut at the end of the head
                return None
    suffix = name.rsplit(".", 1)[-1].casefold() if "." in name.rsplit("/", 1)[-1] else ""
    if _HTML_START.match(head[:4096]) or suffix in ("html", "htm", "xhtml"):
        return HTML
    return TEXT


def _zip_type(data: bytes, name: str) -> str:
    try:
        names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    except (zipfile.BadZipFile, ValueError) as err:
        what = "Word document" if name.casefold().endswith(".docx") else "ZIP archive"
        raise FileReadError(f"truncated or corrupt {what} ({err})") from None
    if "word/document.xml" in names:
        return DOCX
    raise FileReadError("a ZIP archive that is not a Word document (.docx)")


def decode_text(data: bytes) -> str:
    """Bytes as text: UTF-8 (a byte-order mark dropped) or UTF-16 with its byte-order mark;
    FileReadError for anything else or for binary data."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            raise FileReadError("binary content: not valid UTF-16 despite its byte-order mark") from None
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise FileReadError(f"binary content, not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
                                f"{err.start})") from None
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\f")
    if "\x00" in text or controls > _MAX_CONTROL_SHARE * len(text):
        raise FileReadError(f"binary content, not text ({controls} control characters in {len(text)})")
    return text
