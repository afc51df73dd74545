"""What a file reader returns: a title and blocks of text, each with its page or heading path."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lightfoot_pipeline.errors import LightfootError

_SPACES = re.compile(r"[ \t\u00a0]+")
_BLANK_LINES = re.compile(r"\n{3,}")


class FileReadError(LightfootError, ValueError):
    """A file that cannot be read as a document: encrypted, corrupt, binary, empty or too large."""

    hint = "fix or replace the file; the other files are indexed all the same"


@dataclass(frozen=True)
class Block:
    """A paragraph (or a run of them) of a file's text, and where in the file it stands."""

    text: str
    page: int | None = None  # 1-based page of a PDF
    section: tuple[str, ...] = ()  # heading path: the enclosing headings, outermost first


@dataclass(frozen=True)
class ParsedFile:
    media_type: str  # pdf, docx, html, markdown or text
    title: str
    blocks: tuple[Block, ...]


def clean_text(text: str) -> str:
    """Text with runs of spaces made one, lines trimmed, at most one blank line between paragraphs."""
    lines = [_SPACES.sub(" ", line).strip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def parsed(media_type: str, title: str, blocks: list[Block]) -> ParsedFile:
    """The reader's result, with empty blocks dropped; a file without any text is refused."""
    kept = tuple(b for b in (Block(clean_text(b.text), b.page, b.section) for b in blocks) if b.text)
    if not kept:
        raise FileReadError(f"no text in this {media_type} file")
    return ParsedFile(media_type, clean_text(title) or "", kept)
