"""Fixtures for tests of the engine's modules: a tiny cross-encoder (the chat-completions server
is in tests/conftest.py)."""

from __future__ import annotations

import pytest


# -- a tiny cross-encoder ----------------------------------------------------------------------

TINY_WORDS = ("who founded the company that makes zephyr phone orbital corp was by mira kalden in tallinn "
              "nimbus cirrus devices riga capital of estonia latvia handset made sold from").split()


def build_tiny_cross_encoder(directory, num_labels: int = 1, seed: int = 0):
    """A one-layer BERT sequence classifier with a word vocabulary, saved like a hub model."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_WORDS]) + "\n")
    tokenizer = BertTokenizer(vocab_file=str(vocab), do_lower_case=True)
    config = BertConfig(vocab_size=len(TINY_WORDS) + 5, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64, num_labels=num_labels)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model, tokenizer


@pytest.fixture
def tiny_cross_encoder():
    """``make(directory, num_labels=1, seed=0) -> (model, tokenizer)``: a tiny reranker on disk."""
    return build_tiny_cross_encoder


# -- document files, built in the test -----------------------------------------------------------


class DocumentFiles:
    """Builders of real files of each type that ``lightfoot sync`` reads (fpdf2, python-docx)."""

    @staticmethod
    def pdf(pages: list[str], title: str | None = None, password: str | None = None) -> bytes:
        """A PDF with one page per text (paragraphs apart by blank lines); encrypted with ``password``."""
        from fpdf import FPDF

        pdf = FPDF()
        pdf.set_font("Helvetica", size=11)
        if title:
            pdf.set_title(title)
        if password:
            pdf.set_encryption(owner_password="owner-" + password, user_password=password)
        for text in pages:
            pdf.add_page()
            for paragraph in text.split("\n\n"):
                pdf.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(6)
        return bytes(pdf.output())

    @staticmethod
    def docx(sections: list[tuple[int, str, list[str]]], title: str | None = None) -> bytes:
        """A Word document: (heading level, heading, paragraphs) per section, with a Title paragraph."""
        import io

        import docx

        document = docx.Document()
        if title:
            document.add_heading(title, level=0)
        for level, heading, paragraphs in sections:
            document.add_heading(heading, level=level)
            for paragraph in paragraphs:
                document.add_paragraph(paragraph)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    @staticmethod
    def html(title: str, sections: list[tuple[str, list[str]]], chrome: str = "SITE-CHROME") -> bytes:
        """A page with navigation, a header, a sidebar and a footer around its article, each saying ``chrome``."""
        body = "".join(f"<h2>{h}</h2>" + "".join(f"<p>{p}</p>" for p in ps) for h, ps in sections)
        return (
            f"<!DOCTYPE html><html><head><title>{title}</title><style>.{chrome} {{}}</style>"
            f"<script>var x = '{chrome}';</script></head><body>"
            f"<header><a href='/'>{chrome} home</a></header>"
            f"<nav><ul><li><a href='/a'>{chrome} menu</a></li></ul></nav>"
            f"<div role='navigation'>{chrome} breadcrumbs</div>"
            f"<main><article><h1>{title}</h1>{body}</article></main>"
            f"<aside>{chrome} related links</aside><footer>{chrome} copyright</footer></body></html>"
        ).encode()

    @staticmethod
    def markdown(title: str, sections: list[tuple[str, list[str]]]) -> bytes:
        body = "".join(f"## {h}\n\n" + "".join(f"{p}\n\n" for p in ps) for h, ps in sections)
        return f"# {title}\n\n{body}".encode()


@pytest.fixture
def document_files():
    """Builders of PDF, Word, HTML and Markdown files: ``document_files.pdf([...])`` and so on."""
    return DocumentFiles
