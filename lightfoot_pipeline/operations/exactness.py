"""The exactness check at any size: the components a run changed, derived again and compared.

A whole-store comparison with a fresh rebuild (checks.py: ``compare_with_rebuild``) costs a full
build. This check costs the change. It takes what a run changed from its own commits (the
documents its batch log rows name: the names and facts those documents carry now, and, for the
documents it deleted or replaced, the ones they carried before and the names those were linked
to), and derives every component around them again with the code a fresh build uses
(``index/components.py``, ``index/synonyms.py``, ``index/facts.py``) from the live forms, the
stored name links and the live fact assertions: each component is the closure of its names under
the links at the entity threshold, so a fresh build of the whole store gives it the same rows.
Then it compares, table by table, the derived rows with the store's for those keys: aliases (the
component assignment), entities, mentions, synonym edges and facts, with a digest of each side.

The work is bounded (:class:`ExactnessBounds`): when a run changed more components (or facts)
than the bound, a deterministic sample of them is compared, drawn by the store commit's number
(components, facts and documents from as few of their buckets as hold the sample, so that it
reads few buckets of the tables keyed by them: a component's names still lie in any bucket);
and every check also compares a sample of components and facts the run did not change, so a
corruption anywhere is found by some run's check. The report says which: "compared N of M
changed components (sample), K untouched". Failures name a component (entity id) or fact id and
the table, never a name or a passage.

What it takes as given: the forms (what a fresh build derives from the stored extractions) and
the name links (a function of the two names' vectors; links.py); the whole-store comparison
checks those too.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field

import polars as pl

from lightfoot_pipeline.index.components import components, entity_rows, mention_rows
from lightfoot_pipeline.index.documents import forms_from_extractions
from lightfoot_pipeline.index.facts import fact_rows
from lightfoot_pipeline.index.reconcile import in_names, links_of, name_keys, name_rows, name_statistics
from lightfoot_pipeline.index.synonyms import synonym_edges
from lightfoot_pipeline.settings import IndexSettings
from lightfoot_pipeline.store.batches import ADDED, DELETED, REPLACED
from lightfoot_pipeline.store.digests import digest_frame
from lightfoot_pipeline.store.log import Manifest, StoreError
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import (
    ALIASES,
    BATCH_DOCUMENTS,
    DOCUMENT_KEYS,
    DOCUMENTS,
    ENTITIES,
    EXTRACTIONS,
    FACT_SOURCES,
    FACTS,
    FORMS,
    MENTIONS,
    NAME_LINKS,
    SYNONYM_EDGES,
    TableSpec,
    bucket_of,
)

__all__ = ["COMPARED_TABLES", "ChangeComparison", "ExactnessBounds", "RunChanges", "compare_changes",
           "run_changes", "sample"]

NAME_KEY = ["name", "type"]
# The tables compared, each with the column that names the document, component or fact a row belongs to.
COMPARED_TABLES: dict[str, tuple[TableSpec, tuple[str, ...]]] = {
    FORMS.name: (FORMS, ("doc_id",)),
    FACT_SOURCES.name: (FACT_SOURCES, ("doc_id",)),
    ALIASES.name: (ALIASES, ("entity_id",)),
    ENTITIES.name: (ENTITIES, ("entity_id",)),
    MENTIONS.name: (MENTIONS, ("entity_id",)),
    SYNONYM_EDGES.name: (SYNONYM_EDGES, ("entity_a", "entity_b")),
    FACTS.name: (FACTS, ("fact_id",)),
}


@dataclass(frozen=True)
class ExactnessBounds:
    """How much one check compares at most: beyond ``changed`` components (``changed_facts``
    facts, ``documents`` documents whose forms and fact assertions are derived again from their
    extractions) a run changed, a sample of that many; and always a sample of ``untouched``
    components and ``untouched_facts`` facts it did not change."""

    changed: int = 2_000
    documents: int = 50
    changed_facts: int = 5_000
    untouched: int = 100
    untouched_facts: int = 200


@dataclass(frozen=True)
class RunChanges:
    """What a run's commits changed: the names and facts of the documents it added, replaced or
    deleted (``names``: name, type, and whether it is live now), and the documents behind them."""

    documents: int
    names: pl.DataFrame  # name, type, live
    facts: list[str]
    newest_commit: int | None = None  # the run's newest commit that changed a document
    live_documents: list[str] = field(default_factory=list)  # those of its documents that are live now
    # Commits whose earlier state is gone from storage (an erasure vacuumed it): what their deleted
    # documents carried is unknown, and only the sampled part covers it.
    unreadable: list[int] = field(default_factory=list)


@dataclass
class ChangeComparison:
    """What the check compared and what differed: counts, digests and ids only."""

    store_commit: int
    run_documents: int = 0
    compared_documents: int = 0  # of the run's live documents, those whose forms were derived again
    changed_names: int = 0
    changed_components: int = 0  # M: the components the run's live names belong to (and its gone names)
    compared_changed: int = 0  # N
    untouched_compared: int = 0  # K
    live_run_documents: int = 0
    changed_facts: int = 0
    compared_facts: int = 0
    untouched_facts: int = 0
    names_compared: int = 0  # the names of every compared component
    rows: dict[str, int] = field(default_factory=dict)  # store rows compared, per table
    store_digests: dict[str, str] = field(default_factory=dict)
    derived_digests: dict[str, str] = field(default_factory=dict)
    differing: dict[str, list[str]] = field(default_factory=dict)  # table -> component or fact ids
    unreadable_commits: list[int] = field(default_factory=list)
    seconds: float = 0.0
    seed: str = ""  # what drew the samples: the run's newest commit
    untouched_ids: list[str] = field(default_factory=list, repr=False)  # the untouched components compared

    @property
    def sampled(self) -> bool:
        return self.compared_changed < self.changed_components or self.compared_facts < self.changed_facts or (
            self.compared_documents < self.live_run_documents)

    @property
    def passed(self) -> bool:
        return not any(self.differing.values())

    def summary(self) -> str:
        """One line: what was compared and the outcome."""
        sample = " (sample)" if self.sampled else ""
        head = (f"compared {self.compared_changed:,} of {self.changed_components:,} changed components and "
                f"{self.compared_facts:,} of {self.changed_facts:,} changed facts and the forms of "
                f"{self.compared_documents:,} of {self.live_run_documents:,} documents{sample}, "
                f"{self.untouched_compared:,} untouched components and {self.untouched_facts:,} untouched facts")
        if self.unreadable_commits:
            several = len(self.unreadable_commits) > 1
            head += (f"; commit{'s' if several else ''} {', '.join(map(str, self.unreadable_commits))} "
                     f"{'are' if several else 'is'} erased from storage history, so what the documents "
                     f"{'they' if several else 'it'} deleted carried is compared by the samples only")
        if self.passed:
            return f"{head}; passed"
        wrong = "; ".join(f"{table}: {', '.join(ids[:5])}{', …' if len(ids) > 5 else ''} ({len(ids)})"
                          for table, ids in self.differing.items() if ids)
        return f"{head}; differs from a fresh build in {wrong}"


def _manifest_at(store: Store, seq: int) -> Manifest | None:
    """The committed state of store commit ``seq`` (None before the first)."""
    rows = store.history().filter(pl.col("seq") == seq)
    if rows.height == 0:
        return None
    row = rows.row(0, named=True)
    return Manifest(seq=row["seq"], versions=json.loads(row["versions"]), operation=row["operation"],
                    details=json.loads(row["details"]))


def _name_rows(store: Store, spec: TableSpec, names: pl.DataFrame, manifest: Manifest,
               name_col: str = "name") -> pl.DataFrame:
    """The rows of a table bucketed by a name column whose (type, name) is one of ``names``', at
    ``manifest`` (index/reconcile.py ``name_rows``)."""
    if names.height == 0:
        return spec.empty()
    return name_rows(lambda table, column, values: store.rows(table, column, values, manifest), spec, names, name_col)


def _links_of(store: Store, names: pl.DataFrame, manifest: Manifest) -> pl.DataFrame:
    """Every stored link with an end among ``names``, at ``manifest`` (index/reconcile.py ``links_of``)."""
    if names.height == 0:
        return NAME_LINKS.empty().select(NAME_LINKS.columns)
    return links_of(lambda table, column, values: store.rows(table, column, values, manifest), names)


def _ends(links: pl.DataFrame) -> pl.DataFrame:
    return pl.concat([links.select(pl.col("name_a").alias("name"), "type"),
                      links.select(pl.col("name_b").alias("name"), "type")]).unique()


def run_changes(store: Store, run_id: str, manifest: Manifest | None = None) -> RunChanges:
    """The names and facts a run's commits changed, read from its batch log rows of documents
    added, replaced or deleted: the keys those documents carry now, and those its deleted or replaced documents carried in the commit before
    (with the names they were linked to then, whose components may have split)."""
    manifest = manifest or store.manifest()
    log = store.read_columns(BATCH_DOCUMENTS.name, manifest, ["doc_id", "action", "seq", "run_id"])
    # Documents kept unchanged or given other readers change nothing a fresh build derives.
    rows = log.filter((pl.col("run_id") == run_id) & pl.col("action").is_in([ADDED, REPLACED, DELETED]))
    keys = [store.rows(DOCUMENT_KEYS.name, "doc_id", rows.get_column("doc_id").unique().to_list(), manifest)]
    gone_names, unreadable = [], []
    removals = rows.filter(pl.col("action").is_in([DELETED, REPLACED]))
    for seq in sorted(set(removals.get_column("seq").to_list())):
        earlier = removals.filter(pl.col("seq") == seq)
        before = _manifest_at(store, seq - 1)
        if before is None:
            continue
        try:
            old = store.rows(DOCUMENT_KEYS.name, "doc_id", earlier.get_column("doc_id").unique().to_list(), before)
            names = old.filter(pl.col("kind") == "name").select(pl.col("key").alias("name"), "type").unique()
            neighbours = _ends(_links_of(store, names, before))
        except (StoreError, OSError):
            unreadable.append(seq)
            continue
        keys.append(old)
        gone_names.append(neighbours)
    every = pl.concat([k.select(DOCUMENT_KEYS.columns) for k in keys])
    names = pl.concat([every.filter(pl.col("kind") == "name").select(pl.col("key").alias("name"), "type"),
                       *gone_names]).unique()
    live = _name_rows(store, FORMS, names, manifest).select(NAME_KEY).unique()
    names = names.join(live.with_columns(pl.lit(True).alias("live")), on=NAME_KEY, how="left").with_columns(
        pl.col("live").fill_null(False))
    facts = sorted(set(every.filter(pl.col("kind") == "fact").get_column("key").to_list()))
    seqs = rows.get_column("seq").to_list()
    documents = store.rows(DOCUMENTS.name, "doc_id", rows.get_column("doc_id").unique().to_list(), manifest)
    return RunChanges(rows.get_column("doc_id").n_unique(), names.sort(NAME_KEY), facts,
                      max(seqs) if seqs else None, sorted(documents.get_column("doc_id").to_list()), sorted(unreadable))


def sample(ids: list[str], size: int, seed: str) -> list[str]:
    """A deterministic sample of ``size`` ids (all of them when there are no more): those whose
    hash with ``seed`` is smallest."""
    if len(ids) <= size:
        return sorted(ids)
    ranked = sorted(ids, key=lambda i: hashlib.blake2b(f"{seed}\x00{i}".encode(), digest_size=8).digest())
    return sorted(ranked[:size])


def _untouched(store: Store, spec: TableSpec, size: int, seed: str, exclude: set[str], manifest: Manifest) -> list[str]:
    """A deterministic sample of ``size`` keys of a table keyed and bucketed by one id column, none
    of them in ``exclude``: drawn by ``seed`` from a bucket drawn by ``seed`` (and the next ones,
    while it holds too few), so that drawing and comparing them reads few buckets of the tables
    bucketed by that id."""
    if size <= 0:
        return []
    (column,) = spec.key
    n_buckets = store.layout_buckets(manifest)
    first = int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "little") % n_buckets
    chosen: list[str] = []
    for step in range(n_buckets):
        ids = store.read_buckets(spec.name, manifest, [(first + step) % n_buckets]).get_column(column)
        ids = ids.filter(~ids.is_in(pl.Series(sorted(exclude), dtype=pl.String).implode()))
        chosen += sample(ids.to_list(), size - len(chosen), seed)
        if len(chosen) >= size:
            break
    return sorted(chosen)


def _from_few_buckets(ids: list[str], size: int, seed: str, n_buckets: int) -> list[str]:
    """A deterministic sample of ``size`` of ``ids`` from as few buckets as hold that many: those in
    a bucket drawn by ``seed``, then in the next ones."""
    if len(ids) <= size:
        return sorted(ids)
    first = int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "little") % n_buckets
    by_bucket: dict[int, list[str]] = {}
    for i in ids:
        by_bucket.setdefault((bucket_of(i, n_buckets) - first) % n_buckets, []).append(i)
    chosen: list[str] = []
    for step in sorted(by_bucket):
        chosen += sample(by_bucket[step], size - len(chosen), seed)
        if len(chosen) >= size:
            break
    return sorted(chosen)


def _forms_of_documents(store: Store, doc_ids: list[str], manifest: Manifest
                        ) -> tuple[dict[str, pl.DataFrame], dict[str, pl.DataFrame]]:
    """The stored forms and fact assertions of some documents, and those their stored extractions
    give (index/documents.py: the per-document stage's own derivation)."""
    forms, facts = forms_from_extractions(store.rows(EXTRACTIONS.name, "doc_id", doc_ids, manifest))
    keys = store.rows(DOCUMENT_KEYS.name, "doc_id", doc_ids, manifest)
    names = pl.concat([keys.filter(pl.col("kind") == "name").select(pl.col("key").alias("name"), "type"),
                       forms.select(NAME_KEY)]).unique()
    fact_ids = sorted(set(keys.filter(pl.col("kind") == "fact").get_column("key").to_list())
                      | set(facts.get_column("fact_id").to_list()))
    mine = pl.col("doc_id").is_in(pl.Series(doc_ids, dtype=pl.String).implode())
    stored = {FORMS.name: _name_rows(store, FORMS, names, manifest).filter(mine).select(FORMS.columns),
              FACT_SOURCES.name: store.rows(FACT_SOURCES.name, "fact_id", fact_ids, manifest).filter(mine)
              .select(FACT_SOURCES.columns)}
    return stored, {FORMS.name: forms.select(FORMS.columns), FACT_SOURCES.name: facts.select(FACT_SOURCES.columns)}


def _closure(store: Store, start: pl.DataFrame, manifest: Manifest, threshold: float) -> tuple[pl.DataFrame,
                                                                                                 pl.DataFrame]:
    """The live names reachable from ``start`` over stored links at ``threshold``, and every
    stored link with an end among them."""
    seen = start.select(NAME_KEY).unique()
    frontier, links = seen, [NAME_LINKS.empty().select(NAME_LINKS.columns)]
    while frontier.height:
        touching = _links_of(store, frontier, manifest)
        links.append(touching)
        ends = _ends(touching.filter(pl.col("similarity") >= threshold)).join(seen, on=NAME_KEY, how="anti")
        frontier = _name_rows(store, FORMS, ends, manifest).select(NAME_KEY).unique()  # live ones only
        seen = pl.concat([seen, frontier])
    return seen, pl.concat(links).unique(subset=list(NAME_LINKS.key))


def _derive(store: Store, names: pl.DataFrame, manifest: Manifest, settings: IndexSettings
            ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
    """The aliases, entities, mentions and synonym edges a fresh build gives the components of
    ``names`` (live names, closed under strong links), and the stored links touching them."""
    region, touching = _closure(store, names, manifest, settings.entity_threshold)
    forms = _name_rows(store, FORMS, region, manifest)
    inside = touching.filter(in_names(touching, region, "name_a") & in_names(touching, region, "name_b"))
    labels = components(region, inside, settings.entity_threshold)
    aliases = name_statistics(forms).join(labels, on=NAME_KEY).select(ALIASES.columns)
    partners = _ends(touching).join(region, on=NAME_KEY, how="anti")
    partner_aliases = _name_rows(store, ALIASES, partners, manifest).select("name", "type", "entity_id")
    edges = synonym_edges(touching, pl.concat([aliases.select("name", "type", "entity_id"), partner_aliases]),
                          settings.synonym_threshold, settings.numbers_must_agree)
    derived = {
        ALIASES.name: aliases,
        ENTITIES.name: entity_rows(aliases, forms).select(ENTITIES.columns),
        MENTIONS.name: mention_rows(aliases, forms).select(MENTIONS.columns),
        SYNONYM_EDGES.name: edges.select(SYNONYM_EDGES.columns),
    }
    return derived, partner_aliases


def _stored(store: Store, names: pl.DataFrame, entity_ids: list[str], partner_ids: list[str],
            manifest: Manifest) -> dict[str, pl.DataFrame]:
    """The store's rows for those names (aliases) and entities (entities, mentions, synonym edges)."""
    ids = pl.Series(entity_ids, dtype=pl.String).implode()
    edges = store.rows(SYNONYM_EDGES.name, "entity_a", [*entity_ids, *partner_ids], manifest)
    return {
        ALIASES.name: _name_rows(store, ALIASES, names, manifest).select(ALIASES.columns),
        ENTITIES.name: store.rows(ENTITIES.name, "entity_id", entity_ids, manifest).select(ENTITIES.columns),
        MENTIONS.name: store.rows(MENTIONS.name, "entity_id", entity_ids, manifest).select(MENTIONS.columns),
        SYNONYM_EDGES.name: edges.filter(pl.col("entity_a").is_in(ids) | pl.col("entity_b").is_in(ids))
        .select(SYNONYM_EDGES.columns),
    }


def _differing_ids(stored: pl.DataFrame, derived: pl.DataFrame, id_columns: tuple[str, ...]) -> list[str]:
    """The components (or facts) of the rows that one side holds and the other does not, or holds
    more often (a duplicated row)."""
    columns = stored.columns
    odd = pl.concat([stored.join(derived, on=columns, how="anti", nulls_equal=True),
                     derived.join(stored, on=columns, how="anti", nulls_equal=True),
                     stored.filter(stored.is_duplicated()), derived.filter(derived.is_duplicated())])
    return sorted({i for c in id_columns for i in odd.get_column(c).to_list()})


def compare_changes(store: Store, settings: IndexSettings, run_id: str | None, *,
                    bounds: ExactnessBounds | None = None, manifest: Manifest | None = None) -> ChangeComparison:
    """Compare the components and facts a run changed (none when ``run_id`` is None), and a
    sample of those it did not, with what a fresh build derives for them (see the module's
    docstring). Reads only the buckets of the names, entities and facts compared."""
    started = time.perf_counter()
    bounds = bounds or ExactnessBounds()
    manifest = manifest or store.manifest()
    changes = (run_changes(store, run_id, manifest) if run_id is not None
               else RunChanges(0, pl.DataFrame(schema={"name": pl.String, "type": pl.String, "live": pl.Boolean}), []))
    # The samples are drawn by the run's own commit, so that checking the same run again compares the same.
    seed = f"commit-{changes.newest_commit or manifest.seq}"
    found = ChangeComparison(store_commit=manifest.seq, seed=seed)
    found.run_documents, found.unreadable_commits = changes.documents, changes.unreadable
    found.live_run_documents = len(changes.live_documents)
    found.changed_names, found.changed_facts = changes.names.height, len(changes.facts)

    # The changed components: those the run's live names belong to (a name new to the store is one
    # of its own until derived); its gone names must have no alias left, and are compared as names.
    live = changes.names.filter(pl.col("live")).select(NAME_KEY)
    gone = changes.names.filter(~pl.col("live")).select(NAME_KEY)
    owners = live.join(_name_rows(store, ALIASES, live, manifest).select(*NAME_KEY, "entity_id"), on=NAME_KEY,
                       how="left").with_columns(pl.coalesce("entity_id", pl.concat_str(
                           pl.lit("new:"), "type", pl.lit("\x00"), "name")).alias("unit"))
    units = owners.get_column("unit").unique().to_list()
    gone_units = name_keys(gone).to_list()
    found.changed_components = len(units) + len(gone_units)
    # From as few entity buckets as hold the sample: entities, mentions and synonym edges are bucketed by entity.
    n_buckets = store.layout_buckets(manifest)
    chosen = set(_from_few_buckets([*units, *gone_units], bounds.changed, seed, n_buckets))
    found.compared_changed = len(chosen)
    start = owners.filter(pl.col("unit").is_in(sorted(chosen))).select(NAME_KEY)
    gone = gone.filter(name_keys(gone).is_in(sorted(chosen)))

    # Components the run did not change, drawn from the whole entities table: each from its canonical name.
    untouched = _untouched(store, ENTITIES, bounds.untouched, seed, set(units), manifest)
    found.untouched_compared, found.untouched_ids = len(untouched), untouched
    canonical = store.rows(ENTITIES.name, "entity_id", untouched, manifest).select(
        pl.col("canonical_name").alias("name"), "type")
    derived, partners = _derive(store, pl.concat([start, canonical]).unique(), manifest, settings)
    compared_names = pl.concat([derived[ALIASES.name].select(NAME_KEY), gone]).unique()
    found.names_compared = compared_names.height
    stored_ids = _name_rows(store, ALIASES, compared_names, manifest).get_column("entity_id").unique().to_list()
    ids = sorted(set(derived[ALIASES.name].get_column("entity_id").to_list()) | set(stored_ids) | set(untouched))
    stored = _stored(store, compared_names, ids, partners.get_column("entity_id").unique().to_list(), manifest)

    # Facts: the run's (or a sample of them, from as few buckets as hold it: facts and their sources
    # are both bucketed by fact, so the sample reads those buckets only) and a sample of the others,
    # regrouped from their live sources.
    facts = _from_few_buckets(changes.facts, bounds.changed_facts, seed, n_buckets)
    found.compared_facts = len(facts)
    others = _untouched(store, FACTS, bounds.untouched_facts, seed, set(changes.facts), manifest)
    found.untouched_facts = len(others)
    fact_ids = sorted({*facts, *others})
    sources = store.rows(FACT_SOURCES.name, "fact_id", fact_ids, manifest)
    derived[FACTS.name] = fact_rows(sources).select(FACTS.columns)
    stored[FACTS.name] = store.rows(FACTS.name, "fact_id", fact_ids, manifest).select(FACTS.columns)

    # The forms and fact assertions of some of the run's live documents, derived again from their extractions.
    documents = _from_few_buckets(changes.live_documents, bounds.documents, seed, n_buckets)
    found.compared_documents = len(documents)
    stored_forms, derived_forms = _forms_of_documents(store, documents, manifest)
    stored.update(stored_forms)
    derived.update(derived_forms)

    for table, (spec, id_columns) in COMPARED_TABLES.items():
        mine, fresh = stored[table], derived[table].cast(stored[table].schema)
        found.rows[table] = mine.height
        ours, theirs = digest_frame(mine, list(spec.columns)), digest_frame(fresh, list(spec.columns))
        found.store_digests[table], found.derived_digests[table] = ours.digest, theirs.digest
        found.differing[table] = [] if ours == theirs else _differing_ids(mine, fresh, id_columns)
    found.seconds = round(time.perf_counter() - started, 3)
    return found
