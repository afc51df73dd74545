"""The query service (``lightfoot serve``): retrieval and answers over HTTP, and the web page.

``QueryService`` (queries.py) holds the loaded snapshot and answers queries; ``make_app``
(app.py) is its Starlette app, with token authentication (auth.py) and bounded bodies, work and
time; ``QueryServer`` (server.py) runs it under uvicorn with header timeouts; the page at ``/``
(page.py, ``static/``) shows answers and provenance.
"""

from lightfoot_pipeline.service.app import HttpLimits, make_app
from lightfoot_pipeline.service.auth import Tokens
from lightfoot_pipeline.service.queries import QueryService, open_service
from lightfoot_pipeline.service.server import QueryServer

__all__ = ["HttpLimits", "QueryServer", "QueryService", "Tokens", "make_app", "open_service"]
