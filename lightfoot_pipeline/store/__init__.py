"""Where the index lives: Delta tables and LanceDB vectors under one root, committed together."""

from lightfoot_pipeline.store.documents import live_doc_ids
from lightfoot_pipeline.store.fingerprint import Fingerprint, counts
from lightfoot_pipeline.store.log import Manifest, StoreError
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.tables import TableSpec, spec_for
from lightfoot_pipeline.store.transaction import Transaction

# The fingerprint function keeps its module's name (store.fingerprint.fingerprint): a package name
# that is also a submodule's would hide the module.
__all__ = ["Fingerprint", "Manifest", "Store", "StoreError", "TableSpec", "Transaction", "counts", "live_doc_ids",
           "spec_for"]
