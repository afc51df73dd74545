"""The query service (``lightfoot serve``): retrieval and answers over HTTP, and the web page.

``QueryService`` (queries.py) holds the loaded snapshot and answers queries; ``make_app``
(app.py) is its Starlette app, with token authentication (auth.py) and bounded bodies, work and
time; ``QueryServer`` (server.py) runs it under uvicorn with header timeouts; the page at ``/``
(page.py, ``static/``) shows answers and provenance, as explanations.py tells them. Agents and chat
clients have two more doors onto the same calls: the OpenAI-compatible chat endpoint at ``/v1/``
(chat.py) and the MCP server (mcp_server.py: streamable HTTP at ``/mcp``, stdio as ``lightfoot
mcp``).
"""

from lightfoot_pipeline.service.app import HttpLimits, make_app
from lightfoot_pipeline.service.auth import Tokens
from lightfoot_pipeline.service.queries import QueryService, open_service
from lightfoot_pipeline.service.server import QueryServer

__all__ = ["HttpLimits", "QueryServer", "QueryService", "Tokens", "make_app", "open_service"]
