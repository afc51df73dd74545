"""Extraction through a provider's Batch API (a real ``openai`` client against tests/batch_server.py
on loopback), offline batches, and erasure at the provider."""

from __future__ import annotations

import json

import polars as pl
import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.index.documents import document_passages
from lightfoot_pipeline.ingest.extraction.batch_record import BatchRecord
from lightfoot_pipeline.ingest.extraction.openai_extractor import build_openai_extractor
from lightfoot_pipeline.models.batch_api import BatchAPI
from lightfoot_pipeline.models.llm import LLMSettings
from lightfoot_pipeline.operations import batch_extraction
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import EXTRACTIONS

MODEL = "gpt-4o-mini"  # list price $0.15 / $0.60; the batch price half that


def settings_for(server) -> LLMSettings:
    return LLMSettings(base_url=server.base_url, api_key="sk-batch-test", model=MODEL, backoff_s=0.01, timeout_s=5.0,
                       max_retries=0)


def passage_in(messages: list[dict]) -> tuple[str, str]:
    user = "\n".join(m["content"] for m in messages if m["role"] == "user")
    inside = user.split("<passage>\n", 1)[1].rsplit("\n</passage>", 1)[0]
    title, _, text = inside.partition("\n")
    return title, text


def answer(messages: list[dict]) -> str:
    """The answer a model gives a passage here: its title as an entity and one fact (the same by
    either protocol)."""
    title, text = passage_in(messages)
    words = text.split(". ")[0].split()
    return json.dumps({"entities": [{"name": title, "type": "concept", "description": "the passage's topic"}],
                       "facts": [[title, "is described by", " ".join(words[-3:]) or title, " ".join(words[:12])]]},
                      separators=(",", ":"))


def line_answer(line: dict) -> str:
    return answer(line["body"]["messages"])


def collect_until_collected(store, extractor, embedder, tries: int = 4, **kwargs):
    """Collect until a batch is collected (each look moves a fake batch one state on)."""
    for _ in range(tries):
        report = batch_extraction.collect(store, extractor, embedder, **kwargs)
        if report.collected:
            return report
    raise AssertionError(f"no batch collected after {tries} collections: {report.still_open}")


def collect_until_settled(store, extractor, embedder, tries: int = 6, **kwargs):
    """Collect until no batch is open (each look moves a fake batch one state on)."""
    reports = []
    for _ in range(tries):
        reports.append(batch_extraction.collect(store, extractor, embedder, **kwargs))
        if not BatchRecord(store).open_keys():
            return reports
    raise AssertionError(f"batches still open after {tries} collections: {reports[-1].still_open}")


