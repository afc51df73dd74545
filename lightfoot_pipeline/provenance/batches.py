"""The provenance of ingestion batches: what a batch did to each document and where each stands
now, the store commits it made, and which batches and runs produced a document and the sources of
an entity or a fact.

Everything here is read from ``batch_documents`` (store/batches.py) and the store log, which hold
ids, commit numbers and times only, and from the live documents: a batch whose documents were
erased still lists their ids (status ``erased``), with no title and no text.

A document of a batch stands, now, in one of these states:

- ``live``: its current text is the one this batch added or replaced;
- ``unchanged``: this batch found it as stored and kept it (or changed only its readers); its text
  is still the one it saw (``status_batch``: the batch that produced that text, when one did);
- ``replaced``: a later batch (``status_batch``) stored another text of it;
- ``deleted``: it is not in the store; ``status_batch`` deleted it (None: deleted outside a batch);
- ``erased``: deleted, and its history erased;
- ``readded``: this batch deleted it, and a later batch (``status_batch``) stored it again.

Only writes made inside a batch are logged, so a change made outside one (a library call) is not
seen here. A batch's entities are those its live documents' passages mention, most-mentioned
first (at most :data:`MAX_ENTITIES`; ``more_entities`` counts the rest), each the way to its
source documents and the runs that made them (provenance/entities.py). Links: :func:`batch_link` and :func:`document_link` point at the query service's page
(``LIGHTFOOT_PAGE_URL``), :func:`run_link` at a Dagster run (``LIGHTFOOT_DAGSTER_URL``); each is
None when its setting is unset. The Dagster layer puts :func:`batch_link` in each batch's
materialization.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.ingest.extraction.batch_record import BatchRecord
from lightfoot_pipeline.provenance.errors import ExplainError
from lightfoot_pipeline.settings import dagster_url, page_url
from lightfoot_pipeline.store.batches import (
    ACTIONS,
    BATCH_ID,
    CLI,
    DAGSTER,
    DELETED,
    PRODUCED,
    READERS,
    UNCHANGED,
    batch_log,
    batches_of_documents,
)
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ALIASES, DOCUMENT_KEYS, DOCUMENTS, ENTITIES, FORMS, TOMBSTONES, all_specs

LIVE, REPLACED, ERASED, READDED = "live", "replaced", "erased", "readded"
STATUSES = (LIVE, UNCHANGED, REPLACED, DELETED, ERASED, READDED)
CLI_KIND = f"{CLI}-"  # the command line's batch ids start so (cli-ingest-…); the Dagster layer's never do
# Source documents listed with their batches, per entity (the count of documents is always whole).
MAX_SOURCES = 200
# Entities listed per batch, most-mentioned first (their count is always whole).
MAX_ENTITIES = 50


def batch_link(batch_id: str) -> str | None:
    """The page's view of a batch, ``<LIGHTFOOT_PAGE_URL>/batch/<id>``; None when the setting is unset."""
    base = page_url()
    return None if base is None else f"{base}/batch/{urllib.parse.quote(batch_id, safe='')}"


def document_link(doc_id: str) -> str | None:
    """The page's view of a document, ``<LIGHTFOOT_PAGE_URL>/#doc=<id>``; None when the setting is unset."""
    base = page_url()
    return None if base is None else f"{base}/#doc={urllib.parse.quote(doc_id, safe='')}"


def run_link(run_id: str | None, by: str | None) -> str | None:
    """A Dagster run's page, ``<LIGHTFOOT_DAGSTER_URL>/runs/<run id>``, for a run Dagster made;
    None for a command line's run or when the setting is unset."""
    base = dagster_url()
    if base is None or not run_id or by != DAGSTER:
        return None
    return f"{base}/runs/{urllib.parse.quote(run_id, safe='')}"


