"""The permission audit: each principal's view of a snapshot against a store of its readable documents alone.

Issue 27's promise (DESIGN.md, "Permissions"): a principal P whose readable documents are D_P gets
from retrieval exactly what a store built from D_P alone gives. :func:`audit_permissions` checks
it on one snapshot, for a few principals and questions:

1. D_P from the snapshot's readers by the principal's own rule (:meth:`Principal.may_read`), not
   by the view code under audit; the view (permissions/views.py) must read those documents and no
   other;
2. a fresh store of D_P alone, built with no model call by a :data:`ReferenceBuilder` (from a
   dataset's recorded extractions, :func:`dataset_reference`, or from the extractions a store
   keeps, :func:`store_reference`) and exported;
3. for every question, on the view and on the fresh store: the ranked top-10 passages (chunk ids),
   their PageRank and dense scores, the seed facts (ids, similarities, evidence) and the
   explanation of retrieval/explain.py (its entity panels, seeds and shares) without the snapshot
   id. Everything is compared exactly, floats by equality: the view is equal only if every one is.

A difference names the question, the parts that differ and the chunk ids of both rankings, never
a passage's text. ``lightfoot audit-permissions`` runs the audit on a dataset (:func:`audit_dataset`)
or on an existing store, as its readers are now (:func:`audit_store`);
every checked export runs it on a sample of the staged snapshot before publishing it
(:func:`permission_check`: ``lightfoot snapshot`` and Dagster's ``serving_snapshot``), with principals from :func:`principals_from_readers` and questions
from :func:`passage_questions` unless it is given them.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lightfoot_pipeline import operations
from lightfoot_pipeline.evaluation.harness import HarnessError
from lightfoot_pipeline.ingest.dataset import (
    CORPUS_FILE,
    DatasetError,
    Document,
    Question,
    has_recorded_extractions,
    load_corpus,
    load_questions,
    load_recorded_extractions,
)
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.ingest.readers import PUBLIC, default_groups, readers_of_text
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.models.llm import LLMClient
from lightfoot_pipeline.permissions.principals import Principal, read_groups_file
from lightfoot_pipeline.permissions.views import reader_view
from lightfoot_pipeline.retrieval.explain import explain_query
from lightfoot_pipeline.retrieval.retrieve import Retriever
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.snapshot.export import export_snapshot, publish_checked
from lightfoot_pipeline.snapshot.format import Snapshot, SnapshotInfo, load_snapshot
from lightfoot_pipeline.snapshot.verdict import CheckVerdict, StagedCheck
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.scratch import new_scratch
from lightfoot_pipeline.store.store import Store

TOP_K = 10  # passages compared per question
MAX_AUDIT_PRINCIPALS = 16  # each costs a fresh build of its documents
MAX_AUDIT_QUESTIONS = 500  # each costs two retrievals and two explanations per principal
DIFFERENCES_KEPT = 5  # differences a principal's report lists (all are counted)
PARTS = ("passages", "scores", "seed_facts", "explanation")
QUESTION_WORDS = 12  # words of a passage that make a sampled question

# Builds a store of these documents alone into the (new, empty) target store, with no model call.
ReferenceBuilder = Callable[[frozenset[str], Store], None]
Echo = Callable[[str], None]


@dataclass
class PrincipalAudit:
    """One principal's comparison: its readable documents, the questions compared, what differed.

    ``parts`` counts the questions on which each compared part differed; ``digest`` is a digest of
    every record compared on the view (equal views of equal stores have equal digests)."""

    principal: Principal
    documents: int
    questions: int
    documents_equal: bool
    differing_questions: int = 0
    parts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))
    differences: list[dict] = field(default_factory=list)
    digest: str = ""
    view_seconds: float = 0.0
    reference_seconds: float = 0.0

    @property
    def equal(self) -> bool:
        return self.documents_equal and self.differing_questions == 0

    def as_dict(self, kept: int = DIFFERENCES_KEPT) -> dict:
        return {**self.principal.as_dict(), "documents": self.documents, "equal": self.equal,
                "questions": self.questions, "documents_equal": self.documents_equal,
                "differing_questions": self.differing_questions, "parts": dict(self.parts),
                "differences": self.differences[:kept], "digest": self.digest,
                "view_seconds": self.view_seconds, "reference_seconds": self.reference_seconds}


# -- what is compared ---------------------------------------------------------------------------


def retrieval_record(retriever: Retriever, question: str, top_k: int = TOP_K) -> dict:
    """What the audit compares of one question on one snapshot (see the module docstring, step 3)."""
    result = retriever.retrieve(question, top_k=top_k, rerank=False)
    explained = explain_query(retriever, question, top_k=top_k, rerank=False)
    explained.pop("snapshot_id")
    return {
        "passages": [h.chunk_id for h in result.passages],
        "scores": [[h.pagerank_score, h.dense_score] for h in result.passages],
        "seed_facts": [{"fact_id": f.fact_id, "similarity": f.similarity, "evidence": f.evidence}
                       for f in result.seed_facts],
        "explanation": explained,
    }


def differing_parts(mine: dict, theirs: dict) -> list[str]:
    """The parts of two records of one question that are not identical."""
    return [part for part in PARTS if mine[part] != theirs[part]]


def _record_digest(records: list[dict]) -> str:
    text = json.dumps(records, sort_keys=True, default=str, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- who reads what -----------------------------------------------------------------------------


def snapshot_readers(snapshot: Snapshot) -> dict[str, tuple[str, ...]]:
    """Each live document's readers as the snapshot keeps them (a snapshot without access tables
    holds public documents only)."""
    access = snapshot.access
    if access is None:
        return {doc: (PUBLIC,) for doc in snapshot.passages.get_column("doc_id").unique().sort().to_list()}
    return {doc: readers_of_text(text) for doc, text in access.readers.select("doc_id", "readers").iter_rows()}


def principals_from_readers(readers: dict[str, tuple[str, ...]], limit: int) -> list[Principal]:
    """Principals to audit when none are named, from the reader sets present: one of no group (the
    public documents only), then one of each group alone, the groups that read the most documents
    first (ties by name); at most ``limit``. Group names are ids, not content."""
    held: dict[str, int] = {}
    for groups in readers.values():
        for group in groups:
            if group != PUBLIC:
                held[group] = held.get(group, 0) + 1
    ranked = sorted(held, key=lambda g: (-held[g], g))
    principals = [Principal("public", ()), *(Principal(g, (g,)) for g in ranked)]
    return principals[:max(limit, 0)]


def passage_questions(snapshot: Snapshot, count: int, seed: int = 0) -> list[Question]:
    """``count`` questions drawn from the snapshot itself, for an audit without a question set: the
    first words of a seeded sample of its passages (sorted by chunk id first, so the sample is a
    function of the live passages). A question about a passage the principal cannot read is as
    good a test as one it can: both views must answer it as the fresh store does."""
    passages = snapshot.passages.select("chunk_id", "text").sort("chunk_id")
    rows = random.Random(seed).sample(range(passages.height), min(count, passages.height))
    texts = passages.get_column("text")
    return [Question(qid=f"passage-{i}", question=" ".join(str(texts[row]).split()[:QUESTION_WORDS]), answer="")
            for i, row in enumerate(sorted(rows))]


def check_bounds(principals: Sequence[Principal], questions: Sequence[Question]) -> None:
    """Refuse an audit larger than its bounds (each principal is a fresh build) or an empty one."""
    if not principals:
        raise HarnessError("the permission audit has no principal to audit")
    if len(principals) > MAX_AUDIT_PRINCIPALS:
        raise HarnessError(f"the permission audit builds a fresh store for each principal: {len(principals)} "
                           f"principals, at most {MAX_AUDIT_PRINCIPALS}", hint="name fewer in the groups file")
    if not questions:
        raise HarnessError("the permission audit has no question to compare retrieval on")
    if len(questions) > MAX_AUDIT_QUESTIONS:
        raise HarnessError(f"{len(questions)} questions; the permission audit compares at most {MAX_AUDIT_QUESTIONS}",
                           hint="lower --max-questions")


# -- fresh stores of the readable documents -----------------------------------------------------


def seed_vector_cache(source: Store, target: Store) -> None:
    """Copy a local source store's vector caches into a new target store: a cached vector is a
    function of its model and text alone, so the fresh build embeds nothing the source did not."""
    root, into = source.local_root(), target.local_root()
    if root is not None and into is not None and (root / "vectors").exists() and not (into / "vectors").exists():
        shutil.copytree(root / "vectors", into / "vectors")


def dataset_reference(documents: Sequence[Document], records: dict[str, dict], embedder: Embedder,
                      vectors_from: Store | None = None) -> ReferenceBuilder:
    """A fresh build of the readable documents of a dataset from its recorded extractions, as
    ``lightfoot ingest`` of a dataset of them alone would make it."""

    def build(readable: frozenset[str], target: Store) -> None:
        if vectors_from is not None:
            seed_vector_cache(vectors_from, target)
        operations.ingest(target, [d for d in documents if d.doc_id in readable], ReplayExtractor(records), embedder)

    return build


def store_reference(source: Store, embedder: Embedder, settings: IndexSettings | None = None,
                    manifest: Manifest | None = None) -> ReferenceBuilder:
    """A fresh index of some of a store's live documents from the extractions it keeps:
    ``operations.rebuild`` of those documents alone, which derives everything else again."""
    settings = settings or IndexSettings()

    def build(readable: frozenset[str], target: Store) -> None:
        seed_vector_cache(source, target)
        operations.rebuild(source, target, embedder, settings, manifest, doc_ids=sorted(readable))

    return build


# -- the audit ----------------------------------------------------------------------------------


def audit_principal(snapshot: Snapshot, principal: Principal, readable: frozenset[str], embedder: Embedder,
                    questions: Sequence[Question], build_reference: ReferenceBuilder, target: Store,
                    top_k: int = TOP_K) -> PrincipalAudit:
    """One principal's view of ``snapshot`` against a fresh store of ``readable`` built into ``target``."""
    started = time.perf_counter()
    view = reader_view(snapshot, principal)
    view_seconds = round(time.perf_counter() - started, 3)
    everything = frozenset(snapshot_readers(snapshot))
    seen = everything if view.documents is None else frozenset(view.documents)
    audit = PrincipalAudit(principal=principal, documents=len(readable), questions=0,
                           documents_equal=seen == readable, view_seconds=view_seconds)
    if not audit.documents_equal:
        audit.differences.append({"part": "documents", "view_only": sorted(seen - readable)[:DIFFERENCES_KEPT],
                                  "readable_only": sorted(readable - seen)[:DIFFERENCES_KEPT],
                                  "view_documents": len(seen)})
    if not readable:  # no store to build: the view must hold nothing
        held = {"passages": view.snapshot.passages.height, "entities": view.snapshot.entities.height,
                "facts": view.snapshot.facts.height}
        if any(held.values()):
            audit.differences.append({"part": "empty view", **held})
            audit.differing_questions = len(questions)
        audit.questions = len(questions)
        audit.digest = _record_digest([held])
        return audit
    started = time.perf_counter()
    build_reference(readable, target)
    export_snapshot(target, embedder)
    reference = load_snapshot(target)
    audit.reference_seconds = round(time.perf_counter() - started, 3)
    ours, fresh = Retriever(view.snapshot, embedder), Retriever(reference, embedder)
    records = []
    for question in questions:
        mine, theirs = retrieval_record(ours, question.question, top_k), retrieval_record(fresh, question.question, top_k)
        records.append(mine)
        audit.questions += 1
        parts = differing_parts(mine, theirs)
        if not parts:
            continue
        audit.differing_questions += 1
        for part in parts:
            audit.parts[part] += 1
        audit.differences.append({"question": question.qid, "parts": parts, "view_passages": mine["passages"],
                                  "fresh_passages": theirs["passages"]})
    audit.digest = _record_digest(records)
    return audit


