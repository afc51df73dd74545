"""HTML pages through BeautifulSoup: the page's content under its headings, without its chrome.

Navigation, headers, footers, sidebars, forms, scripts and styles (by element or ARIA role) are
dropped; when the page marks its content with ``<main>`` or ``<article>``, only that is read.

The parse is bounded as it goes (:class:`_BoundedBuilder`): a page whose elements nest more than
:data:`MAX_DEPTH` deep is refused at the first such element, and the reader's deadline is checked
every :data:`TIME_CHECK_ELEMENTS` elements, so a page built to take minutes or gigabytes to parse
(hundreds of thousands of nested ``<div>``) stops within the limits rather than after the parse.
"""

from __future__ import annotations

from bs4 import BeautifulSoup, Tag
from bs4.builder import LXMLTreeBuilder

from lightfoot_pipeline.ingest.files.blocks import Block, FileReadError, ParsedFile, ReadLimits, parsed
from lightfoot_pipeline.ingest.files.detect import HTML, decode_text

# Elements inside one another: pages people write nest a few dozen deep; libxml2, under the
# parser, stops building at 256 anyway.
MAX_DEPTH = 200
TIME_CHECK_ELEMENTS = 1024  # elements parsed between two looks at the deadline

_CHROME_TAGS = ("script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "svg",
                "iframe", "button", "select", "dialog", "menu")
_CHROME_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar"}
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_BLOCKS = (*_HEADINGS, "p", "li", "pre", "blockquote", "td", "th", "dt", "dd", "figcaption", "caption",
           "address")


class _BoundedBuilder(LXMLTreeBuilder):
    """BeautifulSoup's lxml tree builder, counting depth and elements as the parser calls it:
    FileReadError (raised from within the parse, which stops it) past :data:`MAX_DEPTH` or the
    deadline."""

    def __init__(self, limits: ReadLimits) -> None:
        super().__init__()
        self.limits, self.depth, self.elements = limits, 0, 0

    def start(self, tag, attrib, nsmap={}):  # noqa: B006 (lxml's signature)
        self.depth += 1
        self.elements += 1
        if self.depth > MAX_DEPTH:
            raise FileReadError(f"HTML whose elements nest more than {MAX_DEPTH} deep, not read further")
        if self.elements % TIME_CHECK_ELEMENTS == 0:
            self.limits.check_time()
        return super().start(tag, attrib, nsmap)

    def end(self, tag):
        self.depth -= 1
        return super().end(tag)


def read_html(data: bytes, limits: ReadLimits) -> ParsedFile:
    soup = BeautifulSoup(decode_text(data), builder=_BoundedBuilder(limits))
    limits.check_time()
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup.find_all(_CHROME_TAGS):
        tag.decompose()
    for tag in soup.find_all(attrs={"role": True}):
        if not tag.decomposed and str(tag.get("role", "")).casefold() in _CHROME_ROLES:
            tag.decompose()
    for tag in soup.find_all(attrs={"aria-hidden": "true"}):
        if not tag.decomposed:
            tag.decompose()
    root = soup.find("main") or soup.find("article") or soup.body or soup
    path: list[str] = []
    blocks: list[Block] = []
    for element in root.find_all(_BLOCKS):
        if _inside_block(element, root):
            continue  # its enclosing block reads it
        text = limits.take(element.get_text(" ", strip=True))
        if element.name in _HEADINGS:
            depth = int(element.name[1])
            path = [*path[: depth - 1], text] if text else path
            title = title or text
            continue
        blocks.append(Block(text, section=tuple(path)))
    if not blocks:  # a page of bare text in divs
        blocks.append(Block(root.get_text("\n", strip=True)))
    return parsed(HTML, title, blocks)


def _inside_block(element: Tag, root: Tag) -> bool:
    for parent in element.parents:
        if parent is root:
            return False
        if parent.name in _BLOCKS:
            return True
    return False
