"""``lightfoot demo``: the main job on the bundled sample, end to end, with no model endpoint.

1. Ingest the bundled MuSiQue sample with its recorded extractions (no model call) and the
   packaged embedder; a second run finds everything extracted and changes nothing.
2. Show what was built: table counts, what validation repaired and dropped, the largest entities.
3. Delete a few documents (no model call), then build a fresh index of the survivors in a scratch
   store and show that the two fingerprints are equal.
4. Put the deleted documents back, so the store again holds the whole sample.
5. Export a serving snapshot and retrieve passages for sample questions: no model call (answers
   would need a language-model endpoint, and the demo never calls one).

Each step that writes the store is an ingestion batch of its own (``cli-demo-ingest-…``,
``cli-demo-delete-…``, ``cli-demo-restore-…``), all in one run; ``lightfoot explain batch`` shows
what each did.
"""

from __future__ import annotations

import argparse
import random
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from lightfoot_pipeline.ingest.dataset import bundled_sample_dir, load_corpus, load_recorded_extractions
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.scratch import new_scratch
from lightfoot_pipeline.store.tables import ALIASES, ENTITIES, SYNONYM_EDGES

if TYPE_CHECKING:
    from lightfoot_pipeline.store.store import Store


def _section(title: str) -> None:
    print(f"\n== {title} ==")


def run_demo(args) -> int:
    from lightfoot_pipeline import operations
    from lightfoot_pipeline.cli.store import command_batch
    from lightfoot_pipeline.ingest.extraction import ReplayExtractor
    from lightfoot_pipeline.models.embedder import load_embedder
    from lightfoot_pipeline.progress import Progress, name_progress
    from lightfoot_pipeline.store.batches import writing_batch
    from lightfoot_pipeline.store.fingerprint import counts, fingerprint
    from lightfoot_pipeline.store.ledger import new_run_id
    from lightfoot_pipeline.store.store import Store

    settings = IndexSettings()
    dataset = Path(args.dataset) if args.dataset else bundled_sample_dir()
    store = Store(args.store)
    documents = load_corpus(dataset)
    records = load_recorded_extractions(dataset)
    print(f"Lightfoot demo: {len(documents)} documents from {dataset}")
    print(f"store: {store.uri}")
    embedder = load_embedder(args.embedder)
    print(f"embedder: {embedder.model_id} ({embedder.dim} dimensions)")
    run_id = new_run_id("cli-demo")

    _section("1. build (recorded extractions: no model call)")
    built = command_batch("demo-ingest", run_id)
    with writing_batch(built):
        report = operations.ingest(store, documents, ReplayExtractor(records), embedder, settings,
                                   progress=Progress("extracting"), embed_progress=name_progress())
    print(f"{report.passages} passages: {report.extracted} extracted now, {report.already_extracted} already "
          f"extracted, {report.failed} failed; {report.model_calls} model calls; {report.graph.vectors_computed} "
          f"name vectors computed; {report.seconds:.1f}s")
    print(f"batch {built.batch_id} (run {run_id})")
    if report.validation:
        print("record validation:")
        for key, count in sorted(report.validation.items()):
            print(f"  {key:<48} {count:>6}")

    _section("2. what was built")
    for name, rows in counts(store).items():
        print(f"  {name:<14} {rows:>8,}")
    _show_entities(store)

    _section(f"3. delete {args.delete} documents (no model call) and compare with a fresh build")
    doomed = sorted(random.Random(0).sample([d.doc_id for d in documents], args.delete))
    deleting = command_batch("demo-delete", run_id)
    with writing_batch(deleting):
        deleted = operations.delete(store, doomed, settings, reason="demo")
    g = deleted.graph
    print(f"deleted {', '.join(deleted.deleted)} in {deleted.seconds:.2f}s with {deleted.model_calls} model calls "
          f"(batch {deleting.batch_id})")
    print(f"  names removed {g.names_removed}, changed {g.names_changed}; {g.entities_recomputed} of "
          f"{g.entities_before} entities recomputed; synonym edges {g.synonym_edges_before} -> {g.synonym_edges_after}")
    survivors = [d for d in documents if d.doc_id not in set(doomed)]
    fresh_root = new_scratch("demo-fresh")
    try:
        fresh = Store(str(fresh_root / "store"))
        _share_vector_cache(store, fresh)
        started = time.perf_counter()
        operations.ingest(fresh, survivors, ReplayExtractor(records), embedder, settings)
        fresh_seconds = time.perf_counter() - started
        mine, theirs = fingerprint(store), fingerprint(fresh)
        print(f"fresh build of the {len(survivors)} survivors: {fresh_seconds:.1f}s "
              "(name vectors from the content-addressed cache)")
        print(f"  fingerprint after delete : {mine.digest[:32]}")
        print(f"  fingerprint of fresh     : {theirs.digest[:32]}")
        equal = mine.digest == theirs.digest
        print(f"  identical: {'yes' if equal else 'NO, tables differ: ' + ', '.join(mine.differences(theirs))}")
    finally:
        shutil.rmtree(fresh_root, ignore_errors=True)

    _section("4. restore the deleted documents")
    restoring = command_batch("demo-restore", run_id)
    with writing_batch(restoring):
        restored = operations.ingest(store, [d for d in documents if d.doc_id in set(doomed)],
                                     ReplayExtractor(records), embedder, settings)
    print(f"re-added {restored.documents} documents with {restored.model_calls} model calls "
          f"(batch {restoring.batch_id}); store fingerprint {fingerprint(store).digest[:32]}")

    _section("5. serve: export a snapshot and retrieve with no model call")
    with writing_batch(command_batch("demo-snapshot", run_id)):  # a first snapshot registers its vector model
        _show_retrieval(store, embedder, dataset)
    print(f"\nNext: `lightfoot explain batch {built.batch_id}`, `lightfoot status`, `lightfoot delete DOC_ID --erase`, "
          "`lightfoot audit-deletion --fraction 0.1 --out audit.json`, `lightfoot query \"…\"`, `lightfoot serve`.")
    return 0 if equal else 1