@pytest.mark.slow  # a few seconds: several collections and store commits
def test_a_round_trip_equals_a_synchronous_ingest_of_the_same_answers(tmp_path, store, batch_server, chat_server,
                                                                       sample_documents, hashing_embedder):
    documents = sample_documents[:6]
    batch_server.answer = line_answer
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    report = operations.ingest(store, documents, extractor, hashing_embedder)
    assert report.failed == report.passages and report.model_calls == 0  # all awaiting the batch
    reasons = store.read(EXTRACTIONS.name).get_column("reason").to_list()
    assert all(r.startswith("awaiting extraction: in batch eb-") for r in reasons)
    status = batch_extraction.batch_status(store)
    assert status["awaiting_passages"] == report.passages and len(status["open"]) == 1
    assert len(status["provider_files"]) == 1
    # Files the provider deletes by itself if nothing else does: three days after their creation.
    (uploaded,) = batch_server.files.values()
    (batch,) = batch_server.batches.values()
    assert uploaded["expires_after"] == {"anchor": "created_at", "seconds": str(3 * 24 * 3600)}
    assert batch["output_expires_after"] == {"anchor": "created_at", "seconds": 3 * 24 * 3600}

    reports = collect_until_settled(store, extractor, hashing_embedder)
    assert [r.still_open for r in reports[:-1]] == [{status["open"][0]: "in_progress"},
                                                    {status["open"][0]: "finalizing"}]
    done = reports[-1]
    assert done.collected == status["open"] and done.answered == report.passages and done.without_answer == 0
    assert done.seq is not None and done.documents == len(documents)
    assert batch_server.files == {}  # input and output deleted at the provider
    assert batch_extraction.batch_status(store)["provider_files"] == []
    assert store.read(EXTRACTIONS.name).filter(pl.col("status") == "ok").height == report.passages

    # The cost ledger: one row per answer at the batch price, its run the batch.
    rows = ledger.read(store, status["open"][0])
    assert rows.height == report.passages
    assert set(rows.get_column("price_source").to_list()) == {"list+batch"}
    assert rows.get_column("price_in_per_mtok").to_list()[0] == pytest.approx(0.075)
    assert rows.get_column("cost_usd").sum() == pytest.approx(report.passages * (700 * 0.075 + 90 * 0.30) / 1e6)

    # The same answers, one synchronous call at a time, into a fresh store: the same index.
    chat_server.script(lambda request: chat_server.Reply(content=answer(request.messages), usage=(700, 90)))
    fresh = Store(str(tmp_path / "synchronous"))
    sync_settings = LLMSettings(base_url=chat_server.base_url, model=MODEL, backoff_s=0.01)
    operations.ingest(fresh, documents, build_openai_extractor(fresh, llm_settings=sync_settings), hashing_embedder)
    assert fingerprint(store, store.manifest()).digest == fingerprint(fresh, fresh.manifest()).digest

    # Collecting again takes nothing twice and asks for nothing.
    again = batch_extraction.collect(store, extractor, hashing_embedder)
    assert (again.collected, again.answered, again.seq) == ([], 0, None)
    assert len(batch_server.batches) == 1


@pytest.mark.slow  # a few seconds: several collections and store commits
def test_failed_and_expired_requests_are_asked_again_once(store, batch_server, sample_documents, hashing_embedder):
    documents = sample_documents[:4]
    refused_title = documents[3].title

    def scripted(line):
        return 500 if passage_in(line["body"]["messages"])[0] == refused_title else line_answer(line)

    batch_server.answer = scripted
    batch_server.ending, batch_server.expire_after = "expired", 2
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    report = operations.ingest(store, documents, extractor, hashing_embedder)
    n = report.passages
    first = collect_until_collected(store, extractor, hashing_embedder)
    assert first.answered == 2 and first.without_answer == n - 2
    assert first.asked_again is not None and first.asked_again.sent == n - 2  # in one new batch
    assert batch_server.files.keys() == {f for b in batch_server.batches.values() if b["status"] == "validating"
                                         for f in [b["input_file_id"]]}  # only the new batch's input

    batch_server.ending = "completed"
    second = collect_until_settled(store, extractor, hashing_embedder)[-1]
    refused = [d for d in documents if d.title == refused_title]
    assert second.without_answer == len(refused) >= 1
    # Asked twice at most: the refused one is not sent a third time.
    assert second.asked_again is not None and second.asked_again.sent == 0 and second.asked_again.given_up == 1
    asked = pl.Series(batch_server.lines_asked).value_counts()
    assert asked.get_column("count").max() <= 2
    rows = store.read(EXTRACTIONS.name)
    failed = rows.filter(pl.col("status") != "ok")
    assert failed.get_column("doc_id").to_list() == [refused[0].doc_id]
    assert failed.get_column("reason").to_list()[0].startswith("no usable answer after 2 batches")
    assert batch_server.files == {}
    events = BatchRecord(store).summaries()
    assert [s.state for s in events.values()] == ["expired", "completed"]


