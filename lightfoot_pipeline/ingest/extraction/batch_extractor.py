"""Extraction through batches: the requests go in files, the answers come back hours later.

:class:`BatchExtractor` is the extractor of ``--extractor openai-batch``. Given passages it
answers those the extraction cache answers at once, and for the rest writes the chat requests
(:mod:`.batch_files`: the same prompt and schema as a synchronous call, the cache key as
``custom_id``) into files within the provider's limits, records each file's batch and the
passages it covers (:mod:`.batch_record`), and submits it: upload, then create the batch with
metadata naming it. Those passages are stored without an extraction, their reason saying which
batch they await. Nothing is asked twice: a text an open batch asks for is not put in another, and
a batch planned but not known to be submitted (a crash between the upload and its record) is
looked for at the provider by its metadata, and its file by its name, before anything is created.

With no provider (an offline batch), the files are written for a runner of the operator's own
(``lightfoot extract-batches export``); its output comes back through :meth:`take_answers` the
same way.

:meth:`take_answers` puts the usable answers of an output file into the cost ledger (at the batch
price; the ledger's run of a batch's answers is the batch id, so an answer already charged is
never taken again) and then the extraction cache; :meth:`from_cache` gives the passages their
outcomes from the cache, as the synchronous extractor's cached answers, so a store extracted
through batches equals one extracted call by call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from lightfoot_pipeline.ingest.extraction.batch_files import (
    FileLimits,
    OutputReading,
    RequestFile,
    RequestFileWriter,
    request_body,
)
from lightfoot_pipeline.ingest.extraction.batch_record import (
    EXPORTED,
    OFFLINE,
    PLANNED,
    PROVIDER,
    PROVIDER_REFUSAL,
    REFUSED,
    SUBMITTED,
    BatchRecord,
    BatchSummary,
    batch_id_for,
)
from lightfoot_pipeline.ingest.extraction.model_answers import ModelAnswers
from lightfoot_pipeline.ingest.extraction.outcome import OK, ExtractionOutcome, ProgressCallback
from lightfoot_pipeline.ingest.extraction.prompt import ExtractionPrompt
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.models.batch_api import BatchAPI, BatchAPIError
from lightfoot_pipeline.models.llm import LLMSettings, prompt_token_bound
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.scratch import scratch_folder
from lightfoot_pipeline.store.tables import EXTRACTIONS, PASSAGES

PURPOSE = "extract"
AWAITING = "awaiting extraction"  # the reason's first words (reason_kind) of a passage in a batch
# A text is sent in at most this many batches: its first, and once more after a failure or expiry.
MAX_ASKS = 2


@dataclass
class SubmitReport:
    """What a submission did: texts answered by the cache, texts already in an open batch, the
    batches planned, submitted, found again after a crash, or refused, and the texts sent."""

    texts: int = 0
    cached: int = 0
    in_open_batch: int = 0
    given_up: int = 0  # asked MAX_ASKS times already: left without an extraction
    sent: int = 0
    batches: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    files: list[RequestFile] = field(default_factory=list)  # offline: the files written
    reasons: dict[str, str] = field(default_factory=dict)  # why a text was not sent, by cache key

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k not in ("files", "reasons")}
        out["files"] = [str(f.path) for f in self.files]
        return out


@dataclass
class TakeReport:
    """What taking a batch's output did: answers put in the cache, unusable ones, failed requests,
    answers skipped as taken already, and the file's problems."""

    answered: int = 0
    unusable: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    already_taken: int = 0
    problems: list[str] = field(default_factory=list)
    n_problems: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0

    def reasons(self) -> dict[str, str]:
        """Why each request of the batch has no usable answer, by cache key."""
        return {**self.failed, **self.unusable}


