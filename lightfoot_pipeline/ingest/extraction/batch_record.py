"""The store's record of extraction batches: what each asks for and what became of it.

Two journals (store/tables.py): ``extraction_batch_requests`` (which passages, by chunk and cache
key, a batch asks for) and ``extraction_batches`` (its events, in order). A batch's id comes from
its content (``eb-`` and a digest of the model and its sorted cache keys), so writing the same
requests again gives the same id, and the provider's batch is found again by that id in its
metadata. The events of a batch:

- ``planned``: its requests are recorded, before anything leaves (a crash after this is resumed:
  the file is found or uploaded again, the batch found or created);
- ``submitted``: its input file is uploaded and the provider's batch created (their ids);
  ``exported`` for an offline batch, written for a runner of the operator's own;
- ``state``: the provider's status changed (validating, in_progress, finalizing, …);
- ``collected``: its answers are in the extraction cache (counts, and why the rest were not taken);
  ``refused``: the provider refused its file or its batch (its passages are asked again later);
  ``cancelled``: the operator or an erasure cancelled it;
- ``files_deleted``: its input, output and error files are deleted at the provider.

The same texts planned again after their batch ended make the same id: its events start over
from that ``planned`` as its next attempt, known at the provider (file name, metadata) and in the
cost ledger as ``ID.2`` (:attr:`BatchSummary.ledger_run`). A batch is *open* until collected, refused or cancelled: the passages it asks for are awaiting
extraction and no other batch asks for them. It *holds text at the provider* from its upload
until ``files_deleted``. Rows hold ids, counts and the engine's reasons, never text.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.store.tables import EXTRACTION_BATCH_REQUESTS, EXTRACTION_BATCHES, with_buckets

PROVIDER, OFFLINE = "provider", "offline"
PLANNED, SUBMITTED, EXPORTED, STATE = "planned", "submitted", "exported", "state"
COLLECTED, REFUSED, CANCELLED, FILES_DELETED = "collected", "refused", "cancelled", "files_deleted"
# How a refusal by the provider (of the upload or of the batch) begins its reason: an attempt that
# counts towards a text's asks, so that a provider refusing every batch is not asked for ever.
PROVIDER_REFUSAL = "the provider refused the batch"
ENDING_EVENTS = frozenset({COLLECTED, REFUSED, CANCELLED})
_FIELDS = ("state", "provider_batch_id", "input_file_id", "output_file_id", "error_file_id", "requests", "answered",
           "failed", "reason", "run_id")


def batch_id_for(model: str, cache_keys: Iterable[str]) -> str:
    """The id of the batch that asks ``model`` for these texts (its content, not its time)."""
    digest = hashlib.sha256("\n".join([model, *sorted(set(cache_keys))]).encode()).hexdigest()
    return f"eb-{digest[:24]}"


@dataclass
class BatchSummary:
    """A batch's events folded: the latest value of each field, and which events it has had."""

    batch: str
    mode: str = PROVIDER
    events: list[str] = field(default_factory=list)
    state: str | None = None
    provider_batch_id: str | None = None
    input_file_id: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    requests: int = 0
    answered: int = 0
    failed: int = 0
    reason: str | None = None
    run_id: str | None = None
    planned_at: dt.datetime | None = None
    last_at: dt.datetime | None = None
    attempt: int = 1  # how many times these texts were planned as this batch (its events start over each time)

    @property
    def ledger_run(self) -> str:
        """The cost ledger's run of this attempt's answers: the batch id, then ``id.2`` for a second attempt."""
        return self.batch if self.attempt == 1 else f"{self.batch}.{self.attempt}"

    @property
    def open(self) -> bool:
        """Not collected, refused or cancelled: its passages await its answers."""
        return not ENDING_EVENTS.intersection(self.events)

    @property
    def holds_provider_files(self) -> bool:
        """Its files (the requests' text, and the answers quoting it) may still be at the provider."""
        return self.mode == PROVIDER and FILES_DELETED not in self.events and (
            self.input_file_id is not None or SUBMITTED in self.events or (PLANNED in self.events and self.open))

    def file_ids(self) -> list[str]:
        return [f for f in (self.input_file_id, self.output_file_id, self.error_file_id) if f]

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items()}
        out["open"] = self.open
        out["holds_provider_files"] = self.holds_provider_files
        return out


