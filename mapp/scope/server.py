"""The MegaScope web server: the page, its assets and one WebSocket, in a thread of its own.

The model runs in the main thread (every rank of the job runs the same requests, see
:mod:`mapp.scope.serve`); this thread only talks to browsers. It never blocks the model:
requests go to the model through a small bounded queue (full: the client gets a ``busy``
error), and frames come back through :meth:`ScopeServer.publish`, which drops ``step`` frames
for a client whose queue is full instead of waiting (a slow browser misses steps, the
generation goes on; ``done`` repeats every row). A client that cannot take even the frames
that are never dropped is disconnected.

Safe by default: it binds 127.0.0.1; another address needs a token, which is then checked on
every HTTP request and WebSocket connection (``?token=``, ``Authorization: Bearer``, or the
cookie the page gets when it is opened with the right ``?token=``);
without a token a connection from a non-loopback peer is refused. Client messages are
validated by :mod:`mapp.scope.protocol` (bounded size, fixed shapes, names from fixed lists);
the files served are a fixed list.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import itertools
import queue
import threading
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import orjson

from mapp.errors import InputError

from .protocol import MAX_MESSAGE_BYTES, ProtocolError, parse_message

__all__ = ["ScopeServer", "is_loopback", "check_binding", "ASSETS"]

HERE = Path(__file__).resolve().parent


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


# path -> (file, content type); nothing outside this list is ever read for a client
ASSETS: dict[str, tuple[Callable[[], Path], str]] = {
    "/": (lambda: HERE / "assets" / "index.html", "text/html; charset=utf-8"),
    "/assets/scope.js": (lambda: HERE / "assets" / "scope.js", "text/javascript; charset=utf-8"),
    "/assets/scope.css": (lambda: HERE / "assets" / "scope.css", "text/css; charset=utf-8"),
    "/assets/plotly.min.js": (_plotly_js, "text/javascript; charset=utf-8"),
}

MAX_CLIENTS = 16
CLIENT_QUEUE = 64        # frames waiting for one client
DROP_STEPS_AT = 48       # above this, step frames for that client are dropped
COMMAND_QUEUE = 8        # requests waiting for the model
# Frames to a browser can be large (every layer's rows); what a browser sends is small.
MAX_INCOMING_BYTES = 4 * MAX_MESSAGE_BYTES

# the model-side requests; the others are answered here from the last forward pass
MODEL_REQUESTS = ("generate", "perturb", "clear")


COOKIE = "mapp_scope_token"


def _cookie(header: str, name: str) -> str:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


def _encode(frame: dict[str, Any]) -> bytes:
    # numpy arrays go out as JSON numbers; orjson writes C-contiguous ones natively
    return orjson.dumps(frame, option=orjson.OPT_SERIALIZE_NUMPY,
                        default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def check_binding(host: str, token: str | None) -> None:
    """Refuse a non-loopback address without a token (before anything slow is loaded)."""
    if not is_loopback(host) and not token:
        raise InputError(f"serving on {host} would let anyone who can reach it use the model",
                         "pass --token SECRET, or keep the default --host 127.0.0.1")


class _Client:
    def __init__(self, number: int, ws: Any):
        self.number = number
        self.ws = ws
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=CLIENT_QUEUE)
        self.dropped = 0


class ScopeServer:
    """Serves the page and the WebSocket; hands model requests to ``commands``.

    ``commands`` receives ``(client_number, message)`` for ``generate``/``perturb``/``clear``;
    ``answer(message)`` answers ``attention``/``pca`` from the last forward pass (it runs in
    this thread: numpy only, no model). ``hello`` is the ``model`` frame every new client
    gets first."""

    def __init__(self, *, hello: dict[str, Any], answer: Callable[[dict[str, Any]], dict[str, Any]],
                 host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
                 commands: "queue.Queue[tuple[int, dict[str, Any]]] | None" = None):
        check_binding(host, token)
        self.host, self.port, self.token = host, port, token
        self.hello, self.answer = hello, answer
        self.commands = commands if commands is not None else queue.Queue(maxsize=COMMAND_QUEUE)
        self._clients: dict[int, _Client] = {}
        self._numbers = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._files: dict[str, bytes] = {}

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> int:
        """Bind and serve in a daemon thread; returns the port (useful with port 0)."""
        self._thread = threading.Thread(target=self._run, name="mapp-scope-server", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise InputError(f"cannot serve on {self.host}:{self.port}: {self._error}",
                             "choose another --port, or stop what is using it")
        return self.port

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # bind errors reach start(); the thread must not die silently
            self._error = exc
            self._started.set()

    async def _serve(self) -> None:
        from websockets.asyncio.server import serve

        self._stop = asyncio.Event()
        async with serve(self._handle, self.host, self.port, process_request=self._http,
                         max_size=MAX_INCOMING_BYTES, max_queue=8) as server:
            self.port = server.sockets[0].getsockname()[1]
            self._started.set()
            await self._stop.wait()

    # -- HTTP: the page, its assets, and the gate in front of the WebSocket ------------------

    def _authorised(self, connection: Any, request: Any) -> bool:
        if self.token:
            given = parse_qs(urlsplit(request.path).query).get("token", [""])[0]
            bearer = request.headers.get("Authorization", "")
            if bearer.startswith("Bearer "):
                given = given or bearer[len("Bearer "):]
            # the page is opened with ?token=; its assets and WebSocket come back with the cookie
            given = given or _cookie(request.headers.get("Cookie", ""), COOKIE)
            return hmac.compare_digest(given.encode(), self.token.encode())
        peer = connection.remote_address[0] if connection.remote_address else ""
        return is_loopback(str(peer))

    def _http(self, connection: Any, request: Any):
        if not self._authorised(connection, request):
            return connection.respond(403, "forbidden: this MegaScope server needs its token (?token=...)\n")
        path = urlsplit(request.path).path
        if path == "/ws":
            if len(self._clients) >= MAX_CLIENTS:
                return connection.respond(503, f"too many viewers (at most {MAX_CLIENTS})\n")
            return None   # go on with the WebSocket handshake
        if path not in ASSETS:
            return connection.respond(404, "not found\n")
        locate, content_type = ASSETS[path]
        if path not in self._files:
            self._files[path] = locate().read_bytes()
        from websockets.datastructures import Headers
        from websockets.http11 import Response

        body = self._files[path]
        headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(body))),
                           ("Cache-Control", "no-cache"), ("X-Content-Type-Options", "nosniff")])
        if self.token and path == "/":
            headers["Set-Cookie"] = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        return Response(200, "OK", headers, body)

    # -- WebSocket -----------------------------------------------------------------------

    async def _handle(self, ws: Any) -> None:
        client = _Client(next(self._numbers), ws)
        self._clients[client.number] = client
        writer = asyncio.create_task(self._write(client))
        try:
            client.queue.put_nowait(_encode(self.hello))
            async for raw in ws:
                self._receive(client, raw)
        except Exception:  # a connection that breaks is that client's end, not the server's
            pass
        finally:
            self._clients.pop(client.number, None)
            writer.cancel()

    async def _write(self, client: _Client) -> None:
        while True:
            frame = await client.queue.get()
            if frame is None:
                await client.ws.close(1008, "too slow: frames could not be delivered")
                return
            await client.ws.send(frame.decode())

    def _receive(self, client: _Client, raw: str | bytes) -> None:
        try:
            message = parse_message(raw)
        except ProtocolError as exc:
            self._send(client, {"type": "error", "message": str(exc)})
            return
        if message["type"] in MODEL_REQUESTS:
            try:
                self.commands.put_nowait((client.number, message))
            except queue.Full:
                self._send(client, {"type": "error", "message": "busy: the model is working on earlier requests; try again"})
            return
        try:
            self._send(client, self.answer(message))
        except ProtocolError as exc:
            self._send(client, {"type": "error", "message": str(exc)})

    def _send(self, client: _Client, frame: dict[str, Any], droppable: bool = False) -> None:
        if droppable and client.queue.qsize() >= DROP_STEPS_AT:
            client.dropped += 1
            return
        if frame.get("type") == "done":
            frame = {**frame, "dropped": client.dropped}
            client.dropped = 0
        try:
            client.queue.put_nowait(_encode(frame))
        except asyncio.QueueFull:
            self._clients.pop(client.number, None)
            while not client.queue.empty():
                client.queue.get_nowait()
            client.queue.put_nowait(None)

    # -- from the model thread ---------------------------------------------------------------

    def publish(self, frame: dict[str, Any], client: int | None = None) -> None:
        """Send ``frame`` to every client (or one); safe to call from any thread, never blocks."""
        if self._loop is None or self._loop.is_closed():
            return
        droppable = frame.get("type") == "step"
        self._loop.call_soon_threadsafe(self._deliver, frame, droppable, client)

    def _deliver(self, frame: dict[str, Any], droppable: bool, only: int | None) -> None:
        for number, client in list(self._clients.items()):
            if only is None or number == only:
                self._send(client, frame, droppable)

    @property
    def clients(self) -> int:
        return len(self._clients)
