"""An S3-compatible server on 127.0.0.1 for the object-store tests: moto, one request at a time.

Run as a script; it prints ``port <N>`` once it listens. S3 evaluates a conditional PUT
(``If-None-Match: *``) atomically; moto's threaded server checks the condition and stores the
object in two steps, so two racing PUTs could both pass. Serving requests one at a time (on
concurrent connections) restores S3's atomicity, which the concurrency tests rely on.
"""

from __future__ import annotations

import sys
import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server


class QuietHandler(MotoRequestHandler):
    def log_request(self, *args, **kwargs) -> None:
        pass


def main() -> None:
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def serialised(environ, start_response):
        with one_at_a_time:
            return list(app(environ, start_response))

    server = make_server("127.0.0.1", 0, serialised, threaded=True, request_handler=QuietHandler)
    print(f"port {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
