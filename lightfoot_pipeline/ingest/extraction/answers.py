"""The model's answers for a batch of passages, put in the extraction cache and nothing else.

This is the part of extraction that may run in many processes at once: it asks the model and
writes only journals (the cache and its cost ledger, and the claims), never a store commit. The
committing step then reads the answers from the cache (:class:`CachedAnswers`), with no call. A
run that asks and commits in one process (a sync) does both through :class:`ClaimingExtractor`.

For each distinct passage text (cache key) :func:`answer_passages`

1. skips it when the cache already answers it;
2. claims it (:mod:`.claims`), at most ``CLAIM_CHUNK`` at a time, asks the model for the keys it
   now holds (:class:`OpenAIExtractor`, which looks in the cache once more first) and releases
   them, with the failure's reason for a key the model did not answer usably;
3. waits for the keys other runs hold, polling the cache and the claims, until each is answered
   or its claim ends (released, expired, or its holder finished); a key whose claim ended without
   an answer is claimed and asked here.

So a passage text is asked once however many runs want it at the same time, and once more only
after a failed or unusable answer (a retry) or a holder that died with its claim.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from lightfoot_pipeline.ingest.extraction.cache import ExtractionCache
from lightfoot_pipeline.ingest.extraction.claims import CLAIM_CHUNK, ExtractionClaims
from lightfoot_pipeline.ingest.extraction.openai_extractor import OpenAIExtractor
from lightfoot_pipeline.ingest.extraction.outcome import OK, ExtractionOutcome, Extractor, ProgressCallback
from lightfoot_pipeline.ingest.extraction.replay import ReplayExtractor
from lightfoot_pipeline.ingest.passages import Passage
from lightfoot_pipeline.models.llm import LLMError

POLL_S = 1.0  # between two looks at the keys other runs hold


@dataclass
class AnswerReport:
    """What a batch's answers cost and where they came from (counts of distinct passage texts)."""

    texts: int = 0
    cached: int = 0  # answered before this batch asked
    asked: int = 0  # asked of the model by this batch
    answered_elsewhere: int = 0  # answered by another run while this one waited
    outcomes: list[ExtractionOutcome] = field(default_factory=list)  # of the texts this batch asked
    endpoint_error: LLMError | None = None  # the endpoint's own failure, which stopped the asking

    @property
    def failed(self) -> list[ExtractionOutcome]:
        return [o for o in self.outcomes if o.status != OK]

    @property
    def unanswered(self) -> list[ExtractionOutcome]:
        """The texts whose call got no answer: an error after the client's retries, or not sent
        once the endpoint had failed. Asking again later may answer them (an unusable answer, by
        contrast, would most likely come back the same)."""
        return [o for o in self.failed if o.raw_output is None]


def answer_passages(
    extractor,
    claims: ExtractionClaims,
    passages: Sequence[Passage],
    *,
    finished: Callable[[str], bool] = lambda claimant: False,
    progress: ProgressCallback | None = None,
    poll_s: float = POLL_S,
    chunk: int = CLAIM_CHUNK,
) -> AnswerReport:
    """Put an answer (or a released claim with the failure's reason) in the extraction cache for
    every passage text. ``finished(claimant)`` says whether another claimant (a run) has ended."""
    by_key: dict[str, Passage] = {}
    for passage in passages:
        by_key.setdefault(extractor.cache_key(passage), passage)
    report = AnswerReport(texts=len(by_key))
    cache = ExtractionCache(extractor.store)
    waiting = set(by_key) - set(_answered(cache, by_key))
    report.cached = len(by_key) - len(waiting)
    # An extractor that sends its texts as files of requests (batch_extractor.py) takes a file's worth at once.
    chunk = getattr(extractor, "texts_at_once", None) or chunk
    todo = sorted(waiting)
    waiting = set()
    for start in range(0, len(todo), chunk):
        if report.endpoint_error is not None:
            break  # every further call would fail the same way; the keys stay unclaimed
        mine, others = claims.claim(todo[start:start + chunk])
        _ask(extractor, claims, [by_key[k] for k in mine], report, progress)
        waiting.update(others)
    while waiting and report.endpoint_error is None:
        answered = set(_answered(cache, {k: by_key[k] for k in waiting}))
        report.answered_elsewhere += len(answered)
        waiting -= answered
        if not waiting:
            break
        state = claims.state(waiting)
        now = dt.datetime.now(dt.UTC)
        ended = sorted(k for k in waiting if k not in state or not state[k].held(now) or finished(state[k].claimant))
        if ended:
            mine, _ = claims.claim(ended, finished)
            _ask(extractor, claims, [by_key[k] for k in mine], report, progress)
            waiting -= set(mine)
        if waiting:
            time.sleep(poll_s)
    return report