def audit_permissions(snapshot: Snapshot, principals: Sequence[Principal], questions: Sequence[Question],
                      embedder: Embedder, build_reference: ReferenceBuilder, work_dir: Path, *,
                      top_k: int = TOP_K, keep_stores: bool = False, echo: Echo = lambda line: None,
                      ) -> list[PrincipalAudit]:
    """Every principal's view of ``snapshot`` against a fresh store of its readable documents (the
    module docstring has the steps). The fresh stores are built under ``work_dir``, one folder a
    principal, and removed once compared unless ``keep_stores``."""
    check_bounds(principals, questions)
    readers = snapshot_readers(snapshot)
    audits = []
    for number, principal in enumerate(principals, start=1):
        readable = frozenset(doc for doc, groups in readers.items() if principal.may_read(groups))
        folder = Path(work_dir) / f"principal-{number}"
        try:
            audit = audit_principal(snapshot, principal, readable, embedder, questions, build_reference,
                                    Store(str(folder / "store")), top_k)
        finally:
            if not keep_stores:
                shutil.rmtree(folder, ignore_errors=True)
        echo(f"{principal.name} ({','.join(principal.groups) or 'no group'}): {audit.documents} of {len(readers)} "
             f"documents, {audit.questions} questions, equal={str(audit.equal).lower()}")
        audits.append(audit)
    return audits


