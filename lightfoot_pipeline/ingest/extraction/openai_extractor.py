"""Extraction by a language model behind an OpenAI-compatible endpoint: one call per new passage.

For a batch of passages the extractor

1. looks every passage up in the extraction cache (model + prompt hash + schema hash + passage
   text hash): a cached answer is parsed again and costs no request, so a rebuild, a re-run after
   a crash or a second ingestion of the same text makes no call;
2. sends one request per remaining distinct text, ``concurrency`` at a time (retries, timeouts
   and output-mode fallback are the client's, :mod:`lightfoot_pipeline.models.llm`);
3. parses each answer tolerantly (:mod:`.parse`) and validates it against its passage;
4. writes every answer to the cost ledger, then every usable one to the cache, before it sends
   another request: the answers that arrive together go in one append to each (so the appends
   per second stay within what storage takes, whatever the concurrency), and at the end it
   compacts the small files those appends left (every ``compact_every`` appends in a long run).

So ``kill -9`` loses at most the answers of the calls in flight at that moment (at most
``concurrency``): every answer the extractor has taken is in the ledger and the cache before the
next request leaves, and a re-run asks only for the passages without a cached answer. An error
that stops the batch (a failed write, an interrupt) loses none: the calls in flight are awaited
and kept. The ledger is written first, so it never lacks a call whose answer is cached.

Every passage gets exactly one outcome: a record, or a failure with its reason (and the raw answer
when there was one). A failure never aborts the batch. When the endpoint refuses the credentials
or does not know the model, or stays unreachable, the passages not yet sent fail with that reason
instead of each trying in turn.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial

from deltalake.exceptions import DeltaError

from lightfoot_pipeline.ingest.extraction.model_answers import ModelAnswers
from lightfoot_pipeline.ingest.extraction.outcome import OK, ExtractionOutcome, ProgressCallback
from lightfoot_pipeline.ingest.extraction.parse import MAX_ANSWER_CHARS
from lightfoot_pipeline.ingest.extraction.prompt import ExtractionPrompt
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.models.llm import Completion, LLMClient, LLMError, LLMSettings
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store import ledger
from lightfoot_pipeline.store.log import StoreError

log = logging.getLogger(__name__)

# Errors after which no further passage is sent in this run: every call would fail the same way.
FATAL_KINDS = frozenset({"auth", "not_found", "config"})
PURPOSE = "extract"
# Appends to the cache (and as many to the ledger) between two compactions within one batch.
COMPACT_EVERY = 1000


@dataclass
class _Answer:
    completion: Completion | None = None
    error: LLMError | None = None


class OpenAIExtractor(ModelAnswers):
    def __init__(
        self,
        store,
        client: LLMClient,
        prompt: ExtractionPrompt | None = None,
        *,
        run_id: str | None = None,
        compact_every: int = COMPACT_EVERY,
        stop_after_unreachable: int = 3,
    ) -> None:
        super().__init__(store, client.settings.model, prompt)
        self.client = client
        self.run_id = run_id or ledger.new_run_id("extract")
        if compact_every < 1:
            raise ValueError(f"compact_every must be at least 1, got {compact_every}")
        self.compact_every = compact_every
        self.stop_after_unreachable = stop_after_unreachable
        # The endpoint's own failure in the last batch: the error that stopped it sending (refused
        # credentials, an unknown model, an endpoint that stays unreachable), or the endpoint being
        # unreachable for every call the batch made; None when the endpoint answered.
        self.endpoint_error: LLMError | None = None
        self.price_in, self.price_out, self.price_source = client.settings.prices()

    def __repr__(self) -> str:
        return f"OpenAIExtractor(model={self.model!r}, run_id={self.run_id!r})"

    # -- the batch ---------------------------------------------------------------------------

    def extract(
        self, passages: Sequence[Passage], progress: ProgressCallback | None = None, run_id: str | None = None,
    ) -> list[ExtractionOutcome]:
        run_id = run_id or self.run_id
        self.endpoint_error = None
        total = len(passages)
        outcomes: list[ExtractionOutcome | None] = [None] * total
        keys = [self.cache_key(p) for p in passages]
        cached = self.cache.lookup(keys) if passages else {}
        pending: dict[str, list[int]] = {}  # cache key -> positions of the passages with that text
        for i, (passage, key) in enumerate(zip(passages, keys, strict=True)):
            hit = cached.get(key)
            if hit is not None:
                parsed = self._parse(hit["output"], passage, truncated=False)
                if parsed.ok:
                    outcomes[i] = self._outcome(passage, key, parsed, hit["output"], cached=True)
                    continue
            pending.setdefault(key, []).append(i)
        done = total - sum(len(v) for v in pending.values())
        if progress is not None and done:
            progress(done, total)
        if pending:
            self._call_all(passages, pending, outcomes, run_id, progress, done)
            self._compact()
        assert all(o is not None for o in outcomes)
        return outcomes  # type: ignore[return-value]

    def _call_all(self, passages, pending, outcomes, run_id, progress, done) -> None:
        total = len(passages)
        queue = list(pending.items())
        cache_rows: list[dict] = []
        charges: list[ledger.Charge] = []
        stopped: str | None = None
        unreachable_streak = 0
        reached, unreachable = False, None  # whether the endpoint answered any call; its last unreachable error
        since_compaction = 0
        workers = self.client.settings.concurrency
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="extract")
        in_flight: dict[Future, tuple[str, list[int]]] = {}
        finished_cleanly = False
        try:
            while queue or in_flight:
                # No more in flight than workers: a stop then sends nothing further.
                while queue and not stopped and len(in_flight) < workers:
                    key, positions = queue.pop(0)
                    future = pool.submit(self._ask, passages[positions[0]])
                    in_flight[future] = (key, positions)
                if not in_flight:
                    break
                ready, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                for future in ready:
                    key, positions = in_flight.pop(future)
                    answer: _Answer = future.result()
                    first = passages[positions[0]]
                    outcome, charge, cache_row = self._settle(first, key, answer, run_id)
                    charges.append(charge)
                    if cache_row is not None:
                        cache_rows.append(cache_row)
                    for n, i in enumerate(positions):
                        outcomes[i] = outcome if n == 0 else self._shared(passages[i], outcome)
                    done += len(positions)
                    if answer.error is not None and answer.error.kind == "unreachable":
                        unreachable = answer.error
                    else:
                        reached = True
                    if answer.error is not None:
                        unreachable_streak = unreachable_streak + 1 if answer.error.kind == "unreachable" else 0
                        if answer.error.kind in FATAL_KINDS or unreachable_streak >= self.stop_after_unreachable:
                            stopped = stopped or str(answer.error)
                            self.endpoint_error = self.endpoint_error or answer.error
                    else:
                        unreachable_streak = 0
                # Durable before another request leaves: a crash from here on loses none of these.
                self._write(cache_rows, charges)
                since_compaction += 1
                if progress is not None:
                    progress(done, total)
                if since_compaction >= self.compact_every:
                    self._compact()
                    since_compaction = 0
            finished_cleanly = True
        finally:
            if not finished_cleanly and in_flight:
                # The calls in flight run to their end anyway (their threads are joined at exit):
                # wait for them and keep their answers too, so that an error loses nothing paid.
                for future in wait(list(in_flight)).done:
                    key, positions = in_flight.pop(future)
                    _, charge, cache_row = self._settle(passages[positions[0]], key, future.result(), run_id)
                    charges.append(charge)
                    if cache_row is not None:
                        cache_rows.append(cache_row)
            # Whatever happened, keep every answer already taken (a write that failed is tried again).
            self._write(cache_rows, charges)
            pool.shutdown(wait=finished_cleanly, cancel_futures=True)
        if self.endpoint_error is None and not reached:
            self.endpoint_error = unreachable
        for key, positions in queue:
            for i in positions:
                outcomes[i] = ExtractionOutcome.failed(
                    passages[i], f"not attempted: an earlier call in this run failed with {stopped}",
                    extractor=self.name, cache_key=key,
                )
                done += 1
        if queue and progress is not None:
            progress(done, total)

    def _write(self, cache_rows: list[dict], charges: list[ledger.Charge]) -> None:
        """Append the charges to the ledger, then the usable answers to the cache.

        In that order, so that the ledger never lacks a call whose answer is cached; a crash between
        the two costs the answers of this one append a second call, which the ledger then shows.
        """
        if charges:
            ledger.record(self.store, list(charges))
            charges.clear()
        if cache_rows:
            self.cache.put(list(cache_rows))
            cache_rows.clear()

    def _compact(self) -> None:
        """Compact the cache and the ledger journals; a failure (another writer's rewrite won) is
        only logged: nothing is lost, and the next compaction does it."""
        for name, compact in (("extraction cache", self.cache.compact),
                              ("cost ledger", partial(ledger.compact, self.store))):
            try:
                compact()
            except (StoreError, DeltaError, OSError) as err:
                log.warning("could not compact the %s: %s", name, err)

    # -- one passage -------------------------------------------------------------------------

    def _ask(self, passage: Passage) -> _Answer:
        """One model call (with the client's retries); never raises."""
        try:
            completion = self.client.complete(
                self.prompt.messages(passage), json_schema=self.prompt.schema, max_tokens=self.prompt.max_output_tokens,
            )
            return _Answer(completion=completion)
        except LLMError as err:
            return _Answer(error=err)
        except Exception as err:  # a failure of one call must not abort the batch
            log.exception("unexpected error extracting %s", passage.chunk_id)
            return _Answer(error=LLMError("unexpected", f"{type(err).__name__}: {err}", attempts=1))

    def _settle(self, passage: Passage, key: str, answer: _Answer, run_id: str):
        """The outcome, the ledger charge and the cache row (None unless usable) of one answer."""
        base = dict(run_id=run_id, purpose=PURPOSE, model=self.model, price_in_per_mtok=self.price_in,
                    price_out_per_mtok=self.price_out, price_source=self.price_source, doc_id=passage.doc_id,
                    chunk_id=passage.chunk_id, cache_key=key)
        if answer.error is not None:
            err = answer.error
            charge = ledger.Charge(status="error", error_kind=err.kind, attempts=max(err.attempts, 1),
                                   tokens_in=0, tokens_out=0, **base)
            reason = f"model call failed after {max(err.attempts, 1)} attempt(s): {err}"
            outcome = ExtractionOutcome.failed(passage, reason, extractor=self.name, cache_key=key,
                                               model_calls=1, retries=err.retries)
            return outcome, charge, None
        completion = answer.completion
        assert completion is not None
        parsed = self._parse(completion.text, passage, truncated=completion.truncated)
        charge = ledger.Charge(
            status="ok" if parsed.ok else "unusable", attempts=completion.attempts, tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out, seconds=completion.seconds, usage_reported=completion.usage_reported,
            **base,
        )
        calls = dict(model_calls=1, retries=completion.retries, tokens_in=completion.tokens_in,
                     tokens_out=completion.tokens_out, cost_usd=charge.cost_usd)
        if not parsed.ok:
            outcome = ExtractionOutcome.failed(passage, parsed.reason, extractor=self.name, cache_key=key,
                                               raw_output=completion.text[:MAX_ANSWER_CHARS], **calls)
            return outcome, charge, None
        outcome = self._outcome(passage, key, parsed, completion.text, **calls)
        return outcome, charge, self._cache_row(passage, key, completion.text, completion.tokens_in,
                                                completion.tokens_out)

    def _shared(self, passage: Passage, outcome: ExtractionOutcome) -> ExtractionOutcome:
        """The outcome of a passage whose text another passage of the batch was extracted for."""
        if outcome.status != OK:
            return ExtractionOutcome.failed(passage, outcome.reason, extractor=self.name, cache_key=outcome.cache_key,
                                            raw_output=outcome.raw_output)
        parsed = self._parse(outcome.raw_output, passage, truncated=False)
        return self._outcome(passage, outcome.cache_key, parsed, outcome.raw_output or "")


def build_openai_extractor(
    store,
    settings: IndexSettings | None = None,
    *,
    llm_settings: LLMSettings | None = None,
    client=None,
    run_id: str | None = None,
    prompt: ExtractionPrompt | None = None,
) -> OpenAIExtractor:
    """The extractor for ``--extractor openai``: endpoint, model and key from the environment."""
    settings = settings or IndexSettings()
    if llm_settings is None:
        llm_settings = LLMSettings.for_extraction()
    prompt = prompt or ExtractionPrompt(entity_types=tuple(settings.entity_types))
    return OpenAIExtractor(store, LLMClient(llm_settings, client), prompt, run_id=run_id)