def runner_of(batch_id: str) -> str:
    """What ran a batch, told by its id: the command line's ids are of a ``cli-`` kind."""
    return CLI if batch_id.startswith(CLI_KIND) else DAGSTER


def with_links(row: dict) -> dict:
    """A batch_documents row with who ran it and the link to its run (None without one)."""
    by = runner_of(row["batch"])
    return {**row, "by": by, "run_url": run_link(row["run_id"], by)}


@dataclass
class BatchExplanation:
    batch_id: str
    store_seq: int
    documents: list[dict] = field(default_factory=list)  # {doc_id, action, seq, run_id, at, status, status_batch, ...}
    commits: list[dict] = field(default_factory=list)  # {seq, operation, committed_at, by, run_id, run_url}
    counts: dict[str, int] = field(default_factory=dict)
    runs: list[dict] = field(default_factory=list)  # {run_id, by, run_url}
    # What its live documents' passages mention: {entity_id, type, display_name, n_passages}, most first
    entities: list[dict] = field(default_factory=list)
    more_entities: int = 0  # entities mentioned beyond those listed
    link: str | None = None  # the page's view of it, when LIGHTFOOT_PAGE_URL is set
    # The open extraction batches its live documents' passages await: {batch, state, passages}
    awaiting_extraction: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def explain_batch(store: Store, batch_id: str, manifest: Manifest | None = None) -> BatchExplanation:
    """A batch's documents with their action and present status, its store commits and its counts,
    as of ``manifest`` (default: the store's latest commit). A batch the store has no trace of
    raises :class:`ExplainError`.

    Reads the whole of ``batch_documents`` (ids and numbers) and of the store log, and of the
    other tables only the buckets of the batch's documents, of their names and of the entities
    listed."""
    manifest = manifest or store.manifest()
    if not BATCH_ID.match(batch_id or ""):
        raise ExplainError(f"{batch_id!r} is not a batch id",
                           hint="a batch id is lower-case letters, digits and dashes, as a command or Dagster names it")
    log = batch_log(store, manifest)
    mine = log.filter(pl.col("batch") == batch_id)
    commits = batch_commits(store, batch_id, manifest)
    if mine.height == 0 and not commits:
        raise ExplainError(f"no batch {batch_id!r} in the store at {store.uri}",
                           hint="each command that writes prints its batch; in Dagster it is the run's partition")
    # One row a document: what this batch last did to it.
    done = mine.sort("seq").group_by("doc_id", maintain_order=True).last().sort("doc_id")
    ids = done.get_column("doc_id").to_list()
    others = log.filter(pl.col("doc_id").is_in(ids) & (pl.col("batch") != batch_id)).sort("seq")
    live = store.rows(DOCUMENTS.name, "doc_id", ids, manifest).select("doc_id", "title", "n_passages")
    titles = {r["doc_id"]: r for r in live.iter_rows(named=True)}
    tombstones = store.rows(TOMBSTONES.name, "doc_id", ids, manifest).sort("requested_at")
    erased = {r["doc_id"]: r["erased_at"] is not None for r in tombstones.iter_rows(named=True)}  # the latest wins
    later: dict[str, list[dict]] = {}
    for row in others.iter_rows(named=True):
        later.setdefault(row["doc_id"], []).append(row)

    explanation = BatchExplanation(batch_id, manifest.seq, commits=commits, link=batch_link(batch_id))
    for row in done.select("doc_id", "action", "seq", "run_id", "at").iter_rows(named=True):
        doc_id = row["doc_id"]
        status, by_batch = _status(batch_id, row, later.get(doc_id, []), doc_id in titles, erased.get(doc_id, False))
        entry = {**row, "status": status, "status_batch": by_batch}
        if doc_id in titles:  # a live document's title; of one deleted, nothing but its id
            entry["title"] = titles[doc_id]["title"]
        explanation.documents.append(entry)
    explanation.counts, explanation.entities, explanation.more_entities = _contribution(
        store, manifest, explanation.documents, titles)
    runs = {c["run_id"]: c["by"] for c in commits if c["run_id"]}  # who ran each, as its commits say
    for run in mine.get_column("run_id").unique().sort().to_list():
        runs.setdefault(run, runner_of(batch_id))
    explanation.runs = [{"run_id": run, "by": by, "run_url": run_link(run, by)} for run, by in sorted(runs.items())]
    explanation.awaiting_extraction = awaiting_extraction(store, list(titles))
    return explanation


