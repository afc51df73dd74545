"""The file readers: each type from its content, locations kept, chrome dropped, bad files refused."""

from __future__ import annotations

import pytest

from lightfoot_pipeline.ingest.files import FileReadError, read_file
from lightfoot_pipeline.ingest.files.detect import detect


def test_a_two_page_pdf_keeps_its_pages_and_title(document_files):
    data = document_files.pdf(["Ravens nest on cliffs.\n\nThey mate for life.", "Gulls eat fish."], title="Birds")
    parsed = read_file(data, "birds.pdf")
    assert parsed.media_type == "pdf" and parsed.title == "Birds"
    assert [b.page for b in parsed.blocks] == [1, 2]
    assert "Ravens nest on cliffs." in parsed.blocks[0].text and "They mate for life." in parsed.blocks[0].text
    assert parsed.blocks[1].text == "Gulls eat fish."


def test_a_word_document_keeps_its_heading_path(document_files):
    data = document_files.docx([(1, "Setup", ["Install the tool."]), (2, "Linux", ["Use apt."]),
                                (1, "Usage", ["Run it."])], title="Manual")
    parsed = read_file(data, "manual.docx")
    assert parsed.title == "Manual"
    assert [(b.section, b.text) for b in parsed.blocks] == [
        (("Setup",), "Install the tool."), (("Setup", "Linux"), "Use apt."), (("Usage",), "Run it.")]


def test_html_drops_navigation_and_other_chrome(document_files):
    data = document_files.html("Guide", [("Start", ["Open the lid.", "Press the button."]), ("End", ["Close it."])])
    parsed = read_file(data, "guide.html")
    text = "\n".join(b.text for b in parsed.blocks)
    assert "SITE-CHROME" not in text and "var x" not in text
    assert [b.text for b in parsed.blocks] == ["Open the lid.", "Press the button.", "Close it."]
    assert parsed.blocks[0].section == ("Guide", "Start") and parsed.blocks[2].section == ("Guide", "End")


def test_markdown_text_without_markup_under_its_headings(document_files):
    data = document_files.markdown("Notes", [("One", ["Some **bold** and a [link](https://example.org).",
                                                      "- item a\n- item b"])])
    data += b"\n| k | v |\n|---|---|\n| a | 1 |\n\n```\ncode here\n```\n"
    parsed = read_file(data, "notes.md")
    assert parsed.title == "Notes"
    texts = [b.text for b in parsed.blocks]
    assert texts[0] == "Some bold and a link."
    assert texts[1:3] == ["item a", "item b"]
    assert "k | v" in texts and "a | 1" in texts and "code here" in texts
    assert {b.section for b in parsed.blocks} == {("Notes", "One")}


def test_type_comes_from_content_not_the_suffix(document_files):
    assert detect(document_files.pdf(["x"]), "report.txt") == "pdf"
    assert detect(document_files.docx([(1, "h", ["p"])]), "letter.bin") == "docx"
    assert detect(b"<!doctype html><p>hi</p>", "page.txt") == "html"
    assert detect(b"# Heading\n\ntext", "README") == "markdown"
    assert detect(b"# not a heading in a text file", "notes.txt") == "text"
    assert read_file("Grüße aus Köln".encode("utf-16"), "a.txt").blocks[0].text == "Grüße aus Köln"


@pytest.mark.parametrize("make, name, reason", [
    (lambda f: f.pdf(["secret plans"], password="pw"), "locked.pdf", "encrypted PDF"),
    (lambda f: b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\ngarbage", "broken.pdf", "corrupt PDF"),
    (lambda f: f.docx([(1, "h", ["p" * 500])])[:2000], "cut.docx", "truncated or corrupt Word document"),
    (lambda f: bytes(range(256)) * 8, "junk.txt", "binary content"),
    (lambda f: b"\x89PNG\r\n\x1a\n" + bytes(100), "image.md", "a PNG image"),
    (lambda f: b"text\x00with\x00nuls" * 10, "nul.txt", "binary content"),
    (lambda f: b"", "empty.txt", "empty file"),
    (lambda f: b"  \n\n ", "blank.md", "empty file"),
    (lambda f: b"<html><body><nav>menu</nav></body></html>", "chrome.html", "no text"),
])
def test_bad_files_are_refused_with_their_reason(document_files, make, name, reason):
    with pytest.raises(FileReadError, match=reason):
        read_file(make(document_files), name)


def test_html_nested_past_the_depth_bound_is_refused_as_it_parses():
    """400,000 nested <div>s (4.4 MB) are refused at the 201st, not after a parse of minutes."""
    import time

    from lightfoot_pipeline.ingest.files.blocks import ReadLimits
    from lightfoot_pipeline.ingest.files.web import MAX_DEPTH

    n = 400_000
    data = b"<html><body>" + b"<div>" * n + b"deep text" + b"</div>" * n + b"</body></html>"
    started = time.monotonic()
    with pytest.raises(FileReadError, match=f"nest more than {MAX_DEPTH} deep"):
        read_file(data, "deep.html", ReadLimits(seconds=120))
    assert time.monotonic() - started < 10
    shallow = b"<html><body>" + b"<div>" * (MAX_DEPTH - 5) + b"deep text" + b"</div>" * (MAX_DEPTH - 5) + b"</body></html>"
    assert read_file(shallow, "shallow.html").blocks[0].text == "deep text"


@pytest.mark.slow
def test_html_checks_the_deadline_while_it_parses():
    from lightfoot_pipeline.ingest.files.blocks import ReadLimits
    from lightfoot_pipeline.ingest.files.web import TIME_CHECK_ELEMENTS

    class Counted(ReadLimits):
        looks = 0

        def check_time(self) -> None:
            self.looks += 1
            super().check_time()

    page = b"<html><body>" + b"<div>word</div>\n" * 20_000 + b"</body></html>"
    counted = Counted()
    read_file(page, "long.html", counted)
    assert counted.looks >= 20_000 // TIME_CHECK_ELEMENTS, "looked at while the parse goes, not once after it"
    with pytest.raises(FileReadError, match="still being read after 0 seconds"):
        read_file(page, "long.html", ReadLimits(seconds=0.0))
