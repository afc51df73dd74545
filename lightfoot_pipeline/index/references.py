"""References between the index's tables: what each kind points at, and how many point at nothing.

A sound store has none dangling: every passage, extraction, form, fact source and mention points at
a live document or passage, every mention and alias at an entity, every synonym edge at two
entities, every fact at a source and back; and the aliases are exactly the live names.
"""

from __future__ import annotations

import polars as pl

from lightfoot_pipeline.store.log import Manifest
from lightfoot_pipeline.store.store import ROWS_PER_PIECE, Store
from lightfoot_pipeline.store.tables import (
    ALIASES,
    DOCUMENTS,
    ENTITIES,
    EXTRACTIONS,
    FACT_SOURCES,
    FACTS,
    FORMS,
    MENTIONS,
    PASSAGES,
    SYNONYM_EDGES,
    TableSpec,
)

# The references checked, grouped by the keys they point at: the referenced table and its columns,
# whether its keys repeat (then they are made distinct as they are gathered; a table's own ids are
# read as they are), and the (kind, referencing table, its columns) that point at them.
REFERENCES: list[tuple[TableSpec, list[str], bool, list[tuple[str, TableSpec, list[str]]]]] = [
    (DOCUMENTS, ["doc_id"], False, [("passages -> documents", PASSAGES, ["doc_id"])]),
    (PASSAGES, ["chunk_id"], False, [
        ("extractions -> passages", EXTRACTIONS, ["chunk_id"]),
        ("forms -> passages", FORMS, ["chunk_id"]),
        ("fact_sources -> passages", FACT_SOURCES, ["chunk_id"]),
        ("mentions -> passages", MENTIONS, ["chunk_id"]),
    ]),
    (ENTITIES, ["entity_id"], False, [
        ("mentions -> entities", MENTIONS, ["entity_id"]),
        ("aliases -> entities", ALIASES, ["entity_id"]),
        ("synonym_edges -> entities", SYNONYM_EDGES, ["entity_a"]),
        ("synonym_edges -> entities", SYNONYM_EDGES, ["entity_b"]),
    ]),
    (FACT_SOURCES, ["fact_id"], False, [("facts -> fact_sources", FACTS, ["fact_id"])]),
    (FACTS, ["fact_id"], False, [("fact_sources -> facts", FACT_SOURCES, ["fact_id"])]),
]


def dangling_references(store: Store, manifest: Manifest | None = None,
                        rows_per_piece: int = ROWS_PER_PIECE) -> dict[str, int]:
    """For each kind of reference, how many point at something that is not live (at ``manifest``,
    by default the newest commit).

    One set of referenced keys is held at a time (the distinct values of its columns), and each
    table that points at it is read a piece at a time (:meth:`Store.column_pieces`), only the
    columns compared: what the check holds follows the largest key set, not the store."""
    manifest = manifest or store.manifest()
    counts: dict[str, int] = {}
    for target, target_columns, repeated, referencing in REFERENCES:
        keys = _keys(store, manifest, target, target_columns, repeated, rows_per_piece)
        for kind, table, columns in referencing:
            named = dict(zip(target_columns, columns, strict=True))
            wanted = keys.rename({t: c for t, c in named.items() if t != c})
            counts[kind] = counts.get(kind, 0) + sum(
                piece.join(wanted, on=columns, how="anti").height
                for piece in store.column_pieces(table.name, manifest, columns, rows_per_piece))
        del keys  # before the next set is gathered: one held at a time
    counts["aliases -> live names"], counts["live names -> aliases"] = _names(store, manifest, rows_per_piece)
    return {kind: counts[kind] for kind in KINDS}


def _keys(store: Store, manifest: Manifest, table: TableSpec, columns: list[str], repeated: bool,
          rows_per_piece: int) -> pl.DataFrame:
    """The values of a table's columns, gathered a piece at a time (made distinct if they repeat:
    an anti join counts the same whether its keys repeat or not)."""
    pieces = [piece.unique() if repeated else piece
              for piece in store.column_pieces(table.name, manifest, columns, rows_per_piece)]
    if not pieces:
        return table.empty().select(columns)
    keys = pl.concat(pieces)
    return keys.unique() if repeated else keys


def _names(store: Store, manifest: Manifest, rows_per_piece: int) -> tuple[int, int]:
    """The aliases must be exactly the live names (a name is live while a live passage's form has
    it): how many alias rows name no live name, and how many live names have no alias. Holds the
    live names and the aliases' names."""
    columns = ["name", "type"]
    live = _keys(store, manifest, FORMS, columns, True, rows_per_piece)
    aliases = list(store.column_pieces(ALIASES.name, manifest, columns, rows_per_piece))
    stray = sum(piece.join(live, on=columns, how="anti").height for piece in aliases)
    named = pl.concat(aliases) if aliases else ALIASES.empty().select(columns)
    return stray, live.join(named, on=columns, how="anti").height


KINDS = [
    "passages -> documents", "extractions -> passages", "forms -> passages", "fact_sources -> passages",
    "mentions -> passages", "mentions -> entities", "aliases -> entities", "aliases -> live names",
    "live names -> aliases", "synonym_edges -> entities", "facts -> fact_sources", "fact_sources -> facts",
]