# -- a dataset's audit (lightfoot audit-permissions) ------------------------------------------------


def dataset_readers(documents: Sequence[Document]) -> dict[str, tuple[str, ...]] | None:
    """Each document's readers as its corpus line gives them (``Document.readers``; one that names
    none gets the default readers, ingest/readers.py), or None when no document names readers."""
    if all(d.readers is None for d in documents):
        return None
    default = default_groups()
    return {d.doc_id: d.readers if d.readers is not None else default for d in documents}


def audit_dataset(dataset_dir: Path, groups_file: Path, store: Store, embedder: Embedder, questions_file: Path,
                  *, max_questions: int = 50, work_dir: Path | None = None, echo: Echo = lambda line: None) -> dict:
    """``lightfoot audit-permissions``: build the dataset's store with its readers (no model call),
    export a snapshot, and audit every principal of the groups file on the first ``max_questions``
    questions. The report is ``{"principals": [...], "equal", ...}`` (:meth:`PrincipalAudit.as_dict`);
    the fresh stores stay in ``work_dir`` when one is given."""
    dataset_dir = Path(dataset_dir)
    principals = read_groups_file(Path(groups_file))
    questions = load_questions(questions_file)[:max_questions]
    check_bounds(principals, questions)
    if not has_recorded_extractions(dataset_dir):
        raise DatasetError(f"{dataset_dir} has no extractions.jsonl: the audit builds its stores with no model call")
    documents = load_corpus(dataset_dir)
    readers = dataset_readers(documents)
    if readers is None:
        raise DatasetError(f"{dataset_dir / CORPUS_FILE} names no document's readers (no line has a readers field): "
                           "every document is public and every principal's view is the whole index, so there is "
                           "nothing to audit", hint="give documents a readers list of group names")
    if store.exists():
        raise HarnessError(f"the audit builds its own store; {store.uri} already holds one",
                           hint="name a new --store, or none for a temporary one")
    records = load_recorded_extractions(dataset_dir)
    calls_before = LLMClient.calls_started()
    started = time.perf_counter()
    operations.ingest(store, documents, ReplayExtractor(records), embedder)  # with each document's readers
    info = export_snapshot(store, embedder)
    snapshot = load_snapshot(store, info.snapshot_id)
    build_seconds = round(time.perf_counter() - started, 3)
    echo(f"built {len(documents)} documents ({len(set(readers.values()))} reader sets) in {build_seconds}s")
    audited = _audit_report(snapshot, principals, questions, embedder,
                            dataset_reference(documents, records, embedder, vectors_from=store),
                            work_dir=work_dir, echo=echo)
    return {
        "dataset": str(dataset_dir), "groups_file": str(groups_file), "questions_file": str(questions_file),
        "store": store.uri, **audited, "build_seconds": build_seconds,
        # the build's calls too: the recorded extractions make it none
        "model_calls": LLMClient.calls_started() - calls_before,
    }


