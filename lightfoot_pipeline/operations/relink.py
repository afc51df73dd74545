"""The graph derived again with its link stage spread over steps: prepare, pieces, commit.

What it does is :func:`pipeline.migrate` (the whole graph derived again from the live documents
and extractions, with the given settings and embedder, in one commit), with the links computed in
independent pieces (index/link_pieces.py) that may run in other processes or on other machines:
the Dagster ``relink`` job runs one step per group of pieces, ``lightfoot migrate --pieces`` runs
them one after the other here. The store it commits is the one :func:`pipeline.migrate` commits.

1. :func:`prepare` reads the live names (the forms), gets each one's band keys (the stored
   sketches when the store was built with the same embedder and settings, else computed from the
   cached vectors, embedding the names that have none) and stages them, one file per type.
2. :func:`plan` cuts the work into pieces and steps (link_pieces.plan_pieces, plan_steps).
3. :func:`link_pieces` computes pieces' links from the staged keys and the vectors of their
   candidate pairs, and stages them, one file per piece.
4. :func:`commit` unions the staged links and commits the graph with them, refusing a store that
   changed since step 1 (its store-log seq); then removes the staging area.

The staging area is ``<store>/_lightfoot/relink/<run id>/``. Its files hold live names, so they
never outlive the run: :func:`commit` removes it whether or not it commits, a failed step removes
it (the Dagster job's failure hook), a step that finds it gone stops and deletes what it wrote, and
every erasure (erase.py) removes the whole ``_lightfoot/relink/`` folder, so staged names never
outlive an erasure even when a run was killed before it could clean up.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import polars as pl
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lightfoot_pipeline.index.documents import derive_forms
from lightfoot_pipeline.index.link_pieces import (
    STAGING,
    LinkPiece,
    PrecomputedLinks,
    RelinkError,
    key_rows,
    piece_links,
    plan_pieces,
    plan_steps,
    type_keys,
    type_label,
    union_links,
)
from lightfoot_pipeline.index.links import LinkRule
from lightfoot_pipeline.index.reconcile import GraphChange, in_names, name_rows, reconcile_graph
from lightfoot_pipeline.models.embedder import Embedder
from lightfoot_pipeline.operations.config import check_config, index_config
from lightfoot_pipeline.operations.migration import COPIED_BY_REBUILD, KEPT_BY_MIGRATION, migrate
from lightfoot_pipeline.settings import IndexSettings, link_piece_size, relink_batch
from lightfoot_pipeline.store.filesystem import (
    delete_folder_quietly,
    delete_quietly,
    open_filesystem,
    read_json,
    write_json,
)
from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES,
    DOCUMENTS,
    FORMS,
    NAME_LINKS,
    NAME_SKETCHES,
    all_specs,
    arrow_frame,
    with_buckets,
)
from lightfoot_pipeline.store.transaction import Transaction
from lightfoot_pipeline.store.vectors import EmbedProgress, UnloadedEmbedder, VectorCache, name_vector_cache

NAME_KEY = ["name", "type"]
KEY_CHUNK = 65_536  # names whose vectors are read, and keys computed, at a time
_RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")


@dataclass
class Prepared:
    """What :func:`prepare` staged: the run, the store state it read, and the names per type."""

    run_id: str
    seq: int  # the store commit the names were read at
    embedder: str
    dim: int
    settings: dict  # IndexSettings.shape_of_index()
    names: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of(cls, value: dict) -> Prepared:
        return cls(**value)


class StagingArea:
    """One run's staged keys and links, under ``<store>/_lightfoot/relink/<run_id>/``."""

    MARK = "prepared.json"

    def __init__(self, store: Store, run_id: str) -> None:
        if not _RUN_ID.fullmatch(run_id):
            raise RelinkError(f"a relink run id is 1 to 128 letters, digits, '.', '_' or '-', not {run_id!r}")
        self.uri = store.path(*STAGING, run_id)
        self.fs, self.root = open_filesystem(self.uri, store.storage_options or None)

    def write(self, kind: str, label: str, frame: pl.DataFrame) -> None:
        self.fs.create_dir(f"{self.root}/{kind}", recursive=True)
        pq.write_table(frame.to_arrow(), f"{self.root}/{kind}/{label}.parquet", filesystem=self.fs)

    def read(self, kind: str, label: str, names: list[str] | None = None) -> pl.DataFrame:
        """A staged file; ``names``: only its rows of these names (a filter on the read)."""
        wanted = None if names is None else pc.field("name").isin(names)
        try:
            return arrow_frame(pq.read_table(f"{self.root}/{kind}/{label}.parquet", filesystem=self.fs,
                                             filters=wanted))
        except FileNotFoundError:
            raise RelinkError(f"relink staging {self.uri}: no {kind} {label!r} (the run was cleaned up, or a "
                              "step did not finish); run the job again") from None

    def discard(self, kind: str, label: str) -> None:
        delete_quietly(self.fs, f"{self.root}/{kind}/{label}.parquet")

    def write_json(self, name: str, payload) -> None:
        write_json(self.fs, f"{self.root}/{name}", payload)

    def read_json(self, name: str):
        try:
            return read_json(self.fs, f"{self.root}/{name}")
        except FileNotFoundError:
            raise RelinkError(f"relink staging {self.uri}: no {name} (the run was cleaned up); run the job "
                              "again") from None

    def alive(self) -> bool:
        """Whether the area is prepared and not removed."""
        return self.fs.get_file_info(f"{self.root}/{self.MARK}").type == pafs.FileType.File

    def remove(self) -> None:
        """Delete the area: its mark first, so that a step still writing sees it gone."""
        delete_quietly(self.fs, f"{self.root}/{self.MARK}")
        delete_folder_quietly(self.fs, self.root)


