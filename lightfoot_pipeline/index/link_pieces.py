"""A full link computation split into independent pieces, by name type and band range.

A link is pairwise (links.py): two names of one type link when they share a key in some LSH band,
pass the sketch cut on their full sketches, reach the threshold in exact cosine and carry the same
numbers. So the links of a set of names split without loss: a *piece* (type, first band, last
band) finds the pairs of its type's names that share a key in one of its bands and pass the cut,
and verifies them. Every link shares at least one band, so some piece finds it; the cut and the
cosine are functions of the pair, so every piece that finds it keeps it with the same similarity.
The union of all pieces' links, deduplicated, is what one :func:`links.links_within` gives.

A piece reads its type's names and band keys and the vectors of the names in its candidate
pairs only, so its memory follows its type and band range, not the store. Pieces are planned so
that a step pairs at most ``size`` names x bands (settings.link_piece_size): a large type's bands
are cut into ranges, small types share a step.

:class:`PrecomputedLinks` hands the links and keys of a whole derivation computed that way to
the graph stage in place of linking there (reconcile.py, ``linker``).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.index.links import LINK_SCHEMA, LinkRule, links_of_pairs
from lightfoot_pipeline.index.lsh import join_keys, near_within
from lightfoot_pipeline.index.name_sketches import decode_keys, key_frame
from lightfoot_pipeline.settings import Banding, IndexSettings
from lightfoot_pipeline.store.filesystem import delete_folder_quietly, open_filesystem
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import ALIASES, NAME_LINKS, NAME_SKETCHES, with_buckets
from lightfoot_pipeline.store.transaction import Transaction
from lightfoot_pipeline.store.vectors import VectorCache

NAME_KEY = ["name", "type"]
# Where a spread link computation stages its keys and links, under the store root (erase.py
# removes the whole folder: staged links are derived from live names and never outlive an erasure).
STAGING = ("_lightfoot", "relink")


def remove_relink_staging(store: Store) -> bool:
    """Delete every relink run's staged keys and links (an erasure does); False when there were none."""
    return delete_folder_quietly(*open_filesystem(store.path(*STAGING), store.storage_options or None))


class RelinkError(LightfootError, RuntimeError):
    """A spread link computation that cannot go on: a missing piece, a store that changed since its
    names were prepared, names that were not prepared."""


@dataclass(frozen=True, order=True)
class LinkPiece:
    """The links of one type's names that share a key in bands ``first_band`` to ``last_band``."""

    type: str
    first_band: int
    last_band: int  # inclusive

    @property
    def bands(self) -> range:
        return range(self.first_band, self.last_band + 1)

    @property
    def label(self) -> str:
        """A file name for the piece: the type's letters and a hash of it, then its bands."""
        return f"{type_label(self.type)}-{self.first_band:04d}-{self.last_band:04d}"

    def as_dict(self) -> dict:
        return {"type": self.type, "first_band": self.first_band, "last_band": self.last_band}

    @classmethod
    def of(cls, value: Mapping) -> LinkPiece:
        return cls(str(value["type"]), int(value["first_band"]), int(value["last_band"]))


def type_label(type_: str) -> str:
    """A file-name-safe label of a name type, distinct for distinct types."""
    letters = re.sub(r"[^a-z0-9]+", "_", type_.casefold()).strip("_")[:32]
    return f"{letters}-{hashlib.blake2b(type_.encode('utf-8'), digest_size=4).hexdigest()}"


def plan_pieces(names_per_type: Mapping[str, int], bands: int, size: int) -> list[LinkPiece]:
    """The pieces of a full link computation: each type's bands cut into as few near-equal ranges
    as keep names x bands within ``size`` (one band a piece at least). Types of fewer than two
    names have no pairs and no piece."""
    if size < 1:
        raise ValueError(f"a link piece pairs at least one name on one band, not {size}")
    pieces = []
    for type_, n in sorted(names_per_type.items()):
        if n < 2:
            continue
        ranges = min(bands, math.ceil(n * bands / size))
        edges = [round(k * bands / ranges) for k in range(ranges + 1)]
        pieces += [LinkPiece(type_, lo, hi - 1) for lo, hi in itertools.pairwise(edges)]
    return pieces