@pytest.mark.slow
def test_a_crash_after_the_upload_creates_no_second_batch(store, batch_server, sample_documents, hashing_embedder,
                                                          monkeypatch):
    documents = sample_documents[:3]
    batch_server.answer = line_answer
    real_create = BatchAPI.create

    def crash_before_create(self, input_file_id, batch):
        raise RuntimeError("the process stopped after uploading")

    def crash_after_create(self, input_file_id, batch):
        real_create(self, input_file_id, batch)
        raise RuntimeError("the process stopped before recording its batch")

    monkeypatch.setattr(BatchAPI, "create", crash_before_create)
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    with pytest.raises(RuntimeError, match="after uploading"):
        operations.ingest(store, documents, extractor, hashing_embedder)
    assert len(batch_server.files) == 1 and batch_server.batches == {}

    monkeypatch.setattr(BatchAPI, "create", crash_after_create)
    with pytest.raises(RuntimeError, match="before recording"):
        operations.ingest(store, documents, extractor, hashing_embedder)
    assert len(batch_server.files) == 1 and len(batch_server.batches) == 1  # the file found, not uploaded again

    monkeypatch.setattr(BatchAPI, "create", real_create)
    report = operations.ingest(store, documents, extractor, hashing_embedder)
    assert len(batch_server.files) == 1 and len(batch_server.batches) == 1  # the batch found by its metadata
    assert report.failed == report.passages
    collect_until_settled(store, extractor, hashing_embedder)
    assert store.read(EXTRACTIONS.name).filter(pl.col("status") == "ok").height == report.passages
    assert sorted(batch_server.lines_asked) == sorted(set(batch_server.lines_asked))


@pytest.mark.slow
def test_a_collector_stopped_after_taking_answers_takes_none_twice(store, batch_server, sample_documents,
                                                                   hashing_embedder, monkeypatch):
    documents = sample_documents[:3]
    batch_server.answer = line_answer
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    report = operations.ingest(store, documents, extractor, hashing_embedder)
    real_note = batch_extraction._note_collected

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(batch_extraction, "_note_collected", stop)
    with pytest.raises(KeyboardInterrupt):
        collect_until_settled(store, extractor, hashing_embedder)
    assert ledger.totals(store)["calls"] == report.passages  # the answers were taken

    monkeypatch.setattr(batch_extraction, "_note_collected", real_note)
    restarted = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    done = batch_extraction.collect(store, restarted, hashing_embedder)
    assert (done.answered, done.already_taken) == (0, report.passages)
    assert ledger.totals(store)["calls"] == report.passages
    assert store.read(EXTRACTIONS.name).filter(pl.col("status") == "ok").height == report.passages
    assert batch_server.files == {}