def prepare(store: Store, embedder: Embedder, settings: IndexSettings, run_id: str,
            progress: EmbedProgress | None = None) -> Prepared:
    """Stage every live name's band keys, one file per type, and mark the area prepared."""
    manifest = store.manifest()
    if not manifest.seq:
        raise RelinkError(f"no store at {store.uri} to relink")
    store.layout_buckets(manifest)  # an earlier layout is refused, with the hint to migrate it
    rule = LinkRule.of(settings)
    if rule.banding is None:
        raise RelinkError("links that compare every pair (lsh_bands = 0) have no bands to split by; "
                          "run lightfoot migrate without --pieces")
    area = StagingArea(store, run_id)
    area.remove()  # what an earlier attempt of this run left
    names = store.read_columns(FORMS.name, manifest, NAME_KEY).unique()
    if manifest.config == index_config(embedder.model_id, embedder.dim, settings):
        stored = store.read(NAME_SKETCHES.name, manifest, remember=False).select(NAME_SKETCHES.columns)
    else:  # keys from another embedder or banding: computed again
        stored = NAME_SKETCHES.empty().select(NAME_SKETCHES.columns)
    cache = VectorCache(store, "name", embedder, progress)
    prepared = Prepared(run_id, manifest.seq, embedder.model_id, embedder.dim, settings.shape_of_index())
    for (type_,), group in sorted(names.partition_by("type", as_dict=True).items()):
        kept = stored.join(group, on=NAME_KEY, how="semi")
        missing = sorted(group.join(kept, on=NAME_KEY, how="anti").get_column("name").to_list())
        frames = [kept]
        for c0 in range(0, len(missing), KEY_CHUNK):
            chunk = missing[c0 : c0 + KEY_CHUNK]
            frames.append(key_rows(type_, chunk, cache.vectors(chunk), rule))
        keys = pl.concat(frames).sort("name")
        area.write("keys", type_label(type_), keys)
        prepared.names[type_] = keys.height
    area.write_json(StagingArea.MARK, prepared.as_dict())
    return prepared


def plan(store: Store, prepared: Prepared, size: int | None = None) -> list[list[LinkPiece]]:
    """The steps of the run (each a list of pieces of at most ``size`` names x bands, default
    settings.link_piece_size), recorded in the staging area for :func:`commit`."""
    size = link_piece_size() if size is None else size
    pieces = plan_pieces(prepared.names, int(prepared.settings["lsh_bands"]), size)
    StagingArea(store, prepared.run_id).write_json("plan.json", [p.as_dict() for p in pieces])
    return plan_steps(pieces, prepared.names, size)


