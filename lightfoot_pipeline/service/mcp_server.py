"""The service as an MCP server (Model Context Protocol, on the official Python SDK ``mcp``), for
agents: tools that search and explain the index, and the documents as resources.

Two transports, one server (:func:`build_mcp_server`):

- **stdio**, ``lightfoot mcp``: a desktop client (Claude Desktop, Claude Code) starts the process
  and speaks to it over stdin and stdout. It answers as the principal its token names
  (``LIGHTFOOT_MCP_TOKEN``, checked against the service's tokens as ``lightfoot serve`` checks
  them), or as ``--as GROUPS`` (default: the public documents only; ``*`` the operator).
- **streamable HTTP**, ``POST /mcp`` of ``lightfoot serve`` (app.py): behind the service's gate,
  token check and rate limits like every other route; the bearer token names the principal, as
  for ``/query``. It is stateless (each POST answered on its own, as JSON), so the service holds
  no MCP session, and its bodies have the service's size and time bounds.

The tools (each with a JSON schema of bounded arguments and a description an agent can act on):

- ``search``: the ranked passages of a question (document id, title, source and scores) and the
  facts that seeded the ranking, with their evidence: exactly ``POST /query``'s result without an
  answer (:meth:`QueryService.retrieve`), so that the agent answers from them;
- ``explain_entity``, ``explain_fact``, ``explain_document``: what ``/explain/entity``,
  ``/explain/fact`` and ``/explain/doc`` answer (explanations.py);
- ``preview_deletion``: the dry run of a document's deletion, for the operator only (as
  ``/explain/doc/preview``).

Documents are resources by id, ``lightfoot://documents/{doc_id}``: the document's explanation
(title, source, its passages' texts, its entities and facts) as JSON.

Every tool and resource reads the view of the principal the request is answered as; none has an
argument that names a principal or a view, so nothing a document says (a prompt injection that
reaches the agent) can make a tool read another view. A name or id the principal may not read is
answered as one the index never held. No tool calls a model: nothing an agent does here is paid.
Errors are MCP's own: bad arguments (wrong type, out of bounds) and refusals come back as a tool
result with ``isError`` and a line saying why, an unknown tool or resource as a JSON-RPC error;
a failure inside the service is logged with an error id that the line names, never its details.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from lightfoot_pipeline.permissions.principals import Principal
from lightfoot_pipeline.provenance import ExplainError
from lightfoot_pipeline.retrieval.retrieve import RetrievalError
from lightfoot_pipeline.service.auth import request_principal
from lightfoot_pipeline.service.explanations import Explanations, OperatorOnly
from lightfoot_pipeline.service.queries import DEFAULT_TOP_K, MAX_QUESTION_CHARS, MAX_TOP_K, NoSnapshotLoaded

log = logging.getLogger(__name__)

SERVER_NAME = "lightfoot"
MAX_NAME_CHARS = 512  # an entity name, a fact id or a document id (the page's bound)
DOCUMENT_URI = "lightfoot://documents/{doc_id}"
INSTRUCTIONS = (
    "Lightfoot is a knowledge-graph index of a document collection. Use `search` to find the passages and "
    "facts that bear on a question, then answer from them and cite each passage's document id and title. "
    "Use `explain_entity` to see everything the index knows of a name (its facts and the entities they join), "
    "`explain_fact` to see a fact's source passages, and `explain_document` (or the resource "
    "lightfoot://documents/{doc_id}) to read a document's passages. Every answer is limited to the documents "
    "you may read."
)

Question = Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS,
                                description="the question or keywords to search for, in plain language")]
TopK = Annotated[int, Field(ge=1, le=MAX_TOP_K, description=f"how many passages to return (1 to {MAX_TOP_K})")]
EntityName = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS,
                                  description="an entity's name as it appears in the documents, e.g. 'Orbital Corp'")]
FactId = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS,
                              description="a fact id, as `search` or `explain_entity` returns it")]
DocId = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS,
                             description="a document id, as `search` returns it in each passage's doc_id")]
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def http_principal(context: Context) -> Principal:
    """Whom a request over streamable HTTP is answered as: the principal the service's token check
    put on the HTTP request (the public documents only when there is none: this fails closed)."""
    request = context.request_context.request
    return request_principal(getattr(request, "scope", {}))


def quietly_made(make: Callable[[], MCPServer]) -> MCPServer:
    """An MCPServer made without the side effect its constructor has on the process's logging (it
    configures the root logger when that has no handler yet): the service's logging is its
    caller's (``lightfoot serve`` and ``lightfoot mcp`` set it up first)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        return make()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def build_mcp_server(explanations: Explanations, principal_of: Callable[[Context], Principal],
                     run: Callable[..., Awaitable], private_error: Callable[[str, str], str],
                     run_preview: Callable[..., Awaitable] | None = None) -> MCPServer:
    """The MCP server over a service's explanations. ``principal_of`` says whom a request is
    answered as (:func:`http_principal`, or the stdio process's one principal); ``run`` runs
    blocking work in a worker thread (the service's retrieval pool), ``run_preview`` a deletion's
    dry run (its pool of one); ``private_error`` logs a failure inside and names it by an id."""
    service = explanations.service
    run_preview = run_preview or run
    server = quietly_made(lambda: MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING"))

    async def answer(context: Context, work: Callable[..., dict], *arguments, pool=run) -> dict[str, Any]:
        principal = principal_of(context)
        try:
            return await pool(work, principal, *arguments)
        except ExplainError as err:
            raise ToolError(explanations.error_line(err)) from None
        except (OperatorOnly, NoSnapshotLoaded) as err:
            raise ToolError(str(err)) from None
        except RetrievalError as err:
            raise ToolError(private_error("retrieval cannot run as configured", str(err))) from None
        except Exception as err:
            status = getattr(err, "status", None)
            if status in (503, 429):  # a pool is full (app.py HttpError): the agent may retry
                raise ToolError(str(err)) from None
            raise ToolError(private_error("the tool failed inside the service", repr(err))) from None

    def search_work(principal: Principal, question: str, top_k: int, rerank: bool) -> dict:
        payload, _ = service.retrieve(question, top_k=top_k, answer=False, rerank=rerank, principal=principal)
        return payload

    @server.tool(annotations=READ_ONLY, description=(
        "Search the documents you may read. Returns the passages that best answer the question, best first "
        "(each with rank, doc_id, title, text, location (its source) and scores), and the facts (subject, "
        "predicate, object, with evidence quotes) the ranking started from. Answer from the passages and cite "
        "their doc_id and title."))
    async def search(question: Question, context: Context, top_k: TopK = DEFAULT_TOP_K,
                     rerank: bool = True) -> dict[str, Any]:
        return await answer(context, search_work, question, top_k, rerank)

    @server.tool(annotations=READ_ONLY, description=(
        "Everything the index knows of an entity: the entities of that name (or a synonym), their facts with "
        "evidence and source documents, and the entities those facts join. Unknown names return no entities."))
    async def explain_entity(name: EntityName, context: Context) -> dict[str, Any]:
        return await answer(context, explanations.entity, name)

    @server.tool(annotations=READ_ONLY, description=(
        "A fact by its fact_id: its subject, predicate and object, the passages that state it and their "
        "documents."))
    async def explain_fact(fact_id: FactId, context: Context) -> dict[str, Any]:
        return await answer(context, explanations.fact, fact_id)

    @server.tool(annotations=READ_ONLY, description=(
        "A document by its doc_id: its title, source, passages (with their text), the names it gives, the "
        "entities and facts it contributes and the batches that brought it."))
    async def explain_document(doc_id: DocId, context: Context) -> dict[str, Any]:
        return await answer(context, explanations.document, doc_id)

    @server.tool(annotations=READ_ONLY, description=(
        "For the operator only: the dry run of deleting a document by its doc_id: the passages, entities, "
        "facts and links its deletion would remove or change. Nothing is deleted."))
    async def preview_deletion(doc_id: DocId, context: Context) -> dict[str, Any]:
        return await answer(context, explanations.deletion_preview, doc_id, pool=run_preview)

    @server.resource(DOCUMENT_URI, name="document", mime_type="application/json",
                     description="a document you may read, by its id: its explanation with its passages' text")
    async def document(doc_id: str, context: Context) -> str:
        if not doc_id or len(doc_id) > MAX_NAME_CHARS:
            raise ResourceNotFoundError(f"a document id has 1 to {MAX_NAME_CHARS} characters")
        try:
            explained = await answer(context, explanations.document, doc_id)
        except ToolError as err:
            raise ResourceNotFoundError(str(err)) from None
        return json.dumps(explained, default=str)

    del search, explain_entity, explain_fact, explain_document, preview_deletion, document  # registered
    return server