def awaiting_extraction(store: Store, doc_ids: list[str]) -> list[dict]:
    """The open extraction batches (ingest/extraction/batch_record.py) that these documents'
    passages await, with the provider's last state and how many of the passages each holds."""
    record = BatchRecord(store)
    opened = {b: s for b, s in record.summaries().items() if s.open}
    if not opened or not doc_ids:
        return []
    rows = record.requests(list(opened)).filter(pl.col("doc_id").is_in(doc_ids))
    counts = rows.group_by("batch").agg(pl.col("chunk_id").n_unique().alias("passages")).sort("batch")
    return [{"batch": b, "state": opened[b].state or opened[b].events[-1], "passages": n} for b, n in counts.iter_rows()]


def _status(batch_id: str, row: dict, later: list[dict], live: bool, erased: bool) -> tuple[str, str | None]:
    """The present status of a batch's document (see the module docstring) and the batch that
    brought it about. ``row``: what the batch did to it; ``later``: the document's rows of other
    batches, oldest first."""
    after = [r for r in later if r["seq"] > row["seq"]]
    produced = [r for r in after if r["action"] in PRODUCED]
    if not live:
        deletions = [r for r in after if r["action"] == DELETED]
        by = deletions[-1]["batch"] if deletions else batch_id if row["action"] == DELETED else None
        return (ERASED if erased else DELETED), by
    if row["action"] == DELETED:
        return READDED, produced[-1]["batch"] if produced else None
    if produced:
        return REPLACED, produced[-1]["batch"]
    if row["action"] in (UNCHANGED, READERS):
        before = [r for r in later if r["seq"] < row["seq"] and r["action"] in PRODUCED]
        return UNCHANGED, before[-1]["batch"] if before else None
    return LIVE, None


def _contribution(store: Store, manifest: Manifest, documents: list[dict],
                  live: dict[str, dict]) -> tuple[dict[str, int], list[dict], int]:
    """Documents by what the batch did to them, and what the text it holds now contributes:
    ``live`` documents, their passages, names, the entities of those names, and facts; and those
    entities, each with how many of the live documents' passages mention it, most first (at most
    :data:`MAX_ENTITIES`), with the count of the rest. A document's names and entities are found as
    ``explain_document`` finds them: its keys, then its names' forms and aliases."""
    counts = {action: sum(d["action"] == action for d in documents) for action in ACTIONS}
    holds = [d["doc_id"] for d in documents if d["status"] == LIVE]
    counts["live"] = len(holds)
    counts["passages"] = sum(live[d]["n_passages"] or 0 for d in holds)
    keys = store.rows(DOCUMENT_KEYS.name, "doc_id", holds, manifest).filter(pl.col("doc_id").is_in(holds))
    names = keys.filter(pl.col("kind") == "name").select("type", "key").unique()
    counts["names"] = names.height
    counts["facts"] = keys.filter(pl.col("kind") == "fact").get_column("key").n_unique()
    name_keys = names.get_column("key").unique().to_list()
    aliases = (store.rows(ALIASES.name, "name", name_keys, manifest)
               .join(names, left_on=["type", "name"], right_on=["type", "key"], how="semi")
               .select("name", "type", "entity_id").drop_nulls("entity_id"))
    forms = store.rows(FORMS.name, "name", name_keys, manifest).filter(pl.col("doc_id").is_in(holds))
    mentioned = (forms.join(aliases, on=["name", "type"], how="inner")
                 .group_by("entity_id").agg(pl.col("chunk_id").n_unique().alias("n_passages"))
                 .sort(["n_passages", "entity_id"], descending=[True, False]))
    counts["entities"] = mentioned.height
    top = mentioned.head(MAX_ENTITIES)
    entities = store.rows(ENTITIES.name, "entity_id", top.get_column("entity_id").to_list(), manifest)
    listed = (top.join(entities.select("entity_id", "type", "display_name"), on="entity_id", how="inner",
                       maintain_order="left")
              .select("entity_id", "type", "display_name", "n_passages"))
    return counts, listed.to_dicts(), mentioned.height - listed.height