def link_pieces(store: Store, prepared: Prepared, pieces: Sequence[LinkPiece], settings: IndexSettings) -> dict[str, int]:
    """Compute and stage the links of some pieces; the number of links of each, by label."""
    _same_settings(prepared, settings)
    area = StagingArea(store, prepared.run_id)
    rule = LinkRule.of(settings)
    cache = VectorCache.for_model(store, "name", prepared.embedder, prepared.dim)
    found: dict[str, int] = {}
    for type_ in sorted({p.type for p in pieces}):
        if not area.alive():
            raise RelinkError(f"relink staging {area.uri} was removed (the run failed or was cleaned up)")
        names, keys = type_keys(area.read("keys", type_label(type_)), rule)
        for piece in (p for p in pieces if p.type == type_):
            links = piece_links(piece, names, keys, cache.vectors, rule)
            area.write("links", piece.label, links)
            if not area.alive():  # removed while this piece ran: leave nothing behind
                area.discard("links", piece.label)
                raise RelinkError(f"relink staging {area.uri} was removed (the run failed or was cleaned up)")
            found[piece.label] = links.height
    return found


def commit(store: Store, prepared: Prepared, settings: IndexSettings, n_buckets: int | None = None,
           batch: int | None = None) -> GraphChange:
    """Commit the graph derived again with the staged links (as :func:`pipeline.migrate`), if the
    store has not changed since :func:`prepare`; the staging area is removed either way.

    ``batch`` (default ``$LIGHTFOOT_RELINK_BATCH``, 50,000): a store of more documents has its graph
    derived in a store of its own, ``batch`` documents a commit, and its tables copied in, so that
    no step holds more than a batch's rows (:func:`_derive_in_batches`); a smaller store, ``batch``
    0 or a new bucket count (``n_buckets``): in one transaction, as ``migrate`` does."""
    area = StagingArea(store, prepared.run_id)
    try:
        _same_settings(prepared, settings)
        manifest = store.manifest()
        _unchanged(manifest, prepared, store)
        pieces = [LinkPiece.of(p) for p in area.read_json("plan.json")]
        links = union_links([area.read("links", p.label) for p in pieces])
        batch = relink_batch() if batch is None else batch
        if 0 < batch < store.row_count(DOCUMENTS.name, manifest) and n_buckets in (None, store.n_buckets):
            return _derive_in_batches(store, manifest, prepared, settings, links, area, batch)
        keys = [area.read("keys", type_label(t)) for t in sorted(prepared.names)]
        key_rows = pl.concat(keys) if keys else NAME_SKETCHES.empty().select(NAME_SKETCHES.columns)

        def check(tx: Transaction) -> None:
            _unchanged(tx.manifest, prepared, store)

        linker = PrecomputedLinks(links, key_rows, check)
        return migrate(store, UnloadedEmbedder(prepared.embedder, prepared.dim), settings, n_buckets, linker)
    finally:
        area.remove()


class BatchLinks:
    """The staged links, for a graph derived a batch of documents at a time in a store of its own:
    the links between each batch's added names and the names live then (added or stored before),
    with the added names' band keys. Every link is a function of its two names alone, so each one
    is returned once, in the batch that brings its second name, and the union over the batches is
    the staged set. Refuses added names that were not prepared."""

    def __init__(self, links: pl.DataFrame, area: StagingArea, check) -> None:
        self.links, self.area, self.check = links, area, check
        self.added_total = 0

    def __call__(self, tx: Transaction, added: pl.DataFrame, removed: pl.DataFrame, name_vectors: VectorCache,
                 settings: IndexSettings) -> pl.DataFrame:
        self.check(tx)
        keys = []
        for (type_,), group in sorted(added.select(NAME_KEY).partition_by("type", as_dict=True).items()):
            wanted = group.get_column("name").to_list()
            staged = self.area.read("keys", type_label(type_), names=wanted)
            if staged.height != len(wanted):
                raise RelinkError(f"{len(wanted) - staged.height} live names of type {type_!r} were not prepared; "
                                  "prepare them again")
            keys.append(staged)
        if keys:
            tx.update(NAME_SKETCHES.name, add=with_buckets(pl.concat(keys), NAME_SKETCHES, tx.n_buckets))
        self.added_total += added.height
        ends = [self.links.filter(in_names(self.links, added, end)) for end in ("name_a", "name_b")]
        touching = pl.concat(ends).unique(subset=NAME_LINKS.key)
        others = pl.concat([touching.select(pl.col(end).alias("name"), "type") for end in ("name_a", "name_b")]
                           ).unique().join(added.select(NAME_KEY), on=NAME_KEY, how="anti")
        live = pl.concat([added.select(NAME_KEY), name_rows(tx.rows, ALIASES, others).select(NAME_KEY)])
        return touching.filter(in_names(touching, live, "name_a") & in_names(touching, live, "name_b"))