def plan_steps(pieces: Sequence[LinkPiece], names_per_type: Mapping[str, int], size: int) -> list[list[LinkPiece]]:
    """Pieces packed, in order, into steps of at most ``size`` names x bands (a piece larger than
    that, one band of a type of more than ``size`` names, has a step of its own)."""
    steps: list[list[LinkPiece]] = []
    load = size
    for piece in pieces:
        cost = names_per_type[piece.type] * len(piece.bands)
        if load + cost > size:
            steps.append([])
            load = 0
        steps[-1].append(piece)
        load += cost
    return steps


def banding_of(rule: LinkRule) -> Banding:
    """The rule's banding; RelinkError for a rule without one (relinking splits the work by band)."""
    if rule.banding is None:
        raise RelinkError("links that compare every pair (lsh_bands = 0) have no bands to split by")
    return rule.banding


def piece_links(
    piece: LinkPiece, names: Sequence[str], keys: np.ndarray, vectors: Callable[[list[str]], np.ndarray],
    rule: LinkRule,
) -> pl.DataFrame:
    """The links of a piece among one type's ``names`` (with their band keys, LinkRule.keys).

    ``vectors`` gives the vectors of names; it is asked only for the names of candidate pairs.
    """
    banding = banding_of(rule)
    if piece.last_band >= banding.bands or piece.first_band < 0 or piece.first_band > piece.last_band:
        raise RelinkError(f"link piece {piece.label}: bands {piece.first_band} to {piece.last_band} are not "
                          f"a range of the {banding.bands} bands")
    i, j = near_within(keys, banding, rule.threshold, piece.bands)
    used = np.unique(np.concatenate([i, j]))
    if len(used) == 0:
        return pl.DataFrame(schema=LINK_SCHEMA)
    listed = [names[k] for k in used]
    return links_of_pairs(piece.type, listed, vectors(listed), np.searchsorted(used, i), np.searchsorted(used, j),
                          rule)


def key_rows(type_: str, names: list[str], vectors: np.ndarray, rule: LinkRule) -> pl.DataFrame:
    """The ``name_sketches`` rows of some names of one type, their keys computed from their vectors."""
    return key_frame(type_, names, rule.keys(names, vectors), banding_of(rule))


def type_keys(frame: pl.DataFrame, rule: LinkRule) -> tuple[list[str], np.ndarray]:
    """A type's names and band keys from its rows of ``name_sketches`` (sorted by name)."""
    frame = frame.sort("name")
    high, marks = decode_keys(frame, banding_of(rule))
    return frame.get_column("name").to_list(), join_keys(high, marks)


def union_links(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """The links of several pieces, each once."""
    if not frames:
        return pl.DataFrame(schema=LINK_SCHEMA)
    return pl.concat([f.select(list(LINK_SCHEMA)).cast(pl.Schema(LINK_SCHEMA)) for f in frames]).unique(
        subset=NAME_LINKS.key, keep="first").sort(NAME_LINKS.key)


class PrecomputedLinks:
    """The links and band keys of every live name, computed elsewhere, in place of
    :func:`name_sketches.link_added_names` (same call, same result) for a graph derived again whole.

    ``key_rows``: the ``name_sketches`` rows of the prepared names; ``check``: called with the
    transaction before anything is staged (the caller's test that the store is still the one
    the names were prepared from). Refuses a transaction whose added names are not exactly the
    prepared ones, or that keeps names from before (their links would be missing).
    """

    def __init__(self, links: pl.DataFrame, key_rows: pl.DataFrame,
                 check: Callable[[Transaction], None] | None = None) -> None:
        self.links = links
        self.key_rows = key_rows.select(NAME_SKETCHES.columns)
        self.check = check

    def __call__(self, tx: Transaction, added: pl.DataFrame, removed: pl.DataFrame, name_vectors: VectorCache,
                 settings: IndexSettings) -> pl.DataFrame:
        if self.check is not None:
            self.check(tx)
        if tx.count(ALIASES.name):
            raise RelinkError("precomputed links replace a whole derivation of the graph, and this store "
                              "keeps names from before")
        prepared = self.key_rows.select(NAME_KEY)
        unprepared = added.select(NAME_KEY).join(prepared, on=NAME_KEY, how="anti")
        gone = prepared.join(added.select(NAME_KEY), on=NAME_KEY, how="anti")
        if unprepared.height or gone.height:
            raise RelinkError(f"the live names are not the prepared ones ({unprepared.height} not prepared, "
                              f"{gone.height} no longer live); prepare them again")
        if self.key_rows.height:
            tx.update(NAME_SKETCHES.name, add=with_buckets(self.key_rows, NAME_SKETCHES, tx.n_buckets))
        return self.links
