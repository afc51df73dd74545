"""Retrieval latency without the reranker, from the bundled sample to 100,000 passages.

    python benchmarks/latency.py [--passages 100000] [--queries 200] [--json OUT.json] [--work DIR]
                                 [--sample-store URI] [--skip-sample] [--skip-musique] [--skip-scale]
                                 [--skip-parity]
    python benchmarks/latency.py --kept STORE QUESTIONS [--kept STORE QUESTIONS ...] [--queries 200] [--no-exact-path]
        [--restage] [--memory-limit MIB ...]
                                 [--json OUT.json]

- **sample**: the bundled MuSiQue sample (1,890 passages) with its recorded extractions and the
  packaged all-MiniLM-L6-v2; the queries are its dev questions, repeated. The latency includes
  embedding the question with MiniLM.
- **musique_scale**: the synthetic corpus of the scale benchmark at MuSiQue's 11,402 passages
  (benchmarks/synthetic.py), built with the model-free hashing embedder at 384 dimensions, the
  size of MiniLM's vectors, so that the passage and fact similarity products cost what they cost
  with the real model; the queries are questions made from the corpus's facts. Query embedding
  is the hashing embedder's (well under a millisecond), not a network's.
- **scale_100k**: the same synthetic corpus at ``--passages`` (100,000 by default). The snapshot
  is loaded and queried in a fresh child process, as a query replica would: ``load_s`` is
  ``load_snapshot``, ``rss_mb`` the child's peak resident memory after its queries. Then one
  document is deleted from the store and ``reexport_after_delete_s`` times the next snapshot
  export (each run deletes another document of the kept store). Building the store takes long
  (keep it with ``--work``).
- **views** (permission-exact retrieval): the MuSiQue-scale synthetic store (``--views-passages``)
  with every document public, then with readers from a seeded rule over four reader sets (public;
  staff; legal; staff and legal). Reported: the export time and the snapshot's size on disk for 1
  reader set and for 4; each principal's view build time (its first query); p50 of the operator's
  retrieval on the whole snapshot beside p50 of the four principals' retrievals on their views,
  query by query in the same loop (``p50_ratio`` is views over whole, target at most 1.2); and the
  revocation latency: from the commit that takes a staff document away from staff, through the
  snapshot export and the service's load of it and the view's build, to the first staff query that
  no longer ranks the document (the service's watch interval, 2 s, comes on top).
- **walk_equality** (in sample and musique_scale): on the sample's 100 questions (dev and
  held-out) and the 200 MuSiQue-scale questions, how many get the exact walk's top 10 (and top 30)
  passages in its order from the default retrieval, how many would from the local walk's plain
  push at the first epsilon, and whether the exact walk's top 30 at its tolerance are those of a
  walk run to 1e-11. Each timed section also gives ``proof``: the shares of queries the local walk
  proved at the first epsilon, proved after pushing on, and left to the exact walk.
- **walk_cost** (in musique_scale and scale_100k): the walk alone, the plain push at the first
  epsilon (the walk before its proof) and the proven walk, timed question by question in one loop
  so that both see the same load; at 100k also how many proven top 10s equal the exact walk's.
- **recall_parity**: on the sample's 50 dev questions with MiniLM, recall@2/5/10 of the exact walk
  with exact seeding beside the local walk, indexed seeding (a fact index built in memory: the
  sample is below the size that gets one on export) and both, with each one's mean top-10 overlap
  with the exact walk.

- **kept** (``--kept``, instead of the sections above): stores built before (``scale.py --keep``),
  each with a JSON list of questions (``--write-questions N FILE`` writes the synthetic corpus's
  at N passages). For each store, in this order: its snapshot exported in a child process if the
  published one does not hold the store's state (``export_s``, ``export_peak_mb``), then a child
  replica as above, which also reports its resident memory split into anonymous pages and pages
  of mapped files (``rss_anon_mb``, ``rss_file_mb``: the snapshot's tables and vectors, shared by
  every replica on the node) after loading and after its queries, and ``exact_path``: on every
  question, whether the default retrieval's top 10 passages are those of the exact path (exact
  PageRank over the whole graph from exact seeding: every passage and fact scored). Each later
  store gets the ratio of its p50 to the first's, measured in the same run. With ``--memory-limit MIB``
  (repeatable), each store's replica also runs under each limit, in a memory cgroup as a pod's
  container does (benchmarks/memory_limit.py), between two runs without one, each from a cold
  page cache: ``under_limits`` gives each run's p50, peak RSS, the group's peak charge, how often
  it hit the limit and whether it was killed. Needs root and a writable cgroup file system.

A query's latency is the wall-clock time of ``Retriever.retrieve``: embed the question, score the
passages and facts, seed and run Personalized PageRank (the local walk, the default), rank the
candidates. Snapshots are loaded once beforehand, as the query service does.

Targets on the 2-core machine: p50 at most 15 ms at MuSiQue scale; at 100,000 passages p50 at most
30 ms and at most twice the MuSiQue-scale p50, p95 at most 60 ms, RSS at most 3 GB, load at most
5 s, re-export after a one-document deletion at most 30 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory import peak_rss_mb
from synthetic import synthetic_documents_and_records

from lightfoot_pipeline import operations
from lightfoot_pipeline.evaluation.evaluate import ensure_dataset_indexed
from lightfoot_pipeline.evaluation.parity import local_settings, retrieval_parity
from lightfoot_pipeline.ingest.dataset import bundled_sample_dir, load_questions
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.models.embedder import HashingEmbedder, SentenceTransformerEmbedder
from lightfoot_pipeline.permissions.principals import OPERATOR_PRINCIPAL, Principal
from lightfoot_pipeline.permissions.views import ViewCache
from lightfoot_pipeline.retrieval.retrieve import Retriever, query_thread_limits
from lightfoot_pipeline.snapshot.collect import with_fact_index
from lightfoot_pipeline.snapshot.export import export_snapshot, publish_checked
from lightfoot_pipeline.snapshot.format import load_snapshot
from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store

# BLAS and torch on one thread each, as the query service runs them, from the first measurement to
# the end of the process (which only measures queries after it).
HELD = contextlib.ExitStack()

MUSIQUE_PASSAGES = 11402
WARM_UP = 5


def measure(retriever: Retriever, questions: list[str], n_queries: int) -> dict:
    """Latency percentiles of n_queries retrievals cycling through the questions (after a warm-up)."""
    for question in questions[:WARM_UP]:
        retriever.retrieve(question, rerank=False)
    totals, cpu, parts, iterations, proofs = [], [], {"embed": [], "seed": [], "pagerank": []}, [], []
    load_before = os.getloadavg()[0]
    for i in range(n_queries):
        question = questions[i % len(questions)]
        started, cpu_started = time.perf_counter(), time.thread_time()
        result = retriever.retrieve(question, rerank=False)
        totals.append((time.perf_counter() - started) * 1000.0)
        cpu.append((time.thread_time() - cpu_started) * 1000.0)
        for name in parts:
            parts[name].append(result.timings_ms[name])
        iterations.append(result.pagerank["edge_visits"] or 0)
        proofs.append(result.pagerank.get("proof"))
    snap = retriever.snapshot
    return {
        "p50_ms": round(float(np.percentile(totals, 50)), 2),
        "p95_ms": round(float(np.percentile(totals, 95)), 2),
        # CPU time of the querying thread; the larger products run half on a second thread
        # (see rowsplit.py), whose time this leaves out.
        "cpu_p50_ms": round(float(np.percentile(cpu, 50)), 2),
        "cpu_p95_ms": round(float(np.percentile(cpu, 95)), 2),
        "n_queries": n_queries,
        "p50_breakdown_ms": {name: round(float(np.median(values)), 2) for name, values in parts.items()},
        "pagerank_edge_visits_p50": float(np.median(iterations)),
        **proof_shares(proofs),
        "walk": retriever.settings.walk,
        "epsilon": retriever.settings.epsilon,
        "fact_index_groups": 0 if snap.fact_index is None else len(snap.fact_index.offsets) - 1,
        "embedder": retriever.embedder.model_id,
        "passages": snap.passages.height,
        "entities": snap.entities.height,
        "facts": snap.facts.height,
        "graph_entries": int(snap.adjacency.nnz),
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }


def proof_shares(proofs: list[dict | None]) -> dict:
    """Of the queries the local walk ranked: the share proven at the first epsilon, the share that
    pushed on to a smaller one, and the share left to the exact walk (graph.ranked_pagerank)."""
    proofs = [p for p in proofs if p is not None]
    if not proofs:
        return {}
    n = len(proofs)
    exact = sum(p["walk"] == "exact" for p in proofs)
    refined = sum(p["walk"] == "local" and p["rounds"] > 1 for p in proofs)
    return {"proof": {"queries": n, "proven_at_first_epsilon": round((n - exact - refined) / n, 4),
                      "refined": round(refined / n, 4), "exact_walk": round(exact / n, 4),
                      "ranks": proofs[0]["ranks"]}}


def walk_cost(retriever: Retriever, questions: list[str], compare: bool = True) -> dict:
    """The walk alone, question by question in one loop so that both see the same load: the local
    walk's plain push at the first epsilon (the walk before its proof) beside the proven walk that
    retrieval runs; with ``compare``, how many proven top 10s equal the exact walk's."""
    from lightfoot_pipeline.retrieval.retrieve import top_indices

    graph, plain_ms, proven_ms, equal, proofs = retriever.graph, [], [], 0, []
    for question in questions:
        vector = retriever.question_vector(question)
        seeds = retriever.seeds(retriever.dense_scores(vector),
                                retriever.similar_facts(vector, retriever.settings.top_facts))
        if not seeds.sum() > 0:
            continue
        started = time.perf_counter()
        graph.local_pagerank(seeds)
        plain_ms.append((time.perf_counter() - started) * 1000.0)
        started = time.perf_counter()
        proven = retriever.walk(seeds)
        proven_ms.append((time.perf_counter() - started) * 1000.0)
        proofs.append(proven.proof)
        if compare:
            exact = graph.personalized_pagerank(seeds, tolerance=retriever.settings.tolerance)
            equal += list(top_indices(graph.passage_scores(proven.scores), 10)) == list(
                top_indices(graph.passage_scores(exact.scores), 10))
    figures = {"questions": len(plain_ms),
               "plain_push_ms": {"p50": round(float(np.percentile(plain_ms, 50)), 2),
                                 "p95": round(float(np.percentile(plain_ms, 95)), 2)},
               "proven_walk_ms": {"p50": round(float(np.percentile(proven_ms, 50)), 2),
                                  "p95": round(float(np.percentile(proven_ms, 95)), 2)},
               **proof_shares(proofs), "load_average_1m": round(os.getloadavg()[0], 2)}
    if compare:
        figures["top10_equal_to_exact_walk"] = equal
    return figures


