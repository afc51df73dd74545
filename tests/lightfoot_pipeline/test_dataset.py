import json

import pytest

from lightfoot_pipeline.dataset import DatasetError, load_corpus, load_questions


def test_bundled_sample_loads(sample_documents, sample_records, sample_dir):
    assert len(sample_documents) == 1890 and len(sample_records) == 1890
    questions = load_questions(sample_dir / "questions-dev.jsonl")
    assert len(questions) == 50 and all(q.gold_doc_ids for q in questions)


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"title": "t", "text": "x"}), "doc_id must be a non-empty string"),
        (json.dumps({"doc_id": "a", "text": "  "}), "has no text"),
        (json.dumps({"doc_id": "a", "text": "x", "retention_until": "soon"}), "not an ISO 8601 date"),
        (json.dumps({"doc_id": "a'b", "text": "x"}), "holds a quote or backslash"),
    ],
)
def test_malformed_documents_are_refused_with_line_and_reason(tmp_path, line, message):
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"doc_id": "ok", "text": "fine"}) + "\n" + line + "\n")
    with pytest.raises(DatasetError, match=message) as err:
        load_corpus(tmp_path)
    assert "corpus.jsonl:2" in str(err.value)


def test_duplicate_doc_ids_are_refused(tmp_path):
    row = json.dumps({"doc_id": "a", "text": "x"})
    (tmp_path / "corpus.jsonl").write_text(row + "\n" + row + "\n")
    with pytest.raises(DatasetError, match="already on line 1"):
        load_corpus(tmp_path)
