"""Markdown files through markdown-it-py (CommonMark and tables): blocks under their headings."""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.token import Token

from lightfoot_pipeline.ingest.files.blocks import Block, ParsedFile, ReadLimits, parsed
from lightfoot_pipeline.ingest.files.detect import MARKDOWN, decode_text

_PARSER = MarkdownIt("commonmark").enable("table")


def read_markdown(data: bytes, limits: ReadLimits) -> ParsedFile:
    """Paragraphs, list items, code blocks and table rows as plain text, under the path of the
    headings above them; the first level-1 heading is the title."""
    tokens = _PARSER.parse(limits.take(decode_text(data)))
    limits.check_time()
    title = ""
    path: list[str] = []
    blocks: list[Block] = []
    row: list[str] = []
    heading_depth = 0
    in_cell = False
    for token in tokens:
        if token.type in ("th_open", "td_open", "th_close", "td_close"):
            in_cell = token.type.endswith("_open")
        elif token.type == "heading_open":
            heading_depth = int(token.tag[1])
        elif token.type == "inline" and heading_depth:
            text = _plain(token)
            path = [*path[: heading_depth - 1], text]
            if heading_depth == 1 and not title:
                title = text
            heading_depth = 0
        elif token.type == "inline" and in_cell:
            row.append(_plain(token))
        elif token.type == "inline":
            blocks.append(Block(_plain(token), section=tuple(path)))
        elif token.type in ("fence", "code_block"):
            blocks.append(Block(token.content, section=tuple(path)))
        elif token.type == "tr_close":
            blocks.append(Block(" | ".join(row), section=tuple(path)))
            row = []
    return parsed(MARKDOWN, title, blocks)


def _plain(inline: Token) -> str:
    """An inline token's text without its markup: link targets and emphasis marks dropped."""
    parts: list[str] = []
    for child in inline.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif child.type == "image":
            parts.append(child.content)
    return "".join(parts)