def _show_retrieval(store: Store, embedder, dataset: Path, n_questions: int = 2) -> None:
    from lightfoot_pipeline.cli.store import publishing_checks
    from lightfoot_pipeline.ingest.dataset import default_questions_file, load_questions
    from lightfoot_pipeline.progress import StepProgress
    from lightfoot_pipeline.retrieval.answer import build_answerer
    from lightfoot_pipeline.retrieval.rerank import load_reranker
    from lightfoot_pipeline.service.queries import QueryService
    from lightfoot_pipeline.snapshot.export import publish_checked
    from lightfoot_pipeline.snapshot.format import SnapshotError

    started = time.perf_counter()
    report = publish_checked(store, embedder, publishing_checks(lambda: embedder), progress=StepProgress("snapshot"))
    if not report.published:
        raise SnapshotError(f"staged snapshot {report.info.snapshot_id} not published: {report.reason}")
    info = report.info
    edges = info.counts["edges"]
    print(f"snapshot {info.snapshot_id}: {info.counts['nodes']:,} nodes ({info.counts['entities']:,} entities, "
          f"{info.counts['passages']:,} passages); {edges['mention']:,} mention, {edges['fact']:,} fact and "
          f"{edges['synonym']:,} synonym edges; {time.perf_counter() - started:.1f}s")
    reranker, reranker_status = load_reranker(None)
    _, answer_status = build_answerer()
    service = QueryService(store, embedder, reranker, reranker_status)
    service.refresh()
    questions_file = default_questions_file(dataset)
    questions = load_questions(questions_file)[:n_questions] if questions_file else []
    if not questions:
        print("the dataset has no questions file to try")
    for question in questions:
        result = service.query(question.question, top_k=3, answer=False)
        gold = set(question.gold_doc_ids)
        print(f"Q: {question.question}")
        print(f"   expected answer: {question.answer}; gold passages: {', '.join(sorted(gold)) or 'none given'}")
        for passage in result["passages"]:
            mark = "*" if passage["doc_id"] in gold else " "
            text = " ".join(passage["text"].split())
            print(f"  {mark}{passage['rank']}. [{passage['doc_id']}] {passage['title']}: {text[:110]}"
                  + ("…" if len(text) > 110 else ""))
        latency = result["latency_ms"]
        print(f"   retrieval {latency['retrieval']:.0f} ms (embed {latency['embed']:.0f}, PageRank "
              f"{latency['pagerank']:.0f}, {result['pagerank']['iterations']} iterations); no model call")
    print("(* = a gold passage)")
    if reranker_status.state != "available":
        print(f"reranking: {reranker_status.state} ({reranker_status.reason}); PageRank order shown")
    if answer_status.startswith("available"):
        print(f"answers: `lightfoot query` would ask {answer_status.removeprefix('available: ')}")
    else:
        print("answers: need a language-model endpoint (set OPENAI_BASE_URL, and OPENAI_API_KEY if it needs one); "
              "retrieval above needed none")


def _show_entities(store: Store) -> None:
    entities = store.read(ENTITIES.name)
    aliases = store.read(ALIASES.name)
    top = entities.sort(["n_aliases", "n_chunks", "entity_id"], descending=[True, True, False]).head(5)
    print("entities with the most aliases:")
    for row in top.iter_rows(named=True):
        names = aliases.filter(pl.col("entity_id") == row["entity_id"]).sort(["n_chunks", "surface"], descending=[True, False])
        shown = ", ".join(names.get_column("surface").head(6).to_list())
        print(f"  {row['display_name']!r}: {row['n_aliases']} aliases in {row['n_chunks']} passages ({shown})")
    edges = store.read(SYNONYM_EDGES.name).sort("similarity", descending=True)
    if edges.height:
        names = dict(zip(entities.get_column("entity_id").to_list(), entities.get_column("display_name").to_list(), strict=True))
        print("synonym edges, e.g.:")
        for row in edges.head(3).iter_rows(named=True):
            print(f"  {names[row['entity_a']]!r} ~ {names[row['entity_b']]!r} ({row['similarity']:.3f})")


def _share_vector_cache(source: Store, target: Store) -> None:
    """Seed a scratch store's vector cache from another's: vectors depend on (model, text) only."""
    src, dst = source.local_root(), target.local_root()
    if src is not None and dst is not None and (src / "vectors").exists():
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src / "vectors", dst / "vectors")


def add_demo_command(sub, common: argparse.ArgumentParser) -> None:
    """The demo subcommand."""
    p = sub.add_parser("demo", parents=[common], help="build the bundled sample, delete some documents, verify")
    p.add_argument("--dataset", default=None, help="dataset directory (default: the bundled MuSiQue sample)")
    p.add_argument("--embedder", default=None, help="embedding model name or path, or hashing[:DIM]")
    p.add_argument("--delete", type=int, default=5, help="how many documents to delete (default 5)")
    p.set_defaults(func=run_demo)