def _audit_report(snapshot: Snapshot, principals: Sequence[Principal], questions: Sequence[Question],
                  embedder: Embedder, reference: ReferenceBuilder, *, work_dir: Path | None, echo: Echo) -> dict:
    """The audit of ``principals``' views of ``snapshot`` against ``reference`` (in ``work_dir``,
    kept, or a temporary folder, removed), as the part of the report that both audits share."""
    calls_before = LLMClient.calls_started()
    readers = snapshot_readers(snapshot)
    keep = work_dir is not None
    scratch = Path(work_dir) if work_dir is not None else new_scratch("permission-audit")
    try:
        audits = audit_permissions(snapshot, principals, questions, embedder, reference, scratch,
                                   keep_stores=keep, echo=echo)
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return {
        "snapshot_id": snapshot.info.snapshot_id,
        "embedder": embedder.model_id,
        "documents": len(readers),
        "reader_sets": len(set(readers.values())),
        "top_k": TOP_K,
        "principals": [a.as_dict() for a in audits],
        "equal": all(a.equal for a in audits),
        "model_calls": LLMClient.calls_started() - calls_before,
        "work_dir": str(scratch) if keep else None,
    }


# -- an existing store's audit (lightfoot audit-permissions --store) ------------------------------------


def audit_store(store: Store, groups_file: Path, embedder: Embedder, questions_file: Path | None = None, *,
                max_questions: int = 50, work_dir: Path | None = None, echo: Echo = lambda line: None) -> dict:
    """``lightfoot audit-permissions --store``: the views of an existing store, with the readers it
    holds now (after ``lightfoot readers``, a sync or an ingest), against fresh builds of each
    principal's readable documents from the extractions the store keeps (:func:`store_reference`,
    no model call). The store's committed state is exported first, as ``lightfoot snapshot`` does
    (staged, and published only if the sample of :func:`permission_check` passes; the published
    snapshot is kept when it holds that state already), and the staged copy is audited either way. The questions are the
    first ``max_questions`` of ``questions_file``, else as many drawn from the snapshot's passages
    (:func:`passage_questions`)."""
    principals = read_groups_file(Path(groups_file))
    if not store.exists():
        raise HarnessError(f"no store at {store.uri} to audit",
                           hint="name an existing store, or give --dataset without --store to build one")
    manifest = store.manifest()
    started = time.perf_counter()
    # Staged and checked as `lightfoot snapshot` does: published only if its own sample passes; the
    # audit below compares the staged copy either way.
    published = publish_checked(store, embedder, [permission_check(lambda: embedder, IndexSettings())])
    info = published.info
    if info.store_seq != manifest.seq:
        raise HarnessError(f"{store.uri} changed while its snapshot was exported (commit {manifest.seq}, then "
                           f"{info.store_seq})", hint="run the audit again once the store is quiet")
    snapshot = load_snapshot(store, info.snapshot_id)
    questions = (load_questions(questions_file)[:max_questions] if questions_file is not None
                 else passage_questions(snapshot, max_questions))
    check_bounds(principals, questions)
    readers = snapshot_readers(snapshot)
    echo(f"exported {len(readers)} documents ({len(set(readers.values()))} reader sets) of commit {manifest.seq} "
         f"in {round(time.perf_counter() - started, 3)}s")
    audited = _audit_report(snapshot, principals, questions, embedder,
                            store_reference(store, embedder, manifest=manifest), work_dir=work_dir, echo=echo)
    return {
        "store": store.uri, "commit": manifest.seq, "groups_file": str(groups_file),
        "questions_file": str(questions_file) if questions_file is not None else None, **audited,
        "published": published.published,
    }


