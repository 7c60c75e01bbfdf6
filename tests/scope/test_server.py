"""The MegaScope server on its own (a real server and a real WebSocket client; the model side
is a queue this test reads): bad messages get an error frame and the server stays up, the page
and its assets are served and nothing else is, a non-loopback peer needs the token, slow
clients lose step frames instead of stalling the sender."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("websockets")
from websockets.sync.client import connect  # noqa: E402

from mapp.errors import InputError  # noqa: E402
from mapp.scope.engine import LastPass  # noqa: E402
from mapp.scope.protocol import MAX_MESSAGE_BYTES  # noqa: E402
from mapp.scope.server import ScopeServer  # noqa: E402
from mapp.scope.views import answer  # noqa: E402

HELLO = {"type": "model", "mode": "serve", "layers": 2}


def _last():
    rng = np.random.default_rng(0)
    probs = rng.random((1, 2, 3, 3)).astype(np.float32)
    return LastPass(tokens=[["a", "b", "c"]], attention={1: probs, 2: probs},
                    residual={0: rng.normal(size=(1, 3, 8)), 1: rng.normal(size=(1, 3, 8))})


@pytest.fixture
def server():
    srv = ScopeServer(hello=HELLO, answer=lambda m: answer(_last(), m), host="127.0.0.1", port=0)
    srv.start()
    yield srv
    srv.stop()


def _recv(ws) -> dict:
    return json.loads(ws.recv(timeout=10))


def test_bad_messages_get_an_error_frame_and_the_connection_stays(server):
    with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        assert _recv(ws) == HELLO
        bad = ["not json", "[1, 2]", json.dumps({"type": "exec", "code": "import os"}),
               json.dumps({"type": "generate", "prompts": ["x"], "reducer": "__import__('os')"}),
               json.dumps({"type": "perturb", "target": "weights", "kind": "gaussian", "strength": float("1e999")}),
               json.dumps({"type": "generate", "prompts": ["x" * (MAX_MESSAGE_BYTES + 10)]})]
        for message in bad:
            ws.send(message)
            frame = _recv(ws)
            assert frame["type"] == "error" and frame["message"], message
        assert server.commands.empty()   # nothing bad reached the model
        # still serving: a good request goes through, and a view is answered
        ws.send(json.dumps({"type": "generate", "prompts": ["hello"]}))
        client, message = server.commands.get(timeout=5)
        assert message["prompts"] == ["hello"] and message["reducer"] == "rms"
        ws.send(json.dumps({"type": "attention", "layer": 2, "head": 1, "prompt": 0}))
        frame = _recv(ws)
        assert frame["type"] == "attention" and np.allclose(frame["matrix"], _last().attention[2][0, 1])
        ws.send(json.dumps({"type": "pca", "layer": 1}))
        frame = _recv(ws)
        assert frame["type"] == "pca" and len(frame["points"][0]) == 3


def test_the_page_and_its_assets_and_nothing_else(server):
    base = f"http://127.0.0.1:{server.port}"
    page = urllib.request.urlopen(base + "/").read().decode()
    assert "<html" in page.lower()
    assert urllib.request.urlopen(base + "/assets/plotly.min.js").headers["Content-Type"].startswith("text/javascript")
    for path in ("/assets/../server.py", "/etc/passwd", "/assets/protocol.py"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + path)
        assert err.value.code == 404


def test_a_full_command_queue_answers_busy(server):
    with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        _recv(ws)
        for _ in range(server.commands.maxsize):
            ws.send(json.dumps({"type": "clear"}))
        ws.send(json.dumps({"type": "clear"}))
        frame = _recv(ws)
        assert frame["type"] == "error" and frame["message"].startswith("busy")


def test_a_slow_client_misses_steps_but_gets_done(server):
    with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        _recv(ws)
        # 500 steps arrive while the client reads nothing. They are delivered in one turn of
        # the server's loop, so its writer cannot drain any in between, however loaded the
        # machine: what does not fit is dropped, never waited for.
        def burst():
            for i in range(500):
                server._deliver({"type": "step", "step": i}, True, None)
            server._deliver({"type": "done", "id": 1}, False, None)

        server._loop.call_soon_threadsafe(burst)
        frames = []
        while not frames or frames[-1]["type"] != "done":
            frames.append(_recv(ws))
        steps = [f["step"] for f in frames if f["type"] == "step"]
        assert 0 < len(steps) < 500 and steps == sorted(steps)
        assert frames[-1]["dropped"] == 500 - len(steps)


def _own_address() -> str | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))
        address = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if address.startswith("127.") else address


def test_another_address_needs_a_token():
    with pytest.raises(InputError, match="--token"):
        ScopeServer(hello=HELLO, answer=lambda m: {}, host="0.0.0.0", port=0)


def test_a_non_loopback_peer_without_the_token_is_refused():
    address = _own_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    srv = ScopeServer(hello=HELLO, answer=lambda m: {}, host="0.0.0.0", port=0, token="s3cret")
    srv.start()
    try:
        for path in ("/", "/ws"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"http://{address}:{srv.port}{path}")
            assert err.value.code == 403
        with pytest.raises(Exception):
            connect(f"ws://{address}:{srv.port}/ws?token=wrong")
        assert srv.clients == 0
        with connect(f"ws://{address}:{srv.port}/ws?token=s3cret") as ws:
            assert _recv(ws) == HELLO
        page = urllib.request.urlopen(f"http://{address}:{srv.port}/?token=s3cret")
        assert page.status == 200
        # the page's own requests (assets, the WebSocket) carry the cookie it was given
        cookie = page.headers["Set-Cookie"].split(";")[0]
        asset = urllib.request.Request(f"http://{address}:{srv.port}/assets/scope.js", headers={"Cookie": cookie})
        assert urllib.request.urlopen(asset).status == 200
        with connect(f"ws://{address}:{srv.port}/ws", additional_headers={"Cookie": cookie}) as ws:
            assert _recv(ws) == HELLO
        forged = urllib.request.Request(f"http://{address}:{srv.port}/assets/scope.js",
                                        headers={"Cookie": "mapp_scope_token=guess"})
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(forged)
    finally:
        srv.stop()