@pytest.mark.slow  # a few seconds each: an ingest, an erasure and a second batch
@pytest.mark.parametrize("when", ["open", "ended"])
def test_an_erasure_reaches_the_provider_and_the_other_passages_are_asked_again(
        when, store, batch_server, sample_documents, hashing_embedder, monkeypatch):
    documents = sample_documents[:3]
    erased = documents[0]
    batch_server.answer = line_answer
    monkeypatch.setenv("OPENAI_BASE_URL", batch_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-batch-test")
    monkeypatch.setenv("LIGHTFOOT_LLM_MODEL", MODEL)
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    operations.ingest(store, documents, extractor, hashing_embedder)
    first = next(iter(batch_server.batches))
    if when == "ended":  # completed at the provider, its output not collected yet
        for _ in range(3):
            batch_server.advance(first)
        assert batch_server.batches[first]["status"] == "completed"
    assert batch_server.holding(erased.text[:40])

    report = operations.delete(store, [erased.doc_id], erase=True, reason="test")
    assert report.erase["provider_batches_cancelled"] == 1 and report.erase["provider_held"] == []
    assert batch_server.holding(erased.text[:40]) == [] and batch_server.files == {}
    assert operations.erase.pending_erasures(store) == []
    assert batch_extraction.batch_status(store)["provider_files"] == []

    collect_until_settled(store, extractor, hashing_embedder)
    assert len(batch_server.batches) == 2  # the others asked again
    rows = store.read(EXTRACTIONS.name)
    assert erased.doc_id not in rows.get_column("doc_id").to_list()
    assert rows.filter(pl.col("status") == "ok").height == rows.height > 0
    assert batch_server.holding(erased.text[:40]) == [] and batch_server.files == {}


@pytest.mark.slow  # a few seconds: several collections and store commits
def test_an_erasure_with_no_endpoint_stays_pending_while_a_provider_file_holds_the_text(
        store, batch_server, sample_documents, hashing_embedder, monkeypatch):
    documents = sample_documents[:2]
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    operations.ingest(store, documents, extractor, hashing_embedder)
    report = operations.delete(store, [documents[0].doc_id], erase=True, reason="test")
    assert report.erase["provider_held"] == [documents[0].doc_id]
    assert operations.erase.pending_erasures(store) == [documents[0].doc_id]
    assert len(batch_extraction.batch_status(store)["provider_files"]) == 1

    # With the provider's API at hand, the next erase finishes it.
    again = operations.erase_history(store, [], batch_api=BatchAPI(settings_for(batch_server)))
    assert again.provider_held == [] and operations.erase.pending_erasures(store) == []
    assert batch_server.files == {}


@pytest.mark.slow
def test_a_refused_upload_leaves_the_passages_awaiting_with_the_reason(store, batch_server, sample_documents,
                                                                       hashing_embedder):
    batch_server.refuse_upload = True
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    report = operations.ingest(store, sample_documents[:2], extractor, hashing_embedder)
    reasons = set(store.read(EXTRACTIONS.name).get_column("reason").to_list())
    assert report.failed == report.passages
    assert reasons == {"the provider refused the batch: upload a request file: the provider answered HTTP 400 "
                       "(invalid_file)"}
    batch_server.refuse_upload = False
    batch_server.answer = line_answer
    collect_until_settled(store, extractor, hashing_embedder)
    assert store.read(EXTRACTIONS.name).filter(pl.col("status") == "ok").height == report.passages


@pytest.mark.slow  # two collections and store commits
def test_a_batch_that_fails_validation_is_asked_again_synchronously_when_the_operator_says_so(
    store, batch_server, chat_server, sample_documents, hashing_embedder
):
    from lightfoot_pipeline.ingest.extraction.answers import ClaimingExtractor

    batch_server.ending = "failed"
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    report = operations.ingest(store, sample_documents[:2], extractor, hashing_embedder)
    chat_server.script(lambda request: chat_server.Reply(content=answer(request.messages)))
    synchronous = ClaimingExtractor(build_openai_extractor(
        store, llm_settings=LLMSettings(base_url=chat_server.base_url, model=MODEL, backoff_s=0.01)))
    done = collect_until_collected(store, extractor, hashing_embedder, synchronous=synchronous)
    assert done.answered == 0 and done.without_answer == report.passages
    assert done.answered_synchronously == report.passages and chat_server.count == report.passages
    assert done.asked_again is None and len(batch_server.batches) == 1  # no second batch
    (summary,) = BatchRecord(store).summaries().values()
    assert summary.state == "failed" and "the batch failed validation at the provider" in (summary.reason or "")
    assert store.read(EXTRACTIONS.name).filter(pl.col("status") == "ok").height == report.passages
    assert batch_server.files == {}


@pytest.mark.slow  # two collections and store commits
def test_a_batch_refused_after_its_upload_has_its_file_deleted_at_the_next_collection(
    store, batch_server, sample_documents, hashing_embedder, monkeypatch
):
    from lightfoot_pipeline.models.batch_api import BatchAPIError

    def refuse(self, input_file_id, batch):
        raise BatchAPIError("create a batch: the provider answered HTTP 400", status=400)

    monkeypatch.setattr(BatchAPI, "create", refuse)
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    operations.ingest(store, sample_documents[:2], extractor, hashing_embedder)
    assert len(batch_server.files) == 1
    assert len(batch_extraction.batch_status(store)["provider_files"]) == 1
    done = batch_extraction.collect(store, extractor, hashing_embedder, ask_again=False)
    assert done.files_deleted == 1 and batch_server.files == {}
    assert batch_extraction.batch_status(store)["provider_files"] == []


@pytest.mark.slow  # two collections and store commits
def test_texts_asked_again_in_a_batch_of_the_same_texts_are_a_new_attempt(store, batch_server, sample_documents,
                                                                           hashing_embedder):
    batch_server.answer = lambda line: "I cannot answer that."  # unusable: every text is asked again, as one batch
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    report = operations.ingest(store, sample_documents[:2], extractor, hashing_embedder)
    first = collect_until_collected(store, extractor, hashing_embedder)
    assert first.answered == 0 and first.without_answer == report.passages
    assert first.asked_again is not None and first.asked_again.batches == first.collected  # the same texts, same id
    assert len(batch_server.batches) == 2  # a new provider batch, not the first one found again
    batch_server.answer = line_answer
    second = collect_until_collected(store, extractor, hashing_embedder)
    assert second.answered == report.passages and second.already_taken == 0
    assert store.read(EXTRACTIONS.name).filter(pl.col("status") == "ok").height == report.passages
    (summary,) = BatchRecord(store).summaries().values()
    assert (summary.attempt, summary.ledger_run) == (2, f"{summary.batch}.2")
    assert ledger.read(store, summary.batch).height == ledger.read(store, summary.ledger_run).height == report.passages
    third = batch_extraction.collect(store, extractor, hashing_embedder)
    assert third.asked_again is None or third.asked_again.sent == 0


def test_an_erasure_after_a_crash_between_upload_and_record_finds_the_file_and_deletes_it(
    store, batch_server, sample_documents, hashing_embedder, monkeypatch
):
    def crash_before_create(self, input_file_id, batch):
        raise RuntimeError("the process stopped after uploading")

    monkeypatch.setattr(BatchAPI, "create", crash_before_create)
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    documents = sample_documents[:2]
    with pytest.raises(RuntimeError):  # the passages are planned and their file uploaded, then the process stops
        extractor.submit(document_passages(documents, IndexSettings()))
    assert len(batch_server.files) == 1 and batch_server.batches == {}
    held = batch_extraction.erase_at_provider(store, [documents[0].doc_id], lambda: BatchAPI(settings_for(batch_server)))
    assert held.cancelled and held.still_held == [] and batch_server.files == {}


def test_a_collection_sends_a_batch_a_crash_left_planned(store, batch_server, sample_documents, hashing_embedder,
                                                         monkeypatch):
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor

    documents = sample_documents[:2]
    operations.ingest(store, documents, ReplayExtractor({}), hashing_embedder)  # stored without extraction
    batch_server.answer = line_answer
    real_create = BatchAPI.create

    def crash_before_create(self, input_file_id, batch):
        raise RuntimeError("the process stopped after uploading")

    monkeypatch.setattr(BatchAPI, "create", crash_before_create)
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    with pytest.raises(RuntimeError):
        extractor.submit(extractor.unextracted([d.doc_id for d in documents]))
    monkeypatch.setattr(BatchAPI, "create", real_create)
    (planned,) = batch_extraction.poll(store, extractor).items()
    assert planned[1] == "planned, not sent"
    first = batch_extraction.collect(store, extractor, hashing_embedder)
    assert first.resumed == [planned[0]] and len(batch_server.files) == 1 and len(batch_server.batches) == 1
    collect_until_settled(store, extractor, hashing_embedder)
    assert store.read(EXTRACTIONS.name).filter(pl.col("status") == "ok").height == len(
        document_passages(documents, IndexSettings()))
    assert batch_server.files == {}


def test_a_provider_that_refuses_every_batch_is_asked_at_most_twice(store, batch_server, sample_documents,
                                                                    hashing_embedder):
    """A refusal counts as an ask: after the provider refused the first batch and the one that asked
    again, collections send nothing more and the passages stay awaiting extraction with the reason."""
    batch_server.refuse_upload = True
    extractor = batch_extraction.build_batch_extractor(store, llm_settings=settings_for(batch_server))
    report = operations.ingest(store, sample_documents[:2], extractor, hashing_embedder)
    assert report.failed == report.passages > 0
    uploads = lambda: sum(1 for method, path in batch_server.requests if (method, path) == ("POST", "/v1/files"))  # noqa: E731
    assert uploads() >= 1
    batch_extraction.collect(store, extractor, hashing_embedder)  # asks again: refused a second time
    tried = uploads()
    assert tried > 1
    for _ in range(2):
        assert "ask-again" not in batch_extraction.poll(store, extractor)
        batch_extraction.collect(store, extractor, hashing_embedder)
    assert uploads() == tried, "no third attempt"
    reasons = set(store.read(EXTRACTIONS.name).get_column("reason").to_list())
    assert all(r.startswith("the provider refused the batch") for r in reasons), reasons