def walk_equality(snapshot, embedder, questions: list[str]) -> dict:
    """How many questions get the exact walk's top 10 (and 30) passages, in its order, from the
    default retrieval (the local walk, proven), beside the local walk's plain push at the first
    epsilon; the exact walk runs at the retrieval's tolerance, and at 1e-11 as a check of it."""
    from lightfoot_pipeline.retrieval.retrieve import RetrievalSettings, top_indices

    local = Retriever(snapshot, embedder)
    exact = Retriever(snapshot, embedder, settings=RetrievalSettings(walk="exact"))
    counts = {"questions": len(questions), "top10_equal": 0, "top30_equal": 0, "plain_push_top10_equal": 0,
              "exact_walk_top30_equal_to_1e-11": 0}
    proofs = []
    for question in questions:
        vector = local.question_vector(question)
        mine = local.retrieve(question, rerank=False, vector=vector)
        theirs = exact.retrieve(question, rerank=False, vector=vector)
        ours, reference = [h.chunk_id for h in mine.passages], [h.chunk_id for h in theirs.passages]
        counts["top10_equal"] += ours[:10] == reference[:10]
        counts["top30_equal"] += ours == reference
        proofs.append(mine.pagerank.get("proof"))
        seeds = local.seeds(local.dense_scores(vector), local.similar_facts(vector, local.settings.top_facts))
        if seeds.sum() > 0:
            graph = local.graph
            plain = top_indices(graph.passage_scores(graph.local_pagerank(seeds).scores), 10)
            fixed = graph.personalized_pagerank(seeds, tolerance=1e-11, max_iterations=3000)
            walked = top_indices(graph.passage_scores(exact.walk(seeds).scores), 30)
            counts["plain_push_top10_equal"] += list(plain) == list(walked[:10])
            counts["exact_walk_top30_equal_to_1e-11"] += list(walked) == list(
                top_indices(graph.passage_scores(fixed.scores), 30))
        else:
            counts["plain_push_top10_equal"] += 1
            counts["exact_walk_top30_equal_to_1e-11"] += 1
    return {**counts, **proof_shares(proofs)}


