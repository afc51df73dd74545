"""Extraction batches as operations: collect their answers, finish their documents, cancel them,
erase their files at the provider, and export and import offline ones.

The command line (``lightfoot extract-batches status|collect|cancel|export|import``) and the
Dagster sensor and job call these. Submitting happens where the passages are found, in the
extractor (``--extractor openai-batch``: ingest/extraction/batch_extractor.py); the rest is here:

- :func:`collect` looks at every open provider batch; one that ended (completed, expired, failed,
  cancelled) has its output and error files read within bounds, its answers put in the ledger at
  the batch price and in the cache, its files deleted at the provider; the requests without a
  usable answer are asked again in a new batch (each text at most ``MAX_ASKS`` times), or at
  once by a synchronous extractor when the operator says so; and the batches' documents go on
  through extractions, forms and the graph in one commit (:func:`finish_documents`).
- :func:`erase_at_provider` is the erasure's step at the provider: an open batch holding an
  erased document's text is cancelled, and every file of a batch holding it is deleted there; the
  erasure stays pending (operations/erase.py) until no provider file holds the text.
- :func:`export` and :func:`import_output` do the same for a batch runner of the operator's own.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
from deltalake.exceptions import DeltaError

from lightfoot_pipeline.index.documents import derive_forms, record_extractions
from lightfoot_pipeline.index.reconcile import reconcile_graph
from lightfoot_pipeline.ingest.extraction.batch_extractor import BatchExtractor, SubmitReport, TakeReport
from lightfoot_pipeline.ingest.extraction.batch_files import FileLimits, OutputReading, read_output
from lightfoot_pipeline.ingest.extraction.batch_record import (
    CANCELLED,
    COLLECTED,
    FILES_DELETED,
    OFFLINE,
    PROVIDER,
    STATE,
    SUBMITTED,
    BatchRecord,
    BatchSummary,
)
from lightfoot_pipeline.ingest.extraction.outcome import OK, Extractor
from lightfoot_pipeline.ingest.extraction.prompt import ExtractionPrompt
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.models.batch_api import BatchAPI, BatchAPIError
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.models.llm import LLMError, LLMSettings
from lightfoot_pipeline.operations.batches import commit_if_changed
from lightfoot_pipeline.operations.config import check_config
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.log import StoreError
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.vectors import name_vector_cache

OPERATION = "extract-batch"
log = logging.getLogger(__name__)


def build_batch_extractor(store: Store, settings: IndexSettings | None = None, *, llm_settings: LLMSettings | None = None,
                          client=None, run_id: str | None = None, offline: bool = False, directory: Path | None = None,
                          limits: FileLimits | None = None, price_share: float | None = None) -> BatchExtractor:
    """The extractor of ``--extractor openai-batch`` (endpoint, model and key from the environment),
    or of offline batches written to ``directory`` (``offline``: no endpoint is needed)."""
    settings = settings or IndexSettings()
    if llm_settings is None:
        llm_settings = LLMSettings.for_extraction()
    api = None if offline else BatchAPI(llm_settings, client)
    prompt = ExtractionPrompt(entity_types=tuple(settings.entity_types))
    return BatchExtractor(store, llm_settings, prompt, api=api, run_id=run_id, limits=limits, directory=directory,
                          price_share=price_share)


# -- status -----------------------------------------------------------------------------------


def batch_status(store: Store) -> dict:
    """Every extraction batch's state, the passages awaiting one, and the batches whose files at the
    provider still hold text (ids and counts only)."""
    record = BatchRecord(store)
    summaries = record.summaries()
    opened = [b for b, s in summaries.items() if s.open]
    awaiting = record.requests(opened) if opened else None
    return {
        "batches": [s.as_dict() for s in summaries.values()],
        "open": opened,
        "awaiting_passages": 0 if awaiting is None else awaiting.select("chunk_id").n_unique(),
        "awaiting_documents": 0 if awaiting is None else awaiting.select("doc_id").n_unique(),
        "provider_files": [{"batch": s.batch, "files": s.file_ids()} for s in summaries.values()
                           if s.holds_provider_files],
    }


# -- collecting --------------------------------------------------------------------------------


def poll(store: Store, extractor: BatchExtractor) -> dict[str, str]:
    """Look at every open provider batch and record its state when it changed; the batches that
    have ended at the provider (or are planned and not sent, or have ended here with files still
    at the provider) and so need a collection, with their state. Takes no answer."""
    api = extractor.api
    if api is None:
        return {}
    record = extractor.record
    due: dict[str, str] = {}
    for summary in record.summaries().values():
        if summary.mode != PROVIDER:
            continue
        if not summary.open:
            if summary.holds_provider_files:
                due[summary.batch] = "files at the provider"
            continue
        if SUBMITTED not in summary.events or summary.provider_batch_id is None:
            due[summary.batch] = "planned, not sent"
            continue
        provider = api.retrieve(summary.provider_batch_id)
        if provider.state != summary.state:
            record.note(summary.batch, STATE, state=provider.state)
        if provider.ended:
            due[summary.batch] = provider.state
    again = to_ask_again(store, extractor, askable=True)
    if again:  # of a batch cancelled (by an erasure) or refused
        due["ask-again"] = f"{len(again)} passages to ask again"
    return due


def to_ask_again(store: Store, extractor: BatchExtractor, doc_ids: Iterable[str] = (), *,
                 askable: bool = False) -> list[Passage]:
    """The live passages without an extraction, of these documents and of those of the batches that
    ended without their answers (cancelled, refused), that no open batch asks for: what a
    collection gives to :meth:`BatchExtractor.submit` (which leaves out, with their reason, the
    texts the cache answers and those asked ``MAX_ASKS`` times). ``askable``: only the passages
    it would send."""
    record = extractor.record
    docs = _ended_batch_docs(record) | set(doc_ids)
    if not docs:
        return []
    passages = extractor.unextracted(sorted(live_doc_ids(store, among=docs)))
    opened = record.open_keys()
    keys = {p.chunk_id: extractor.cache_key(p) for p in passages}
    left = [p for p in passages if keys[p.chunk_id] not in opened]
    if not askable or not left:
        return left
    asked = record.times_asked(keys[p.chunk_id] for p in left)
    cached = set(extractor.cache.lookup({keys[p.chunk_id] for p in left}))
    return [p for p in left if keys[p.chunk_id] not in cached and asked.get(keys[p.chunk_id], 0) < extractor.max_asks]


@dataclass
class CollectReport:
    """What a collection did (counts of distinct passage texts, and batch ids)."""

    looked_at: int = 0
    resumed: list[str] = field(default_factory=list)  # planned batches sent after a crash
    still_open: dict[str, str] = field(default_factory=dict)  # batch -> the provider's state
    collected: list[str] = field(default_factory=list)
    answered: int = 0
    without_answer: int = 0  # requests that failed, expired, were missing or unusable
    already_taken: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)  # batch -> the first problems of its files
    files_deleted: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    asked_again: SubmitReport | None = None
    answered_synchronously: int = 0
    synchronous_calls: int = 0  # model calls made to ask again synchronously (the rest are the batches')
    documents: int = 0  # documents whose passages were finished
    seq: int | None = None  # the store commit that finished them
    cost_usd: float = 0.0

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "asked_again"}
        out["asked_again"] = self.asked_again.as_dict() if self.asked_again else None
        return out


def collect(store: Store, extractor: BatchExtractor, embedder: Embedder | None, settings: IndexSettings | None = None,
            *, ask_again: bool = True, synchronous: Extractor | None = None, finish: bool = True) -> CollectReport:
    """Take the answers of every open provider batch that has ended, delete its files at the
    provider, ask again for what it did not answer (``synchronous``: by that extractor now, not
    in a new batch), and finish its documents in one commit (``finish``; needs ``embedder``)."""
    report = CollectReport()
    api = extractor.api
    if api is None:
        raise LLMError("config", "collecting provider batches needs an endpoint: set OPENAI_BASE_URL")
    record = extractor.record
    report.resumed = extractor.resume()  # batches planned and never known to be sent (a crash): sent now
    docs: set[str] = set()
    reasons: dict[str, str] = {}
    for summary in list(record.summaries().values()):
        if summary.mode != PROVIDER:
            continue
        if not summary.open:
            report.files_deleted += release_files(api, record, summary)
            continue
        if SUBMITTED not in summary.events or summary.provider_batch_id is None:
            continue  # planned, not sent: the next submission resumes it
        report.looked_at += 1
        provider = api.retrieve(summary.provider_batch_id)
        if not provider.ended:
            if provider.state != summary.state:
                record.note(summary.batch, STATE, state=provider.state)
            report.still_open[summary.batch] = provider.state
            continue
        keys = set(record.requests([summary.batch]).get_column("cache_key").to_list())
        reading = _read_files(api, provider, keys, extractor.limits)
        if provider.state == "failed" and not reading.answers:
            codes = ", ".join(provider.error_codes) or "no code given"
            reading.failed.update({k: f"the batch failed validation at the provider ({codes})"
                                   for k in keys if k not in reading.failed})
        if provider.state in ("expired", "cancelled"):
            reading.failed.update({k: f"the batch {provider.state} before answering it" for k in keys
                                   if k not in reading.answers and k not in reading.failed})
        taken = extractor.take_answers(summary, reading)
        _note_collected(record, summary.batch, provider.state, provider.output_file_id, provider.error_file_id, taken)
        summary = record.summary(summary.batch) or summary
        report.files_deleted += release_files(api, record, summary)
        report.collected.append(summary.batch)
        report.answered += taken.answered
        report.already_taken += taken.already_taken
        report.without_answer += len(taken.reasons())
        report.cost_usd += taken.cost_usd
        report.tokens_in += taken.tokens_in
        report.tokens_out += taken.tokens_out
        if taken.problems:
            report.problems[summary.batch] = taken.problems[:10]
        reasons.update(taken.reasons())
        docs.update(record.requests([summary.batch]).get_column("doc_id").to_list())
    if ask_again:
        left = to_ask_again(store, extractor, docs)
        if synchronous is not None and left:
            outcomes = synchronous.extract(left)
            report.answered_synchronously = sum(1 for o in outcomes if o.status == OK and o.model_calls)  # not the cache's
            # Calls at the list price, in the totals beside the batch's answers (the ledger has each).
            report.synchronous_calls = sum(o.model_calls for o in outcomes)
            report.tokens_in += sum(o.tokens_in for o in outcomes)
            report.tokens_out += sum(o.tokens_out for o in outcomes)
            report.cost_usd += float(sum(o.cost_usd for o in outcomes))
            docs.update(p.doc_id for p in left)
        elif left:
            report.asked_again = extractor.submit(left)
            reasons.update(report.asked_again.reasons)
    if finish and docs:
        report.seq, report.documents = finish_documents(store, docs, extractor, embedder, settings, reasons)
    _compact(store, extractor)
    return report


def _compact(store: Store, extractor: BatchExtractor) -> None:
    """Compact the journals a collection appends to; a failure (another writer's rewrite won) is
    only logged: nothing is lost, and the next collection does it."""
    for name, compact in (("extraction batches", extractor.record.compact), ("extraction cache", extractor.cache.compact),
                          ("cost ledger", lambda: ledger.compact(store))):
        try:
            compact()
        except (StoreError, DeltaError, OSError) as err:
            log.warning("could not compact the %s: %s", name, err)


def _ended_batch_docs(record: BatchRecord) -> set[str]:
    """The documents of provider batches that ended without their answers (cancelled, refused)."""
    ended = [b for b, s in record.summaries().items()
             if s.mode == PROVIDER and not s.open and COLLECTED not in s.events]
    return set(record.requests(ended).get_column("doc_id").to_list()) if ended else set()


def _note_collected(record: BatchRecord, batch: str, state: str, output_file_id, error_file_id,
                    taken: TakeReport) -> None:
    reason = None
    if taken.n_problems or taken.reasons():
        kinds: dict[str, int] = {}
        for why in taken.reasons().values():
            kind = why.split(": ")[0].split(" (")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        parts = [f"{n} {kind}" for kind, n in sorted(kinds.items())]
        if taken.n_problems:
            parts.append(f"{taken.n_problems} problems in its files (first: {taken.problems[0]})")
        reason = "; ".join(parts)
    record.note(batch, COLLECTED, state=state, output_file_id=output_file_id, error_file_id=error_file_id,
                answered=taken.answered, failed=len(taken.reasons()), reason=reason)


def _read_files(api: BatchAPI, provider, keys: set[str], limits: FileLimits) -> OutputReading:
    """The batch's output and error files, each downloaded to a temporary file within the bound
    of what its requests can make, then read line by line."""
    reading = OutputReading()
    for file_id in (provider.output_file_id, provider.error_file_id):
        if not file_id:
            continue
        with tempfile.TemporaryFile() as scratch:
            try:
                api.download(file_id, scratch, limits.max_output_bytes(max(len(keys), 1)))
            except BatchAPIError as err:
                reading.problem(f"a file of the batch could not be taken: {err}")
                continue
            scratch.seek(0)
            reading.merge(read_output(scratch, keys, limits=limits))
    return reading


def release_files(api: BatchAPI, record: BatchRecord, summary: BatchSummary) -> int:
    """Delete a batch's files at the provider once it has ended there, and record it; the files
    deleted (0 when it holds none, or has not ended yet)."""
    if not summary.holds_provider_files:
        return 0
    files = summary.file_ids()
    if summary.provider_batch_id is not None:
        provider = api.retrieve(summary.provider_batch_id)
        if not provider.ended:
            return 0  # a cancelled batch still cancelling: its output may yet appear
        files = sorted({*files, *(f for f in (provider.input_file_id, provider.output_file_id,
                                              provider.error_file_id) if f)})
    deleted = sum(1 for file_id in files if api.delete_file(file_id))
    record.note(summary.batch, FILES_DELETED)  # its reason stays the collection's
    return deleted


def finish_documents(store: Store, doc_ids: Iterable[str], extractor: BatchExtractor, embedder: Embedder | None,
                     settings: IndexSettings | None = None, reasons: dict[str, str] | None = None
                     ) -> tuple[int | None, int]:
    """Record the extraction-cache answers of the documents' passages without an extraction, derive
    their forms and update the graph, in one commit (none when nothing changed); the commit and
    the documents finished."""
    settings = settings or IndexSettings()
    live = sorted(live_doc_ids(store, among=doc_ids))
    passages = extractor.unextracted(live)
    if not passages:
        return None, 0
    keys = [extractor.cache_key(p) for p in passages]
    outcomes = extractor.from_cache(passages, {**(reasons or {}), **extractor.awaiting_reasons(keys)})
    done = sorted({o.doc_id for o in outcomes if o.status == OK})
    with store.transaction() as tx:
        check_config(tx, settings, embedder)
        record_extractions(tx, outcomes)
        if done:
            derive_forms(tx, done)
            if embedder is not None:
                reconcile_graph(tx, settings, name_vector_cache(store, embedder))
        manifest, changed = commit_if_changed(tx, OPERATION, {"documents": len(done), "passages": len(outcomes),
                                                             "extracted": sum(1 for o in outcomes if o.status == OK)})
    return (manifest.seq if changed else None), len(done)


# -- cancelling and erasing ----------------------------------------------------------------------


def cancel(store: Store, extractor: BatchExtractor, batches: Sequence[str] | None = None, *,
           reason: str = "cancelled by the operator") -> list[str]:
    """Cancel open provider batches (all, or those named) and delete their files once they end;
    their passages are asked again at the next collection. The batches cancelled."""
    api = extractor.api
    if api is None:
        raise LLMError("config", "cancelling provider batches needs an endpoint: set OPENAI_BASE_URL")
    record = extractor.record
    wanted = set(batches) if batches is not None else None
    done = []
    for summary in list(record.summaries().values()):
        if summary.mode != PROVIDER or not summary.open or (wanted is not None and summary.batch not in wanted):
            continue
        _cancel_one(api, record, summary, reason)
        done.append(summary.batch)
    return done


def _cancel_one(api: BatchAPI, record: BatchRecord, summary: BatchSummary, reason: str) -> None:
    state, batch_id, file_id = summary.state, summary.provider_batch_id, summary.input_file_id
    if batch_id is None:  # planned, not known to be sent: a crash may have left its file or batch there
        found = api.find(summary.ledger_run)
        batch_id = found.id if found is not None else None
        file_id = found.input_file_id if found is not None else api.find_file(f"{summary.ledger_run}.jsonl")
    if batch_id is not None:
        provider = api.retrieve(batch_id)
        state = provider.state if provider.ended else api.cancel(batch_id).state
    record.note(summary.batch, CANCELLED, state=state, reason=reason, provider_batch_id=batch_id,
                input_file_id=file_id)
    release_files(api, record, record.summary(summary.batch) or summary)


@dataclass
class ProviderErasure:
    """What erasing at the provider did: batches cancelled, files deleted, and the documents whose
    text a provider file may still hold (their erasure stays pending), with why."""

    cancelled: list[str] = field(default_factory=list)
    files_deleted: int = 0
    still_held: list[str] = field(default_factory=list)
    reason: str | None = None


def erase_at_provider(store: Store, doc_ids: Sequence[str], api_factory: Callable[[], BatchAPI | None]
                      ) -> ProviderErasure:
    """Cancel the open batches that hold these documents' text and delete every file of the
    batches that do, at the provider (see the module docstring). ``api_factory()`` gives the
    provider's Batch API, asked only when a file holds the text; None: no endpoint is configured,
    and every document a provider file holds stays held."""
    out = ProviderErasure()
    record = BatchRecord(store)
    holding = record.holding(doc_ids)
    if not holding:
        return out
    api = api_factory()
    if api is None:
        out.reason = "provider files hold their text and no endpoint is configured to delete them (OPENAI_BASE_URL)"
    else:
        for summary in holding:
            try:
                if summary.open:
                    _cancel_one(api, record, summary, "cancelled: an erasure of a document it holds")
                    out.cancelled.append(summary.batch)
                else:
                    out.files_deleted += release_files(api, record, summary)
            except BatchAPIError as err:
                out.reason = f"the provider did not delete a batch's files: {err}"
    left = record.holding(doc_ids)
    if left:
        held = record.requests([s.batch for s in left]).filter(pl.col("doc_id").is_in(list(doc_ids)))
        out.still_held = sorted(set(held.get_column("doc_id").to_list()))
        out.reason = out.reason or "a cancelled batch is still cancelling at the provider: its files go when it ends"
    return out


def provider_api_from_env() -> BatchAPI | None:
    """The Batch API the environment names, or None when it names no endpoint."""
    try:
        return BatchAPI(LLMSettings.from_env())
    except (LLMError, ValueError):
        return None


# -- offline batches -------------------------------------------------------------------------------


def export(store: Store, extractor: BatchExtractor, doc_ids: Iterable[str] | None = None) -> SubmitReport:
    """Write request files for every live passage without an extraction (of ``doc_ids``, or all)
    that no open batch asks for, into the extractor's directory, and record their batches."""
    if extractor.mode != OFFLINE or extractor.directory is None:
        raise ValueError("export needs an offline batch extractor with a directory")
    ids = live_doc_ids(store, among=doc_ids) if doc_ids is not None else live_doc_ids(store)
    return extractor.submit(extractor.unextracted(sorted(ids)))


@dataclass
class ImportReport:
    batch: str
    taken: TakeReport
    seq: int | None = None
    documents: int = 0


def import_output(store: Store, extractor: BatchExtractor, path: Path, embedder: Embedder | None,
                  settings: IndexSettings | None = None, *, batch: str | None = None) -> ImportReport:
    """Take an offline runner's output file for an open offline batch (named, else the one whose
    id the file's name starts with, else the one its first answer belongs to), with the same
    bounds, cache and ledger as a provider's, and finish the batch's documents."""
    record = extractor.record
    summaries = record.summaries()
    batch = batch or _batch_of(Path(path), record, summaries)
    summary = summaries.get(batch) if batch else None
    if summary is None or summary.mode != OFFLINE:
        named = f" {batch}" if batch else ""
        raise ValueError(f"{Path(path).name}: no offline extraction batch{named} to import it for")
    if not summary.open:
        raise ValueError(f"the batch {batch} was collected already")
    keys = set(record.requests([summary.batch]).get_column("cache_key").to_list())
    with Path(path).open("rb") as handle:
        reading = read_output(handle, keys, limits=extractor.limits)
    taken = extractor.take_answers(summary, reading)
    _note_collected(record, summary.batch, "imported", None, None, taken)
    docs = record.requests([summary.batch]).get_column("doc_id").to_list()
    seq, n = finish_documents(store, docs, extractor, embedder, settings, taken.reasons())
    return ImportReport(summary.batch, taken, seq, n)


def _batch_of(path: Path, record: BatchRecord, summaries: dict[str, BatchSummary]) -> str | None:
    for batch in summaries:
        if path.name.startswith(batch):
            return batch
    with path.open("rb") as handle:
        first = handle.readline(FileLimits().max_line_bytes)
    try:
        custom_id = json.loads(first).get("custom_id")
    except (ValueError, AttributeError):
        return None
    opened = [b for b, s in summaries.items() if s.open and s.mode == OFFLINE]
    if not opened or not isinstance(custom_id, str):
        return None
    rows = record.requests(opened).filter(pl.col("cache_key") == custom_id)
    return rows.get_column("batch").to_list()[0] if rows.height else None
