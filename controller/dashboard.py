"""Serve the dashboard's files (``controller/ui/``) at ``/ui/`` on the API's address.

The page is plain HTML, CSS and JavaScript modules with no build step and nothing fetched from elsewhere
(``Content-Security-Policy: default-src 'self'`` makes the browser refuse any other origin), so it works
offline and a newcomer reads exactly what runs.  It reads the API's JSON endpoints by polling.

Only files that exist in the folder when the server starts are served (the names are listed once, so a
request path never reaches the file system); GET and HEAD only.

Kept Python 3.9 compatible; stdlib only.
"""

from __future__ import annotations

import os
from typing import Any, Callable

UI_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ui")
PREFIX = "/ui"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
SECURITY_HEADERS = [
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-cache"),
]


class Dashboard:
    """WSGI app for ``/ui`` and everything below it."""

    def __init__(self, directory: str = UI_DIR) -> None:
        self.files = {name: os.path.join(directory, name) for name in sorted(os.listdir(directory))
                      if os.path.splitext(name)[1] in CONTENT_TYPES}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET").upper()
        if path == PREFIX:
            return _answer(start_response, "301 Moved Permanently", b"", "text/plain",
                           [("Location", PREFIX + "/")])
        if method not in ("GET", "HEAD"):
            return _answer(start_response, "405 Method Not Allowed", b"the dashboard is read-only\n",
                           "text/plain", [("Allow", "GET, HEAD")])
        name = path[len(PREFIX) + 1:] or "index.html"
        file_path = self.files.get(name)
        if file_path is None:
            return _answer(start_response, "404 Not Found", f"no dashboard file {name!r}\n".encode(),
                           "text/plain")
        with open(file_path, "rb") as handle:
            body = handle.read()
        content_type = CONTENT_TYPES[os.path.splitext(name)[1]]
        return _answer(start_response, "200 OK", b"" if method == "HEAD" else body, content_type,
                       length=len(body))


def _answer(start_response: Callable[..., Any], status: str, body: bytes, content_type: str,
            extra: list[tuple[str, str]] | None = None, length: int | None = None) -> list[bytes]:
    size = len(body) if length is None else length
    headers = [("Content-Type", content_type), ("Content-Length", str(size)), *SECURITY_HEADERS,
               *(extra or [])]
    start_response(status, headers)
    return [body]