def sample_scale(store: Store, n_queries: int, parity: bool) -> dict:
    embedder = SentenceTransformerEmbedder()
    built = ensure_dataset_indexed(store, bundled_sample_dir(), embedder)
    if built["built"]:
        print(f"  built the sample store in {built['seconds']}s", file=sys.stderr)
    retriever = serving_retriever(store, embedder)
    dev = load_questions(bundled_sample_dir() / "questions-dev.jsonl")
    figures = measure(retriever, [q.question for q in dev], n_queries)
    print("  the exact walk's top 10 on the sample's 100 questions", file=sys.stderr)
    held_out = load_questions(bundled_sample_dir() / "questions-heldout.jsonl")
    figures["walk_equality"] = walk_equality(retriever.snapshot, embedder, [q.question for q in dev + held_out])
    if parity:
        print("  recall parity of the local walk and indexed seeding with the exact walk", file=sys.stderr)
        indexed = with_fact_index(retriever.snapshot)
        figures["recall_parity"] = retrieval_parity(indexed, embedder, dev, {
            "local_walk": local_settings(seeding="exact"),
            "indexed_seeding": local_settings(walk="exact"),
            "local_walk_indexed_seeding": local_settings(),
        })
    return figures


def progress_line(step: str, done: int, total: int) -> None:
    if done >= total:
        print(f"    {step}: {done:,}/{total:,}", file=sys.stderr)