class BatchRecord:
    """Reads and appends the two journals of extraction batches."""

    def __init__(self, store) -> None:
        self.store = store

    # -- reading -------------------------------------------------------------------------------

    def events(self) -> pl.DataFrame:
        return self.store.read_journal(EXTRACTION_BATCHES.name).sort(["batch", "seq", "at"])

    def summaries(self) -> dict[str, BatchSummary]:
        """Every batch, folded from its events (oldest batch first)."""
        return self._fold(self.events())

    @staticmethod
    def _fold(events: pl.DataFrame) -> dict[str, BatchSummary]:
        out: dict[str, BatchSummary] = {}
        for row in events.iter_rows(named=True):
            summary = out.get(row["batch"])
            attempt = 1
            if summary is not None and row["event"] == PLANNED and not summary.open:
                attempt = summary.attempt + 1
                summary = None  # planned again after it ended (the same texts asked again): it starts over
            if summary is None:
                summary = out[row["batch"]] = BatchSummary(row["batch"], mode=row["mode"] or PROVIDER,
                                                           planned_at=row["at"], attempt=attempt)
            summary.events.append(row["event"])
            summary.last_at = row["at"]
            for name in _FIELDS:
                if row[name] is not None:
                    setattr(summary, name, row[name])
        return dict(sorted(out.items(), key=lambda item: (item[1].planned_at or dt.datetime.min.replace(tzinfo=dt.UTC),
                                                          item[0])))

    def summary(self, batch: str) -> BatchSummary | None:
        return self.summaries().get(batch)

    def requests(self, batches: Sequence[str] | None = None) -> pl.DataFrame:
        """The passages batches ask for (every batch's, or those named)."""
        rows = self.store.read_journal(EXTRACTION_BATCH_REQUESTS.name)
        rows = rows if batches is None else rows.filter(pl.col("batch").is_in(list(batches)))
        return rows.unique(["batch", "cache_key", "chunk_id"], maintain_order=True)

    def open_keys(self) -> set[str]:
        """The cache keys an open batch asks for: no other batch asks for them."""
        opened = [b for b, s in self.summaries().items() if s.open]
        if not opened:
            return set()
        return set(self.requests(opened).get_column("cache_key").to_list())

    def times_asked(self, keys: Iterable[str]) -> dict[str, int]:
        """How many batches asked for each key: those that got as far as the provider or a runner,
        and those the provider refused (each attempt counts)."""
        wanted = list(set(keys))
        if not wanted:
            return {}
        events = self.events()
        attempts = events.filter(pl.col("event").is_in([SUBMITTED, EXPORTED])
                                 | ((pl.col("event") == REFUSED) & pl.col("reason").str.starts_with(PROVIDER_REFUSAL)))
        sent = dict(attempts.group_by("batch").len().iter_rows())
        if not sent:
            return {}
        rows = self.requests(list(sent)).filter(pl.col("cache_key").is_in(wanted)).unique(["batch", "cache_key"])
        asked: dict[str, int] = {}
        for batch, key in rows.select("batch", "cache_key").iter_rows():  # every attempt of each batch counts
            asked[key] = asked.get(key, 0) + sent[batch]
        return asked

    def holding(self, doc_ids: Iterable[str]) -> list[BatchSummary]:
        """The batches whose files at the provider hold text of these documents."""
        ids = list(set(doc_ids))
        holders = {b: s for b, s in self.summaries().items() if s.holds_provider_files}
        if not ids or not holders:
            return []
        rows = self.requests(list(holders)).filter(pl.col("doc_id").is_in(ids))
        return [holders[b] for b in sorted(set(rows.get_column("batch").to_list()))]

    # -- writing -------------------------------------------------------------------------------

    def compact(self) -> int:
        """Rewrite the small files that the events' appends left into a few larger ones; the files compacted."""
        return sum(self.store.compact_journal(spec.name) for spec in (EXTRACTION_BATCHES, EXTRACTION_BATCH_REQUESTS))

    def plan(self, batch: str, mode: str, passages: Sequence[tuple[str, str, str]], run_id: str) -> None:
        """Record a batch's requests, ``(cache_key, chunk_id, doc_id)`` each, then its ``planned`` event."""
        frame = pl.DataFrame([{"batch": batch, "cache_key": k, "chunk_id": c, "doc_id": d} for k, c, d in passages],
                             schema=EXTRACTION_BATCH_REQUESTS.empty().select(EXTRACTION_BATCH_REQUESTS.columns).schema)
        if frame.height:
            self.store.append_journal(EXTRACTION_BATCH_REQUESTS.name,
                                      with_buckets(frame, EXTRACTION_BATCH_REQUESTS, self.store.n_buckets))
        self.note(batch, PLANNED, mode=mode, requests=len({k for k, _, _ in passages}), run_id=run_id)

    def note(self, batch: str, event: str, *, mode: str | None = None, **values) -> None:
        """Append one event of a batch (the fields named; the others stay as they were)."""
        unknown = set(values) - set(_FIELDS)
        if unknown:
            raise ValueError(f"unknown fields of a batch event: {sorted(unknown)}")
        events = self.events()
        seq = events.filter(pl.col("batch") == batch).height + 1
        known = self._fold(events).get(batch)
        row = {"batch": batch, "seq": seq, "event": event, "mode": mode or (known.mode if known else PROVIDER),
               **{name: values.get(name) for name in _FIELDS}, "at": dt.datetime.now(dt.UTC)}
        frame = pl.DataFrame([row], schema=EXTRACTION_BATCHES.empty().select(EXTRACTION_BATCHES.columns).schema)
        self.store.append_journal(EXTRACTION_BATCHES.name, with_buckets(frame, EXTRACTION_BATCHES, self.store.n_buckets))
