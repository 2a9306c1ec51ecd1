"""The training-side API client against a real HTTP server: a call the API server could not take
(too busy, failing, unreachable) is tried again, so that a checkpoint's load or report under a
loaded cluster does not end training with exit code 1; a create is sent again only when it was
surely not processed (429)."""

import http.server
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from trainerop_sdk import kubeapi
from trainerop_sdk.kubeapi import ApiClient, ApiError


class Scripted(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next (status, Retry-After) of the server's script."""

    def _answer(self) -> None:
        server: ScriptedServer = self.server  # type: ignore[assignment]
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, retry_after = server.script[min(len(server.seen), len(server.script) - 1)]
        server.seen.append(self.command)
        body = json.dumps({"kind": "Status", "message": f"answer {status}"} if status >= 400 else {"ok": True})
        self.send_response(status)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_PATCH(self) -> None:
        self._answer()

    def log_message(self, *_: object) -> None:
        pass


class ScriptedServer(http.server.ThreadingHTTPServer):
    script: list[tuple[int, str | None]]
    seen: list[str]


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    s = ScriptedServer(("127.0.0.1", 0), Scripted)
    s.script, s.seen = [(200, None)], []
    thread = threading.Thread(target=s.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield s
    s.shutdown()
    s.server_close()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waited: list[float] = []
    monkeypatch.setattr(kubeapi, "sleep", waited.append)
    return waited


def client(port: int) -> ApiClient:
    return ApiClient(f"http://127.0.0.1:{port}", "token", "team")


@pytest.mark.parametrize(
    ("method", "script", "attempts", "sent", "outcome", "waited"),
    [
        # a read, or an idempotent update, is sent again after a busy, failing or unreachable server
        ("GET", [(429, "0"), (200, None)], 4, 2, 200, [0.0]),
        ("GET", [(503, None), (502, None), (200, None)], 4, 3, 200, [0.5, 1.0]),
        ("PATCH", [(500, None), (504, None), (200, None)], 4, 3, 200, [0.5, 1.0]),
        ("GET", [(500, None)], 4, 4, 500, [0.5, 1.0, 2.0]),  # gives up after its attempts
        ("GET", [(429, "1000")], 2, 2, 429, [10.0]),  # the server's Retry-After, capped
        # a create after a 5xx may have gone through: not sent again; after a 429 it was not processed
        ("POST", [(500, None), (201, None)], 4, 1, 500, []),
        ("POST", [(429, None), (201, None)], 4, 2, 201, [0.5]),
        # refusals a retry does not change, and a caller that retries itself (the heartbeat)
        ("PATCH", [(404, None)], 4, 1, 404, []),
        ("GET", [(403, None)], 4, 1, 403, []),
        ("GET", [(503, None), (200, None)], 1, 1, 503, []),
    ],
)
def test_a_transient_failure_is_tried_again(
    server: ScriptedServer,
    waits: list[float],
    method: str,
    script: list[tuple[int, str | None]],
    attempts: int,
    sent: int,
    outcome: int,
    waited: list[float],
) -> None:
    server.script = script
    api = client(server.server_address[1])
    if outcome < 400:
        assert api.request(method, "/x", {} if method != "GET" else None, attempts=attempts) == {"ok": True}
    else:
        with pytest.raises(ApiError) as raised:
            api.request(method, "/x", {} if method != "GET" else None, attempts=attempts)
        assert raised.value.code == outcome
    assert server.seen == [method] * sent
    assert waits == waited


def test_an_unreachable_server_is_tried_again_then_reported(waits: list[float]) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ApiError) as raised:
        client(port).request("GET", "/x")
    assert raised.value.code == 0
    assert "failed" in str(raised.value)
    assert waits == [0.5, 1.0, 2.0]
