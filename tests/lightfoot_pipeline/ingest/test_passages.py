from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.passages import chunk_id_for, split_passages


def test_short_document_is_one_passage_with_a_content_id():
    doc = Document("d1", "Title", "Some text.")
    (passage,) = split_passages(doc, 4000)
    assert passage.chunk_id == chunk_id_for("d1", 0, "Some text.")
    assert passage.retrieval_text == "Title\nSome text."
    assert split_passages(doc, 4000)[0].chunk_id == passage.chunk_id


def test_long_document_splits_at_paragraphs_in_order():
    paragraphs = [f"Paragraph {i} " + "word " * 40 for i in range(10)]
    doc = Document("d2", "", "\n\n".join(paragraphs))
    passages = split_passages(doc, 500)
    assert len(passages) > 1
    assert all(len(p.text) <= 500 for p in passages)
    assert [p.ordinal for p in passages] == list(range(len(passages)))
    joined = " ".join(p.text for p in passages)
    assert all(f"Paragraph {i} " in joined for i in range(10))
    assert len({p.chunk_id for p in passages}) == len(passages)


def test_chunk_ids_differ_between_documents_with_the_same_text():
    a = split_passages(Document("a", "", "Same."), 100)[0]
    b = split_passages(Document("b", "", "Same."), 100)[0]
    assert a.chunk_id != b.chunk_id