def serving_retriever(store: Store, embedder) -> Retriever:
    """A retriever over a freshly exported snapshot, warmed up and threaded as the query service runs."""
    started = time.perf_counter()
    info = export_snapshot(store, embedder, progress=progress_line)
    print(f"  snapshot {info.snapshot_id} in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    retriever = Retriever(load_snapshot(store, info.snapshot_id), embedder)
    HELD.enter_context(query_thread_limits())  # for the rest of this process: it only queries
    retriever.warm_up()
    return retriever


def synthetic_questions(records: dict[str, dict], n: int, seed: int) -> list[str]:
    """Questions built from the corpus's facts, worded like MuSiQue's single hops."""
    rng = random.Random(seed)
    facts = [f for r in records.values() for f in r["facts"]]
    picked = rng.sample(facts, min(n, len(facts)))
    forms = ("Who {p} {o}?", "What {p} {o}?", "{s} {p} what?")
    return [rng.choice(forms).format(s=s, p=p, o=o) for s, p, o, *_ in picked]


def synthetic_store(store: Store, passages: int, seed: int = 0) -> dict[str, dict]:
    """The synthetic corpus's store (built when missing) and its extraction records."""
    documents, records = synthetic_documents_and_records(passages, seed)
    if not store.exists():
        started = time.perf_counter()
        operations.ingest(store, documents, ReplayExtractor(records), HashingEmbedder(dim=384))
        print(f"  built the synthetic store in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return records


def musique_scale(store: Store, n_queries: int, seed: int = 0) -> dict:
    records = synthetic_store(store, MUSIQUE_PASSAGES, seed)
    retriever = serving_retriever(store, HashingEmbedder(dim=384))
    questions = synthetic_questions(records, 200, seed)
    figures = measure(retriever, questions, n_queries)
    print("  the exact walk's top 10 on the 200 questions", file=sys.stderr)
    figures["walk_equality"] = walk_equality(retriever.snapshot, retriever.embedder, questions)
    figures["walk_cost"] = walk_cost(retriever, questions, compare=False)
    return figures


def resident_split_mb() -> dict:
    """This process's resident memory now, in MB: anonymous pages and pages of mapped files (Linux)."""
    fields = {"RssAnon:": "rss_anon_mb", "RssFile:": "rss_file_mb"}
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name = line.split(maxsplit=1)[0] if line else ""
        if name in fields:
            found[fields[name]] = round(int(line.split()[1]) / 1024.0, 1)
    return found


def query_replica(store_uri: str, questions_file: Path, n_queries: int, exact_path: bool | None = None) -> dict:
    """Run in a child process: load the published snapshot and time queries, as a replica would.
    The questions come from a file the parent wrote, so that the child's resident memory is the
    replica's, not the synthetic corpus's it would take to make them. With ``exact_path``, also
    compare each question's top 10 with the exact path's (:func:`exact_path_equality`); with
    ``exact_path=False``, no exact walk runs at all (at 1M it takes seconds a question)."""
    embedder = HashingEmbedder(dim=384)
    HELD.enter_context(query_thread_limits())  # for the rest of this process: it only queries
    started, cpu_started = time.perf_counter(), time.process_time()
    snapshot = load_snapshot(Store(store_uri))
    load_s, load_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    loaded = resident_split_mb()
    retriever = Retriever(snapshot, embedder)
    retriever.warm_up()
    warm_up_s = time.perf_counter() - started - load_s
    questions = json.loads(questions_file.read_text())
    figures = measure(retriever, questions, n_queries)
    figures["walk_cost"] = walk_cost(retriever, questions, compare=exact_path is not False)
    figures.update(load_s=round(load_s, 3), load_cpu_s=round(load_cpu_s, 3), warm_up_s=round(warm_up_s, 3),
                   rss_mb=peak_rss_mb(), after_load=loaded, after_queries=resident_split_mb())
    if exact_path:
        figures["exact_path"] = exact_path_equality(retriever, questions)
    return figures


def exact_path_equality(retriever: Retriever, questions: list[str]) -> dict:
    """How many questions get, from the default retrieval, the top 10 passages (in order) of the
    exact path: exact seeding (every passage and fact scored) and exact PageRank over the whole
    graph, at the retrieval's tolerance."""
    from lightfoot_pipeline.retrieval.retrieve import RetrievalSettings

    exact = Retriever(retriever.snapshot, retriever.embedder, settings=RetrievalSettings(walk="exact", seeding="exact"))
    equal, differing, seconds = 0, [], []
    for number, question in enumerate(questions):
        vector = retriever.question_vector(question)
        ours = [h.chunk_id for h in retriever.retrieve(question, rerank=False, vector=vector).passages[:10]]
        started = time.perf_counter()
        theirs = [h.chunk_id for h in exact.retrieve(question, rerank=False, vector=vector).passages[:10]]
        seconds.append(time.perf_counter() - started)
        if ours == theirs:
            equal += 1
        else:
            differing.append({"question": number, "same_set": set(ours) == set(theirs),
                              "overlap": len(set(ours) & set(theirs))})
    return {"questions": len(questions), "top10_equal": equal, "share": round(equal / max(len(questions), 1), 4),
            "differing": differing[:20], "exact_path_p50_s": round(float(np.median(seconds)), 3) if seconds else None}


def export_child(store_uri: str, restage: bool = False) -> dict:
    """Run in a child process: publish a snapshot of the store's state unless the published one
    holds it (or with ``restage``), with its time and this process's peak memory."""
    started, cpu_started = time.perf_counter(), time.process_time()
    report = publish_checked(Store(store_uri), HashingEmbedder(dim=384), (), progress=progress_line, restage=restage)
    return {"snapshot": report.info.snapshot_id, "exported": report.staged,
            "export_s": round(time.perf_counter() - started, 1), "export_cpu_s": round(time.process_time() - cpu_started, 1),
            "export_peak_mb": peak_rss_mb(), "counts": report.info.counts}


def _child(*arguments: str, preexec_fn=None) -> dict:
    child = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True, preexec_fn=preexec_fn)
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(arguments[:2])} failed ({child.returncode}): {child.stderr[-2000:]}")
    return json.loads(child.stdout)


