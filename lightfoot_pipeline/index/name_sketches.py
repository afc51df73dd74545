"""Linking added names: each against the stored names it can link to, and no others.

With the LSH filter on (``settings.banding``), two names are compared only when they share a band
key (lsh.py), and a name's keys depend on its own vector alone. The keys of every live name are
stored in ``name_sketches`` (one row per name: the keys' common high bits, which its number group
sets, and its sketch, the ``rows`` sign bits of each band, 2 bytes a band at the default), so
linking added names holds the live names' keys in memory, finds the stored names that collide
with an added name and pass the sketch cut (lsh.py), and reads the vectors of those names alone. With the filter off, every live
name of the type is compared, so every vector of the type is read.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import polars as pl
import pyarrow as pa

from lightfoot_pipeline.index.links import LINK_SCHEMA, LinkRule, links_between
from lightfoot_pipeline.index.lsh import join_keys, near_between_parts, sketches, split_keys
from lightfoot_pipeline.settings import Banding, IndexSettings
from lightfoot_pipeline.store.tables import ALIASES, NAME_SKETCHES, bucket_groups, with_buckets
from lightfoot_pipeline.store.transaction import Transaction
from lightfoot_pipeline.store.vectors import VectorCache

NAME_KEY = ["name", "type"]


def key_frame(type_: str, names: list[str], keys: np.ndarray, banding: Banding) -> pl.DataFrame:
    """``name_sketches`` rows (without buckets) of names of one type, from their band keys."""
    high, marks = split_keys(keys, banding)
    rows = np.ascontiguousarray(marks.astype(marks.dtype.newbyteorder("<")))
    return pl.DataFrame({"type": [type_] * len(names), "name": names, "group_hash": high,
                         "sketch": [r.tobytes() for r in rows]},
                        schema={"type": pl.String, "name": pl.String, "group_hash": pl.Int64, "sketch": pl.Binary})


def decode_keys(frame: pl.DataFrame, banding: Banding) -> tuple[np.ndarray, np.ndarray]:
    """The band keys of a ``name_sketches`` frame, taken apart: (rows,) high bits and (rows, bands) sketches."""
    width = sketches(np.zeros((0, banding.bands), dtype=np.int64), banding).dtype.newbyteorder("<")
    if frame.height == 0:
        return np.zeros(0, dtype=np.int64), np.zeros((0, banding.bands), dtype=width)
    column = frame.get_column("sketch").to_arrow().cast(pa.large_binary())
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64)[column.offset : column.offset + len(column) + 1]
    data = np.frombuffer(column.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    if len(data) != len(column) * banding.bands * width.itemsize:
        raise ValueError(f"name sketches of {len(data)} bytes for {len(column)} names of {banding.bands} bands")
    return frame.get_column("group_hash").to_numpy(), data.view(width).reshape(-1, banding.bands)


def drop_keys(tx: Transaction, names: pl.DataFrame) -> None:
    """Remove the stored keys of names that are no longer live."""
    if names.height == 0:
        return
    listed = names.get_column("name").unique().to_list()
    tx.rows(NAME_SKETCHES.name, "name", listed)
    wanted = names.select(pl.concat_str("type", pl.lit("\x00"), "name").alias("k")).get_column("k").implode()
    tx.update(NAME_SKETCHES.name, remove=pl.concat_str("type", pl.lit("\x00"), "name").is_in(wanted))


def store_keys(tx: Transaction, names: pl.DataFrame, name_vectors: VectorCache, rule: LinkRule) -> int:
    """Compute and stage the keys of live names that have none stored (a repair; returns how many)."""
    if rule.banding is None or names.height == 0:
        return 0
    missing = names.join(tx.table(NAME_SKETCHES.name).select(NAME_KEY), on=NAME_KEY, how="anti")
    frames = []
    for (type_,), group in sorted(missing.partition_by("type", as_dict=True).items()):
        listed = sorted(group.get_column("name").to_list())
        frames.append(key_frame(type_, listed, rule.keys(listed, name_vectors.vectors(listed)), rule.banding))
    if frames:
        tx.update(NAME_SKETCHES.name, add=with_buckets(pl.concat(frames), NAME_SKETCHES, tx.n_buckets))
    return missing.height


# The stored sketches are scanned about this many rows at a time: what linking holds of them is a
# part and the rows of the names that collide with an added one, not every live name's sketch
# (400 bytes each: 2.2 GB at a million passages).
SKETCH_PART_ROWS = 250_000


def sketch_parts(tx: Transaction) -> Iterator[pl.DataFrame]:
    """The stored sketches, a group of buckets of about SKETCH_PART_ROWS rows at a time, read past the
    transaction (which has only dropped the sketches of removed names); the whole staged table, once,
    when a repair has staged it whole (store_keys)."""
    if tx.loaded(NAME_SKETCHES.name) is None:
        yield tx.table(NAME_SKETCHES.name)
        return
    per_bucket = tx.store.rows_per_bucket(NAME_SKETCHES.name, tx.manifest)
    for group in bucket_groups(range(tx.n_buckets), per_bucket, SKETCH_PART_ROWS):
        yield tx.store.read_buckets(NAME_SKETCHES.name, tx.manifest, group)


def link_added_names(
    tx: Transaction, added: pl.DataFrame, removed: pl.DataFrame, name_vectors: VectorCache, settings: IndexSettings
) -> pl.DataFrame:
    """Links of every added name against every live name of its type, and stage the added names' keys.

    ``removed``: names no longer live, whose keys :func:`drop_keys` has dropped.
    """
    rule = LinkRule.of(settings)
    if rule.banding is None:
        return _link_exhaustively(tx, added, removed, name_vectors, rule)
    gone = pl.concat([removed.select(NAME_KEY), added.select(NAME_KEY)])
    new_by_type: dict[str, tuple[list[str], np.ndarray, np.ndarray]] = {}
    new_parts: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # each type's keys taken apart, once
    gone_by_type: dict[str, pl.Series] = {}
    new_rows = []
    for (type_,), group in sorted(added.partition_by("type", as_dict=True).items()):
        new_names = sorted(group.get_column("name").to_list())
        new_vectors = name_vectors.vectors(new_names)
        new_keys = rule.keys(new_names, new_vectors)
        new_rows.append(key_frame(type_, new_names, new_keys, rule.banding))
        new_by_type[type_] = (new_names, new_vectors, new_keys)
        new_parts[type_] = split_keys(new_keys, rule.banding)
        gone_by_type[type_] = gone.filter(pl.col("type") == type_).get_column("name")
    # The stored sketches a part at a time (sketch_parts): of each part, only the rows of the names
    # that collide with an added one are kept.
    found: dict[str, list[tuple[pl.Series, np.ndarray, np.ndarray]]] = {t: [] for t in new_by_type}
    for stored in sketch_parts(tx):
        # Taken apart once; each type's rows are then picked out of the arrays, not out of the frame.
        stored_high, stored_marks = decode_keys(stored, rule.banding)
        stored_types = stored.get_column("type")
        for type_, apart in new_parts.items():
            of_type = np.flatnonzero((stored_types == type_).to_numpy())
            old_high, old_marks = stored_high[of_type], stored_marks[of_type]
            _, j = near_between_parts(apart, (old_high, old_marks), rule.banding, rule.threshold)
            colliding = np.unique(j)
            # Stored rows of removed or added names are not live ones: dropped here, among the few that
            # collide, rather than from every stored row beforehand.
            candidates = stored.get_column("name").gather(of_type[colliding])
            live = ~candidates.is_in(gone_by_type[type_].implode()).to_numpy()
            colliding = colliding[live]
            found[type_].append((candidates.filter(pl.Series(live)), old_high[colliding], old_marks[colliding]))
    frames = []
    for type_, (new_names, new_vectors, new_keys) in new_by_type.items():
        parts = found[type_]
        old_names = pl.concat([names for names, _, _ in parts]).to_list() if parts else []
        old_high = np.concatenate([h for _, h, _ in parts]) if parts else np.zeros(0, dtype=np.int64)
        old_marks = (np.concatenate([m for _, _, m in parts]) if parts
                     else decode_keys(NAME_SKETCHES.empty(), rule.banding)[1])
        old_vectors = name_vectors.vectors(old_names) if old_names else np.zeros((0, new_vectors.shape[1]), np.float32)
        frames.append(links_between(type_, new_names, new_vectors, old_names, old_vectors, rule,
                                    new_keys, join_keys(old_high, old_marks)))
    if new_rows:
        tx.update(NAME_SKETCHES.name, add=with_buckets(pl.concat(new_rows), NAME_SKETCHES, tx.n_buckets))
    return pl.concat(frames) if frames else pl.DataFrame(schema=LINK_SCHEMA)


def _link_exhaustively(
    tx: Transaction, added: pl.DataFrame, removed: pl.DataFrame, name_vectors: VectorCache, rule: LinkRule
) -> pl.DataFrame:
    """Links of added names against every live name of their type, every vector read."""
    stored = tx.store.read(ALIASES.name, tx.manifest, columns=NAME_KEY)
    live = stored.join(removed, on=NAME_KEY, how="anti").join(added, on=NAME_KEY, how="anti")
    live_by_type = live.partition_by("type", as_dict=True)
    frames = []
    for (type_,), group in sorted(added.partition_by("type", as_dict=True).items()):
        new_names = sorted(group.get_column("name").to_list())
        old_frame = live_by_type.get((type_,))
        old_names = sorted(old_frame.get_column("name").to_list()) if old_frame is not None else []
        vectors = name_vectors.vectors(new_names + old_names)
        new_vecs, old_vecs = vectors[: len(new_names)], vectors[len(new_names):]
        frames.append(links_between(type_, new_names, np.ascontiguousarray(new_vecs), old_names,
                                    np.ascontiguousarray(old_vecs), rule))
    return pl.concat(frames) if frames else pl.DataFrame(schema=LINK_SCHEMA)
