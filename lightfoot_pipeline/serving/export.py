"""Serving snapshots exported from the store: written, published, pruned, and removed when they
hold erased text.

:func:`export_snapshot` writes the store's committed state as a new snapshot directory (the
format is in snapshot.py), publishes it by replacing the ``latest`` pointer, and prunes the older
ones. Snapshots hold passage text, so a hard erase must reach them too: :func:`erase_from_snapshots`
removes every snapshot that holds an erased document, or the earlier text of a document that was
ingested again, exporting a fresh one first when the current one has to go.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import scipy.sparse as sp

from lightfoot_pipeline.index.facts import fact_text
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.ingest.passages import location_label
from lightfoot_pipeline.serving.graph import build_adjacency
from lightfoot_pipeline.serving.snapshot import (
    MANIFEST_FILE, SnapshotDirectory, SnapshotError, SnapshotInfo, FORMAT_VERSION, embedder_for_models,
    latest_snapshot, passage_text, read_info,
)
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.log import Manifest, StoreError
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES, ENTITIES, FACT_SOURCES, FACTS, MENTIONS, PASSAGE_SOURCES, PASSAGES, SYNONYM_EDGES,
)
from lightfoot_pipeline.store.vectors import UnloadedEmbedder, VectorCache

log = logging.getLogger(__name__)

DEFAULT_KEEP = 3


@dataclass
class _Content:
    entities: pl.DataFrame
    passages: pl.DataFrame
    facts: pl.DataFrame
    evidence: pl.DataFrame
    adjacency: sp.csr_matrix
    passage_vectors: np.ndarray
    fact_vectors: np.ndarray
    edge_counts: dict


def with_locations(passages: pl.DataFrame, sources: pl.DataFrame) -> pl.DataFrame:
    """The passages with their ``location`` for citations (``guide.pdf, page 2``); null for a
    passage of a corpus line, which has none but its doc id."""
    located = passages.join(sources.with_columns(pl.lit(True).alias("located")), on="chunk_id", how="left")
    labels = [location_label(doc_id, page, section) if known else None
              for doc_id, page, section, known in located.select("doc_id", "page", "section", "located").iter_rows()]
    return located.drop("page", "section", "located").with_columns(pl.Series("location", labels, dtype=pl.String))


def _collect(store: Store, manifest: Manifest, embedder: Embedder) -> _Content:
    """Node tables, edges and vectors of the store's committed state."""
    entities = store.read(ENTITIES.name, manifest, columns=["entity_id", "type", "display_name"]).sort("entity_id")
    entities = entities.with_row_index("node").with_columns(pl.col("node").cast(pl.Int64))
    n_entities = entities.height
    passages = store.read(PASSAGES.name, manifest, columns=["chunk_id", "doc_id", "title", "text"])
    sources = store.read(PASSAGE_SOURCES.name, manifest, columns=["chunk_id", "page", "section"])
    passages = with_locations(passages, sources).sort("chunk_id")
    passages = passages.with_row_index("node").with_columns(pl.col("node").cast(pl.Int64) + n_entities)
    entity_index = entities.select("entity_id", pl.col("node").alias("entity_node"))
    passage_index = passages.select("chunk_id", (pl.col("node") - n_entities).alias("passage_row"))

    mentions = store.read(MENTIONS.name, manifest, columns=["entity_id", "chunk_id"])
    mention_pairs = mentions.join(entity_index, on="entity_id", how="left").join(passage_index, on="chunk_id", how="left")
    if mention_pairs.filter(pl.col("entity_node").is_null() | pl.col("passage_row").is_null()).height:
        raise SnapshotError("mentions name entities or passages that the store does not hold; run the graph stage")
    per_entity = mention_pairs.group_by("entity_id").agg(pl.col("chunk_id").n_unique().alias("n_passages"))
    entities = entities.join(per_entity, on="entity_id", how="left").with_columns(
        pl.col("n_passages").fill_null(0).cast(pl.Int64)).sort("node")

    aliases = store.read(ALIASES.name, manifest, columns=["name", "type", "entity_id"])
    facts = store.read(FACTS.name, manifest, columns=["fact_id", "subject", "subject_type", "predicate", "object",
                                                      "object_type", "n_sources"]).sort("fact_id")
    ends = aliases.join(entity_index, on="entity_id", how="left").select("name", "type", "entity_node")
    facts = (
        facts.join(ends.rename({"name": "subject", "type": "subject_type", "entity_node": "subject_entity"}),
                   on=["subject", "subject_type"], how="left")
        .join(ends.rename({"name": "object", "type": "object_type", "entity_node": "object_entity"}),
              on=["object", "object_type"], how="left")
        .sort("fact_id")
    )
    if facts.filter(pl.col("subject_entity").is_null() | pl.col("object_entity").is_null()).height:
        raise SnapshotError("facts name subjects or objects that no alias holds; run the graph stage")
    facts = facts.select("fact_id", "subject", "predicate", "object", "subject_entity", "object_entity", "n_sources")

    evidence = store.read(FACT_SOURCES.name, manifest, columns=["fact_id", "chunk_id", "doc_id", "evidence"])
    evidence = evidence.sort(["fact_id", "chunk_id"])

    # Entity–entity edges: one per unordered pair, weighted by how many facts link the pair.
    linked = facts.filter(pl.col("subject_entity") != pl.col("object_entity")).select(
        "fact_id",
        pl.min_horizontal("subject_entity", "object_entity").alias("a"),
        pl.max_horizontal("subject_entity", "object_entity").alias("b"),
    )
    fact_edges = linked.group_by("a", "b").agg(pl.col("fact_id").n_unique().alias("w")).sort("a", "b")
    synonyms = (
        store.read(SYNONYM_EDGES.name, manifest, columns=["entity_a", "entity_b", "similarity"])
        .join(entity_index.rename({"entity_id": "entity_a", "entity_node": "a"}), on="entity_a", how="left")
        .join(entity_index.rename({"entity_id": "entity_b", "entity_node": "b"}), on="entity_b", how="left")
    )
    if synonyms.filter(pl.col("a").is_null() | pl.col("b").is_null()).height:
        raise SnapshotError("synonym edges name entities that the store does not hold; run the graph stage")
    adjacency = build_adjacency(
        n_entities,
        passages.height,
        (mention_pairs.get_column("entity_node").to_numpy(), mention_pairs.get_column("passage_row").to_numpy()),
        (fact_edges.get_column("a").to_numpy(), fact_edges.get_column("b").to_numpy(),
         fact_edges.get_column("w").to_numpy()),
        (synonyms.get_column("a").to_numpy(), synonyms.get_column("b").to_numpy(),
         synonyms.get_column("similarity").to_numpy()),
    )

    texts = [passage_text(t, x) for t, x in passages.select("title", "text").iter_rows()]
    passage_vectors = VectorCache(store, "passage", embedder).vectors(texts)
    fact_texts = [fact_text(s, p, o) for s, p, o in facts.select("subject", "predicate", "object").iter_rows()]
    fact_vectors = VectorCache(store, "fact", embedder).vectors(fact_texts)
    return _Content(
        entities=entities.select("node", "entity_id", "type", "display_name", "n_passages"),
        passages=passages.select("node", "chunk_id", "doc_id", "title", "text", "location"),
        facts=facts,
        evidence=evidence,
        adjacency=adjacency,
        passage_vectors=passage_vectors,
        fact_vectors=fact_vectors,
        edge_counts={"mention": mention_pairs.height, "fact": fact_edges.height, "synonym": synonyms.height},
    )


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _npz(matrix: sp.csr_matrix) -> bytes:
    buffer = io.BytesIO()
    sp.save_npz(buffer, matrix, compressed=False)
    return buffer.getvalue()