def replicas_under_limits(store_uri: str, questions: str, n_queries: int, limits: list[int]) -> list[dict]:
    """The replica run without a limit, under each of ``limits`` (MiB, a memory cgroup as a pod's:
    benchmarks/memory_limit.py), and without one again, each from a cold page cache (the
    snapshot's files evicted first, so that a limited replica is charged for what it reads)."""
    from memory_limit import evict, memory_limit

    snapshot = Path(store_uri) / "snapshots"
    runs = []
    for limit in [None, *limits, None]:
        evict(snapshot)
        arguments = ("--child-replica", store_uri, "--questions", questions, "--queries", str(n_queries),
                     "--no-exact-path")
        print(f"  replica {'without a limit' if limit is None else f'under {limit} MiB'}", file=sys.stderr)
        if limit is None:
            figures = _child(*arguments)
            runs.append({"memory_limit_mb": None, **_replica_summary(figures)})
            continue
        with memory_limit(limit) as group:
            try:
                figures = _replica_summary(_child(*arguments, preexec_fn=group.join))
            except RuntimeError as err:  # killed at the limit: say so
                figures = {"failed": str(err)[:300]}
            runs.append({**figures, **group.figures()})
    return runs


def _replica_summary(figures: dict) -> dict:
    return {key: figures[key] for key in ("p50_ms", "p95_ms", "cpu_p50_ms", "rss_mb", "after_queries",
                                          "p50_breakdown_ms", "load_average_1m") if key in figures}


def kept_stores(pairs: list[tuple[str, str]], n_queries: int, exact_path: bool = True, restage: bool = False,
                limits: list[int] | None = None) -> dict:
    """Each kept store's export (when its published snapshot is not current, or with ``restage``)
    and replica, one after the other; each later store's p50 against the first's, of the same run."""
    result: dict = {}
    first = None
    for store_uri, questions in pairs:
        label = Path(store_uri).resolve().as_posix()
        print(f"kept store {label}", file=sys.stderr)
        export = _child("--child-export", store_uri, *(["--restage"] if restage else []))
        figures = {"export": export, "load_average_1m_before": round(os.getloadavg()[0], 2)}
        figures.update(_child("--child-replica", store_uri, "--questions", questions, "--queries", str(n_queries),
                              "--exact-path" if exact_path else "--no-exact-path"))
        if limits:
            figures["under_limits"] = replicas_under_limits(store_uri, questions, n_queries, limits)
        if first is None:
            first = figures
        else:
            for name in ("p50_ms", "cpu_p50_ms"):
                figures[f"{name}_ratio_to_first"] = round(figures[name] / first[name], 2)
        result[label] = figures
    return result


