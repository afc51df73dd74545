"""The query service's web page: a question box, ranked passages with why they ranked, the
provenance of an entity, a fact or a document, and what an ingestion batch did, at ``/`` of
``lightfoot serve``.

Routes::

    GET  /                   the page (static; it holds no data)
    GET  /batch/ID           the same page, opening the view of batch ID (the link the Dagster
                             layer puts in each batch's materialization, provenance.batch_link)
    GET  /static/NAME        its script, style sheet and the vendored graph library
    POST /explain/query      {"question": "...", "top_k": 10, "rerank": true}: explain_query
    GET  /explain/entity?name=NAME    explain_entity, with the entities its facts and synonyms join
    GET  /explain/fact?fact_id=ID     explain_fact: its passages and source documents
    GET  /explain/doc?doc_id=ID       explain_document: its passages, names, entities and facts
    GET  /explain/doc/preview?doc_id=ID    the dry run of its deletion (preview_deletion)
    GET  /explain/batch?batch_id=ID   explain_batch: its documents and their status now, its commits,
                                      the entities its documents mention (each one click from its sources)

The page and its files are open (they carry no data; the page asks for the token and keeps it in
the tab's sessionStorage); every ``/explain`` route needs the same token as ``/query`` and runs in
the same bounded pool of retrieval threads, under the same body and request limits. Documents,
entities and facts name the batches and runs behind them; the page links each batch to its view
and, with ``LIGHTFOOT_DAGSTER_URL`` set, each Dagster run to its page there.

Every route answers as the request's principal (auth.py): ``/explain/query`` from its view of the
served snapshot, and the entity, fact and document routes from the store of the documents it may
read at the store's latest commit (permissions/provenance.py), so that an entity, a fact or a
document it may not read gets exactly the answer of one the store never held. A batch's view and
a deletion's dry run answer the operator only (a principal of the group ``*``): neither can be
told as a store of some documents alone would tell it (a batch's commits and a deletion's effect
on the graph are the whole store's), so every other principal gets one refusal (403) whatever
the batch or document, which says nothing of the data.

What the routes tell is assembled by :class:`~lightfoot_pipeline.service.explanations.Explanations`
(explanations.py), which the MCP server's tools call too, kept per commit and per view. A
document's explanation reads only the buckets of the document, its names and its facts: about a
query's work. Its deletion preview (a deletion's graph stage, run in a transaction never
committed: several times a query's work) is a route of its own, which the page asks for after it
shows the document, and runs in a pool of its own of one thread, so that however many clients ask
for previews, queries and explanations keep their workers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lightfoot_pipeline.provenance import ExplainError
from lightfoot_pipeline.service.auth import request_principal
from lightfoot_pipeline.service.explanations import Explanations, OperatorOnly
from lightfoot_pipeline.store.batches import BATCH_ID

STATIC_PREFIX = "/static/"
BATCH_PAGE_PREFIX = "/batch/"  # the page, opening a batch's view; open as the page is
PAGE_FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "vendor/vis-network.min.js": "text/javascript; charset=utf-8",
}
MAX_PARAMETER_CHARS = 512  # a doc id or an entity name


def page_file(name: str) -> bytes:
    return resources.files("lightfoot_pipeline.service").joinpath("static", *name.split("/")).read_bytes()


def page_routes(explanations: Explanations, run: Callable[..., Awaitable], guard, json_response, http_error,
                parse_body, run_preview: Callable[..., Awaitable] | None = None) -> list[Route]:
    """The page's routes. ``run`` runs a function in the retrieval pool, ``run_preview`` (default
    ``run``) in the deletion previews' pool; ``guard`` wraps an endpoint so that the service's errors
    become its JSON error responses; ``parse_body`` reads and validates a POST body into
    ``(question, top_k, rerank)`` or raises ``http_error`` (400, 408, 413)."""
    cache = {name: page_file(name) for name in PAGE_FILES}
    run_preview = run_preview or run

    async def index(request: Request) -> Response:
        return Response(cache["index.html"], media_type=PAGE_FILES["index.html"], headers={"cache-control": "no-store"})

    async def batch_page(request: Request) -> Response:
        batch_id = request.path_params["batch_id"]
        if not BATCH_ID.match(batch_id):  # what the path says, before the page asks for the batch
            return json_response(404, {"error": f"{batch_id[:80]!r} is not a batch id (lower-case letters, digits "
                                                "and dashes)"})
        return await index(request)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in PAGE_FILES or name == "index.html":
            return json_response(404, {"error": f"no such file {STATIC_PREFIX}{name}"})
        return Response(cache[name], media_type=PAGE_FILES[name],
                        headers={"cache-control": "max-age=300"})  # the server adds the security headers

    def parameter(request: Request, name: str) -> str:
        value = request.query_params.get(name, "")
        if not value.strip() or len(value) > MAX_PARAMETER_CHARS:
            raise http_error(400, f"give ?{name}= with 1 to {MAX_PARAMETER_CHARS} characters")
        return value

    async def answer(request: Request, method: Callable[..., dict], *arguments,
                     pool: Callable[..., Awaitable] = run) -> Response:
        """``method(principal, *arguments)`` of the explanations, in ``pool``, as a response."""
        principal = request_principal(request.scope)
        try:
            return json_response(200, await pool(method, principal, *arguments))
        except OperatorOnly as err:
            return json_response(403, {"error": str(err)})
        except ExplainError as err:  # its line may name the store: the client is told "the index"
            return json_response(404, {"error": explanations.error_line(err)})

    async def query(request: Request) -> Response:
        question, top_k, rerank = await parse_body(request)
        return await answer(request, explanations.query, question, top_k, rerank)

    async def entity(request: Request) -> Response:
        return await answer(request, explanations.entity, parameter(request, "name"))

    async def fact(request: Request) -> Response:
        return await answer(request, explanations.fact, parameter(request, "fact_id"))

    async def batch(request: Request) -> Response:
        if not request_principal(request.scope).is_operator:  # before the parameter: one refusal for all
            return json_response(403, {"error": str(OperatorOnly())})
        return await answer(request, explanations.batch, parameter(request, "batch_id"))

    async def document(request: Request) -> Response:
        return await answer(request, explanations.document, parameter(request, "doc_id"))

    async def deletion_preview(request: Request) -> Response:
        if not request_principal(request.scope).is_operator:
            return json_response(403, {"error": str(OperatorOnly())})
        return await answer(request, explanations.deletion_preview, parameter(request, "doc_id"), pool=run_preview)

    return [
        Route("/", index, methods=["GET"]),
        Route(BATCH_PAGE_PREFIX + "{batch_id}", batch_page, methods=["GET"]),
        Route(STATIC_PREFIX + "{name:path}", static, methods=["GET"]),
        Route("/explain/query", guard(query), methods=["POST"]),
        Route("/explain/entity", guard(entity), methods=["GET"]),
        Route("/explain/fact", guard(fact), methods=["GET"]),
        Route("/explain/doc", guard(document), methods=["GET"]),
        Route("/explain/doc/preview", guard(deletion_preview), methods=["GET"]),
        Route("/explain/batch", guard(batch), methods=["GET"]),
    ]