def _derive_in_batches(store: Store, manifest: Manifest, prepared: Prepared, settings: IndexSettings,
                       links: pl.DataFrame, area: StagingArea, batch: int) -> GraphChange:
    """The graph derived again in a store under the staging area (``shadow/``), ``batch`` documents a
    commit: each batch's documents, readers, passages and extractions copied there as the store holds
    them, their forms derived and the graph brought in line (reconcile_graph, the links from
    :class:`BatchLinks`), so a step holds a batch's rows and what they touch, never the store. After
    any sequence of batches a store equals a fresh build of its documents, so the last one is what
    ``migrate`` derives in one transaction. Its derived tables are then copied into the store a group
    of buckets at a time (Transaction.copy_from) in one store commit, refused if the store changed
    since :func:`prepare` (``manifest``: the store's state, checked unchanged by the caller); the
    documents and the rest ``migrate`` keeps are left as they are."""
    embedder = UnloadedEmbedder(prepared.embedder, prepared.dim)
    name_vectors = name_vector_cache(store, embedder)  # never asked for a vector: the links are staged
    shadow = Store(f"{area.uri}/shadow", n_buckets=store.n_buckets, storage_options=store.storage_options or None)
    doc_ids = sorted(store.read_column(DOCUMENTS.name, manifest, "doc_id").to_list())

    def check(_: Transaction) -> None:
        _unchanged(store.manifest(), prepared, store)

    linker = BatchLinks(links, area, check)
    change: GraphChange | None = None
    for start in range(0, len(doc_ids), batch):
        ids = doc_ids[start:start + batch]
        with shadow.transaction() as tx:
            check_config(tx, settings, embedder)
            for spec in COPIED_BY_REBUILD:
                rows = store.rows(spec.name, "doc_id", ids, manifest)
                tx.update(spec.name, add=with_buckets(rows, spec, tx.n_buckets) if rows.height else None)
            derive_forms(tx, ids)
            done = reconcile_graph(tx, settings, name_vectors, linker=linker)
            tx.commit("relink batch", {"documents": len(ids)})
        change = done if change is None else change.then(done)
    if linker.added_total != sum(prepared.names.values()):
        raise RelinkError(f"the documents hold {linker.added_total} live names, {sum(prepared.names.values())} were "
                          "prepared; prepare them again")
    derived = shadow.manifest()
    kept = {spec.name for spec in KEPT_BY_MIGRATION}
    with store.transaction() as tx:
        _unchanged(tx.manifest, prepared, store)
        tx.config = {}
        check_config(tx, settings, embedder)
        for spec in all_specs():
            if spec.name in tx.manifest.versions and spec.name not in kept:
                tx.copy_from(spec.name, shadow, derived)
        tx.commit("migrate", {"from_layout": tx.manifest.details.get("layout"), "n_buckets": tx.n_buckets,
                              "derived_in_batches": batch})
    return change or GraphChange()


def relink(store: Store, embedder: Embedder, settings: IndexSettings, *, n_buckets: int | None = None,
           size: int | None = None, progress: EmbedProgress | None = None, batch: int | None = None) -> GraphChange:
    """Every step in this process, one piece after another (``lightfoot migrate --pieces``;
    ``batch``: the graph derived that many documents at a time, see :func:`commit`)."""
    run_id = f"local-{uuid.uuid4().hex}"
    area = StagingArea(store, run_id)
    try:
        prepared = prepare(store, embedder, settings, run_id, progress)
        for step in plan(store, prepared, size):
            link_pieces(store, prepared, step, settings)
        return commit(store, prepared, settings, n_buckets, batch)
    finally:
        area.remove()


def _unchanged(manifest: Manifest, prepared: Prepared, store: Store) -> None:
    if manifest.seq != prepared.seq:
        raise RelinkError(f"store {store.uri} changed since its names were prepared (commit {prepared.seq}, now "
                          f"{manifest.seq}); nothing was committed", hint="run the relink again")


def _same_settings(prepared: Prepared, settings: IndexSettings) -> None:
    if settings.shape_of_index() != prepared.settings:
        raise RelinkError(f"the names were prepared for settings {prepared.settings}, not "
                          f"{settings.shape_of_index()}; run the relink again")
