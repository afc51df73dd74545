"""What the service explains, as a principal may be told it: a query's ranking, an entity, a fact,
a document, a batch and a deletion's dry run. The page's ``/explain`` routes (page.py) and the MCP
server's tools (mcp_server.py) both call :class:`Explanations`, so that each answer is assembled
once, whichever door asks.

A query is explained from the principal's view of the served snapshot; an entity, a fact and a
document from the store of the documents it may read at the store's latest commit
(permissions/provenance.py), so that one it may not read gets exactly the answer of one the store
never held (:class:`~lightfoot_pipeline.provenance.ExplainError`). A batch's view and a
deletion's dry run answer the operator only (:class:`OperatorOnly`): both tell of the whole store.

What the provenance answers read is the store's committed state, so they are kept per commit and
per view (:class:`PerCommit`, keyed by what the principal reads, so that one principal's answer
is never another's): asked again at the same commit, a document or an entity costs a manifest
read. Every method is blocking work for a worker thread (app.py's pools).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from lightfoot_pipeline.errors import LightfootError
from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.permissions.provenance import source_key
from lightfoot_pipeline.provenance import ExplainError
from lightfoot_pipeline.provenance.batches import explain_batch
from lightfoot_pipeline.provenance.documents import explain_document, preview_deletion
from lightfoot_pipeline.provenance.entities import explain_entity, explain_fact
from lightfoot_pipeline.retrieval.explain import explain_query
from lightfoot_pipeline.service.queries import QueryService, shown_reranker
from lightfoot_pipeline.store.tables import DOCUMENTS

PER_COMMIT_ENTRIES = 256  # provenance answers kept, the least recently asked dropped first
# What the operator's views need, said where a principal asks for one: the operator's token.
OPERATOR_VIEW = ("start the service as the operator (`lightfoot serve --as '*'` on loopback) or give the page a "
                 "token of the group * (`lightfoot serve-token --principal operator --groups '*'`), or read it with "
                 "`lightfoot explain batch ID`")
OPERATOR_ONLY = ("batch views and deletion previews answer the operator only (a token of the group *): they "
                 f"tell of the whole store; to see them, {OPERATOR_VIEW}")


class OperatorOnly(LightfootError, PermissionError):
    """What a principal other than the operator asked for answers the operator only (the message
    is the same whatever was asked, so that it says nothing of the data)."""

    def __init__(self) -> None:
        super().__init__(OPERATOR_ONLY)


class PerCommit:
    """Answers kept by (store commit, view, question), at most ``size``; a new commit makes every kept
    answer of older ones unreachable, and they leave as new ones come in."""

    def __init__(self, size: int = PER_COMMIT_ENTRIES) -> None:
        self.size = size
        self._kept: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()  # the pools' threads share it
        self.hits = 0

    def get(self, key: Hashable, compute: Callable[[], object]):
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                self.hits += 1
                return self._kept[key]
        value = compute()
        with self._lock:
            self._kept[key] = value
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return value


class Explanations:
    """The explanations of one service, each as ``principal`` may be told it (see the module
    docstring). A name, id or batch the principal cannot see raises ExplainError, whose line the
    caller shows with the store's location replaced (:meth:`error_line`)."""

    def __init__(self, service: QueryService, size: int = PER_COMMIT_ENTRIES) -> None:
        self.service = service
        self.answers = PerCommit(size)

    def error_line(self, err: ExplainError) -> str:
        """The line of an ExplainError as a client is told it: the store is "the index"."""
        return err.line().replace(str(self.service.store.uri), "the index")

    def _per_commit(self, kind: str, question: str, principal: Principal, compute: Callable) -> dict:
        """``compute(source, manifest)`` on what ``principal`` reads at the latest commit, kept under
        the commit, that source's name and the question."""
        manifest = self.service.store.manifest()
        source = self.service.provenance_source(principal, manifest)
        return self.answers.get((kind, manifest.seq, source_key(source), question),
                                lambda: compute(source, manifest))

    def query(self, principal: Principal, question: str, top_k: int, rerank: bool) -> dict:
        """Why each passage ranked where it did, on the principal's view of the served snapshot."""
        served = self.service.current(principal)
        result = explain_query(served.retriever, question, top_k=top_k, rerank=rerank)
        if not principal.is_operator:
            result["reranker"] = shown_reranker(result["reranker"])  # no path on the server
        result["snapshot"] = {"snapshot_id": served.snapshot_id, "view": served.view_key,
                              "created_at": served.snapshot.info.created_at, "loaded_at": served.loaded_at}
        return result

    def entity(self, principal: Principal, name: str) -> dict:
        """The entities of that name (or a synonym's), with their facts and the entities they join."""
        return self._per_commit("entity", name, principal, lambda source, manifest: {
            "entities": [e.as_dict() for e in explain_entity(source, name)]})

    def fact(self, principal: Principal, fact_id: str) -> dict:
        """A fact: its passages and their source documents."""
        return self._per_commit("fact", fact_id, principal, lambda source, manifest:
                                explain_fact(source, fact_id, manifest).as_dict())

    def document(self, principal: Principal, doc_id: str) -> dict:
        """A document: its passages, names, entities and facts (no deletion preview)."""
        return self._per_commit("doc", doc_id, principal, lambda source, manifest:
                                explain_document(source, doc_id, preview=False, manifest=manifest).as_dict())

    def batch(self, principal: Principal, batch_id: str) -> dict:
        """A batch's documents and their status now, its commits and its entities (the operator's)."""
        self.require_operator(principal)
        return self._per_commit("batch", batch_id, principal, lambda source, manifest: explain_batch(
            source, batch_id, manifest).as_dict())

    def deletion_preview(self, principal: Principal, doc_id: str) -> dict:
        """The dry run of a live document's deletion: what it would remove (the operator's)."""
        self.require_operator(principal)
        store = self.service.store

        def work(source, manifest) -> dict:
            if not store.rows(DOCUMENTS.name, "doc_id", [doc_id], manifest).height:
                raise ExplainError(f"no live document {doc_id!r} to preview the deletion of")
            return {"doc_id": doc_id, "deletion_preview": preview_deletion(store, [doc_id],
                                                                           manifest=manifest).as_dict()}

        return self._per_commit("preview", doc_id, principal, work)

    @staticmethod
    def require_operator(principal: Principal) -> None:
        if not principal.is_operator:
            raise OperatorOnly()