# -- a snapshot's audit before it is published (every checked export) ------------------------------


@dataclass
class PublishedAudit:
    """The audit of a store's published snapshot: the views compared, or why none was.

    ``skipped`` says why the audit did not run (disabled, too large, the store changed since the
    export); every document public means nothing to audit (``public``), which passes."""

    snapshot_id: str
    documents: int
    reader_sets: int
    public: bool = False
    skipped: str | None = None
    audits: list[PrincipalAudit] = field(default_factory=list)
    principals_from: str = "reader groups"
    questions: int = 0
    seconds: float = 0.0
    model_calls: int = 0

    @property
    def unequal(self) -> list[PrincipalAudit]:
        return [a for a in self.audits if not a.equal]


def audit_published_snapshot(store: Store, embedder: Callable[[], Embedder], settings: IndexSettings, *,
                             snapshot_id: str | None = None, enabled: bool = True,
                             groups_file: Path | None = None, principals: int = 3, questions: int = 5,
                             document_limit: int | None = None, echo: Echo = lambda line: None) -> PublishedAudit:
    """Audit a sample of principals' views of a snapshot (``snapshot_id``: a staged one; by
    default the store's published one) on a few questions
    drawn from its passages (with a fixed seed), each against a fresh store of its readable
    documents rebuilt from the store's own extractions (no model call). The principals are the
    first of ``groups_file``, or else derived from the reader groups present; the audit is skipped
    when disabled, when the snapshot holds more than ``document_limit`` documents, or when the
    store changed since the export (the next export's audit covers it). ``embedder()`` is called
    only when the audit runs (a model need not be loaded for a snapshot whose documents are public)."""
    snapshot = load_snapshot(store, snapshot_id)
    manifest = store.manifest()
    readers = snapshot_readers(snapshot)
    found = PublishedAudit(snapshot.snapshot_id, len(readers), len(set(readers.values())))
    if snapshot.access is None:
        found.public = True
        return found
    found.skipped = (
        "the permission audit is disabled in this run's config" if not enabled
        else f"the snapshot holds {len(readers):,} documents, more than the limit of {document_limit:,} "
        "(document_limit)" if document_limit is not None and len(readers) > document_limit
        else "the store has changed since the snapshot was exported: the next export's check "
        "audits it" if manifest.seq != snapshot.info.store_seq
        and fingerprint(store, manifest).digest != snapshot.info.fingerprint else None)
    if found.skipped:
        return found
    named = read_groups_file(groups_file) if groups_file else None
    chosen = (named or principals_from_readers(readers, principals))[:principals]
    sample = passage_questions(snapshot, questions)
    scratch = new_scratch("permission-check")
    started, calls, model = time.perf_counter(), LLMClient.calls_started(), embedder()
    try:
        found.audits = audit_permissions(snapshot, chosen, sample, model,
                                         store_reference(store, model, settings, manifest), scratch, echo=echo)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    found.principals_from = "groups file" if named else "reader groups"
    found.questions = len(sample)
    found.seconds = time.perf_counter() - started
    found.model_calls = LLMClient.calls_started() - calls
    return found