def large_scale(store: Store, passages: int, n_queries: int, seed: int = 0) -> dict:
    records = synthetic_store(store, passages, seed)
    questions_file = Path(store.uri).parent / f"questions-{passages}.json"
    questions_file.write_text(json.dumps(synthetic_questions(records, 200, seed)))
    del records
    embedder = HashingEmbedder(dim=384)
    started = time.perf_counter()
    info = export_snapshot(store, embedder, progress=progress_line)
    export_s = time.perf_counter() - started
    print(f"  snapshot {info.snapshot_id} in {export_s:.1f}s", file=sys.stderr)
    child = subprocess.run(
        [sys.executable, __file__, "--child-replica", store.uri, "--questions", str(questions_file),
         "--queries", str(n_queries)], check=True, capture_output=True, text=True)
    figures = json.loads(child.stdout)
    live = sorted(live_doc_ids(store))
    doomed = random.Random(len(live)).choice(live)
    started = time.perf_counter()
    operations.delete(store, [doomed])
    delete_s = time.perf_counter() - started
    started, cpu_started = time.perf_counter(), time.process_time()
    after = export_snapshot(store, embedder, progress=progress_line)
    reexport_s, reexport_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    # The store fingerprint that names the snapshot is part of every export; timed again alone.
    started, cpu_started = time.perf_counter(), time.process_time()
    fingerprint(store)
    figures.update(export_s=round(export_s, 2), deleted_doc=doomed, delete_s=round(delete_s, 3),
                   reexport_after_delete_s=round(reexport_s, 2), reexport_after_delete_cpu_s=round(reexport_cpu_s, 2),
                   store_fingerprint_s=round(time.perf_counter() - started, 2),
                   store_fingerprint_cpu_s=round(time.process_time() - cpu_started, 2),
                   reexport_embedded=after.counts.get("embedded"), passages=passages,
                   snapshot_passages=info.counts.get("passages"), snapshot_facts=info.counts.get("facts"))
    return figures


VIEW_PRINCIPALS = (Principal("public-reader", ()), Principal("staff-member", ("staff",)),
                   Principal("counsel", ("legal",)), Principal("partner", ("legal", "staff")))
READER_SETS = (("public",), ("staff",), ("legal",), ("legal", "staff"))


