"""A git server over HTTP behind Basic authentication, for the tests: `git http-backend` run as a
CGI program by a small threaded HTTP server. A request without the expected credentials gets
`401` and nothing of the repository."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@contextmanager
def authenticated_git_server(root: Path, host: str, username: str, password: str) -> Iterator[str]:
    """Every repository under `root`, served on `host` at a free port; the server's base URL."""
    expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()

    class GitOverHttp(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.serve()

        def do_POST(self) -> None:
            self.serve()

        def log_message(self, format: str, *args: object) -> None:
            pass

        def serve(self) -> None:
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            environment = {
                "PATH": os.environ["PATH"],
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_USER": username,
                "REMOTE_ADDR": self.client_address[0],
            }
            for header, variable in (
                ("Git-Protocol", "GIT_PROTOCOL"),
                ("Content-Encoding", "HTTP_CONTENT_ENCODING"),
            ):
                if self.headers.get(header):
                    environment[variable] = self.headers[header]
            answer = subprocess.run(
                ["git", "http-backend"], input=body, env=environment, capture_output=True, check=False
            ).stdout
            head, _, content = answer.partition(b"\r\n\r\n")
            status, headers = 200, []
            for line in head.decode().split("\r\n"):
                name, _, value = line.partition(": ")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    http = ThreadingHTTPServer((host, 0), GitOverHttp)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{http.server_address[1]}"
    finally:
        http.shutdown()
        http.server_close()
