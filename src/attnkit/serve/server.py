"""The playground's HTTP server: the standard library's ``ThreadingHTTPServer``, nothing to install.

Why the standard library: the playground serves one person on their own machine — a page, three
small files, and two JSON endpoints whose time goes into the model, not the HTTP layer. An ASGI
stack (uvicorn + starlette/fastapi) would add dependencies and an event loop for no gain: the
model runs on the CPU one request at a time anyway (a lock serialises them; a second request waits
up to ``WAIT_SECONDS`` and then gets 503). ``ThreadingHTTPServer`` gives each connection a daemon
thread, so a slow client never blocks the page, and closing the server leaves no process behind.

Routes::

    GET  /                       the page (assets/index.html)
    GET  /assets/NAME            the page's files, shipped inside the package (no CDN, no network)
    GET  /lessons/LANG/FILE      a course lesson (docs/course/LANG/FILE of a source checkout)
    GET  /api/info               limits, cache kinds, model facts
    POST /api/attention          see :mod:`attnkit.serve.attention_api`
    POST /api/decode             see :mod:`attnkit.serve.decode_api`

Robustness: every request body is bounded (``MAX_BODY_BYTES``, 413 past it), every socket read
times out (``SOCKET_SECONDS``), every refused input is a JSON ``{"error", "field"}`` with a 4xx, and
an unexpected exception becomes a 500 with its message — the server keeps serving. Responses carry
a Content-Security-Policy of ``'self'`` only, so the page cannot load or send anything off the
machine even by mistake.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path

from . import limits as LIM
from .limits import ApiError, require_object
from .unit_json import dumps

TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".json": "application/json; charset=utf-8",
         ".py": "text/plain; charset=utf-8", ".svg": "image/svg+xml"}
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'"
#: docs/course of a source checkout (src/attnkit/serve/server.py → the repository root)
COURSE = Path(__file__).resolve().parents[3] / "docs" / "course"


def asset_bytes(name: str) -> bytes | None:
    """A file of ``attnkit/serve/assets`` by bare name, or None (no folders, so no path escapes)."""
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    f = resources.files("attnkit.serve") / "assets" / name
    return f.read_bytes() if f.is_file() else None


def lesson_bytes(lang: str, name: str) -> bytes | None:
    if lang not in ("en", "zh") or "/" in name or "\\" in name or name.startswith(".") or not name.endswith(".py"):
        return None
    f = COURSE / lang / name
    return f.read_bytes() if f.is_file() else None


class PlaygroundServer(ThreadingHTTPServer):
    """Holds the two services and the lock that lets one request at a time use the models."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, attention, decode):
        self.attention, self.decode = attention, decode
        self.model_lock = threading.Lock()
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


class Handler(BaseHTTPRequestHandler):
    server: PlaygroundServer
    timeout = LIM.SOCKET_SECONDS  # a client that stops sending mid-request is dropped
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # the terminal stays quiet; errors go back to the page as JSON

    # responses ---------------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, dumps(obj).encode("utf-8"), TYPES[".json"])

    def _error(self, e: ApiError) -> None:
        self._json(e.status, e.body())

    # GET ---------------------------------------------------------------------------------------
    def do_GET(self):  # noqa: N802 - the base class's name
        path = self.path.split("?", 1)[0].split("#", 1)[0]
        if path in ("/", "/index.html"):
            return self._file(asset_bytes("index.html"), ".html", path)
        if path.startswith("/assets/"):
            name = path[len("/assets/"):]
            return self._file(asset_bytes(name), Path(name).suffix, path)
        if path.startswith("/lessons/"):
            parts = path[len("/lessons/"):].split("/")
            data = lesson_bytes(*parts) if len(parts) == 2 else None
            if data is None:
                return self._error(ApiError(f"no lesson at {path}; lessons come with a source checkout (docs/course/)", status=404))
            return self._send(200, data, TYPES[".py"])
        if path == "/api/info":
            return self._json(200, {"limits": _limits(), "decode": self.server.decode.info()})
        if path == "/favicon.ico":
            return self._send(204, b"", "image/x-icon")
        return self._error(ApiError(f"no such page: {path}", status=404))

    do_HEAD = do_GET

    def _file(self, data: bytes | None, suffix: str, path: str) -> None:
        if data is None or suffix not in TYPES:
            return self._error(ApiError(f"no such file: {path}", status=404))
        self._send(200, data, TYPES[suffix])

    # POST --------------------------------------------------------------------------------------
    def do_POST(self):  # noqa: N802 - the base class's name
        routes = {"/api/attention": self.server.attention, "/api/decode": self.server.decode}
        service = routes.get(self.path.split("?", 1)[0])
        try:
            body = self._read_body()  # read even for a 404, so the connection stays in step
            if service is None:
                raise ApiError(f"no such endpoint: POST {self.path}; use /api/attention or /api/decode", status=404)
            req = service.parse(require_object(body))
            if not self.server.model_lock.acquire(timeout=LIM.WAIT_SECONDS):
                raise ApiError(f"the model is busy with another request for over {LIM.WAIT_SECONDS:g} s; try again", status=503)
            try:
                out = service.run(req)
            finally:
                self.server.model_lock.release()
        except ApiError as e:
            return self._error(e)
        except TimeoutError:  # the client stopped sending its body: drop it, answer nothing
            self.close_connection = True
            return None
        except Exception as e:  # noqa: BLE001 - the server must outlive any request
            return self._json(500, {"error": f"internal error: {type(e).__name__}: {e}", "field": None})
        self._json(200, out)

    def _read_body(self):
        raw_len = self.headers.get("Content-Length")
        if raw_len is None:
            self.close_connection = True
            raise ApiError("a POST needs a Content-Length header and a JSON body", status=411)
        try:
            n = int(raw_len)
        except ValueError:
            self.close_connection = True
            raise ApiError(f"Content-Length must be an integer, got {raw_len!r}") from None
        if n < 0 or n > LIM.MAX_BODY_BYTES:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            raise ApiError(f"the request body is {n} bytes; the limit is {LIM.MAX_BODY_BYTES}", status=413)
        data = self.rfile.read(n)
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ApiError(f"malformed JSON body: {e}; send e.g. {{\"text\": \"The cat sat.\"}}") from None


def _limits() -> dict:
    return {"max_tokens": LIM.MAX_TOKENS, "max_text_chars": LIM.MAX_TEXT_CHARS, "full_weights_max": LIM.FULL_WEIGHTS_MAX,
            "pad_extra": LIM.PAD_EXTRA, "top_k": LIM.TOP_K, "max_steps": LIM.MAX_STEPS, "max_prompt_chars": LIM.MAX_PROMPT_CHARS,
            "compute_seconds": LIM.COMPUTE_SECONDS}


def make_server(host: str = "127.0.0.1", port: int = 8765, *, attention=None, decode=None) -> PlaygroundServer:
    """A bound (not yet serving) server; MiniLM is loaded now, the decoder on its first request.
    ``port=0`` picks a free port (read it back from ``server.url``)."""
    from .attention_api import AttentionService
    from .decode_api import DecodeService

    attention = AttentionService() if attention is None else attention
    decode = DecodeService() if decode is None else decode
    return PlaygroundServer((host, port), attention, decode)