def resident_mb() -> float:
    """This process's resident memory now, in MB (Linux's VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def snapshot_bytes(store: Store, snapshot_id: str) -> int:
    folder = Path(store.uri) / "snapshots" / snapshot_id
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def timed_export(store: Store, embedder) -> tuple[object, float]:
    started = time.perf_counter()
    info = export_snapshot(store, embedder)
    return info, time.perf_counter() - started


def views(store: Store, passages: int, n_queries: int, seed: int = 0) -> dict:
    """The views section (see the module docstring)."""
    records = synthetic_store(store, passages, seed)
    embedder = HashingEmbedder(dim=384)
    doc_ids = sorted(live_doc_ids(store))
    operations.set_readers(store, {d: ("public",) for d in doc_ids}, reason="benchmark: every document public")
    export_snapshot(store, embedder)  # every vector embedded once: both timed exports below reuse them
    # 1 reader set: a re-export after a readers-only commit that leaves every document public
    operations.set_readers(store, {doc_ids[0]: ("public", "staff")}, reason="benchmark: still public")
    whole_info, whole_export_s = timed_export(store, embedder)
    rng = random.Random(seed)
    readers = {d: rng.choice(READER_SETS) for d in doc_ids}
    operations.set_readers(store, readers, reason="benchmark: four reader sets")
    info, export_s = timed_export(store, embedder)  # 4 reader sets: the same re-export, with access tables
    snapshot = load_snapshot(store, info.snapshot_id)
    cache = ViewCache(snapshot)
    build = {}
    for principal in VIEW_PRINCIPALS:
        before = resident_mb()
        started = time.perf_counter()
        view = cache.view(principal)
        build[principal.name] = {"build_s": round(time.perf_counter() - started, 3),
                                 "documents": len(view.documents or doc_ids), "passages": view.snapshot.passages.height,
                                 "facts": view.snapshot.facts.height, "resident_mb_added": round(resident_mb() - before, 1)}
    HELD.enter_context(query_thread_limits())  # for the rest of this process: it only queries
    whole = Retriever(snapshot, embedder)
    whole.warm_up()
    retrievers = {}
    for principal in VIEW_PRINCIPALS:
        retrievers[principal.name] = Retriever(cache.view(principal).snapshot, embedder)
        retrievers[principal.name].warm_up()
    questions = synthetic_questions(records, 200, seed)
    plain, viewed = [], []
    load_before = os.getloadavg()[0]
    for i in range(n_queries):
        question = questions[i % len(questions)]
        started = time.perf_counter()
        whole.retrieve(question, rerank=False)
        plain.append((time.perf_counter() - started) * 1000.0)
        principal = VIEW_PRINCIPALS[i % len(VIEW_PRINCIPALS)]
        started = time.perf_counter()
        view = cache.view(principal)  # what a request pays: the principal's view, found by its reader set
        retrievers[principal.name].retrieve(question, rerank=False)
        assert view.snapshot is retrievers[principal.name].snapshot
        viewed.append((time.perf_counter() - started) * 1000.0)
    figures = {
        "passages": passages, "documents": len(doc_ids), "n_queries": n_queries,
        "export_s": {"1_reader_set": round(whole_export_s, 2), "4_reader_sets": round(export_s, 2),
                     "ratio": round(export_s / whole_export_s, 2)},
        "snapshot_mb": {"1_reader_set": round(snapshot_bytes(store, whole_info.snapshot_id) / 2**20, 1),
                        "4_reader_sets": round(snapshot_bytes(store, info.snapshot_id) / 2**20, 1)},
        "reader_sets": info.counts.get("reader_sets"),
        "view_build": build,
        "p50_ms": {"whole": round(float(np.percentile(plain, 50)), 2), "views": round(float(np.percentile(viewed, 50)), 2)},
        "p95_ms": {"whole": round(float(np.percentile(plain, 95)), 2), "views": round(float(np.percentile(viewed, 95)), 2)},
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    figures["snapshot_mb"]["ratio"] = round(figures["snapshot_mb"]["4_reader_sets"] / figures["snapshot_mb"]["1_reader_set"], 2)
    figures["p50_ratio"] = round(figures["p50_ms"]["views"] / figures["p50_ms"]["whole"], 2)
    figures["revocation"] = revocation(store, embedder, readers, questions)
    return figures


def revocation(store: Store, embedder, readers: dict[str, tuple[str, ...]], questions: list[str]) -> dict:
    """Seconds from taking a document away from staff to a staff query that no longer ranks it."""
    staff = VIEW_PRINCIPALS[1]
    served = Retriever(ViewCache(load_snapshot(store)).view(staff).snapshot, embedder)
    target, question = None, None
    for candidate in questions:  # a question whose top passage staff may read only through "staff"
        top = served.retrieve(candidate, top_k=1, rerank=False).passages
        if top and readers.get(top[0].doc_id) == ("staff",):
            target, question = top[0].doc_id, candidate
            break
    if target is None:
        return {"skipped": "no question ranks a staff-only document first"}
    clock = time.perf_counter()
    operations.set_readers(store, {target: ("legal",)}, reason="benchmark: revoke staff")
    committed = time.perf_counter()
    info = export_snapshot(store, embedder)
    exported = time.perf_counter()
    snapshot = load_snapshot(store, info.snapshot_id)
    loaded = time.perf_counter()
    view = ViewCache(snapshot).view(staff)
    retriever = Retriever(view.snapshot, embedder)
    ranked = retriever.retrieve(question, rerank=False).passages
    answered = time.perf_counter()
    assert all(hit.doc_id != target for hit in ranked), "the revoked document is still served to staff"
    assert ViewCache(snapshot).view(OPERATOR_PRINCIPAL).documents is None
    return {"total_s": round(answered - clock, 2), "commit_s": round(committed - clock, 3),
            "export_s": round(exported - committed, 2), "load_s": round(loaded - exported, 3),
            "view_and_query_s": round(answered - loaded, 3), "watch_interval_s": 2.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200, help="timed queries per scale (default 200)")
    parser.add_argument("--json", default=None, help="write the result here")
    parser.add_argument("--work", default=None, help="keep the stores in this directory (reused on the next run)")
    parser.add_argument("--sample-store", default=None, help="a store that holds (or will hold) the sample")
    parser.add_argument("--skip-sample", action="store_true")
    parser.add_argument("--skip-musique", action="store_true")
    parser.add_argument("--skip-scale", action="store_true", help="leave out the --passages scale")
    parser.add_argument("--skip-parity", action="store_true", help="leave out the recall parity on the sample")
    parser.add_argument("--skip-views", action="store_true", help="leave out the permission views")
    parser.add_argument("--views-passages", type=int, default=MUSIQUE_PASSAGES,
                        help=f"passages of the views' synthetic store (default {MUSIQUE_PASSAGES:,})")
    parser.add_argument("--passages", type=int, default=100_000, help="passages of the large scale (default 100,000)")
    parser.add_argument("--kept", nargs=2, action="append", metavar=("STORE", "QUESTIONS"), default=None,
                        help="a kept store and a JSON list of questions: measure its export and replica (repeatable)")
    parser.add_argument("--write-questions", nargs=2, metavar=("PASSAGES", "FILE"), default=None,
                        help="write the synthetic corpus's questions at PASSAGES passages to FILE, and stop")
    parser.add_argument("--child-replica", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-export", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--exact-path", action="store_true", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-exact-path", action="store_false", dest="exact_path",
                        help="with --kept: leave out the comparisons with the exact path and the exact walk")
    parser.add_argument("--questions", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--memory-limit", type=int, action="append", default=None, metavar="MIB",
                        help="with --kept: also run each replica under this memory limit (a memory cgroup, as a "
                             "pod's; repeat for several), from a cold page cache, between two runs without one")
    parser.add_argument("--restage", action="store_true",
                        help="with --kept: export each store again even when its published snapshot is current "
                             "(its vectors reused; after a change to what a snapshot holds)")
    args = parser.parse_args()
    if args.child_replica:
        print(json.dumps(query_replica(args.child_replica, args.questions, args.queries, args.exact_path)))
        return 0
    if args.child_export:
        print(json.dumps(export_child(args.child_export, args.restage)))
        return 0
    if args.write_questions:
        passages, target = int(args.write_questions[0]), Path(args.write_questions[1])
        _, records = synthetic_documents_and_records(passages, 0)
        target.write_text(json.dumps(synthetic_questions(records, 200, 0)))
        print(f"wrote {target}")
        return 0
    if args.kept:
        result = {"kept": kept_stores([(store, questions) for store, questions in args.kept], args.queries,
                                      args.exact_path is not False, args.restage, args.memory_limit)}
        for label, figures in result["kept"].items():
            print(f"{label}: p50 {figures['p50_ms']} ms (ratio {figures.get('p50_ms_ratio_to_first', 1.0)}), "
                  f"peak {figures['rss_mb']} MB, after queries {figures['after_queries']}, "
                  f"exact path {figures.get('exact_path', {}).get('top10_equal', '-')} top 10s equal, "
                  f"export {figures['export']}")
        write_result(result, args.json)
        return 0
    if args.queries < 1:
        parser.error("--queries must be at least 1")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="lightfoot-latency-"))
    result: dict = {}
    try:
        if not args.skip_sample:
            print("sample scale (bundled MuSiQue sample, all-MiniLM-L6-v2)", file=sys.stderr)
            result["sample"] = sample_scale(Store(args.sample_store or str(work / "sample")), args.queries,
                                            not args.skip_parity)
            if "recall_parity" in result["sample"]:
                result["recall_parity"] = result["sample"].pop("recall_parity")
        if not args.skip_musique:
            print(f"MuSiQue scale (synthetic, {MUSIQUE_PASSAGES:,} passages, hashing embedder)", file=sys.stderr)
            result["musique_scale"] = musique_scale(Store(str(work / "musique")), args.queries)
        if not args.skip_views:
            print(f"permission views (synthetic, {args.views_passages:,} passages, hashing embedder)", file=sys.stderr)
            result["views"] = views(Store(str(work / f"views-{args.views_passages}")), args.views_passages,
                                    args.queries)
        if not args.skip_scale:
            print(f"large scale (synthetic, {args.passages:,} passages, hashing embedder)", file=sys.stderr)
            key = "scale_100k" if args.passages == 100_000 else f"scale_{args.passages // 1000}k"
            result[key] = large_scale(Store(str(work / f"synthetic-{args.passages}")), args.passages,
                                               args.queries)
            if "musique_scale" in result:
                for name in ("p50_ms", "cpu_p50_ms"):
                    result[key][f"{name}_ratio_to_musique_scale"] = round(
                        result[key][name] / result["musique_scale"][name], 2)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    for name, figures in result.items():
        if name == "views":
            print(f"views          p50 {figures['p50_ms']['views']:7.2f} ms beside {figures['p50_ms']['whole']:.2f} ms "
                  f"whole ({figures['p50_ratio']}x); export {figures['export_s']}; size MB {figures['snapshot_mb']}; "
                  f"revocation {figures['revocation']}; load {figures['load_average_1m']}")
            continue
        if name == "recall_parity":
            print(f"recall parity  {json.dumps({k: v for k, v in figures.items() if k != 'questions'})}")
            continue
        print(f"{name:<14} p50 {figures['p50_ms']:7.2f} ms   p95 {figures['p95_ms']:7.2f} ms   "
              f"(CPU p50 {figures['cpu_p50_ms']:.2f} ms)   "
              f"({figures['passages']:,} passages, {figures['graph_entries']:,} graph entries, "
              f"{figures['pagerank_edge_visits_p50']:.0f} edges walked; p50 parts {figures['p50_breakdown_ms']}; "
              f"load {figures['load_average_1m']})")
    write_result(result, args.json)
    return 0


def write_result(result: dict, path: str | None) -> None:
    """The run's figures as JSON at ``path`` (when given)."""
    if path:
        Path(path).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