class BatchExtractor(ModelAnswers):
    """Extraction by batches of requests (see the module docstring). ``api``: the provider's
    Batch API; None for offline batches, whose files go to ``directory``."""

    NOT_ASKED = f"{AWAITING}: no batch asks for it yet"

    def __init__(self, store, settings: LLMSettings, prompt: ExtractionPrompt | None = None, *,
                 api: BatchAPI | None = None, run_id: str | None = None, limits: FileLimits | None = None,
                 directory: Path | None = None, max_asks: int = MAX_ASKS, price_share: float | None = None) -> None:
        super().__init__(store, settings.model, prompt)  # its name the synchronous extractor's: the same rows
        self.settings = settings
        self.api = api
        self.mode = PROVIDER if api is not None else OFFLINE
        self.run_id = run_id or ledger.new_run_id("extract-batch")
        self.limits = limits or FileLimits()
        self.directory = Path(directory) if directory is not None else None
        self.max_asks = max_asks
        self.record = BatchRecord(store)
        if price_share is None:  # a provider's batch price; an offline runner's is configured (default $0)
            self.price_in, self.price_out, self.price_source = (
                settings.batch_prices() if api is not None else (0.0, 0.0, "offline"))
        else:
            price_in, price_out, source = settings.prices()
            self.price_in, self.price_out, self.price_source = price_in * price_share, price_out * price_share, \
                f"{source}+batch"
        self.endpoint_error = None  # the Extractor interface of the CLI's ingest
        # Texts claimed and submitted at once by answers.py (a file's worth, not CLAIM_CHUNK: one batch, not many).
        self.texts_at_once = self.limits.max_requests

    def __repr__(self) -> str:
        return f"BatchExtractor(model={self.model!r}, mode={self.mode!r})"

    # -- the extractor ---------------------------------------------------------------------------

    def extract(self, passages: Sequence[Passage], progress: ProgressCallback | None = None) -> list[ExtractionOutcome]:
        """The cache's answers; every other passage is submitted in a batch and awaits it."""
        report = self.submit(passages)
        outcomes = self.from_cache(passages, {**report.reasons,
                                              **self.awaiting_reasons(self.cache_key(p) for p in passages)})
        if progress is not None and passages:
            progress(len(passages), len(passages))
        return outcomes

    def awaiting_reasons(self, keys: Iterable[str]) -> dict[str, str]:
        """For each key an open batch asks for: the reason its passages are stored without extraction."""
        wanted = set(keys)
        summaries = self.record.summaries()
        opened = [b for b, s in summaries.items() if s.open]
        if not wanted or not opened:
            return {}
        rows = self.record.requests(opened).filter(pl.col("cache_key").is_in(list(wanted)))
        return {k: f"{AWAITING}: in batch {b}" for b, k in rows.select("batch", "cache_key").iter_rows()}

    # -- submitting ------------------------------------------------------------------------------

    def submit(self, passages: Sequence[Passage]) -> SubmitReport:
        """Plan and send batches for the passages' texts that neither the cache nor an open batch
        answers (after resuming any batch planned but not sent)."""
        report = SubmitReport()
        by_key: dict[str, list[Passage]] = {}
        for passage in passages:
            by_key.setdefault(self.cache_key(passage), []).append(passage)
        report.resumed = self.resume({k: v[0] for k, v in by_key.items()})
        report.texts = len(by_key)
        cached = set(self.cache.lookup(by_key)) if by_key else set()
        in_open = self.record.open_keys() & set(by_key)
        asked = self.record.times_asked(set(by_key) - cached - in_open)
        given_up = {k for k, n in asked.items() if n >= self.max_asks}
        todo = sorted(set(by_key) - cached - in_open - given_up)
        report.cached, report.in_open_batch, report.given_up = len(cached), len(in_open), len(given_up)
        report.reasons.update({k: f"no usable answer after {asked[k]} batches: not asked again" for k in given_up})
        if not todo:
            return report
        with scratch_folder("batch") as scratch:
            where = self.directory if self.mode == OFFLINE and self.directory is not None else Path(scratch)
            with RequestFileWriter(where, self.limits, stem=f"{self.run_id}") as writer:
                for key in todo:
                    writer.add(key, request_body(self.prompt, by_key[key][0], self.model, self.settings.temperature))
            for request_file in writer.files:
                batch = batch_id_for(self.model, request_file.custom_ids)
                self.record.plan(batch, self.mode,
                                 [(k, p.chunk_id, p.doc_id) for k in request_file.custom_ids for p in by_key[k]],
                                 self.run_id)
                # The name the provider knows this attempt by (its file's name, its batch's metadata).
                name = (self.record.summary(batch) or BatchSummary(batch)).ledger_run
                named = where / f"{name}.jsonl"
                request_file.path.rename(named)
                request_file.path = named
                report.batches.append(batch)
                report.sent += len(request_file.custom_ids)
                if self.mode == OFFLINE:
                    self.record.note(batch, EXPORTED, requests=len(request_file.custom_ids))
                    report.files.append(request_file)
                    continue
                refusal = self._send(batch, name, named)
                if refusal:
                    report.refused[batch] = refusal
                    report.reasons.update({k: refusal for k in request_file.custom_ids})
        return report

    def _send(self, batch: str, name: str, path: Path) -> str | None:
        """Find or upload the batch's file and find or create its batch at the provider, both known
        there by ``name`` (the attempt's); the reason when refused."""
        assert self.api is not None
        file_id = None
        try:
            found = self.api.find(name)
            if found is None:
                file_id = self.api.find_file(path.name) or self.api.upload(path, path.name)
                found = self.api.create(file_id, name)
        except BatchAPIError as err:
            reason = f"{PROVIDER_REFUSAL}: {err}"
            # An uploaded file the batch was refused for holds the text: it is deleted like a batch's files.
            self.record.note(batch, REFUSED, reason=reason, input_file_id=file_id)
            return reason
        self.record.note(batch, SUBMITTED, state=found.state, provider_batch_id=found.id,
                         input_file_id=found.input_file_id)
        return None

    def resume(self, given: dict[str, Passage] | None = None) -> list[str]:
        """Send the provider batches planned and never known to be sent (a crash after the plan):
        their file is written again from the passages ``given`` (by cache key) or else the stored
        ones; the batch is found at the provider, not created twice."""
        if self.mode != PROVIDER:
            return []
        pending = [s for s in self.record.summaries().values()
                   if s.mode == PROVIDER and s.open and SUBMITTED not in s.events and PLANNED in s.events]
        resumed = []
        for summary in pending:
            requests = self.record.requests([summary.batch])
            passages = self.stored_passages(requests.get_column("chunk_id").to_list(),
                                            requests.get_column("doc_id").to_list())
            first: dict[str, Passage] = dict(given or {})
            for passage in passages:
                first.setdefault(self.cache_key(passage), passage)
            keys = sorted(set(requests.get_column("cache_key").to_list()))
            if set(keys) - set(first):  # a passage gone meanwhile: the file could not be the same
                self.record.note(summary.batch, REFUSED, reason="its passages changed before it was sent")
                continue
            with scratch_folder("batch") as scratch:
                with RequestFileWriter(Path(scratch), FileLimits(max_requests=len(keys) + 1,
                                                                 max_bytes=2**62)) as writer:
                    for key in keys:
                        writer.add(key, request_body(self.prompt, first[key], self.model, self.settings.temperature))
                named = Path(scratch) / f"{summary.ledger_run}.jsonl"
                writer.files[0].path.rename(named)
                self._send(summary.batch, summary.ledger_run, named)
            resumed.append(summary.batch)
        return resumed

    def stored_passages(self, chunk_ids: Sequence[str], doc_ids: Sequence[str]) -> list[Passage]:
        """The live passages of these chunks (read through their documents' buckets)."""
        wanted = set(chunk_ids)
        if not wanted:
            return []
        rows = self.store.rows(PASSAGES.name, "doc_id", sorted(set(doc_ids)))
        return [Passage(r["chunk_id"], r["doc_id"], r["ordinal"], r["title"], r["text"])
                for r in rows.sort("doc_id", "ordinal").iter_rows(named=True) if r["chunk_id"] in wanted]

    def unextracted(self, doc_ids: Sequence[str]) -> list[Passage]:
        """The live passages of these documents without a successful extraction, in document order."""
        ids = sorted(set(doc_ids))
        if not ids:
            return []
        done = set(self.store.rows(EXTRACTIONS.name, "doc_id", ids).filter(pl.col("status") == OK)
                   .get_column("chunk_id").to_list())
        rows = self.store.rows(PASSAGES.name, "doc_id", ids)
        return [Passage(r["chunk_id"], r["doc_id"], r["ordinal"], r["title"], r["text"])
                for r in rows.sort("doc_id", "ordinal").iter_rows(named=True) if r["chunk_id"] not in done]

    # -- taking answers --------------------------------------------------------------------------

    def take_answers(self, summary: BatchSummary, reading: OutputReading) -> TakeReport:
        """Put a batch's usable answers in the ledger (at the batch price) and then the cache; an
        answer whose ledger row (its run: the batch id, with the attempt after the first) exists
        already is not taken again."""
        report = TakeReport(failed=dict(reading.failed), problems=list(reading.problems),
                            n_problems=reading.n_problems)
        requests = self.record.requests([summary.batch])
        charged = set(ledger.read(self.store, summary.ledger_run).get_column("cache_key").drop_nulls().to_list())
        keys = sorted(set(requests.get_column("cache_key").to_list()))
        passages = {self.cache_key(p): p for p in self.stored_passages(requests.get_column("chunk_id").to_list(),
                                                                       requests.get_column("doc_id").to_list())}
        missing = [k for k in keys if k not in reading.answers and k not in reading.failed]
        for key in missing:
            report.failed[key] = "no answer in the batch's output"
        charges: list[ledger.Charge] = []
        rows: list[dict] = []
        base = dict(run_id=summary.ledger_run, purpose=PURPOSE, model=self.model, price_in_per_mtok=self.price_in,
                    price_out_per_mtok=self.price_out, price_source=self.price_source)
        for key, answer in sorted(reading.answers.items()):
            if key in charged:
                report.already_taken += 1
                continue
            passage = passages.get(key)
            if passage is None:  # its document was deleted meanwhile: nothing to take it for
                report.unusable[key] = "its passage is no longer stored"
                continue
            messages = self.prompt.messages(passage)
            tokens_in = answer.tokens_in if answer.usage_reported else prompt_token_bound(messages, self.prompt.schema)
            tokens_out = answer.tokens_out if answer.usage_reported else self.prompt.max_output_tokens
            parsed = self._parse(answer.text, passage, truncated=answer.finish_reason == "length")
            charge = ledger.Charge(status="ok" if parsed.ok else "unusable", attempts=1, tokens_in=tokens_in,
                                   tokens_out=tokens_out, usage_reported=answer.usage_reported,
                                   doc_id=passage.doc_id, chunk_id=passage.chunk_id, cache_key=key, **base)
            charges.append(charge)
            report.tokens_in += tokens_in
            report.tokens_out += tokens_out
            report.cost_usd += charge.cost_usd
            if not parsed.ok:
                report.unusable[key] = f"unusable answer: {parsed.reason}"
                continue
            report.answered += 1
            rows.append(self._cache_row(passage, key, answer.text, tokens_in, tokens_out))
        ledger.record(self.store, charges)  # the ledger first: it never lacks a call whose answer is cached
        self.cache.put(rows)
        return report

