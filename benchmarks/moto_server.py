"""moto's mock AWS services on a free loopback port, in a process of their own.

    python benchmarks/moto_server.py          # prints the port, then serves until killed

The benchmark starts this as a child process (``backends.MotoProcess``) so that the mock
server's CPU is not counted as the client's and does not compete for the client's GIL.
Requests are accepted on many connections at once, but the application handles one at a
time: moto's in-memory tables are not safe for concurrent requests (a transaction copies
the table while another request may be changing it), which a real DynamoDB never
exhibits; serving them one by one keeps concurrent clients from seeing spurious 500s.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any


def serve(host: str = "127.0.0.1", port: int = 0) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def handle(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with one_at_a_time:
            body = app(environ, start_response)
            try:
                return [bytes(chunk) for chunk in body]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()

    server = make_server(host, port, handle, threaded=True, request_handler=MotoRequestHandler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(port=int(sys.argv[1]) if len(sys.argv) > 1 else 0)