PERMISSION_CHECK = "views_match_fresh_stores"


def describe_audit(found: PublishedAudit) -> CheckVerdict:
    """The permission audit of a snapshot as its check's verdict: passed, skipped with why, or
    failed naming the principals whose views differ; metadata of counts, group names, equality and
    digests only, never a question or a passage."""
    common = {"snapshot_id": found.snapshot_id, "documents": found.documents, "reader_sets": found.reader_sets}
    if found.public:
        return CheckVerdict(PERMISSION_CHECK, passed=True, metadata={**common, "principals": 0},
                            reason=None, skipped=None)
    if found.skipped:
        return CheckVerdict(PERMISSION_CHECK, passed=False, skipped=found.skipped, metadata=common)
    unequal = found.unequal
    reason = None if not unequal else "views differ from a fresh store of their readable documents: " + ", ".join(
        f"{a.principal.name} ({a.differing_questions} of {a.questions} questions"
        + ("; other documents" if not a.documents_equal else "") + ")" for a in unequal)
    return CheckVerdict(PERMISSION_CHECK, passed=not unequal, reason=reason, metadata={
        **common, "principals_from": found.principals_from, "questions": found.questions,
        "model_calls": found.model_calls, "principals": len(found.audits),
        "equal": len(found.audits) - len(unequal),
        "views": [{"principal": a.principal.name, "groups": list(a.principal.groups), "documents": a.documents,
                   "equal": a.equal, "documents_equal": a.documents_equal,
                   "differing_questions": a.differing_questions, "parts": a.parts, "digest": a.digest}
                  for a in found.audits],
        "audit_seconds": round(found.seconds, 3),
    })


def permission_check(embedder: Callable[[], Embedder], settings: IndexSettings, *, enabled: bool = True,
                     groups_file: Path | None = None, principals: int = 3, questions: int = 5,
                     document_limit: int | None = None, echo: Echo = lambda line: None) -> StagedCheck:
    """The permission audit as a check of a staged snapshot (snapshot/export.py: ``publish_checked``):
    :func:`audit_published_snapshot` on the staged copy, as :func:`describe_audit` reports it."""

    def views_match_fresh_stores(store: Store, staged: SnapshotInfo) -> CheckVerdict:
        return describe_audit(audit_published_snapshot(
            store, embedder, settings, snapshot_id=staged.snapshot_id, enabled=enabled, groups_file=groups_file,
            principals=principals, questions=questions, document_limit=document_limit, echo=echo))

    return views_match_fresh_stores
