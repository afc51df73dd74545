"""Where the index lives: Delta tables and LanceDB vectors under one root, committed together."""

from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.fingerprint import counts, fingerprint
from lightfoot_pipeline.store.log import Manifest, StoreError
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import TableSpec, spec_for
from lightfoot_pipeline.store.transaction import Transaction

__all__ = ["Manifest", "Store", "StoreError", "TableSpec", "Transaction", "counts", "fingerprint", "live_doc_ids",
           "spec_for"]
