"""What a file reader returns: a title and blocks of text, each with its page or heading path."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

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


@dataclass
class ReadLimits:
    """How much a reader may take of one file, checked as it goes so that a file over a limit stops
    its parse early: words of text (a word is at least one token, so ``max_words`` of
    ``max_passages × tokens`` refuses only files that would give more passages than allowed), the
    inflated bytes of an archive's parts (a Word file's XML), and seconds."""

    max_words: int | None = None
    too_long: str = "too much text"  # the reason given when max_words is passed
    max_inflated_bytes: int | None = None
    seconds: float | None = None
    words: int = 0
    started: float = field(default_factory=time.monotonic)

    def take(self, text: str) -> str:
        """``text``, counted against the limits; FileReadError once a limit is passed."""
        self.words += len(text.split())
        if self.max_words is not None and self.words > self.max_words:
            raise FileReadError(self.too_long)
        self.check_time()
        return text

    def check_time(self) -> None:
        if self.seconds is not None and time.monotonic() - self.started > self.seconds:
            raise FileReadError(f"still being read after {self.seconds:g} seconds, the limit per file")



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
