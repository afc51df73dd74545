"""A commit that dies between its table writes and its store-log row changes nothing visible, and
the next writer undoes its table writes before going on."""

from __future__ import annotations

import pytest

from lightfoot_pipeline import operations
from lightfoot_pipeline.ingest.dataset import Document
from lightfoot_pipeline.ingest.extraction import ReplayExtractor
from lightfoot_pipeline.store.fingerprint import fingerprint
from lightfoot_pipeline.store.store import Store
from lightfoot_pipeline.store.transaction import Transaction

RECORDS = {
    f"d{i}": {"entities": [{"name": f"Person {i % 3}", "type": "person"}, {"name": "Copenhagen"}],
              "facts": [[f"Person {i % 3}", "lived in", "Copenhagen"]]}
    for i in range(8)
}
DOCUMENTS = [Document(f"d{i}", f"Title {i}", f"Person {i % 3} lived in Copenhagen.") for i in range(8)]


class Crash(RuntimeError):
    pass


@pytest.mark.parametrize("where", ["before-log", "mid-tables"])
@pytest.mark.slow
def test_a_crashed_commit_is_invisible_and_undone(tmp_path, hashing_embedder, monkeypatch, where):
    store = Store(str(tmp_path / "store"))
    operations.ingest(store, DOCUMENTS[:5], ReplayExtractor(RECORDS), hashing_embedder)
    before = fingerprint(store)
    seq = store.manifest().seq

    if where == "before-log":
        monkeypatch.setattr(Transaction, "_append_log", lambda *a, **k: (_ for _ in ()).throw(Crash("died")))
    else:
        real = Transaction._write_table
        calls = {"n": 0}

        def dies_on_the_third(self, *args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 3:
                raise Crash("died")
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Transaction, "_write_table", dies_on_the_third)
    with pytest.raises(Crash):
        operations.delete(store, ["d1", "d2"])
    monkeypatch.undo()

    # Readers see the last committed state, although some tables were written past it.
    fresh_reader = Store(store.uri)
    assert fresh_reader.manifest().seq == seq
    assert fingerprint(fresh_reader).digest == before.digest

    # The next writer undoes the stray writes, then works as if the crash never happened.
    operations.ingest(Store(store.uri), DOCUMENTS[5:], ReplayExtractor(RECORDS), hashing_embedder)
    operations.delete(Store(store.uri), ["d1", "d2"])
    expected = Store(str(tmp_path / "expected"))
    operations.ingest(expected, [d for d in DOCUMENTS if d.doc_id not in {"d1", "d2"}], ReplayExtractor(RECORDS),
                    hashing_embedder)
    assert fingerprint(Store(store.uri)).digest == fingerprint(expected).digest
