"""A local HTTP receiver of notifications (cutover/notify.py) for the tests: records what arrives."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """An HTTP receiver on 127.0.0.1 recording (path, JSON body); the first `fail_first` requests get `status`."""

    def __init__(self, fail_first: int = 0, status: int = 503):
        self.received: list[tuple[str, dict]] = []
        self.attempts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.attempts += 1
                code = status if receiver.attempts <= fail_first else 200
                if code == 200:
                    receiver.received.append((self.path, body))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, path: str) -> list[dict]:
        return [body for where, body in self.received if where == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