def _write_parquet(location: SnapshotDirectory, path: str, frame: pl.DataFrame) -> None:
    buffer = io.BytesIO()
    pq.write_table(frame.to_arrow(), buffer)
    location.write_bytes(path, buffer.getvalue())


def _new_snapshot_id(now: dt.datetime, fingerprint: str) -> str:
    return f"{now:%Y%m%dT%H%M%S%f}Z-{fingerprint[:12]}"


def _register_vector_model(store: Store, embedder: Embedder) -> None:
    """Record a passage/fact vector model other than the index's, so that erasure purges its caches."""
    config = store.manifest().config
    if not config.get("embedder") or config["embedder"] == embedder.model_id:
        return
    entry = {"model": embedder.model_id, "dim": int(embedder.dim)}
    known = config.get("vector_models", {})
    if all(entry in known.get(kind, []) for kind in ("passage", "fact")):
        return
    with store.transaction() as tx:
        vector_models = {k: list(v) for k, v in tx.config.get("vector_models", {}).items()}
        for kind in ("passage", "fact"):
            if entry not in vector_models.setdefault(kind, []):
                vector_models[kind].append(entry)
        tx.config = {**tx.config, "vector_models": vector_models}
        tx.commit("register-vector-model", {"model": embedder.model_id})


def export_snapshot(store: Store, embedder: Embedder, *, keep: int = DEFAULT_KEEP) -> SnapshotInfo:
    """Export the store's committed state as a new snapshot, publish it and prune old ones.

    When the newest snapshot already holds this state (same fingerprint, same models), it is kept
    and returned instead of writing an identical one.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1 (the published snapshot), got {keep}")
    if not store.exists():
        raise SnapshotError(f"no index at {store.uri}: ingest documents before exporting a snapshot")
    _register_vector_model(store, embedder)
    manifest = store.manifest()
    digest = fingerprint(store, manifest).digest
    models = {"embedder": embedder.model_id, "dim": int(embedder.dim),
              "index_embedder": manifest.config.get("embedder")}
    location = SnapshotDirectory(store)
    with location.lock():
        current = latest_snapshot(store)
        if current is not None and current.fingerprint == digest and current.models == models:
            _prune(location, keep)
            return current
        content = _collect(store, manifest, embedder)
        now = dt.datetime.now(dt.timezone.utc)
        snapshot_id = _new_snapshot_id(now, digest)
        counts = {
            "entities": content.entities.height,
            "passages": content.passages.height,
            "documents": content.passages.get_column("doc_id").n_unique(),
            "facts": content.facts.height,
            "fact_evidence": content.evidence.height,
            "nodes": int(content.adjacency.shape[0]),
            "stored_entries": int(content.adjacency.nnz),
            "edges": {k: int(v) for k, v in content.edge_counts.items()},
        }
        info = SnapshotInfo(
            snapshot_id=snapshot_id, uri=location.uri(snapshot_id), fingerprint=digest, store_seq=manifest.seq,
            created_at=now.isoformat(), counts=counts, models=models,
        )
        location.fs.create_dir(location.path(snapshot_id), recursive=True)
        folder = lambda name: location.path(snapshot_id, name)  # noqa: E731
        location.write_bytes(folder("graph.npz"), _npz(content.adjacency))
        _write_parquet(location, folder("entities.parquet"), content.entities)
        _write_parquet(location, folder("passages.parquet"), content.passages)
        _write_parquet(location, folder("facts.parquet"), content.facts)
        _write_parquet(location, folder("fact_evidence.parquet"), content.evidence)
        location.write_bytes(folder("passage_vectors.npy"), _npy(content.passage_vectors))
        location.write_bytes(folder("fact_vectors.npy"), _npy(content.fact_vectors))
        payload = {"format": FORMAT_VERSION, **info.as_dict()}
        payload.pop("uri")
        # The manifest goes last: a directory without one is an export that did not finish.
        location.write_bytes(folder(MANIFEST_FILE), json.dumps(payload, indent=2, sort_keys=True).encode())
        location.publish_pointer(snapshot_id)
        _prune(location, keep)
    return info


def _prune(location: SnapshotDirectory, keep: int) -> list[str]:
    """Remove snapshots beyond the newest ``keep`` complete ones, and unfinished older exports."""
    published = location.pointer()
    ids = location.snapshot_ids()
    complete = [i for i in ids if location.exists(location.path(i, MANIFEST_FILE))]
    kept = set(complete[-keep:])
    if published is not None:
        kept.add(published)
    newest_kept = max(kept) if kept else ""
    removed = []
    for snapshot_id in ids:
        unfinished = snapshot_id not in complete
        if snapshot_id in kept or (unfinished and snapshot_id > newest_kept):
            continue  # an unfinished export newer than everything kept may still be running
        location.remove(snapshot_id)
        removed.append(snapshot_id)
    return removed


# -- erasure ------------------------------------------------------------------------------------


def _holds_any(
    location: SnapshotDirectory, snapshot_id: str, doc_ids: set[str], live: pl.DataFrame | None = None
) -> bool:
    """Whether a snapshot holds any of ``doc_ids`` or, given the store's ``live`` passages
    (doc_id, chunk_id, title), a passage of a live document that the store no longer holds as it
    is: the text that re-ingesting the document replaced."""
    for name in ("passages.parquet", "fact_evidence.parquet"):
        path = location.path(snapshot_id, name)
        if not location.exists(path):
            return True  # cannot tell what an unfinished export holds: treat it as holding them
        replaced_check = live is not None and name == "passages.parquet"
        columns = ["doc_id", "chunk_id", "title"] if replaced_check else ["doc_id"]
        table = pq.read_table(io.BytesIO(location.read_bytes(path)), columns=columns)
        if any(d in doc_ids for d in table.column("doc_id").unique().to_pylist()):
            return True
        if replaced_check:
            held = pl.from_arrow(table).join(live.select("doc_id").unique(), on="doc_id", how="semi")
            if held.join(live, on=["doc_id", "chunk_id", "title"], how="anti", nulls_equal=True).height:
                return True
    return False


def erase_from_snapshots(
    store: Store, doc_ids: Sequence[str], embedder: Embedder | None = None, *, replaced_text: bool = False
) -> int:
    """Remove every snapshot that holds any of ``doc_ids``; return how many were removed.

    Called after a hard erase. With ``replaced_text``, also every snapshot that holds a live
    document's passage in a version the store no longer holds (the text a re-ingest replaced).
    When the published snapshot must go, a fresh one is exported first (with ``embedder``, else the
    snapshot's own embedder, else from cached vectors only), so the service keeps a snapshot to
    answer from. If no fresh one can be made, the pointer is removed with the old snapshot: no
    snapshot may keep an erased document's text.
    """
    wanted = set(doc_ids)
    location = SnapshotDirectory(store)
    if not wanted and not replaced_text:
        return 0
    live = store.read(PASSAGES.name, columns=["doc_id", "chunk_id", "title"]) if replaced_text else None
    with location.lock():
        published = location.pointer()
        doomed = [i for i in location.snapshot_ids() if _holds_any(location, i, wanted, live)]
    if not doomed:
        return 0
    if published in doomed:
        info = read_info(location, published)
        chosen = embedder or embedder_for_models(info.models if info else {})
        if chosen is None and info is not None:
            chosen = UnloadedEmbedder(info.models["embedder"], int(info.models["dim"]))  # cached vectors only
        try:
            if chosen is None:
                raise SnapshotError("the published snapshot names no embedder")
            fresh = export_snapshot(store, chosen, keep=max(DEFAULT_KEEP, 1))
            log.info("exported snapshot %s to replace %s after an erase", fresh.snapshot_id, published)
        except (SnapshotError, StoreError, RuntimeError) as err:
            log.warning("could not export a replacement snapshot (%s); unpublishing %s", err, published)
            with location.lock():
                if location.pointer() == published:
                    location.clear_pointer()
    removed = 0
    with location.lock():
        for snapshot_id in location.snapshot_ids():
            # Snapshots exported since the first look hold the store's passages as they were then or
            # later, so only an erased document can make one of them go.
            if snapshot_id in doomed or _holds_any(location, snapshot_id, wanted):
                if location.pointer() == snapshot_id:
                    location.clear_pointer()
                location.remove(snapshot_id)
                removed += 1
    return removed