def _ask(extractor, claims: ExtractionClaims, passages: list[Passage], report: AnswerReport,
         progress: ProgressCallback | None) -> None:
    if not passages:
        return
    keys = [extractor.cache_key(p) for p in passages]
    try:
        outcomes = extractor.extract(passages, progress)
    except BaseException:
        claims.release(keys, {k: "the run asking for it stopped before it had an answer" for k in keys})
        raise
    report.endpoint_error = report.endpoint_error or extractor.endpoint_error
    asked = [o for o in outcomes if not o.cached]
    report.asked += len(asked)
    report.answered_elsewhere += len(outcomes) - len(asked)  # cached between the claim and the call
    report.outcomes.extend(asked)
    claims.release(keys, {o.cache_key: o.reason for o in outcomes if o.status != OK})


def _answered(cache: ExtractionCache, by_key: dict[str, Passage]) -> list[str]:
    return list(cache.lookup(by_key))


class CachedAnswers:
    """The committing step's extractor: every passage's outcome from the extraction cache alone
    (no model call), or a failure with the reason its last claim was released with."""

    def __init__(self, extractor, claims: ExtractionClaims) -> None:
        self.extractor = extractor
        self.claims = claims
        self.name = extractor.name

    def extract(self, passages: Sequence[Passage], progress: ProgressCallback | None = None) -> list[ExtractionOutcome]:
        keys = {self.extractor.cache_key(p) for p in passages}
        outcomes = self.extractor.from_cache(passages, self.claims.reasons(keys))
        if progress is not None and passages:
            progress(len(passages), len(passages))
        return outcomes


class ClaimingExtractor:
    """An extractor for a run that commits its own answers (a sync, an ingest): the passage texts
    it is given are asked through the claims (:func:`answer_passages`), so two such runs at once
    ask each text once, and every passage then gets its outcome: the one its call gave, or the
    cache's answer (or the reason a claim ended without one).

    The claimant is the extractor's run id with the host and process id, so a run on this host
    whose process has ended holds nothing; one elsewhere holds its claims until their lease ends.
    """

    def __init__(self, extractor: OpenAIExtractor, *, poll_s: float = POLL_S) -> None:
        self.extractor = extractor
        self.name = extractor.name
        self.store = extractor.store
        self.claims = ExtractionClaims(extractor.store, f"{extractor.run_id}@{socket.gethostname()}:{os.getpid()}")
        self.poll_s = poll_s
        self.endpoint_error: LLMError | None = None

    def cache_key(self, passage: Passage) -> str:
        return self.extractor.cache_key(passage)

    def extract(self, passages: Sequence[Passage], progress: ProgressCallback | None = None) -> list[ExtractionOutcome]:
        report = answer_passages(self.extractor, self.claims, passages, finished=process_ended, progress=progress,
                                 poll_s=self.poll_s)
        self.endpoint_error = report.endpoint_error
        asked = {o.chunk_id: o for o in report.outcomes}
        asked_keys = {o.cache_key for o in report.outcomes if o.status == OK}
        rest = [p for p in passages if p.chunk_id not in asked]
        keys = {self.extractor.cache_key(p) for p in rest}
        answered = iter(self.extractor.from_cache(rest, self.claims.reasons(keys)))
        outcomes = []
        for passage in passages:
            outcome = asked.get(passage.chunk_id) or next(answered)
            if outcome.cached and outcome.cache_key in asked_keys:
                outcome = replace(outcome, cached=False)  # its text was asked in this run, for another passage
            outcomes.append(outcome)
        return outcomes


def process_ended(claimant: str) -> bool:
    """Whether a claimant named ``run@host:pid`` is a process of this host that has ended."""
    _, at, where = claimant.rpartition("@")
    host, _, pid = where.rpartition(":")
    if not at or host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class RecordedOrModelExtractor:
    """Replays the recorded extraction of documents that have one; sends the other passages to a model."""

    def __init__(self, recorded: dict[str, dict | list], model: Callable[[], Extractor] | None) -> None:
        self.replay = ReplayExtractor(recorded, entity_types=None)
        self.recorded = set(recorded)
        self.model_factory = model
        self.name = self.replay.name if model is None else f"{self.replay.name}+model"

    def extract(self, passages: Sequence[Passage], progress: ProgressCallback | None = None) -> list[ExtractionOutcome]:
        replayed = [p for p in passages if p.doc_id in self.recorded]
        asked = [p for p in passages if p.doc_id not in self.recorded]
        outcomes = {o.chunk_id: o for o in self.replay.extract(replayed)}
        if asked:
            outcomes.update({o.chunk_id: o for o in self._ask(asked, progress)})
        return [outcomes[p.chunk_id] for p in passages]

    def _ask(self, passages: Sequence[Passage], progress: ProgressCallback | None) -> list[ExtractionOutcome]:
        if self.model_factory is None:
            return [ExtractionOutcome.failed(p, "no recorded extraction for this passage, and the extractor "
                                                "is in replay mode", extractor=self.replay.name) for p in passages]
        try:
            model = self.model_factory()
        except Exception as err:  # a missing endpoint or bad settings fail the passages, with the reason
            return [ExtractionOutcome.failed(p, f"no recorded extraction, and the language model is not usable: {err}",
                                             extractor="openai") for p in passages]
        if isinstance(model, OpenAIExtractor):  # through the claims: a sync or ingest beside it asks each text once
            model = ClaimingExtractor(model)
        return model.extract(passages, progress)