def batch_commits(store: Store, batch_id: str, manifest: Manifest | None = None) -> list[dict]:
    """The store commits made in a batch, oldest first, from the store log's details."""
    upto = (manifest or store.manifest()).seq
    out = []
    for row in store.history().filter(pl.col("seq") <= upto).iter_rows(named=True):
        details = json.loads(row["details"] or "{}")
        if details.get("batch") == batch_id:
            by = details.get("by")
            out.append({"seq": row["seq"], "operation": row["operation"], "committed_at": row["committed_at"],
                        "by": by, "run_id": details.get("run_id"), "run_url": run_link(details.get("run_id"), by)})
    return out


def document_batches(store: Store, doc_ids: Iterable[str], manifest: Manifest | None = None) -> dict[str, list[dict]]:
    """Each document's rows in every batch that added, replaced, kept or deleted it, oldest first
    (batch, action, seq, run_id, at, by, run_url); read from the documents' buckets only."""
    rows = batches_of_documents(store, doc_ids, manifest)
    out: dict[str, list[dict]] = {}
    for row in rows.iter_rows(named=True):
        out.setdefault(row["doc_id"], []).append(with_links({k: v for k, v in row.items() if k != "doc_id"}))
    return out


def source_batches(store: Store, doc_ids: Iterable[str], manifest: Manifest | None = None) -> list[dict]:
    """For each source document (at most :data:`MAX_SOURCES`, in id order): the batch and run that
    produced its current text (``produced_by``: the latest that added or replaced it, None when
    none did in a batch) and every batch that touched it (``batches``)."""
    ids = sorted(set(doc_ids))[:MAX_SOURCES]
    history = document_batches(store, ids, manifest)
    out = []
    for doc_id in ids:
        rows = history.get(doc_id, [])
        produced = [r for r in rows if r["action"] in PRODUCED]
        out.append({"doc_id": doc_id, "produced_by": produced[-1] if produced else None, "batches": rows})
    return out


COMMIT_SCHEMA = {"seq": pl.Int64, "operation": pl.String, "batch": pl.String, "run_id": pl.String,
                 "by": pl.String, "committed_at": pl.Datetime("us", "UTC")}  # what a commit is listed by


def store_commits(store: Store) -> pl.DataFrame:
    """Every commit of the store, oldest first: its seq and operation, the batch, run and runner
    its log details name (``""`` where they name none), when, and whether it wrote a fingerprinted
    table (``content``; a commit that does not say which tables it wrote counts as one that did).
    Ids and times only."""
    log = store.history()
    details = [json.loads(d) if d else {} for d in log.get_column("details").to_list()]
    named = {key: [str(d.get(key) or "") for d in details] for key in ("batch", "run_id", "by")}
    fingerprinted = {spec.name for spec in all_specs() if spec.fingerprinted}
    content = [not isinstance(d.get("buckets_written"), dict) or bool(fingerprinted & set(d["buckets_written"]))
               for d in details]
    return pl.DataFrame({"seq": log.get_column("seq"), "operation": log.get_column("operation"), **named,
                         "committed_at": log.get_column("committed_at"), "content": content},
                        schema={**COMMIT_SCHEMA, "content": pl.Boolean})
